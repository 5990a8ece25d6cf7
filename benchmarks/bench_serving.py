"""Figure: `leantfx serve` vs the model server most users write, on loopback.

Model: a small CNN trained here on scikit-learn's ``load_digits()`` (8x8
pixels / 16, input ``image_xf`` [None, 64] -> ``probabilities`` [None, 10]),
exported as a SavedModel and as a full-int8 TFLite model.

Servers, each in its own process on 127.0.0.1:
  * leantfx serve, SavedModel backend, batching off / on;
  * leantfx serve, TFLite backend, batching off / on;
  * the baseline: a small Flask app calling ``model.predict`` per request, or,
    when Flask is not installed, the same app on the standard library's
    ``ThreadingHTTPServer`` (labelled as such).

Load: the same bounded load for every server: REQUESTS requests of one
instance each (batch 1), from CONCURRENCY client threads with keep-alive
connections, after WARMUP requests; requests/s = requests / wall time, p50/p99
of per-request latency. Then a hot swap under load: a gRPC client loop while a
new version is pushed (written to a temp dir, renamed into place), giving the
failed requests and the swap delay against the poll interval.

  .venv/bin/python -m benchmarks.bench_serving [--requests N] [--concurrency N]
"""
import argparse
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional

import numpy as np

from benchmarks import harness

# Bounded load (loopback only). 8 threads = 4 per core on the 2-core target
# machine, enough to keep a server busy without a queue of thousands.
REQUESTS = 2000
BASELINE_REQUESTS = 400  # model.predict per request is ~100x slower.
CONCURRENCY = 8
WARMUP = 50
POLL_S = 0.5  # Hot swap: --file-system-poll-wait-seconds.
SWAP_LOOP_MAX_S = 30.0  # Hot swap: client loop duration bound.
SWAP_CLIENTS = 4  # Hot swap: gRPC client threads.
TRAIN_EPOCHS = 8  # Enough for ~95% validation accuracy on load_digits.

_RUN_SERVE = ('import sys, argparse\n'
              'from leantfx.cli import serving as cli\n'
              'parser = argparse.ArgumentParser(prog="leantfx")\n'
              'cli.add_commands(parser.add_subparsers())\n'
              'args = parser.parse_args(sys.argv[1:])\n'
              'sys.exit(args.func(args))\n')
_RUN_BASELINE = ('import sys\n'
                 'from benchmarks.bench_serving import baseline_server\n'
                 'baseline_server(sys.argv[1])\n')


def _env() -> Dict[str, str]:
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')


def _flask_available() -> bool:
  try:
    import flask  # pylint: disable=g-import-not-at-top,unused-import
    return True
  except ImportError:
    return False


def baseline_server(keras_path: str) -> None:
  """The baseline: load the Keras model, ``model.predict`` per request.

  Runs Flask when it is installed, else the same handler on the standard
  library's ThreadingHTTPServer. Prints ``port <n>`` and serves forever.
  """
  import leantfx  # noqa: F401  Keras 2 before TensorFlow (leantfx/__init__.py).
  import tf_keras  # pylint: disable=g-import-not-at-top
  model = tf_keras.models.load_model(keras_path)

  def predict(body: bytes) -> bytes:
    instances = np.asarray(json.loads(body)['instances'], np.float32)
    return json.dumps(
        {'predictions': model.predict(instances, verbose=0).tolist()}).encode()

  if _flask_available():
    import flask  # pylint: disable=g-import-not-at-top
    from werkzeug import serving  # pylint: disable=g-import-not-at-top
    app = flask.Flask('baseline')

    @app.route('/v1/models/digits:predict', methods=['POST'])
    def handle():
      return flask.Response(predict(flask.request.get_data()),
                            mimetype='application/json')

    server = serving.make_server('127.0.0.1', 0, app, threaded=True)
    print(f'port {server.server_port}', flush=True)
    server.serve_forever()
    return

  import http.server  # pylint: disable=g-import-not-at-top

  class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def do_POST(self):  # pylint: disable=invalid-name
      body = self.rfile.read(int(self.headers['Content-Length']))
      payload = predict(body)
      # One write without Nagle, as leantfx does: the comparison is about
      # what happens per request, not about a 40 ms delayed-ACK stall.
      self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
      self.wfile.write(
          b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n'
          b'Content-Length: %d\r\n\r\n' % len(payload) + payload)

    def log_message(self, *args):
      pass

  server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
  print(f'port {server.server_address[1]}', flush=True)
  server.serve_forever()


