"""Prometheus text metrics for ``/monitoring/prometheus/metrics``.

Request counts by model, API (Predict, Classify, ...), entrypoint (REST, GRPC)
and status code; a latency histogram; the versions each model serves; load
failures and batching counters. ``:tensorflow:serving:request_count`` repeats
TF Serving's own counter (model_name, status) so existing dashboards work.
Model names that are not configured are counted as ``_unknown_`` so a client
cannot grow the label set without bound.
"""
import bisect
import threading
from typing import Callable, Dict, List, Mapping, Sequence, Tuple

UNKNOWN_MODEL = '_unknown_'
# Seconds: 0.5 ms .. 10 s, covering a TFLite call on loopback up to a timeout.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _escape(value: str) -> str:
  return value.replace('\\', '\\\\').replace('\n', '\\n').replace('"', '\\"')


def _labels(pairs: Sequence[Tuple[str, str]]) -> str:
  return '{' + ','.join(f'{k}="{_escape(str(v))}"' for k, v in pairs) + '}'


class Metrics:
  """Thread-safe counters and histograms rendered in the Prometheus format."""

  def __init__(self,
               serving_versions: Callable[[], Mapping[str, List[int]]] = dict,
               gauges: Callable[[], Mapping[str, float]] = dict):
    """Creates the registry.

    Args:
      serving_versions: returns model -> versions serving now.
      gauges: returns extra ``name -> value`` counters sampled at render time.
    """
    self._lock = threading.Lock()
    self._requests: Dict[Tuple[str, str, str, str], int] = {}
    self._latency: Dict[Tuple[str, str, str], List[float]] = {}
    self._serving_versions = serving_versions
    self._gauges = gauges

  def record_request(self, model: str, api: str, entrypoint: str,
                     code_name: str, seconds: float) -> None:
    """Counts one finished request and its latency."""
    with self._lock:
      key = (model, api, entrypoint, code_name)
      self._requests[key] = self._requests.get(key, 0) + 1
      hist = self._latency.get(key[:3])
      if hist is None:
        # Bucket counts, then sum, then count.
        hist = [0.0] * (len(LATENCY_BUCKETS) + 2)
        self._latency[key[:3]] = hist
      index = bisect.bisect_left(LATENCY_BUCKETS, seconds)
      if index < len(LATENCY_BUCKETS):
        hist[index] += 1
      hist[-2] += seconds
      hist[-1] += 1

  def render(self) -> str:
    """Returns the exposition text (format 0.0.4)."""
    with self._lock:
      requests = dict(self._requests)
      latency = {k: list(v) for k, v in self._latency.items()}
    lines = [
        '# HELP leantfx_serving_requests_total Requests finished, by model, '
        'API, entrypoint and status code.',
        '# TYPE leantfx_serving_requests_total counter',
    ]
    tf_counts: Dict[Tuple[str, str], int] = {}
    for (model, api, entrypoint, code), count in sorted(requests.items()):
      lines.append('leantfx_serving_requests_total' + _labels(
          [('model_name', model), ('api', api), ('entrypoint', entrypoint),
           ('status', code)]) + f' {count}')
      tf_key = (model, code)
      tf_counts[tf_key] = tf_counts.get(tf_key, 0) + count
    lines += [
        '# HELP :tensorflow:serving:request_count The total number of '
        'requests (TF Serving compatible).',
        '# TYPE :tensorflow:serving:request_count counter',
    ]
    for (model, code), count in sorted(tf_counts.items()):
      lines.append(':tensorflow:serving:request_count' + _labels(
          [('model_name', model), ('status', code)]) + f' {count}')
    lines += [
        '# HELP leantfx_serving_request_latency_seconds Request latency from '
        'body read to response written.',
        '# TYPE leantfx_serving_request_latency_seconds histogram',
    ]
    for (model, api, entrypoint), hist in sorted(latency.items()):
      base = [('model_name', model), ('api', api), ('entrypoint', entrypoint)]
      cumulative = 0
      for bound, count in zip(LATENCY_BUCKETS, hist):
        cumulative += count
        lines.append('leantfx_serving_request_latency_seconds_bucket' +
                     _labels(base + [('le', repr(bound))]) +
                     f' {int(cumulative)}')
      lines.append('leantfx_serving_request_latency_seconds_bucket' +
                   _labels(base + [('le', '+Inf')]) + f' {int(hist[-1])}')
      lines.append('leantfx_serving_request_latency_seconds_sum' +
                   _labels(base) + f' {hist[-2]:.6f}')
      lines.append('leantfx_serving_request_latency_seconds_count' +
                   _labels(base) + f' {int(hist[-1])}')
    lines += [
        '# HELP leantfx_serving_model_version_serving 1 for each model '
        'version currently serving.',
        '# TYPE leantfx_serving_model_version_serving gauge',
    ]
    for model, versions in sorted(self._serving_versions().items()):
      for version in versions:
        lines.append('leantfx_serving_model_version_serving' + _labels(
            [('model_name', model), ('version', str(version))]) + ' 1')
    for name, value in sorted(self._gauges().items()):
      lines.append(f'# TYPE {name} counter')
      lines.append(f'{name} {value:g}')
    return '\n'.join(lines) + '\n'
