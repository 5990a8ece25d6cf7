"""The serve/predict/deploy commands through serving.cli, as the CLI runs them."""
import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from leantfx.cli import serving as cli
from tests import helpers

_RUN_CLI = ('import sys, argparse\n'
            'from leantfx.cli import serving as cli\n'
            'parser = argparse.ArgumentParser(prog="leantfx")\n'
            'cli.add_commands(parser.add_subparsers())\n'
            'args = parser.parse_args(sys.argv[1:])\n'
            'sys.exit(args.func(args))\n')


def _parse(argv):
  parser = argparse.ArgumentParser(prog='leantfx')
  cli.add_commands(parser.add_subparsers())
  return parser.parse_args(argv)


@pytest.mark.unit
def test_parsers_set_handlers_and_defaults():
  args = _parse(['serve', '--model-base-path', '/tmp/x'])
  assert args.func is cli.serve
  assert (args.rest_port, args.grpc_port, args.host) == (8501, 8500,
                                                         '127.0.0.1')
  assert args.max_body_bytes == 16 * 1024 * 1024
  assert _parse(['serve', '--max-body-bytes', '2MiB']).max_body_bytes == \
      2 * 1024 * 1024
  assert _parse(['deploy', 'tf-serving', '--model-base-path', 'b', '--out',
                 'o']).func is cli.deploy_tf_serving
  assert _parse(['predict', '--model', 'm', '--json', 'f']).func is cli.predict
  with pytest.raises(SystemExit):
    _parse(['serve', '--max-body-bytes', 'lots'])


@pytest.mark.unit
@pytest.mark.parametrize('argv, mode', [
    ([], 'auto'),
    (['--workers', '2'], 'off'),
    (['--batching', 'on', '--workers', '2'], 'on'),
    (['--enable-batching'], 'on'),
    (['--batching', 'off'], 'off'),
    (['--batching-parameters-file', 'b.txt'], 'on'),
    (['--batching-parameters-file', 'b.txt', '--workers', '2'], 'on'),
])
def test_batching_is_auto_by_default_and_off_with_workers(argv, mode):
  args = _parse(['serve', '--model-base-path', '/tmp/x'] + argv)
  assert cli.batching_mode(args) == mode


@pytest.mark.unit
def test_batching_off_with_a_parameters_file_is_refused(tmp_path, capsys):
  (tmp_path / 'm' / '1').mkdir(parents=True)
  code = cli.serve(_parse(['serve', '--model-base-path', str(tmp_path / 'm'),
                           '--batching', 'off', '--batching-parameters-file',
                           str(tmp_path / 'b.txt')]))
  assert code == 2
  assert '--batching off with --batching-parameters-file' in (
      capsys.readouterr().err)


@pytest.mark.unit
def test_serve_reports_config_errors(tmp_path, capsys):
  code = cli.serve(_parse(['serve', '--model-base-path',
                           str(tmp_path / 'missing')]))
  assert code == 2
  assert 'is not a directory' in capsys.readouterr().err


@pytest.mark.e2e
@pytest.mark.parametrize('use_grpc', [False, True])
def test_predict_command(server, tmp_path, capsys, use_grpc):
  request = tmp_path / 'request.json'
  request.write_text(json.dumps({'instances': [[1.0], [3.0]]}))
  argv = ['predict', '--model', 'half_plus_two', '--json', str(request),
          '--rest-port', str(server.rest_port), '--grpc-port',
          str(server.grpc_port)]
  code = cli.predict(_parse(argv + (['--grpc'] if use_grpc else [])))
  out = capsys.readouterr().out
  assert code == 0
  assert json.loads(out) == {'predictions': [[2.5], [3.5]]}


@pytest.mark.e2e
def test_predict_command_reports_server_errors(server, tmp_path, capsys):
  request = tmp_path / 'request.json'
  request.write_text('{"instances": [["not a number"]]}')
  code = cli.predict(_parse(['predict', '--model', 'half_plus_two', '--json',
                             str(request), '--rest-port',
                             str(server.rest_port)]))
  assert code == 2
  assert 'HTTP 400' in capsys.readouterr().err