def _train(workdir: str):
  """Trains the digits CNN; returns (SavedModel dir, tflite dir, .h5, x_test)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras as keras  # pylint: disable=g-import-not-at-top
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  from sklearn import model_selection  # pylint: disable=g-import-not-at-top
  digits = datasets.load_digits()
  x = (digits.data / 16.0).astype(np.float32)
  x_train, x_test, y_train, y_test = model_selection.train_test_split(
      x, digits.target, test_size=0.2, random_state=0)
  keras.utils.set_random_seed(0)
  inputs = keras.Input(shape=(64,), name='image_xf')
  h = keras.layers.Reshape((8, 8, 1))(inputs)
  h = keras.layers.Conv2D(16, 3, activation='relu', padding='same')(h)
  h = keras.layers.MaxPooling2D()(h)
  h = keras.layers.Conv2D(32, 3, activation='relu', padding='same')(h)
  h = keras.layers.Flatten()(h)
  h = keras.layers.Dense(64, activation='relu')(h)
  outputs = keras.layers.Dense(10, activation='softmax', name='probabilities')(h)
  model = keras.Model(inputs, outputs)
  model.compile('adam', 'sparse_categorical_crossentropy', ['accuracy'])
  model.fit(x_train, y_train, epochs=TRAIN_EPOCHS, batch_size=32, verbose=0)
  accuracy = model.evaluate(x_test, y_test, verbose=0)[1]

  @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float32,
                                              'image_xf')])
  def serve(image_xf):
    return {'probabilities': model(image_xf, training=False)}

  def export(version_dir):
    tf.saved_model.save(model, version_dir,
                        signatures={'serving_default': serve})

  saved = os.path.join(workdir, 'saved', 'digits')
  export(os.path.join(saved, '1'))
  converter = tf.lite.TFLiteConverter.from_saved_model(
      os.path.join(saved, '1'))
  converter.optimizations = [tf.lite.Optimize.DEFAULT]
  converter.representative_dataset = lambda: ([row[None]] for row in x_train[
      :200])
  converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
  converter.inference_input_type = tf.int8
  converter.inference_output_type = tf.int8
  lite = os.path.join(workdir, 'lite', 'digits', '1')
  os.makedirs(lite)
  with open(os.path.join(lite, 'model.tflite'), 'wb') as f:
    f.write(converter.convert())
  h5 = os.path.join(workdir, 'digits.h5')
  model.save(h5)
  return saved, os.path.dirname(lite), h5, x_test, accuracy, export


def _start(cmd: List[str], marker: str, timeout_s: float = 180.0):
  """Starts a server process and returns (process, port) from its banner."""
  process = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, env=_env(),
                             cwd=os.path.dirname(os.path.dirname(
                                 os.path.abspath(__file__))))
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
  raise SystemExit(f'server {cmd[3:6]} did not start')


def _serve(base: str, batching_file: Optional[str], poll_s: float = 0.0):
  cmd = [sys.executable, '-c', _RUN_SERVE, 'serve', '--model-base-path', base,
         '--rest-port', '0', '--grpc-port', '0',
         '--file-system-poll-wait-seconds', str(poll_s)]
  if batching_file:
    cmd += ['--batching-parameters-file', batching_file]
  return _start(cmd, 'leantfx serve:')


def _stop(process) -> None:
  process.terminate()
  try:
    process.wait(30)
  except subprocess.TimeoutExpired:
    process.kill()
    process.wait(10)


def _load(port: int, rows: np.ndarray, requests: int, concurrency: int,
          path: str = '/v1/models/digits:predict') -> Dict[str, float]:
  """Sends `requests` single-instance requests from `concurrency` threads."""
  bodies = [json.dumps({'instances': [row.round(4).tolist()]})
            for row in rows[:64]]
  latencies: List[float] = []
  failures = [0]
  lock = threading.Lock()
  counter = iter(range(requests + WARMUP))

  def connect():
    connection = http.client.HTTPConnection('127.0.0.1', port, timeout=60)
    connection.connect()
    # http.client sends headers and body in two writes: no Nagle on the
    # client either, or every request waits for the server's delayed ACK.
    connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return connection

  def worker():
    connection = connect()
    mine, failed = [], 0
    while True:
      with lock:
        index = next(counter, None)
      if index is None:
        break
      start = time.perf_counter()
      try:
        connection.request('POST', path, bodies[index % len(bodies)],
                           {'Content-Type': 'application/json'})
        response = connection.getresponse()
        response.read()
        ok = response.status == 200
      except (OSError, http.client.HTTPException):
        ok = False
        connection.close()
        connection = connect()
      if index >= WARMUP:
        mine.append(time.perf_counter() - start)
        failed += 0 if ok else 1
    connection.close()
    with lock:
      latencies.extend(mine)
      failures[0] += failed

  threads = [threading.Thread(target=worker) for _ in range(concurrency)]
  wall_start = time.perf_counter()
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  wall = time.perf_counter() - wall_start
  # Wall time includes the WARMUP requests; scale to the measured share.
  measured_wall = wall * requests / (requests + WARMUP)
  values = np.array(latencies) * 1000
  return {'rps': requests / measured_wall,
          'p50_ms': float(np.percentile(values, 50)),
          'p99_ms': float(np.percentile(values, 99)),
          'failed': failures[0]}


def _hot_swap(export, workdir: str, rows: np.ndarray) -> Dict[str, float]:
  """gRPC loop while version 2 is pushed; failures and swap delay."""
  import grpc  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow_serving.apis import predict_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow_serving.apis import prediction_service_pb2_grpc  # pylint: disable=g-import-not-at-top
  base = os.path.join(workdir, 'swap')
  shutil.copytree(os.path.join(workdir, 'saved'), base)
  model_dir = os.path.join(base, 'digits')
  cmd = [sys.executable, '-c', _RUN_SERVE, 'serve', '--model-base-path', base,
         '--rest-port', '0', '--grpc-port', '0',
         '--file-system-poll-wait-seconds', str(POLL_S)]
  log_path = os.path.join(workdir, 'swap-server.log')
  log = open(log_path, 'w')  # pylint: disable=consider-using-with
  process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log,
                             text=True, env=_env())
  line = ''
  deadline = time.monotonic() + 180
  while 'leantfx serve:' not in line and time.monotonic() < deadline:
    line = process.stdout.readline()
  grpc_port = int(line.split(' gRPC 127.0.0.1:')[1].split()[0])
  request = predict_pb2.PredictRequest()
  request.model_spec.name = 'digits'
  request.inputs['image_xf'].CopyFrom(tf.make_tensor_proto(rows[:1]))
  # Version 2 is written before the load starts; under load only the rename
  # (the push itself) happens.
  tmp = os.path.join(model_dir, '.tmp-2')
  export(tmp)
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
  log.close()
  with open(log_path) as f:
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
  parser.add_argument('--requests', type=int, default=REQUESTS)
  parser.add_argument('--baseline-requests', type=int,
                      default=BASELINE_REQUESTS)
  parser.add_argument('--concurrency', type=int, default=CONCURRENCY)
  args = parser.parse_args(argv)
  import leantfx  # noqa: F401  Keras 2 before TensorFlow (leantfx/__init__.py).
  workdir = tempfile.mkdtemp(prefix='bench-serving-')
  rows_out = []
  try:
    saved, lite, h5, x_test, accuracy, export = _train(workdir)
    batching = os.path.join(workdir, 'batching.txt')
    with open(batching, 'w') as f:
      f.write('max_batch_size { value: 32 }\nbatch_timeout_micros { value: 0 }'
              '\nnum_batch_threads { value: 2 }\n')
    flask = _flask_available()
    baseline_label = ('baseline: Flask + model.predict per request' if flask
                      else 'baseline: stdlib http.server + model.predict per '
                      'request (Flask not installed)')
    configs = [
        ('leantfx serve, SavedModel', saved, None),
        ('leantfx serve, SavedModel, batching', saved, batching),
        ('leantfx serve, TFLite int8', lite, None),
        ('leantfx serve, TFLite int8, batching', lite, batching),
    ]
    process, port = _start([sys.executable, '-c', _RUN_BASELINE, h5], 'port ')
    try:
      baseline = _load(port, x_test, args.baseline_requests, args.concurrency)
    finally:
      _stop(process)
    rows_out.append(dict(server=baseline_label,
                         requests=args.baseline_requests, **baseline))
    for label, base, batching_file in configs:
      process, port = _serve(os.path.dirname(base), batching_file)
      try:
        measured = _load(port, x_test, args.requests, args.concurrency)
      finally:
        _stop(process)
      rows_out.append(dict(server=label, requests=args.requests, **measured))
    for row in rows_out:
      row['x_baseline_rps'] = row['rps'] / baseline['rps']
      row['p99_vs_baseline'] = row['p99_ms'] / baseline['p99_ms']
    swap = _hot_swap(export, workdir, x_test)
  finally:
    shutil.rmtree(workdir, ignore_errors=True)

  best = max(rows_out[1:], key=lambda r: r['rps'])
  rows_out.append({'server': 'hot swap under load (leantfx, gRPC)',
                   'requests': swap['requests'], 'failed': swap['failed'],
                   'poll_s': POLL_S, 'load_s': swap['load_s'],
                   'swap_delay_s': swap['swap_delay_s']})
  notes = [
      f'digits CNN on sklearn load_digits (pixels/16), test accuracy '
      f'{accuracy:.3f}; batch 1 per request, {args.concurrency} client threads '
      'with keep-alive, loopback, servers in their own processes.',
      f'{rows_out[0]["server"]}.',
      f'best leantfx config "{best["server"]}": {best["x_baseline_rps"]:.1f}x '
      f'the baseline requests/s, p99 {best["p99_ms"]:.1f} ms vs '
      f'{rows_out[0]["p99_ms"]:.1f} ms (target: >= 5x at lower p99).',
      f'hot swap under load (gRPC, {SWAP_CLIENTS} client threads): '
      f'{swap["requests"]} requests, {swap["failed"]} failed, version 2 '
      f'answered {swap["swap_delay_s"]:.2f} s after the rename with '
      f'--file-system-poll-wait-seconds={POLL_S} and a load + warm-up of '
      f'{swap["load_s"]:.2f} s (delay <= poll wait + load); '
      f'{swap["after_swap_on_v1"]} requests started after the swap were '
      'answered by version 1.',
      'the client threads share the 2 cores with the server: absolute numbers '
      'are a floor; the ratio is the figure.',
  ]
  harness.report('serving', 'leantfx serve vs model.predict per request '
                 '(digits, batch 1)', rows_out, notes)
  print(f'ratio: {best["x_baseline_rps"]:.1f}x baseline requests/s')
  return 0


if __name__ == '__main__':
  sys.exit(main())
