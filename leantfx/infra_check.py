"""Infra validation: a candidate served by ``leantfx serve`` before it is pushed.

TFX's InfraValidator loads a model in the server that will run it and sends
it requests before the model is blessed. Here that server is ``leantfx
serve`` (serving/, TF Serving's REST and gRPC APIs), which serves every push
leantfx makes: SavedModel, TFLite, OpenVINO and ONNX versions. ``check``:

  1. lays the candidates out as a model base path in a temporary folder
     (``<tmp>/<model>/1/``, a copy of each candidate's files);
  2. starts ``leantfx serve`` on it in a subprocess (by command: this layer
     imports no server code) on free loopback ports, polling once and with no
     load retries, and waits, bounded, for its ready banner;
  3. per model: its load status (a version that does not load fails with the
     server's own load error), then the rows as one batch over REST and over
     gRPC and one at a time over REST, each answer checked against the
     offline outputs the caller computed (numbers: max abs difference <=
     ``Settings.tolerance``; strings: equal);
  4. p50/p99 latency at batch 1, one client after another and from 8
     concurrent clients (REST; a bounded number of requests);
  5. stops the server, always (SIGTERM, then SIGKILL after a grace period):
     after a failure, a timeout or an exception too.

The rows are sent under the names the server takes (the columns as written,
which the server maps to the model's input keys with the version's
feature_names.json); the caller computes the offline outputs from the same
rows.
"""
import base64
import concurrent.futures
import dataclasses
import json
import math
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from leantfx import serving_client
from leantfx import sizing

# The loopback interface only: a check opens no port to the network.
HOST = '127.0.0.1'
# The version folder every candidate is served as.
VERSION = 1
# ``leantfx serve``'s banner: "leantfx serve: REST http://H:P gRPC H:P ...".
_BANNER_RE = re.compile(
    r'leantfx serve: REST http://[^:]+:(\d+) gRPC [^:]+:(\d+) models (.*)$')
# Figures a result carries (CheckResult.figures), by these names.
FIGURE_NAMES = ('load_s', 'rows_checked', 'rest_max_abs_diff',
                'grpc_max_abs_diff', 'batch1_max_abs_diff',
                'latency_p50_ms_batch1', 'latency_p99_ms_batch1',
                'latency_p50_ms_concurrent', 'latency_p99_ms_concurrent',
                'concurrent_clients', 'throughput_rps_concurrent',
                'cpu_cores', 'requests')


class CheckError(Exception):
  """A check failed; the message says what and why."""


@dataclasses.dataclass(frozen=True)
class Settings:
  """How a check runs; every bound says what it protects.

  Attributes:
    max_rows: rows checked per candidate (the first ones given): enough to
      see a wrong answer, few enough to cost a fraction of a second.
    tolerance: the largest absolute difference allowed between the server's
      answer and the offline output. The server runs the same runtime on the
      same file as the offline call, so only batching (a different batch
      shape, other kernels) moves the floats; 1e-4 is far above that and far
      below any real disagreement (probabilities differ by 1e-2 and more).
    latency_requests: batch-1 requests timed one after another.
    concurrent_clients: clients sending batch-1 requests at once.
    concurrent_requests: requests over all concurrent clients.
    start_timeout_s: longest wait for the server's ready banner (it imports
      TensorFlow and loads every candidate first; on a busy 2-core machine
      that takes tens of seconds).
    request_timeout_s: longest wait for one answer.
    stop_timeout_s: grace period of SIGTERM before SIGKILL.
    serve_args: further ``leantfx serve`` options, as the deployment uses
      them (e.g. ``('--batching', 'off')``).
  """
  max_rows: int = 32
  tolerance: float = 1e-4
  latency_requests: int = 100
  concurrent_clients: int = 8
  concurrent_requests: int = 200
  start_timeout_s: float = 180.0
  request_timeout_s: float = 30.0
  stop_timeout_s: float = 15.0
  serve_args: Sequence[str] = ()

  def __post_init__(self):
    for name in ('max_rows', 'latency_requests', 'concurrent_clients',
                 'concurrent_requests'):
      if getattr(self, name) < 1:
        raise ValueError(f'Settings.{name} must be >= 1, got '
                         f'{getattr(self, name)}.')
    for name in ('tolerance', 'start_timeout_s', 'request_timeout_s',
                 'stop_timeout_s'):
      if not getattr(self, name) > 0:
        raise ValueError(f'Settings.{name} must be > 0, got '
                         f'{getattr(self, name)}.')