@pytest.mark.e2e
def test_tensorflow_threads_default_to_one_and_apply_in_a_fresh_process(
    model_base):
  args = _parse(['serve', '--model-base-path', '/tmp/x'])
  assert (args.tensorflow_intra_op_parallelism,
          args.tensorflow_inter_op_parallelism) == (1, 1)
  args = _parse(['serve', '--model-base-path', '/tmp/x',
                 '--tensorflow-intra-op-parallelism', '0',
                 '--tensorflow-inter-op-parallelism', '3'])
  assert (args.tensorflow_intra_op_parallelism,
          args.tensorflow_inter_op_parallelism) == (0, 3)
  with pytest.raises(SystemExit):
    _parse(['serve', '--tensorflow-intra-op-parallelism', '-1'])
  # In a process where TensorFlow has run nothing yet, the first SavedModel
  # loaded sets the pools.
  code = ('import sys, os\n'
          'from leantfx.serving import saved_model_servable as s\n'
          's.set_tensorflow_threads(1, 2)\n'
          'base = os.path.join(sys.argv[1], "digits")\n'
          'version = max(os.listdir(base), key=int)\n'
          's.SavedModelServable("digits", int(version), '
          'os.path.join(base, version))\n'
          'import tensorflow as tf\n'
          'print(tf.config.threading.get_intra_op_parallelism_threads(), '
          'tf.config.threading.get_inter_op_parallelism_threads())\n')
  done = subprocess.run([sys.executable, '-c', code, model_base],
                        capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
  assert done.returncode == 0, done.stderr[-2000:]
  assert done.stdout.split()[-2:] == ['1', '2']


@pytest.mark.e2e
def test_sigterm_finishes_in_flight_request_and_exits_0(model_base, tmp_path):
  # A 2 s batch timeout with a big max batch keeps one request in flight (in
  # the batch queue) when SIGTERM arrives.
  batching = tmp_path / 'batching.txt'
  batching.write_text('max_batch_size { value: 64 }\n'
                      'batch_timeout_micros { value: 2000000 }\n')
  process = subprocess.Popen(
      [sys.executable, '-c', _RUN_CLI, 'serve', '--model-base-path',
       model_base, '--model-name', 'digits', '--rest-port', '0',
       '--grpc-port', '0', '--batching-parameters-file', str(batching),
       '--file-system-poll-wait-seconds', '0'],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
  try:
    line = ''
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and 'leantfx serve:' not in line:
      line = process.stdout.readline()
      if not line and process.poll() is not None:
        pytest.fail(f'serve exited early: {process.stderr.read()[-2000:]}')
    assert 'leantfx serve:' in line, line
    port = int(line.split('http://127.0.0.1:')[1].split()[0])
    answer = {}

    def in_flight_request():
      request = urllib.request.Request(
          f'http://127.0.0.1:{port}/v1/models/digits:predict',
          data=json.dumps({'instances': [[0.5] * 64]}).encode(),
          method='POST')
      with urllib.request.urlopen(request, timeout=30) as response:
        answer['status'] = response.status
        answer['body'] = json.loads(response.read())

    thread = threading.Thread(target=in_flight_request)
    thread.start()
    time.sleep(0.5)  # The request now waits in the batch queue.
    process.send_signal(signal.SIGTERM)
    thread.join(30)
    assert process.wait(timeout=helpers.EXIT_TIMEOUT_S) == 0
    assert answer.get('status') == 200, answer
    assert len(answer['body']['predictions'][0]) == 10
    with pytest.raises(OSError):
      urllib.request.urlopen(f'http://127.0.0.1:{port}/v1/models/digits',
                             timeout=5)
  finally:
    if process.poll() is None:
      process.kill()
      process.wait(10)
