"""Figure: `leantfx serve` under heavy and hostile requests, for minutes.

One `leantfx serve` process on 127.0.0.1 serves two pushes of the 64-column
digits model (benchmarks/soak_models.py): `wide` (SavedModel) and
`wide_lite` (its TFLite conversion), polling its base directory every
second. Three phases:

1. idle: one client sends batch-1 predicts for IDLE_S seconds: the good
   requests' p50/p99 when nothing else runs, and the idle RSS;
2. probe: a PROBE_ROWS-row columnar request (100,000 rows, ~15 MB, the
   issue's case) to each push, timed, while a client asks for the model's
   status every 20 ms: the status answers' worst and p99 latency (target:
   under 50 ms), the batch's seconds, and RSS after it (target: at most
   1.5x idle);
3. soak, DURATION_S seconds (10 minutes by default): at once, two clients
   of good batch-1 predicts; one of malformed requests (bad JSON, wrong
   types, missing inputs, lists 900 deep, bad UTF-8, path tricks); one of
   10 MB columnar batches to either push; one of gRPC Predicts whose
   shapes stretch one value to [1000000] (refused) or [20000] (served);
   SLOW_CLIENTS connections sending a byte a second; and a new version of
   `wide` copied in every SWAP_EVERY_S seconds (a hot swap); once, half a
   swap period in, a version of `wide_lite` whose model.tflite is cut in
   half, copied in by hand with no manifest (it must be refused, version 1
   serving on). RSS is sampled every second.

Reported: good requests' p50/p99 idle and under soak, RSS over time, every
non-2xx answer by code and by kind of client, and crashes (the server
process gone, or any 500 answer: a client's input never gets one). The
bench fails (exit 1) on a crash or a 500.

  .venv/bin/python -m benchmarks.bench_soak [--duration-s 600]
"""
import argparse
import collections
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List

from benchmarks import harness
from benchmarks import soak_models

LEANTFX = os.path.join(os.path.dirname(sys.executable), 'leantfx')
DURATION_S = 600
IDLE_S = 15
PROBE_ROWS = 100_000
SWAP_EVERY_S = 60
SLOW_CLIENTS = 20
BATCH_ROWS = 65_000  # ~10 MB of columnar JSON.
REQUEST_TIMEOUT_S = 10  # Slow clients are dropped at it (and come back).
COLUMNS = soak_models.COLUMNS
GOOD = json.dumps({'inputs': {c: [3.0] for c in COLUMNS}}).encode()
MALFORMED = [
    ('/v1/models/wide:predict', b'{"inputs": '),
    ('/v1/models/wide:predict', b'{"inputs": {"pixel_0": ["a"]}}'),
    ('/v1/models/wide:predict', b'{"inputs": {"pixel_0": [1.0]}}'),
    ('/v1/models/wide:predict', b'\xff\xfe{"inputs": 1}'),
    ('/v1/models/wide:predict', ('{"inputs": {' + ', '.join(
        f'"{c}": {"[" * 900 + "1" + "]" * 900 if c == "pixel_0" else "[1]"}'
        for c in COLUMNS) + '}}').encode()),
    ('/v1/models/wide:predict', b'[' * 10_000 + b']' * 10_000),
    ('/v1/models/..%2Fwide:predict', GOOD),
    ('/v1/models/wide%00:predict', GOOD),
    ('/v1/models/nope:predict', GOOD),
    ('/v1/models/wide/versions/99:predict', GOOD),
]


class _Tally:
  """Answers by kind of client and code, and good requests' latencies."""

  def __init__(self):
    self.lock = threading.Lock()
    self.codes: Dict[str, collections.Counter] = collections.defaultdict(
        collections.Counter)
    self.latencies: List[float] = []

  def add(self, kind: str, code, seconds: float = 0.0) -> None:
    with self.lock:
      self.codes[kind][str(code)] += 1
      if kind == 'good' and code == 200:
        self.latencies.append(seconds)


def _rss_mb(pid: int) -> float:
  with open(f'/proc/{pid}/status') as f:
    for line in f:
      if line.startswith('VmRSS:'):
        return int(line.split()[1]) / 1024
  return 0.0


def _percentile(values: List[float], q: float) -> float:
  ordered = sorted(values)
  return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered \
      else float('nan')


def _request(connection, method: str, path: str, body=None):
  connection.request(method, path, body)
  response = connection.getresponse()
  return response.status, response.read()


def _client_loop(port: int, stop: threading.Event, step):
  """Calls step(connection) until stop; reconnects after a closed answer."""
  connection = http.client.HTTPConnection('127.0.0.1', port, timeout=60)
  while not stop.is_set():
    try:
      step(connection)
    except (OSError, http.client.HTTPException):
      connection.close()
      connection = http.client.HTTPConnection('127.0.0.1', port, timeout=60)
  connection.close()