@dataclasses.dataclass(frozen=True)
class Candidate:
  """One model version to check.

  Attributes:
    model_name: its model directory in the base path (a plain name).
    version_dir: the version's files: a SavedModel folder, or a runtime
      push's folder (model.tflite, an OpenVINO IR, model.onnx, with their
      manifest and feature_names.json).
    rows: {input name as the server takes it: [n] array} (float32 with NaN
      for a missing number, bytes or str with '' for a missing category).
    expected: {output name: [n, ...] array}: the offline outputs of the same
      version on the same rows.
    signature_name: the signature queried ('' is serving_default).
  """
  model_name: str
  version_dir: str
  rows: Mapping[str, np.ndarray]
  expected: Mapping[str, np.ndarray]
  signature_name: str = ''


@dataclasses.dataclass(frozen=True)
class CheckResult:
  """What the check found for one candidate.

  Attributes:
    model_name: the candidate's model name.
    passed: it loaded, answered every request like the offline outputs and
      within the time bounds.
    reason: why not ('' when passed).
    figures: the measured figures (FIGURE_NAMES; those reached before a
      failure).
  """
  model_name: str
  passed: bool
  reason: str
  figures: Dict[str, float]


def _num_rows(rows: Mapping[str, np.ndarray]) -> int:
  counts = {len(v) for v in rows.values()}
  if len(counts) != 1:
    raise ValueError(f'Every input needs the same number of rows; got '
                     f'{ {k: len(v) for k, v in rows.items()} }.')
  return counts.pop()


def _take(arrays: Mapping[str, np.ndarray], index) -> Dict[str, np.ndarray]:
  return {k: np.asarray(v)[index] for k, v in arrays.items()}


def _json_value(value):
  """A request value as TF Serving's JSON takes it."""
  if isinstance(value, (bytes, np.bytes_)):
    try:
      return bytes(value).decode('utf-8')
    except UnicodeDecodeError:
      # Binary (an encoded image): TF Serving's JSON carries it as base64.
      return {'b64': base64.b64encode(bytes(value)).decode('ascii')}
  if isinstance(value, np.generic):
    value = value.item()
  if isinstance(value, float) and math.isnan(value):
    return float('nan')  # json.dumps writes NaN, which the server parses.
  return value


def _rest_inputs(rows: Mapping[str, np.ndarray]) -> Dict[str, list]:
  return {k: [_json_value(x) for x in np.asarray(v).tolist()]
          if np.asarray(v).dtype.kind in 'fiub' else
          [_json_value(x) for x in np.asarray(v)]
          for k, v in rows.items()}


