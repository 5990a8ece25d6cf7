"""Figure: serving speed as users get it, with `wrk` as the client.

Models: the pipeline's own pushes. The bench runs `leantfx run` on digits
(with --runtimes all, so the TFLite, OpenVINO and ONNX picks are pushed too)
and on penguins, or reuses the outputs of earlier runs (--digits-output,
--penguins-output: folders written by `leantfx run --output`).

Servers, each in its own process on 127.0.0.1, one at a time:
  * baseline: a threaded Flask app that loads the pushed SavedModel and calls
    its raw-feature `serving_default` per request (TF Serving's row format in,
    `probabilities` out): the competent server most teams write;
  * history (digits): the same Flask app calling the Keras model's
    `model.predict` per request, the old baseline of docs/measurements.md;
  * `leantfx serve` on the pushed SavedModel (raw columns: what TF Serving
    users get) and on each pushed runtime (TFLite, OpenVINO, ONNX), batching
    off and on (default batching parameters).
Each row is sent the inputs its push takes, as its manifest says
(metrics.serving_inputs.inputs): every push the optimizer could fold the
Transform into takes the raw columns (an OpenVINO push with vocabulary
columns takes their ids, which `leantfx serve` looks up from the strings);
one whose fold failed takes the transformed features. The table says which
input each row had.

Client: wrk (C, not Python: the figures do not depend on a Python client on
these 2 cores), 1 thread, CONNECTIONS keep-alive connections, DURATION_S
seconds after a WARMUP_S warm-up run, one instance per request, cycling over
64 eval-split examples. CPU seconds per request: the server's process tree
(utime + stime from /proc) over the run, divided by the requests wrk
completed.

  apt-get install wrk   # Debian's package; the bench stops without it
  .venv/bin/python -m benchmarks.bench_serving [--duration S]
"""
import argparse
import glob
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from benchmarks import harness
from leantfx.models import features
from leantfx.models import model_layout
from leantfx.models import serving_graph

CONNECTIONS = 8
WORKERS = 2  # serve --workers for the multi-process rows: the cores here.
DURATION_S = 15
WARMUP_S = 3
EXAMPLES = 64
POLL_S = 0.5  # Hot swap: --file-system-poll-wait-seconds.
SWAP_LOOP_MAX_S = 30.0  # Hot swap: client loop duration bound.
SWAP_CLIENTS = 4  # Hot swap: gRPC client threads.
RUNTIMES = ('tflite', 'openvino', 'onnx')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_RUN_SERVE = ('import sys, argparse\n'
              'from leantfx.cli import serving as cli\n'
              'parser = argparse.ArgumentParser(prog="leantfx")\n'
              'cli.add_commands(parser.add_subparsers())\n'
              'args = parser.parse_args(sys.argv[1:])\n'
              'sys.exit(args.func(args))\n')
_RUN_BASELINE = ('import sys\n'
                 'from benchmarks.bench_serving import baseline_server\n'
                 'baseline_server(*sys.argv[1:])\n')


def _env() -> Dict[str, str]:
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')


def baseline_server(kind: str, path: str, model_name: str) -> None:
  """The Flask app of make_app under werkzeug's threaded server.

  Prints ``port <n>`` and serves forever.
  """
  from werkzeug import serving  # pylint: disable=g-import-not-at-top
  app = make_app(kind, path, model_name)
  server = serving.make_server('127.0.0.1', 0, app, threaded=True)
  print(f'port {server.server_port}', flush=True)
  server.serve_forever()