def _good(port, tally, kind='good'):
  def step(connection):
    start = time.perf_counter()
    code, _ = _request(connection, 'POST', '/v1/models/wide:predict', GOOD)
    tally.add(kind, code, time.perf_counter() - start)
  return step


def _malformed(port, tally):
  index = [0]

  def step(connection):
    path, body = MALFORMED[index[0] % len(MALFORMED)]
    index[0] += 1
    code, _ = _request(connection, 'POST', path, body)
    tally.add('malformed', code)
    time.sleep(0.2)
  return step


def _big(port, tally, bodies):
  index = [0]

  def step(connection):
    model = ('wide', 'wide_lite')[index[0] % 2]
    body = bodies[index[0] % len(bodies)]
    index[0] += 1
    code, _ = _request(connection, 'POST', f'/v1/models/{model}:predict',
                       body)
    tally.add('10MB batch', code)
  return step


def _grpc_loop(port: int, stop: threading.Event, tally: _Tally) -> None:
  import grpc  # pylint: disable=g-import-not-at-top
  from tensorflow.core.framework import tensor_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow_serving.apis import predict_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow_serving.apis import prediction_service_pb2_grpc  # pylint: disable=g-import-not-at-top

  def stretched(rows):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = 'wide'
    for column in COLUMNS:
      proto = tensor_pb2.TensorProto(dtype=1, float_val=[1.0])
      proto.tensor_shape.dim.add(size=rows)
      request.inputs[column].CopyFrom(proto)
    return request

  requests = [stretched(1_000_000), stretched(20_000)]
  with grpc.insecure_channel(f'127.0.0.1:{port}', options=[
      ('grpc.max_receive_message_length', 64 * 1024 * 1024)]) as channel:
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    index = 0
    while not stop.wait(1.0):
      try:
        stub.Predict(requests[index % 2], timeout=60)
        tally.add('stretched gRPC', 'OK')
      except grpc.RpcError as e:
        tally.add('stretched gRPC', e.code().name)
      index += 1


def _slow_client(port: int, stop: threading.Event, tally: _Tally) -> None:
  head = (b'POST /v1/models/wide:predict HTTP/1.1\r\nContent-Length: %d'
          b'\r\n\r\n' % len(GOOD)) + GOOD
  while not stop.is_set():
    try:
      with socket.create_connection(('127.0.0.1', port), timeout=60) as sock:
        for byte in head:
          if stop.wait(1.0):
            return
          sock.sendall(bytes([byte]))
        tally.add('slow client', 'answered')
    except OSError:
      tally.add('slow client', 'dropped')


def _swap_loop(base: str, stop: threading.Event, every_s: float,
               swaps: List[float]) -> None:
  """Copies a new version of `wide` in (atomically) every `every_s`."""
  version = 1
  while not stop.wait(every_s):
    version += 1
    staging = os.path.join(base, f'.staging-{version}')
    shutil.copytree(os.path.join(base, 'wide', '1'), staging)
    os.rename(staging, os.path.join(base, 'wide', str(version)))
    swaps.append(time.monotonic())