def _grpc_inputs(rows: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
  inputs = {}
  for k, v in rows.items():
    array = np.asarray(v)
    if array.dtype.kind in 'USO':
      array = np.array([x.encode('utf-8') if isinstance(x, str) else bytes(x)
                        for x in array], dtype=object)
    inputs[k] = array
  return inputs


def _difference(name: str, got: Any, expected: np.ndarray) -> float:
  """Max abs difference of numbers; 0 or inf for strings (equal or not).

  Raises:
    CheckError: the shapes differ.
  """
  expected = np.asarray(expected)
  if expected.dtype.kind in 'USO':
    decode = lambda x: bytes(x) if isinstance(x, bytes) else (
        str(x).encode('utf-8'))
    got_list = [decode(x) for x in np.asarray(got, dtype=object).reshape(-1)]
    want = [decode(x) for x in expected.reshape(-1)]
    if len(got_list) != len(want):
      raise CheckError(f'output {name!r} has {len(got_list)} values, the '
                       f'offline output {len(want)}')
    return 0.0 if got_list == want else math.inf
  got = np.asarray(got, dtype=np.float64)
  if got.shape != expected.shape:
    raise CheckError(f'output {name!r} has shape {list(got.shape)}, the '
                     f'offline output {list(expected.shape)}')
  if not got.size:
    return 0.0
  diff = np.abs(got - expected.astype(np.float64))
  # NaN on both sides is equal; NaN on one side is a difference.
  both_nan = np.isnan(got) & np.isnan(expected.astype(np.float64))
  diff = np.where(both_nan, 0.0, diff)
  return float(np.nan_to_num(diff, nan=math.inf).max())


def _compare(answer: Mapping[str, Any], expected: Mapping[str, np.ndarray],
             tolerance: float, how: str) -> float:
  """The largest difference over the expected outputs.

  Raises:
    CheckError: an output is missing, shaped otherwise, or differs by more
      than the tolerance (the message names it and the difference).
  """
  worst = 0.0
  for name, want in expected.items():
    if name not in answer:
      raise CheckError(f'{how}: the answer has no output {name!r} (it has '
                       f'{sorted(answer)})')
    diff = _difference(name, answer[name], want)
    if diff > tolerance:
      shown = ('different strings' if math.isinf(diff) and
               np.asarray(want).dtype.kind in 'USO' else
               f'max abs difference {diff:.3g}')
      raise CheckError(f'{how}: output {name!r} differs from the offline '
                       f'output: {shown} > {tolerance:g}')
    worst = max(worst, diff)
  return worst


def _rest_outputs(response: Mapping[str, Any],
                  expected: Mapping[str, np.ndarray]) -> Dict[str, Any]:
  outputs = response.get('outputs')
  # TF Serving's columnar answer: a bare value when there is one output.
  if not isinstance(outputs, dict):
    if len(expected) != 1:
      raise CheckError(f'REST: one unnamed output, expected {sorted(expected)}')
    return {next(iter(expected)): outputs}
  return outputs


def _percentiles(seconds: List[float]) -> Dict[str, float]:
  ms = np.asarray(seconds) * 1000.0
  return {'p50': float(np.percentile(ms, 50)),
          'p99': float(np.percentile(ms, 99))}


class _Server:
  """``leantfx serve`` in a subprocess: started, read, always stopped."""

  def __init__(self, base_path: str, settings: Settings, log_path: str):
    self.settings = settings
    self.log_path = log_path
    self._log = open(log_path, 'wb')  # pylint: disable=consider-using-with
    command = [sys.executable, '-m', 'leantfx.cli', 'serve', '--verbose',
               '--model-base-path', base_path, '--host', HOST,
               '--rest-port', '0', '--grpc-port', '0',
               '--file-system-poll-wait-seconds', '0',
               '--max-num-load-retries', '0',
               '--request-timeout-s', str(settings.request_timeout_s),
               *settings.serve_args]
    self.process = subprocess.Popen(  # pylint: disable=consider-using-with
        command, stdout=subprocess.PIPE, stderr=self._log,
        stdin=subprocess.DEVNULL)
    self.pid = self.process.pid
    self._lines: 'queue.Queue[Optional[str]]' = queue.Queue()
    threading.Thread(target=self._read_stdout, daemon=True,
                     name='leantfx-infra-check-stdout').start()
    self.rest_port = self.grpc_port = None

  def _read_stdout(self):
    for raw in self.process.stdout:
      self._lines.put(raw.decode('utf-8', 'replace').rstrip('\n'))
    self._lines.put(None)

  def log_tail(self, lines: int = 5) -> str:
    try:
      with open(self.log_path, 'rb') as f:
        text = f.read().decode('utf-8', 'replace')
    except OSError:
      return ''
    return ' | '.join(l for l in text.strip().splitlines()[-lines:])

  def wait_ready(self) -> None:
    """Waits for the banner.

    Raises:
      CheckError: the server exited or printed no banner in time.
    """
    deadline = time.monotonic() + self.settings.start_timeout_s
    printed = []
    while True:
      left = deadline - time.monotonic()
      if left <= 0:
        raise CheckError(
            f'leantfx serve was not ready within '
            f'{self.settings.start_timeout_s:g} s: {self.log_tail()}')
      try:
        line = self._lines.get(timeout=min(left, 1.0))
      except queue.Empty:
        continue
      if line is None:
        code = self.process.wait(timeout=self.settings.stop_timeout_s)
        raise CheckError(
            f'leantfx serve exited with code {code} before serving: '
            f'{" ".join(printed) or self.log_tail()}')
      match = _BANNER_RE.search(line)
      if match:
        self.rest_port, self.grpc_port = int(match.group(1)), int(
            match.group(2))
        return
      printed.append(line)

  def stop(self) -> None:
    """SIGTERM, then SIGKILL after the grace period; reaps the process."""
    try:
      if self.process.poll() is None:
        self.process.send_signal(signal.SIGTERM)
        try:
          self.process.wait(timeout=self.settings.stop_timeout_s)
        except subprocess.TimeoutExpired:
          self.process.kill()
          self.process.wait(timeout=self.settings.stop_timeout_s)
    finally:
      if self.process.stdout is not None:
        self.process.stdout.close()
      self._log.close()


def _load_status(rest: serving_client.RestClient, model: str) -> float:
  """Raises CheckError unless the model's version is AVAILABLE."""
  try:
    status = rest.status(model)
  except serving_client.RestError as e:
    raise CheckError(f'the server does not serve it: {e.message}') from None
  except OSError as e:
    raise CheckError(f'the server does not answer: {type(e).__name__}: {e}'
                    ) from None
  for version in status.get('model_version_status', []):
    if version.get('state') == 'AVAILABLE':
      return 0.0
    error = (version.get('status') or {}).get('error_message')
    if error:
      raise CheckError(f'it did not load: {error}')
  raise CheckError(f'it did not load: status {json.dumps(status)}')


def _check_one(candidate: Candidate, server: _Server,
               settings: Settings) -> Dict[str, float]:
  """Checks one served candidate; returns its figures.

  Raises:
    CheckError: what failed.
  """
  figures: Dict[str, float] = {}
  rest = serving_client.RestClient(HOST, server.rest_port,
                                   settings.request_timeout_s)
  model = candidate.model_name
  _load_status(rest, model)
  count = min(_num_rows(candidate.rows), settings.max_rows)
  if not count:
    raise CheckError('no rows to check it with')
  rows = _take(candidate.rows, slice(0, count))
  expected = _take(candidate.expected, slice(0, count))
  figures['rows_checked'] = count
  signature = candidate.signature_name or None

  def rest_predict(inputs):
    try:
      return rest.predict(model, inputs=inputs, signature_name=signature)
    except serving_client.RestError as e:
      raise CheckError(f'REST predict failed: {e}') from None
    except OSError as e:
      raise CheckError(f'REST predict failed: {type(e).__name__}: {e}'
                      ) from None

  figures['rest_max_abs_diff'] = _compare(
      _rest_outputs(rest_predict(_rest_inputs(rows)), expected), expected,
      settings.tolerance, f'REST, {count} rows in one request')
  import grpc  # pylint: disable=g-import-not-at-top
  with serving_client.GrpcClient(HOST, server.grpc_port,
                                 settings.request_timeout_s) as stub:
    try:
      answer = stub.predict(model, _grpc_inputs(rows),
                            candidate.signature_name).outputs
    except grpc.RpcError as e:
      raise CheckError(f'gRPC predict failed: {e.code().name}: '
                       f'{e.details()}') from None
  figures['grpc_max_abs_diff'] = _compare(
      answer, expected, settings.tolerance,
      f'gRPC, {count} rows in one request')

  # Batch 1: every answer checked, the timing kept.
  one_row = [_rest_inputs(_take(rows, slice(i, i + 1))) for i in range(count)]
  one_expected = [_take(expected, slice(i, i + 1)) for i in range(count)]
  worst = 0.0

  def timed(index: int) -> float:
    started = time.perf_counter()
    response = rest_predict(one_row[index % count])
    took = time.perf_counter() - started
    return took, _compare(_rest_outputs(response, one_expected[index % count]),
                          one_expected[index % count], settings.tolerance,
                          f'REST, row {index % count} alone')

  sequential = []
  for i in range(settings.latency_requests):
    took, diff = timed(i)
    sequential.append(took)
    worst = max(worst, diff)
  with concurrent.futures.ThreadPoolExecutor(
      settings.concurrent_clients,
      thread_name_prefix='leantfx-infra-check') as pool:
    started = time.perf_counter()
    results = list(pool.map(timed, range(settings.concurrent_requests)))
    concurrent_s = time.perf_counter() - started
  worst = max([worst] + [diff for _, diff in results])
  figures['batch1_max_abs_diff'] = worst
  alone = _percentiles(sequential)
  together = _percentiles([took for took, _ in results])
  figures['latency_p50_ms_batch1'] = alone['p50']
  figures['latency_p99_ms_batch1'] = alone['p99']
  figures['latency_p50_ms_concurrent'] = together['p50']
  figures['latency_p99_ms_concurrent'] = together['p99']
  figures['concurrent_clients'] = settings.concurrent_clients
  # The served throughput: batch-1 requests answered per second with every
  # client sending, on the cores this machine gives the server and its
  # clients alike (the model card's cores for a target load).
  figures['throughput_rps_concurrent'] = (settings.concurrent_requests /
                                          concurrent_s)
  figures['cpu_cores'] = sizing.machine_cores()
  figures['requests'] = (2 + settings.latency_requests +
                         settings.concurrent_requests)
  return figures


def check(candidates: Sequence[Candidate],
          settings: Settings = Settings(),
          on_server_started=None) -> Dict[str, CheckResult]:
  """Serves every candidate in one ``leantfx serve`` and checks each.

  Args:
    candidates: the versions to check; distinct model names.
    settings: the bounds.
    on_server_started: called with the server's pid once it runs (tests
      check that the process is gone afterwards).

  Returns:
    model name -> its CheckResult. A server that does not start fails every
    candidate with its reason.

  Raises:
    ValueError: no candidate, a repeated or unusable model name, or a
      version folder that does not exist.
  """
  if not candidates:
    raise ValueError('check needs at least one candidate.')
  names = [c.model_name for c in candidates]
  if len(set(names)) != len(names):
    raise ValueError(f'Candidate model names repeat: {names}.')
  for c in candidates:
    if not re.fullmatch(r'[A-Za-z][A-Za-z0-9_-]*', c.model_name):
      raise ValueError(f'Candidate model name {c.model_name!r} is no plain '
                       'directory name.')
    if not os.path.isdir(c.version_dir):
      raise ValueError(f'Candidate {c.model_name}: {c.version_dir} is not a '
                       'folder.')
  results: Dict[str, CheckResult] = {}
  with tempfile.TemporaryDirectory(prefix='leantfx-infra-check-') as scratch:
    base = os.path.join(scratch, 'models')
    for c in candidates:
      shutil.copytree(c.version_dir,
                      os.path.join(base, c.model_name, str(VERSION)))
    started = time.monotonic()
    server = _Server(base, settings, os.path.join(scratch, 'serve.log'))
    try:
      if on_server_started is not None:
        on_server_started(server.pid)
      try:
        server.wait_ready()
      except CheckError as e:
        return {c.model_name: CheckResult(c.model_name, False, str(e), {})
                for c in candidates}
      load_s = time.monotonic() - started
      for c in candidates:
        figures = {'load_s': load_s}
        try:
          figures.update(_check_one(c, server, settings))
        except CheckError as e:
          results[c.model_name] = CheckResult(c.model_name, False, str(e),
                                              figures)
          continue
        results[c.model_name] = CheckResult(c.model_name, True, '', figures)
    finally:
      server.stop()
  return results