def make_app(kind: str, path: str, model_name: str):
  """A Flask app answering POST /v1/models/<name>:predict.

  kind 'saved_model': `serving_default` of the SavedModel at path, one
  tensor per raw column built from the row-format instances. kind 'keras':
  `model.predict` of the tf_keras model at path on the instances' transformed
  features. The model is loaded and called once before the app is returned
  (gunicorn calls this in each worker: ``benchmarks.bench_serving:make_app(
  "saved_model", PATH, NAME)``).
  """
  import leantfx  # noqa: F401  Keras 2 before TensorFlow (leantfx/__init__.py).
  import flask  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  if kind == 'saved_model':
    signature = tf.saved_model.load(path).signatures['serving_default']
    specs = signature.structured_input_signature[1]

    def predict(instances):
      columns = {name: tf.constant([row[name] for row in instances],
                                   dtype=spec.dtype)
                 for name, spec in specs.items()}
      return signature(**columns)['probabilities'].numpy().tolist()
  else:
    import tf_keras  # pylint: disable=g-import-not-at-top
    model = tf_keras.models.load_model(path)
    names = [t.name.split(':')[0] for t in model.inputs]
    # Keras' predict from 8 request threads at once stalls (none finished in
    # a 3 s run); one at a time, as a Keras app has to serve it.
    lock = threading.Lock()

    def predict(instances):
      if isinstance(instances[0], dict):
        feed = [np.asarray([row[n] for row in instances], np.float32)
                for n in names]
      else:
        feed = [np.asarray(instances, np.float32)]
      with lock:
        return model.predict(feed if len(feed) > 1 else feed[0],
                             verbose=0).tolist()

  # One call before the port is printed: the first call traces the graph
  # (about 12 s for Keras' predict), which the warm-up run would not cover.
  if kind == 'saved_model':
    signature(**{name: tf.zeros([1], spec.dtype) if spec.dtype != tf.string
                 else tf.constant(['']) for name, spec in specs.items()})
  else:
    model.predict([np.zeros([1] + t.shape[1:].as_list(), np.float32)
                   for t in model.inputs], verbose=0)
  app = flask.Flask('baseline')
  logging.getLogger('werkzeug').setLevel(logging.ERROR)  # No line a request.

  @app.route(f'/v1/models/{model_name}:predict', methods=['POST'])
  def handle():
    instances = json.loads(flask.request.get_data())['instances']
    return flask.Response(json.dumps({'predictions': predict(instances)}),
                          mimetype='application/json')

  return app


def _leantfx() -> str:
  return os.path.join(os.path.dirname(sys.executable), 'leantfx')


def _pipeline(dataset: str, output: str, runtimes: str) -> None:
  """Runs `leantfx run` into output unless it already pushed there."""
  if glob.glob(os.path.join(output, 'serving', dataset, '*', 'saved_model.pb')):
    print(f'{dataset}: reusing the pushes in {output}', flush=True)
    return
  print(f'{dataset}: leantfx run --runtimes {runtimes} (several minutes)',
        flush=True)
  result = subprocess.run(
      [_leantfx(), 'run', '--dataset', dataset, '--output', output,
       '--runtimes', runtimes], env=_env(), capture_output=True, text=True,
      check=False)
  if result.returncode != 0:
    raise SystemExit(f'leantfx run --dataset {dataset} failed '
                     f'(exit {result.returncode}):\n{result.stdout[-3000:]}')


def _inputs_of(folder: str) -> str:
  """'raw' or 'transformed': what the newest push in folder takes."""
  with open(os.path.join(harness.newest_version(folder), 'manifest.json'),
            encoding='utf-8') as f:
    metrics = json.load(f).get('metrics') or {}
  return (metrics.get('serving_inputs') or {}).get('inputs', 'transformed')


def _summary(dataset: str, output: str):
  from leantfx.pipeline import run_summary  # pylint: disable=g-import-not-at-top
  return run_summary.summarize(os.path.join(output, 'metadata.sqlite'),
                               f'leantfx-{dataset}')


def _values(feature) -> list:
  return list(feature.bytes_list.value or feature.float_list.value or
              feature.int64_list.value)


