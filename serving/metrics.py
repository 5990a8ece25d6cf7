"""Prometheus text metrics for ``/monitoring/prometheus/metrics``.

Request counts by model, API (Predict, Classify, ...), entrypoint (REST, GRPC)
and status code; a latency histogram; the versions each model serves; load
failures and batching counters. ``:tensorflow:serving:request_count`` repeats
TF Serving's own counter (model_name, status) so existing dashboards work.
Model names that are not configured are counted as ``_unknown_`` so a client
cannot grow the label set without bound.

With worker processes (``serve --workers N``) each worker publishes a snapshot
of its counters to a shared directory about once a second
(``SharedSnapshots``); whichever worker answers a scrape adds the others'
latest snapshots to its own live counters, so a scrape covers every worker.
"""
import bisect
import json
import logging
import os
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

_log = logging.getLogger(__name__)

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
               gauges: Callable[[], Mapping[str, float]] = dict,
               peers: Callable[[], Sequence[Mapping[str, Any]]] = list):
    """Creates the registry.

    Args:
      serving_versions: returns model -> versions serving now.
      gauges: returns extra ``name -> value`` counters sampled at render time.
      peers: returns the other worker processes' snapshots (see snapshot()),
        added to this registry's counters when rendering.
    """
    self._lock = threading.Lock()
    self._requests: Dict[Tuple[str, str, str, str], int] = {}
    self._latency: Dict[Tuple[str, str, str], List[float]] = {}
    self._refusals: Dict[Tuple[str, str], int] = {}
    self._serving_versions = serving_versions
    self._gauges = gauges
    self._peers = peers

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

  def record_refusal(self, entrypoint: str, code: str) -> None:
    """Counts a request refused at a limit, or a client dropped at one.

    Args:
      entrypoint: REST or GRPC.
      code: the HTTP status (413, 429, 503, 408 for a client dropped at the
        request deadline) or the gRPC code name.
    """
    with self._lock:
      key = (entrypoint, str(code))
      self._refusals[key] = self._refusals.get(key, 0) + 1

  def refusals(self) -> Dict[Tuple[str, str], int]:
    """(entrypoint, code) -> requests refused, in this process."""
    with self._lock:
      return dict(self._refusals)

  def snapshot(self) -> Dict[str, Any]:
    """This process's counters as JSON-able data (what peers add up)."""
    with self._lock:
      requests = [list(k) + [v] for k, v in self._requests.items()]
      latency = [list(k) + [list(v)] for k, v in self._latency.items()]
      refusals = [list(k) + [v] for k, v in self._refusals.items()]
    return {'requests': requests, 'latency': latency, 'refusals': refusals,
            'counters': dict(self._gauges())}

  def render(self) -> str:
    """Returns the exposition text (format 0.0.4), peers' counters added."""
    with self._lock:
      requests = dict(self._requests)
      latency = {k: list(v) for k, v in self._latency.items()}
      refusals = dict(self._refusals)
    counters = dict(self._gauges())
    for peer in self._peers():
      for *key, count in peer.get('refusals', ()):
        refusals[tuple(key)] = refusals.get(tuple(key), 0) + count
      for *key, count in peer.get('requests', ()):
        requests[tuple(key)] = requests.get(tuple(key), 0) + count
      for *key, hist in peer.get('latency', ()):
        mine = latency.setdefault(tuple(key), [0.0] * len(hist))
        latency[tuple(key)] = [a + b for a, b in zip(mine, hist)]
      for name, value in peer.get('counters', {}).items():
        counters[name] = counters.get(name, 0) + value
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
    lines += [
        '# HELP leantfx_serving_refused_requests_total Requests refused at a '
        'limit (413 body, 429 slots, 503 memory budget, 408 request '
        'deadline; gRPC codes by name), counted before any model ran.',
        '# TYPE leantfx_serving_refused_requests_total counter',
    ]
    for (entrypoint, code), count in sorted(refusals.items()):
      lines.append('leantfx_serving_refused_requests_total' + _labels(
          [('entrypoint', entrypoint), ('code', code)]) + f' {count}')
    for name, value in sorted(counters.items()):
      lines.append(f'# TYPE {name} counter')
      lines.append(f'{name} {value:g}')
    return '\n'.join(lines) + '\n'


class SharedSnapshots:
  """Worker processes' metric snapshots, exchanged through one directory.

  Each worker writes ``worker-<pid>.json`` (atomically: a temporary file, then
  a rename) every ``period_s`` and when it stops; ``peers()`` reads the other
  workers' files. A snapshot is at most ``period_s`` old when read.
  """

  def __init__(self, directory: str, period_s: float = 1.0,
               name: Optional[str] = None):
    self._directory = directory
    self._name = f'worker-{name or os.getpid()}.json'
    self._period_s = period_s
    self._snapshot: Optional[Callable[[], Mapping[str, Any]]] = None
    self._stop = threading.Event()
    self._thread: Optional[threading.Thread] = None

  def peers(self) -> List[Mapping[str, Any]]:
    """The other workers' latest snapshots (unreadable files skipped)."""
    found = []
    try:
      names = sorted(os.listdir(self._directory))
    except OSError:
      return found
    for name in names:
      if name == self._name or not (name.startswith('worker-') and
                                    name.endswith('.json')):
        continue
      try:
        with open(os.path.join(self._directory, name), encoding='utf-8') as f:
          found.append(json.load(f))
      except (OSError, ValueError):
        continue  # Being replaced, or its worker never wrote it whole.
    return found

  def publish(self) -> None:
    """Writes this worker's snapshot now."""
    if self._snapshot is None:
      return
    path = os.path.join(self._directory, self._name)
    try:
      with open(path + '.tmp', 'w', encoding='utf-8') as f:
        json.dump(self._snapshot(), f)
      os.replace(path + '.tmp', path)
    except OSError as e:
      _log.warning('Cannot publish metrics to %s: %s', path, e)

  def start(self, snapshot: Callable[[], Mapping[str, Any]]) -> None:
    """Publishes ``snapshot()`` every period until stop()."""
    self._snapshot = snapshot

    def loop():
      while not self._stop.wait(self._period_s):
        self.publish()

    self.publish()
    self._thread = threading.Thread(target=loop, name='leantfx-metrics-share',
                                    daemon=True)
    self._thread.start()

  def stop(self) -> None:
    """Publishes a last time and stops (counters of a stopped worker stay)."""
    self._stop.set()
    if self._thread is not None:
      self._thread.join(5)
    self.publish()
