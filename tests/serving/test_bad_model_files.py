"""A damaged model file never takes the server down; the older version serves.

The premise first: TFLite's own interpreter crashes (SIGSEGV) on a truncated
model.tflite, so a server that handed it the file would die with every model
it holds. Then the real ``leantfx serve`` (a child process, REST on
loopback) is given such a file as a newer version copied by hand, without a
manifest (a TF Serving layout): it stays up, keeps answering on the older
version, reports the new one END with DATA_LOSS and counts it. Each kind of
damage (empty, not a flatbuffer, cut at several points; ONNX and OpenVINO
files cut short without a manifest) is refused by model_file_check before
any native loader in the server sees it.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from leantfx.runtimes import registry as runtimes_lib
from leantfx.serving import loading
from leantfx.serving import model_config
from leantfx.serving import model_file_check
from leantfx.serving import model_manager
from leantfx.serving import status
from tests import helpers

POLL_S = 0.3
# How long the server may take to see and refuse a version: a few polls and
# one child process (about a second on an idle 2-core machine).
REFUSE_TIMEOUT_S = 60.0


def _lite_file(model_base: str) -> str:
  """The float digits model.tflite of the shared fixture (no manifest)."""
  return os.path.join(model_base, 'digits_float_lite', '1', 'model.tflite')


def _write_truncated(source: str, version_dir: str, keep: float) -> None:
  """Copies `source` into version_dir by hand, cut to `keep` of its bytes."""
  os.makedirs(version_dir)
  with open(source, 'rb') as f:
    content = f.read()
  with open(os.path.join(version_dir, 'model.tflite'), 'wb') as f:
    f.write(content[:int(len(content) * keep)])


@pytest.mark.unit
def test_a_truncated_tflite_file_crashes_tflites_own_interpreter(
    model_base, tmp_path):
  # What the server would do without model_file_check: tf.lite.Interpreter
  # on the bytes, as tflite_servable does.
  _write_truncated(_lite_file(model_base), str(tmp_path / '2'), 0.5)
  code = ('import sys, tensorflow as tf\n'
          'content = open(sys.argv[1], "rb").read()\n'
          'tf.lite.Interpreter(model_content=content).allocate_tensors()\n')
  done = subprocess.run(
      [sys.executable, '-c', code, str(tmp_path / '2' / 'model.tflite')],
      capture_output=True, timeout=300,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
  assert done.returncode == -signal.SIGSEGV, done.stderr[-2000:]


def _start_serve(base: str):
  process = subprocess.Popen(
      [helpers.LEANTFX, 'serve', '--model-base-path', base, '--rest-port',
       '0', '--grpc-port', '0', '--file-system-poll-wait-seconds',
       str(POLL_S), '--max-num-load-retries', '1'],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
  line = ''
  deadline = time.monotonic() + 120
  while time.monotonic() < deadline and 'leantfx serve:' not in line:
    line = process.stdout.readline()
    if not line and process.poll() is not None:
      pytest.fail(f'serve exited early: {process.stderr.read()[-2000:]}')
  assert 'leantfx serve:' in line, line
  return process, int(line.split('http://127.0.0.1:')[1].split()[0])


def _get(port: int, path: str):
  with urllib.request.urlopen(f'http://127.0.0.1:{port}{path}',
                              timeout=20) as response:
    return response.read().decode()


def _predict(port: int) -> dict:
  request = urllib.request.Request(
      f'http://127.0.0.1:{port}/v1/models/lite:predict',
      data=json.dumps({'instances': [[0.5] * 64]}).encode(), method='POST')
  with urllib.request.urlopen(request, timeout=20) as response:
    return json.loads(response.read())


@pytest.mark.e2e
def test_serve_outlives_a_truncated_tflite_version_copied_by_hand(
    model_base, tmp_path):
  base = tmp_path / 'models'
  os.makedirs(base / 'lite' / '1')
  shutil.copy(_lite_file(model_base), base / 'lite' / '1')
  process, port = _start_serve(str(base))
  try:
    before = _predict(port)['predictions']
    _write_truncated(_lite_file(model_base), str(base / 'lite' / '2'), 0.5)

    def version_2():
      try:
        states = json.loads(_get(port, '/v1/models/lite'))
      except OSError:  # A dead server resets the connection.
        time.sleep(1)
        assert process.poll() is None, (
            f'serve died ({process.returncode}): '
            f'{process.stderr.read()[-2000:]}')
        raise
      return {s['version']: s for s in states['model_version_status']
              }.get('2')

    deadline = time.monotonic() + REFUSE_TIMEOUT_S
    state = None
    while time.monotonic() < deadline:
      assert process.poll() is None, (
          f'serve died ({process.returncode}): '
          f'{process.stderr.read()[-2000:]}')
      state = version_2()
      if state is not None and state['state'] == 'END':
        break
      time.sleep(POLL_S)
    assert state is not None and state['state'] == 'END', state
    assert state['status']['error_code'] == 'DATA_LOSS', state
    assert 'Model files refused' in state['status']['error_message']
    # The first try and its one quick retry (--max-num-load-retries 1) are
    # each refused and counted; then it rests (RETRY_BACKOFF_S, 30 s).
    rejected = 'leantfx_serving_model_files_rejected_total 2\n'
    deadline = time.monotonic() + REFUSE_TIMEOUT_S
    while time.monotonic() < deadline and rejected not in _get(
        port, '/monitoring/prometheus/metrics'):
      time.sleep(POLL_S)
    time.sleep(5 * POLL_S)
    metrics = _get(port, '/monitoring/prometheus/metrics')
    assert rejected in metrics, [m for m in metrics.splitlines()
                                 if 'rejected' in m]
    assert process.poll() is None
    assert _predict(port)['predictions'] == before  # Version 1 answers.
  finally:
    if process.poll() is None:
      process.send_signal(signal.SIGTERM)
    try:
      process.wait(timeout=helpers.EXIT_TIMEOUT_S)
    finally:
      if process.poll() is None:
        process.kill()
  log = process.stderr.read()
  assert log.count('Loading model lite version 2 failed') == 2, log[-3000:]


@pytest.mark.unit
@pytest.mark.parametrize('damage, reason', [
    (lambda content: b'', model_file_check.REASON_FILES),
    (lambda content: b'\x00' * 4 + b'NOTL' + content[8:],
     model_file_check.REASON_FILES),
    (lambda content: content[:16], model_file_check.REASON_REFUSED),
    (lambda content: content[:len(content) // 2],
     model_file_check.REASON_REFUSED),
    (lambda content: content[:-64], model_file_check.REASON_REFUSED),
])
def test_each_damaged_tflite_file_is_refused_before_the_loader(
    model_base, tmp_path, damage, reason):
  with open(_lite_file(model_base), 'rb') as f:
    content = f.read()
  (tmp_path / 'model.tflite').write_bytes(damage(content))
  with pytest.raises(model_file_check.ModelFileError) as raised:
    loading.load_servable('lite', 2, str(tmp_path))
  assert raised.value.reason == reason, raised.value
  assert raised.value.code == status.Code.DATA_LOSS
  assert str(tmp_path / 'model.tflite') in str(raised.value)


@pytest.mark.unit
def test_a_sound_tflite_file_passes_the_child_check(model_base, tmp_path):
  shutil.copy(_lite_file(model_base), tmp_path)
  runtime = runtimes_lib.get(runtimes_lib.TFLITE)
  model_file_check.check_version(runtime, str(tmp_path))  # Does not raise.


@pytest.mark.unit
def test_a_crashing_loader_is_reported_as_a_crash(tmp_path, monkeypatch):
  # A runtime whose verifier kills its process, as a native loader's
  # SIGSEGV does: the child dies, the caller gets a ModelFileError.
  (tmp_path / 'model.tflite').write_bytes(b'\x00' * 4 + b'TFL3' + b'\x00' * 8)
  runtime = runtimes_lib.get(runtimes_lib.TFLITE)
  code = 'import os, signal; os.kill(os.getpid(), signal.SIGSEGV)'
  monkeypatch.setattr(model_file_check, '_child_command',
                      lambda runtime, folder: [sys.executable, '-c', code])
  with pytest.raises(model_file_check.ModelFileError) as raised:
    model_file_check.check_version(runtime, str(tmp_path))
  assert raised.value.reason == model_file_check.REASON_CRASHED
  assert 'SIGSEGV' in str(raised.value)
  assert 'the server is unharmed' in str(raised.value)


def _keras_model():
  import tf_keras  # pylint: disable=g-import-not-at-top
  tf_keras.utils.set_random_seed(0)
  x = tf_keras.Input(shape=(4,), name='x')
  y = tf_keras.layers.Dense(3, activation='softmax', name='probabilities')(x)
  return tf_keras.Model({'x': x}, y)


@pytest.mark.unit
@pytest.mark.parametrize('runtime, truncated', [
    ('openvino', 'model.bin'),
    ('onnx', 'model.onnx'),
])
def test_a_hand_copied_runtime_version_cut_short_is_refused(
    tmp_path, runtime, truncated):
  from leantfx.runtimes import onnx as onnx_runtime  # pylint: disable=g-import-not-at-top
  from leantfx.runtimes import openvino as openvino_runtime  # pylint: disable=g-import-not-at-top
  export = {'openvino': openvino_runtime.export_openvino,
            'onnx': onnx_runtime.export_onnx}[runtime]
  exported = str(tmp_path / 'exported')
  export(_keras_model(), 'float32', output_dir=exported)
  base = tmp_path / 'm'
  files = runtimes_lib.get(runtime).files
  for version in (1, 2):
    os.makedirs(base / str(version))
    for name in files:
      shutil.copy(os.path.join(exported, name), base / str(version))
  path = base / '2' / truncated
  path.write_bytes(path.read_bytes()[:os.path.getsize(path) // 2])
  config = model_config.ModelConfig('m', str(base))
  manager = model_manager.ModelManager(lambda: [config],
                                       max_num_load_retries=0,
                                       enable_warmup=False)
  manager.poll_once()
  try:
    with manager.acquire('m') as servable:
      assert servable.version == 1
      features = np.ones((2, 4), np.float32)
      (output,) = servable.signatures['serving_default'].outputs
      assert servable.run('serving_default', {'x': features},
                          [output])[output].shape == (2, 3)
    state = manager.version_states('m')[2]
    assert state.error_code == status.Code.DATA_LOSS
    assert 'Model files refused' in state.error_message
    assert truncated in state.error_message
    assert manager.files_rejected == 1
  finally:
    manager.stop()