def _truncated_once(base: str, stop: threading.Event, delay_s: float,
                   found: Dict) -> None:
  """Copies in a newer `wide_lite` version with model.tflite cut in half."""
  if stop.wait(delay_s):
    return
  lite = os.path.join(base, 'wide_lite')
  staging = os.path.join(base, '.staging-truncated')
  shutil.copytree(os.path.join(lite, '1'), staging)
  manifest = os.path.join(staging, 'manifest.json')
  if os.path.exists(manifest):
    os.remove(manifest)  # As a hand copy of a TF Serving layout.
  model = os.path.join(staging, 'model.tflite')
  with open(model, 'rb') as f:
    data = f.read()
  with open(model, 'wb') as f:
    f.write(data[:len(data) // 2])
  os.rename(staging, os.path.join(lite, '2'))
  found['version'] = 2


def _lite_status(port: int) -> Dict[str, str]:
  """{version: state (error code)} of `wide_lite`, as the server reports."""
  connection = http.client.HTTPConnection('127.0.0.1', port, timeout=10)
  try:
    connection.request('GET', '/v1/models/wide_lite')
    answer = json.loads(connection.getresponse().read())
  finally:
    connection.close()
  return {str(v['version']): v['state'] + (
      f' ({v["status"]["error_code"]})'
      if v.get('status', {}).get('error_code') not in (None, 'OK') else '')
          for v in answer.get('model_version_status', [])}


def _status_during(port: int, model: str, body: bytes) -> Dict[str, float]:
  """Times a big request while a client asks for status every 20 ms."""
  latencies, done = [], threading.Event()

  def poll():
    connection = http.client.HTTPConnection('127.0.0.1', port, timeout=60)
    while not done.is_set():
      start = time.perf_counter()
      _request(connection, 'GET', f'/v1/models/{model}')
      latencies.append(time.perf_counter() - start)
      time.sleep(0.02)
    connection.close()

  poller = threading.Thread(target=poll)
  poller.start()
  time.sleep(0.2)
  connection = http.client.HTTPConnection('127.0.0.1', port, timeout=300)
  start = time.perf_counter()
  code, _ = _request(connection, 'POST', f'/v1/models/{model}:predict', body)
  seconds = time.perf_counter() - start
  connection.close()
  done.set()
  poller.join()
  return {'code': code, 'seconds': seconds,
          'status_max_ms': max(latencies) * 1000,
          'status_p99_ms': _percentile(latencies, 0.99) * 1000,
          'status_answers': len(latencies)}


def _start_server(base: str, rest: int, grpc_port: int):
  command = [LEANTFX, 'serve', '--model-base-path', base,
             '--rest-port', str(rest), '--grpc-port', str(grpc_port),
             '--request-timeout-s', str(REQUEST_TIMEOUT_S)]
  process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
  deadline = time.monotonic() + 300
  while time.monotonic() < deadline:
    try:
      connection = http.client.HTTPConnection('127.0.0.1', rest, timeout=5)
      if _request(connection, 'GET', '/v1/models/wide_lite')[0] == 200:
        return process
    except OSError:
      pass
    if process.poll() is not None:
      raise RuntimeError(f'leantfx serve exited with {process.returncode}')
    time.sleep(0.5)
  process.kill()
  raise RuntimeError('leantfx serve did not answer within 300 s')


def _free_port() -> int:
  with socket.socket() as sock:
    sock.bind(('127.0.0.1', 0))
    return sock.getsockname()[1]


def _idle(port: int, pid: int, seconds: float) -> Dict[str, float]:
  tally, stop = _Tally(), threading.Event()
  thread = threading.Thread(target=_client_loop,
                            args=(port, stop, _good(port, tally)))
  thread.start()
  time.sleep(seconds)
  stop.set()
  thread.join()
  return {'p50_ms': _percentile(tally.latencies, 0.5) * 1000,
          'p99_ms': _percentile(tally.latencies, 0.99) * 1000,
          'requests': len(tally.latencies), 'rss_mb': _rss_mb(pid)}


def _soak(base, port, grpc_port, process, args) -> Dict:
  """Phase 3: every client at once; returns the tally and the RSS samples."""
  tally, stop, swaps, rss = _Tally(), threading.Event(), [], []
  truncated: Dict = {}
  bodies = [soak_models.columnar_body(BATCH_ROWS, seed=s) for s in (1, 2)]
  threads = [threading.Thread(target=_client_loop, args=(
      port, stop, _good(port, tally))) for _ in range(2)]
  threads += [
      threading.Thread(target=_client_loop,
                       args=(port, stop, _malformed(port, tally))),
      threading.Thread(target=_client_loop,
                       args=(port, stop, _big(port, tally, bodies))),
      threading.Thread(target=_grpc_loop, args=(grpc_port, stop, tally)),
      threading.Thread(target=_swap_loop,
                       args=(base, stop, args.swap_every_s, swaps)),
      threading.Thread(target=_truncated_once,
                       args=(base, stop, args.swap_every_s / 2, truncated)),
  ]
  threads += [threading.Thread(target=_slow_client, args=(port, stop, tally))
              for _ in range(args.slow_clients)]
  for thread in threads:
    thread.daemon = True
    thread.start()
  start = time.monotonic()
  crashed = None
  while time.monotonic() - start < args.duration_s:
    time.sleep(1.0)
    if process.poll() is not None:
      crashed = process.returncode
      break
    rss.append((round(time.monotonic() - start), _rss_mb(process.pid)))
  if crashed is None and truncated:
    truncated['status'] = _lite_status(port)
  stop.set()
  for thread in threads:
    thread.join(90)
  return {'tally': tally, 'rss': rss, 'swaps': len(swaps),
          'crashed': crashed, 'truncated': truncated}


def _rss_over_time(rss, points: int = 10) -> str:
  if not rss:
    return 'no samples'
  step = max(1, len(rss) // points)
  return ', '.join(f'{t}s {mb:.0f}' for t, mb in rss[::step])


def parse_args(argv=None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--duration-s', type=float, default=DURATION_S)
  parser.add_argument('--idle-s', type=float, default=IDLE_S)
  parser.add_argument('--probe-rows', type=int, default=PROBE_ROWS)
  parser.add_argument('--swap-every-s', type=float, default=SWAP_EVERY_S)
  parser.add_argument('--slow-clients', type=int, default=SLOW_CLIENTS)
  return parser.parse_args(argv)


def measure(args: argparse.Namespace) -> Dict:
  """Runs the three phases against a fresh server; returns what was seen."""
  with tempfile.TemporaryDirectory(prefix='leantfx-bench-soak-') as base:
    soak_models.saved_model(os.path.join(base, 'wide', '1'))
    soak_models.tflite_model(os.path.join(base, 'wide', '1'),
                             os.path.join(base, 'wide_lite', '1'))
    port, grpc_port = _free_port(), _free_port()
    process = _start_server(base, port, grpc_port)
    try:
      idle = _idle(port, process.pid, args.idle_s)
      probe_body = soak_models.columnar_body(args.probe_rows)
      probes = {model: _status_during(port, model, probe_body)
                for model in ('wide', 'wide_lite')}
      after_probe = _rss_mb(process.pid)
      soak = _soak(base, port, grpc_port, process, args)
    finally:
      if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
  return {'idle': idle, 'probes': probes, 'after_probe': after_probe,
          'soak': soak, 'probe_bytes': len(probe_body)}


def main(argv=None) -> int:
  args = parse_args(argv)
  return report(args, measure(args))


def report(args: argparse.Namespace, seen: Dict) -> int:
  """Prints and writes results/soak.json; 1 on a crash or a 500, else 0."""
  idle, probes, soak = seen['idle'], seen['probes'], seen['soak']
  after_probe, probe_bytes = seen['after_probe'], seen['probe_bytes']
  tally = soak['tally']
  rss_values = [mb for _, mb in soak['rss']] or [float('nan')]
  five_hundreds = sum(count for codes in tally.codes.values()
                      for code, count in codes.items() if code == '500')
  rows = [{'phase': 'idle', 'good p50 ms': f'{idle["p50_ms"]:.2f}',
           'good p99 ms': f'{idle["p99_ms"]:.2f}',
           'requests': idle['requests'], 'RSS MB': f'{idle["rss_mb"]:.0f}'}]
  for model, probe in probes.items():
    rows.append({'phase': f'{args.probe_rows:,}-row batch to {model}',
                 'good p50 ms': '', 'good p99 ms': '',
                 'requests': f'{probe["code"]} in {probe["seconds"]:.2f} s; '
                             f'status max {probe["status_max_ms"]:.1f} ms, '
                             f'p99 {probe["status_p99_ms"]:.1f} ms',
                 'RSS MB': ''})
  rows.append({'phase': 'after the batches', 'good p50 ms': '',
               'good p99 ms': '', 'requests': '',
               'RSS MB': f'{after_probe:.0f} '
                         f'({after_probe / idle["rss_mb"]:.2f}x idle)'})
  rows.append({'phase': f'soak {args.duration_s:.0f} s',
               'good p50 ms': f'{_percentile(tally.latencies, 0.5) * 1000:.2f}',
               'good p99 ms':
                   f'{_percentile(tally.latencies, 0.99) * 1000:.2f}',
               'requests': len(tally.latencies),
               'RSS MB': f'max {max(rss_values):.0f}, last '
                         f'{rss_values[-1]:.0f}'})
  crash = ('0' if soak['crashed'] is None else
           f'1 (exit {soak["crashed"]})')
  notes = ['answers by client and code: ' + '; '.join(
      f'{kind}: ' + ', '.join(f'{code} x{n}' for code, n in sorted(
          codes.items())) for kind, codes in sorted(tally.codes.items())),
           f'RSS over the soak (MB): {_rss_over_time(soak["rss"])}',
           f'hot swaps: {soak["swaps"]}; crashes: {crash}; answers of 500: '
           f'{five_hundreds}',
           'truncated model.tflite copied in as wide_lite version 2: '
           f'{_truncated_text(soak.get("truncated") or {})}',
           f'probe body: {probe_bytes / 1e6:.1f} MB columnar; one '
           '`leantfx serve` process, 127.0.0.1, models from '
           'benchmarks/soak_models.py']
  harness.report('soak', 'leantfx serve under heavy and hostile requests',
                 rows, notes)
  return 1 if (soak['crashed'] is not None or five_hundreds or
               not _truncated_held(soak.get('truncated') or {})) else 0


def _truncated_held(truncated: Dict) -> bool:
  """The cut version was refused and version 1 went on serving."""
  status = truncated.get('status') or {}
  return (status.get('1') == 'AVAILABLE' and
          status.get('2', '').startswith('END'))


def _truncated_text(truncated: Dict) -> str:
  if not truncated:
    return 'not copied (the soak ended first)'
  status = truncated.get('status') or {}
  return (', '.join(f'version {v} {state}' for v, state in sorted(
      status.items())) or 'no status') + (
          '' if _truncated_held(truncated) else ' (NOT HELD)')


if __name__ == '__main__':
  sys.exit(main())