def _bodies(dataset: str, output: str) -> Dict[str, List[str]]:
  """Request bodies of EXAMPLES eval-split rows, by input kind.

  'raw': TF Serving's row format of the raw columns (the label left out);
  'transformed': the same rows through the SavedModel's transform_features.
  Rows with a missing value are skipped (row format has no missing value).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  summary = _summary(dataset, output)
  uri = summary.executions['CsvExampleGen'].outputs['examples'][0].uri
  records = [r.numpy() for r in tf.data.TFRecordDataset(
      glob.glob(os.path.join(uri, 'Split-eval', '*')),
      compression_type='GZIP')]
  model = tf.saved_model.load(harness.newest_version(os.path.join(output, 'serving',
                                                   dataset)))
  raw_names = set(model.signatures['serving_default']
                  .structured_input_signature[1])
  raw, kept = [], []
  for record in records:
    feature = tf.train.Example.FromString(record).features.feature
    if not all(name in feature and _values(feature[name])
               for name in raw_names):
      continue  # A missing value (absent, or an empty list).
    row = {}
    for name in sorted(raw_names):
      f = feature[name]
      row[name] = (f.bytes_list.value[0].decode() if f.bytes_list.value else
                   float(f.float_list.value[0]) if f.float_list.value else
                   int(f.int64_list.value[0]))
    raw.append(row)
    kept.append(record)
    if len(raw) == EXAMPLES:
      break
  transformed = model.signatures['transform_features'](
      examples=tf.constant(kept))
  names = sorted(n for n in transformed if n != features.LABEL_KEY)
  rows = [{n: transformed[n].numpy()[i].tolist() for n in names}
          for i in range(len(kept))]
  if len(names) == 1:  # One input: TF Serving's row format is the value.
    rows = [row[names[0]] for row in rows]
  return {
      'raw': [json.dumps({'instances': [row]}) for row in raw],
      'transformed': [json.dumps({'instances': [row]}) for row in rows],
  }


def _graph_cost(saved_dir: str, body: str, calls: int = 200
                ) -> Dict[str, float]:
  """The raw-feature serving graph's op count and in-process call cost (the
  figures the Pusher records for the run summary), with a real eval row."""
  cost = serving_graph.measure(saved_dir, json.loads(body)['instances'][0],
                               calls)
  return {'serving_graph_ops': cost.ops,
          **{f'call_ms_batch{batch}': ms for batch, ms in cost.call_ms.items()}}


def _start(cmd: List[str], marker: str, timeout_s: float = 300.0):
  """Starts a server process and returns (process, port) from its banner."""
  process = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, env=_env(),
                             cwd=ROOT)
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    line = process.stdout.readline()
    if marker in line:
      if marker == 'port ':
        return process, int(line.split()[1])
      return process, int(line.split('http://127.0.0.1:')[1].split()[0])
    if not line and process.poll() is not None:
      break
  process.kill()
  raise SystemExit(f'server {cmd[3:8]} did not start')


def _serve(model_dir: str, batching: bool, workers: int = 1,
           poll_s: float = 0.0):
  cmd = [sys.executable, '-c', _RUN_SERVE, 'serve', '--model-base-path',
         model_dir, '--model-name', os.path.basename(model_dir),
         '--rest-port', '0', '--grpc-port', '0',
         '--file-system-poll-wait-seconds', str(poll_s),
         '--workers', str(workers),
         # Explicit both ways: serve's default (auto) batches a SavedModel in
         # one process, which is this table's "batching" row.
         '--batching', 'on' if batching else 'off']
  return _start(cmd, 'leantfx serve:')


def _stop(process) -> None:
  process.terminate()
  try:
    process.wait(30)
  except subprocess.TimeoutExpired:
    process.kill()
    process.wait(10)


def _cpu_seconds(pid: int) -> float:
  """utime + stime of pid and every descendant still running, in seconds."""
  ticks = os.sysconf('SC_CLK_TCK')
  stats = {}
  for path in glob.glob('/proc/[0-9]*/stat'):
    try:
      with open(path, encoding='utf-8') as f:
        text = f.read()
    except OSError:
      continue
    fields = text[text.rindex(')') + 2:].split()
    stats[int(path.split('/')[2])] = (int(fields[1]),
                                      int(fields[11]) + int(fields[12]))
  tree, frontier = {pid}, [pid]
  while frontier:
    parent = frontier.pop()
    for child, (ppid, _) in stats.items():
      if ppid == parent and child not in tree:
        tree.add(child)
        frontier.append(child)
  return sum(stats[p][1] for p in tree if p in stats) / ticks


def _lua(bodies: Sequence[str], path: str) -> str:
  """A wrk script that cycles over the bodies (Lua long strings)."""
  items = ',\n'.join(f'[==[{b}]==]' for b in bodies)
  return (f'local bodies = {{\n{items}\n}}\n'
          'local i = 0\n'
          'local headers = {["Content-Type"] = "application/json"}\n'
          'request = function()\n'
          '  i = i % #bodies + 1\n'
          f'  return wrk.format("POST", "{path}", headers, bodies[i])\n'
          'end\n')


_UNITS = {'us': 1e-3, 'ms': 1.0, 's': 1e3}


def _wrk(port: int, script: str, seconds: int, connections: int
         ) -> Dict[str, float]:
  """Runs wrk; returns requests/s, p50/p99 ms, requests and failures."""
  result = subprocess.run(
      ['wrk', '-t1', f'-c{connections}', f'-d{seconds}s', '--latency',
       '--timeout', '10s', '-s', script, f'http://127.0.0.1:{port}'],
      capture_output=True, text=True, check=True)
  out = result.stdout

  def latency(percent):
    found = re.search(rf'^\s+{percent}%\s+([0-9.]+)(us|ms|s)\s*$', out, re.M)
    return float(found.group(1)) * _UNITS[found.group(2)]

  requests = int(re.search(r'(\d+) requests in', out).group(1))
  non_2xx = re.search(r'Non-2xx or 3xx responses: (\d+)', out)
  errors = re.search(r'Socket errors: connect (\d+), read (\d+), write (\d+),'
                     r' timeout (\d+)', out)
  failed = (int(non_2xx.group(1)) if non_2xx else 0) + (
      sum(int(g) for g in errors.groups()) if errors else 0)
  if failed or not requests:
    print(f'wrk: {failed} of {requests} requests failed:\n{out}', flush=True)
  return {'rps': float(re.search(r'Requests/sec:\s+([0-9.]+)', out).group(1)),
          'p50_ms': latency(50), 'p99_ms': latency(99),
          'requests': requests, 'failed': failed}


def _measure(process, port: int, bodies: Sequence[str], model_name: str,
             workdir: str, args) -> Dict[str, float]:
  script = os.path.join(workdir, 'bodies.lua')
  with open(script, 'w', encoding='utf-8') as f:
    f.write(_lua(bodies, f'/v1/models/{model_name}:predict'))
  _wrk(port, script, WARMUP_S, args.connections)
  before = _cpu_seconds(process.pid)
  measured = _wrk(port, script, args.duration, args.connections)
  cpu = _cpu_seconds(process.pid) - before
  measured['cpu_ms_per_request'] = 1000 * cpu / max(measured['requests'], 1)
  return measured


def _dataset_rows(dataset: str, output: str, workdir: str, args
                  ) -> List[Dict[str, object]]:
  """Every server of one dataset, one at a time; ratios to the baseline."""
  bodies = _bodies(dataset, output)
  saved = os.path.join(output, 'serving', dataset)
  servers: List[Tuple[str, str, List[str], Optional[Tuple[str, bool]]]] = [
      ('baseline: Flask, SavedModel serving_default', 'raw',
       [sys.executable, '-c', _RUN_BASELINE, 'saved_model', harness.newest_version(saved),
        dataset], None)]
  if dataset == 'digits':
    model_uri = _summary(dataset, output).executions['Trainer'].outputs[
        'model'][0].uri
    servers.append(('history: Flask, Keras model.predict', 'transformed',
                    [sys.executable, '-c', _RUN_BASELINE, 'keras',
                     os.path.join(model_uri, model_layout.KERAS_MODEL_DIR),
                     dataset], None))
  # (batching, workers): one process, then WORKERS processes (both cores),
  # each without and with batching.
  settings = ((False, 1), (True, 1), (False, WORKERS), (True, WORKERS))

  def label(backend, batching, workers):
    return (f'leantfx serve, {backend}{", batching" * batching}'
            f'{f", {workers} workers" * (workers > 1)}')

  for batching, workers in settings:
    servers.append((label('SavedModel', batching, workers), 'raw', [],
                    (saved, batching, workers)))
  for runtime in RUNTIMES:
    folder = os.path.join(output, runtime, dataset)
    if not os.path.isdir(folder):
      continue
    kind = _inputs_of(folder)
    for batching, workers in settings:
      servers.append((label(runtime, batching, workers), kind, [],
                      (folder, batching, workers)))
  rows = []
  for label, kind, cmd, serve in servers:
    if serve is None:
      process, port = _start(cmd, 'port ')
    else:
      process, port = _serve(*serve)
    try:
      measured = _measure(process, port, bodies[kind], dataset, workdir, args)
    finally:
      _stop(process)
    print(f'{dataset}: {label}: {measured["rps"]:.0f} req/s, p99 '
          f'{measured["p99_ms"]:.1f} ms', flush=True)
    rows.append(dict(dataset=dataset, server=label, input=kind, **measured))
  baseline = rows[0]
  for row in rows:
    row['x_baseline_rps'] = row['rps'] / baseline['rps']
  cost = _graph_cost(harness.newest_version(saved), bodies['raw'][0])
  rows.append(dict(dataset=dataset, server='serving_default in-process (no '
                   'server)', input='raw', **cost))
  return rows


def _hot_swap(output: str, workdir: str) -> Dict[str, float]:
  """gRPC loop while a copy of the pushed SavedModel is pushed as version 2."""
  import grpc  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow_serving.apis import predict_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow_serving.apis import prediction_service_pb2_grpc  # pylint: disable=g-import-not-at-top
  model_dir = os.path.join(workdir, 'swap', 'digits')
  source = harness.newest_version(os.path.join(output, 'serving', 'digits'))
  shutil.copytree(source, os.path.join(model_dir, '1'))
  signature = tf.saved_model.load(source).signatures['serving_default']
  request = predict_pb2.PredictRequest()
  request.model_spec.name = 'digits'
  for name, spec in signature.structured_input_signature[1].items():
    request.inputs[name].CopyFrom(tf.make_tensor_proto(
        np.zeros([1], spec.dtype.as_numpy_dtype)))
  log_path = os.path.join(workdir, 'swap-server.log')
  cmd = [sys.executable, '-c', _RUN_SERVE, 'serve', '--model-base-path',
         model_dir, '--model-name', 'digits', '--rest-port', '0',
         '--grpc-port', '0', '--file-system-poll-wait-seconds', str(POLL_S)]
  with open(log_path, 'w', encoding='utf-8') as log:
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log,
                               text=True, env=_env())
    line = ''
    deadline = time.monotonic() + 300
    while 'leantfx serve:' not in line and time.monotonic() < deadline:
      line = process.stdout.readline()
      if not line and process.poll() is not None:
        raise SystemExit(f'the hot-swap server did not start; see {log_path}')
    grpc_port = int(line.split(' gRPC 127.0.0.1:')[1].split()[0])
    # Version 2 is written before the load starts; under load only the
    # rename (the push itself) happens.
    tmp = os.path.join(model_dir, '.tmp-2')
    shutil.copytree(source, tmp)
    results = []
    stop = threading.Event()

    def loop():
      channel = grpc.insecure_channel(f'127.0.0.1:{grpc_port}')
      stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
      started = time.monotonic()
      while not stop.is_set() and time.monotonic() - started < SWAP_LOOP_MAX_S:
        start = time.monotonic()
        try:
          version = stub.Predict(request, timeout=10).model_spec.version.value
        except grpc.RpcError:
          version = None
        results.append((start, time.monotonic(), version))
      channel.close()

    threads = [threading.Thread(target=loop) for _ in range(SWAP_CLIENTS)]
    for thread in threads:
      thread.start()
    time.sleep(1.0)
    os.rename(tmp, os.path.join(model_dir, '2'))
    pushed = time.monotonic()
    deadline = pushed + SWAP_LOOP_MAX_S
    while time.monotonic() < deadline and not any(r[2] == 2 for r in results):
      time.sleep(0.05)
    time.sleep(1.0)  # Traffic after the swap too.
    stop.set()
    for thread in threads:
      thread.join()
    _stop(process)
  with open(log_path, encoding='utf-8') as f:
    loaded = re.search(r'Loaded model digits version 2 \(tensorflow\) in '
                       r'([0-9.]+)s', f.read())
  first_v2 = min((end for _, end, v in results if v == 2),
                 default=float('nan'))
  return {'requests': len(results),
          'load_s': float(loaded.group(1)) if loaded else float('nan'),
          'failed': sum(1 for r in results if r[2] is None),
          'swap_delay_s': first_v2 - pushed,
          'after_swap_on_v1': sum(1 for start, _, v in results
                                  if v == 1 and start > first_v2)}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--duration', type=int, default=DURATION_S,
                      help='seconds of each wrk run')
  parser.add_argument('--connections', type=int, default=CONNECTIONS)
  parser.add_argument('--digits-output',
                      help='reuse this `leantfx run --dataset digits` output')
  parser.add_argument('--penguins-output',
                      help='reuse this `leantfx run --dataset penguins` output')
  parser.add_argument('--datasets', default='digits,penguins')
  args = parser.parse_args(argv)
  if shutil.which('wrk') is None:
    print('bench_serving: wrk is not installed; install it (Debian: apt-get '
          'install wrk) and run the bench again.', file=sys.stderr)
    return 2
  import leantfx  # noqa: F401  Keras 2 before TensorFlow (leantfx/__init__.py).
  workdir = tempfile.mkdtemp(prefix='bench-serving-')
  rows: List[Dict[str, object]] = []
  try:
    outputs = {'digits': args.digits_output or os.path.join(workdir, 'digits'),
               'penguins': (args.penguins_output or
                            os.path.join(workdir, 'penguins'))}
    chosen = args.datasets.split(',')
    for dataset in chosen:
      _pipeline(dataset, outputs[dataset],
                'all' if dataset == 'digits' else 'tflite')
    for dataset in chosen:
      rows += _dataset_rows(dataset, outputs[dataset], workdir, args)
    swap = (_hot_swap(outputs['digits'], workdir) if 'digits' in chosen
            else None)
  finally:
    shutil.rmtree(workdir, ignore_errors=True)
  notes = [
      f'wrk 1 thread, {args.connections} keep-alive connections, '
      f'{args.duration} s after a {WARMUP_S} s warm-up, one instance per '
      f'request cycling over {EXAMPLES} eval-split rows; servers one at a '
      'time on 127.0.0.1; cpu_ms_per_request: the server process tree '
      '(workers included). The Flask baseline is one process (threaded); '
      f'"{WORKERS} workers" rows are `leantfx serve --workers {WORKERS}`.',
      "input raw: TF Serving's row format of the raw columns (the SavedModel's"
      ' serving_default runs the Transform graph; the runtimes\' pushes hold '
      'it folded in); transformed: the transformed features (a push whose '
      'Transform could not be folded in, as its manifest says, and the '
      'Keras history row).',
  ]
  for dataset in chosen:
    mine = [r for r in rows if r['dataset'] == dataset]
    cost = mine.pop()
    notes.append(
        f'{dataset}: the raw-feature serving_default graph has '
        f'{cost["serving_graph_ops"]} ops (Transform included) and costs '
        f'{cost["call_ms_batch1"]:.2f} ms a call at batch 1, '
        f'{cost["call_ms_batch32"]:.2f} ms at batch 32, in-process.')
    best = max(mine[1:], key=lambda r: r['rps'])
    saved = max((r for r in mine if 'SavedModel' in r['server']
                 and 'leantfx' in r['server']), key=lambda r: r['rps'])
    notes.append(
        f'{dataset}: fastest "{best["server"]}" {best["rps"]:.0f} req/s = '
        f'{best["x_baseline_rps"]:.2f}x the Flask baseline, p99 '
        f'{best["p99_ms"]:.1f} ms (targets: >= 1500 req/s for digits, >= 5x, '
        f'p99 <= 15 ms); SavedModel best {saved["x_baseline_rps"]:.2f}x '
        '(target >= 3x).')
  if swap:
    rows.append({'dataset': 'digits',
                 'server': 'hot swap under load (leantfx, gRPC)',
                 'requests': swap['requests'], 'failed': swap['failed'],
                 'poll_s': POLL_S, 'load_s': swap['load_s'],
                 'swap_delay_s': swap['swap_delay_s']})
    notes.append(
        f'hot swap under load (gRPC, {SWAP_CLIENTS} client threads, the '
        f'pushed digits SavedModel): {swap["requests"]} requests, '
        f'{swap["failed"]} failed, version 2 answered '
        f'{swap["swap_delay_s"]:.2f} s after the rename with '
        f'--file-system-poll-wait-seconds={POLL_S} and a load + warm-up of '
        f'{swap["load_s"]:.2f} s; {swap["after_swap_on_v1"]} requests '
        'started after the swap were answered by version 1.')
  harness.report('serving', 'serving speed: leantfx serve vs a Flask app '
                 'on the pushed models (wrk, batch-1 requests)', rows, notes)
  return 0


if __name__ == '__main__':
  sys.exit(main())
