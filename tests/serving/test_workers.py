"""``leantfx serve --workers N``: N server processes on one port.

The e2e tests run the real command: two spawned workers behind one REST port,
both answering, one metrics view over both, a hot swap reaching both, a
graceful SIGTERM and a worker killed mid-serve.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from leantfx.serving import metrics as metrics_lib
from tests import helpers
from tests.serving.test_cli import _RUN_CLI

DIGIT = [0.5] * 64


def test_metrics_add_the_peers_snapshots(tmp_path):
  directory = str(tmp_path)
  mine = metrics_lib.Metrics(lambda: {'digits': [1]},
                             lambda: {'leantfx_serving_batches_total': 2})
  peer = metrics_lib.Metrics(lambda: {'digits': [1]},
                             lambda: {'leantfx_serving_batches_total': 5})
  for _ in range(3):
    mine.record_request('digits', 'Predict', 'REST', 'OK', 0.002)
  peer.record_request('digits', 'Predict', 'REST', 'OK', 0.2)
  peer.record_request('digits', 'Predict', 'GRPC', 'NOT_FOUND', 0.001)
  share_mine = metrics_lib.SharedSnapshots(directory, name='a')
  share_peer = metrics_lib.SharedSnapshots(directory, name='b')
  share_peer.start(peer.snapshot)
  share_peer.stop()
  merged = metrics_lib.Metrics(lambda: {'digits': [1]},
                               lambda: {'leantfx_serving_batches_total': 2},
                               share_mine.peers)
  for _ in range(3):
    merged.record_request('digits', 'Predict', 'REST', 'OK', 0.002)
  text = merged.render()
  assert ('leantfx_serving_requests_total{model_name="digits",api="Predict",'
          'entrypoint="REST",status="OK"} 4') in text
  assert ('leantfx_serving_requests_total{model_name="digits",api="Predict",'
          'entrypoint="GRPC",status="NOT_FOUND"} 1') in text
  assert ':tensorflow:serving:request_count{model_name="digits",status="OK"} 4' in text
  assert ('leantfx_serving_request_latency_seconds_count{model_name="digits",'
          'api="Predict",entrypoint="REST"} 4') in text
  # 3 at 2 ms and 1 at 200 ms: 3 below the 5 ms bound, 4 below 250 ms.
  assert ('leantfx_serving_request_latency_seconds_bucket{model_name="digits",'
          'api="Predict",entrypoint="REST",le="0.005"} 3') in text
  assert ('leantfx_serving_request_latency_seconds_bucket{model_name="digits",'
          'api="Predict",entrypoint="REST",le="0.25"} 4') in text
  assert 'leantfx_serving_batches_total 7' in text
  # Its own file is not a peer; a half-written file is skipped.
  (tmp_path / 'worker-c.json').write_text('{"requests": [')
  assert len(share_peer.peers()) == 0
  assert len(share_mine.peers()) == 1


def test_a_port_in_use_is_refused_before_any_worker_starts(cli):
  with socket.socket() as taken:
    taken.bind(('127.0.0.1', 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    result = cli(['serve', '--model-base-path', '/nonexistent', '--workers',
                  '2', '--rest-port', str(port), '--grpc-port', '0'])
  assert result.returncode != 0
  assert f'Cannot bind 127.0.0.1:{port}' in result.stderr
  assert 'Traceback' not in result.stderr


def _start(base: str, *extra: str) -> subprocess.Popen:
  return subprocess.Popen(
      [sys.executable, '-c', _RUN_CLI, 'serve', '--model-base-path', base,
       '--model-name', 'digits', '--rest-port', '0', '--grpc-port', '0',
       '--workers', '2', *extra],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))


def _port(process: subprocess.Popen) -> int:
  deadline = time.monotonic() + 180
  line = ''
  while time.monotonic() < deadline and 'leantfx serve:' not in line:
    line = process.stdout.readline()
    if not line and process.poll() is not None:
      pytest.fail(f'serve exited early: {process.stderr.read()[-3000:]}')
  assert 'leantfx serve:' in line and line.rstrip().endswith('workers 2'), line
  return int(line.split('http://127.0.0.1:')[1].split()[0])


def _workers(parent: int):
  """Pids of the spawned workers of parent (not multiprocessing's helpers)."""
  found = []
  for pid in helpers.child_pids(parent):
    try:
      with open(f'/proc/{pid}/cmdline', 'rb') as f:
        if b'spawn_main' in f.read():
          found.append(pid)
    except OSError:
      continue
  return found


def _predict(port: int):
  request = urllib.request.Request(
      f'http://127.0.0.1:{port}/v1/models/digits:predict',
      data=json.dumps({'instances': [DIGIT]}).encode(), method='POST')
  with urllib.request.urlopen(request, timeout=30) as response:
    return response.status, json.loads(response.read())


def _get(port: int, path: str) -> str:
  with urllib.request.urlopen(f'http://127.0.0.1:{port}{path}',
                              timeout=30) as response:
    return response.read().decode()


def _stop(process: subprocess.Popen) -> None:
  if process.poll() is None:
    process.kill()
    process.wait(10)
  for pid in _workers(process.pid):
    os.kill(pid, signal.SIGKILL)


@pytest.mark.e2e
def test_two_workers_share_the_port_metrics_and_hot_swaps(model_base,
                                                           tmp_path):
  base = tmp_path / 'base'
  shutil.copytree(os.path.join(model_base, 'digits', '1'),
                  base / 'digits' / '1')
  process = _start(str(base), '--file-system-poll-wait-seconds', '0.3')
  try:
    port = _port(process)
    workers = _workers(process.pid)
    assert len(workers) == 2, workers
    # Each urlopen is a new connection: the kernel spreads them over the
    # workers; 30 all landing on one has a probability of 2**-29.
    for _ in range(30):
      status, body = _predict(port)
      assert status == 200 and len(body['predictions'][0]) == 10
    time.sleep(2.5)  # Two publishing periods: every snapshot is current.
    for _ in range(4):  # Whichever worker answers, it counts all 30.
      text = _get(port, '/monitoring/prometheus/metrics')
      assert ('leantfx_serving_requests_total{model_name="digits",'
              'api="Predict",entrypoint="REST",status="OK"} 30') in text, text
    # Hot swap: a new version reaches every worker.
    shutil.copytree(os.path.join(model_base, 'digits', '2'),
                    base / 'digits' / '2')
    deadline = time.monotonic() + 90
    streak = 0
    while streak < 12 and time.monotonic() < deadline:
      status = json.loads(_get(port, '/v1/models/digits'))
      versions = {s['version']: s['state']
                  for s in status['model_version_status']}
      streak = streak + 1 if versions.get('2') == 'AVAILABLE' else 0
      time.sleep(0.1)
    assert streak >= 12, status
    # A worker that dies stops the server: exit 3, the worker named, no
    # worker left behind, the port closed.
    os.kill(workers[0], signal.SIGKILL)
    assert process.wait(timeout=90) == 3
    err = process.stderr.read()
    assert f'worker 0 (pid {workers[0]}) exited with code -9' in err, err[-3000:]
    assert 'restart the server' in err
    assert not any(helpers.pid_alive(pid) for pid in workers)
    with pytest.raises(OSError):
      _get(port, '/v1/models/digits')
  finally:
    _stop(process)


@pytest.mark.e2e
def test_sigterm_stops_every_worker_gracefully(model_base, tmp_path):
  # A 2 s batch timeout keeps a request in a worker's batch queue when
  # SIGTERM arrives; it is answered, then every worker exits.
  batching = tmp_path / 'batching.txt'
  batching.write_text('max_batch_size { value: 64 }\n'
                      'batch_timeout_micros { value: 2000000 }\n')
  process = _start(model_base, '--batching-parameters-file', str(batching),
                   '--file-system-poll-wait-seconds', '0')
  try:
    port = _port(process)
    workers = _workers(process.pid)
    assert len(workers) == 2, workers
    answer = {}

    def in_flight():
      answer['result'] = _predict(port)

    thread = threading.Thread(target=in_flight)
    thread.start()
    time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    thread.join(30)
    assert process.wait(timeout=helpers.EXIT_TIMEOUT_S) == 0
    assert answer['result'][0] == 200
    assert not any(helpers.pid_alive(pid) for pid in workers)
    with pytest.raises(OSError):
      _get(port, '/v1/models/digits')
  finally:
    _stop(process)


def test_a_worker_that_cannot_start_gives_its_error_and_exit_code(cli,
                                                                  tmp_path):
  # An empty base directory: each worker's build_server refuses it, and the
  # first worker's message and exit code are the command's.
  result = cli(['serve', '--model-base-path', str(tmp_path),
                '--workers', '2', '--rest-port', '0', '--grpc-port', '0'])
  assert result.returncode == 2, result.stderr[-2000:]
  assert f'{tmp_path} holds no model directories' in result.stderr
  assert 'Traceback' not in result.stderr
