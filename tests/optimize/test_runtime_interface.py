"""The Runtime interface: every runtime registered once, each one run for real.

Each runtime's predictor and timer (leantfx/runtimes/) load the float32
export of conftest's trained digits CNN, made by the optimizer's own export
(TFLite conversion, openvino.convert_model, tf2onnx), and answer what the
Keras model answers.
"""
import os
import time

import numpy as np
import pytest

from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.export import runtime_variants
from leantfx.components.optimize.export import tflite as tflite_export
from leantfx.errors import ConfigError
from leantfx.runtimes import push
from leantfx.runtimes import registry
from leantfx.runtimes import runtime as runtime_lib
from leantfx.runtimes import timing
from leantfx.serving import loading
from leantfx.serving import servable

pytestmark = pytest.mark.unit

# Float32 exports of the same graph: the runtimes' kernels differ from
# Keras' in summation order only (probabilities in [0, 1]).
FLOAT32_ATOL = 1e-4
EXAMPLES = 8


def test_every_runtime_is_registered_once_by_its_own_name():
  assert registry.RUNTIMES == ('tflite', 'openvino', 'onnx')
  for name in registry.RUNTIMES:
    found = registry.get(name)
    assert isinstance(found, runtime_lib.Runtime)
    assert found.name == name
    assert found.label == registry.LABELS[name]
    assert found.model_file == found.files[0]
    assert found.required_modules == registry.REQUIRED_MODULES[name]
    assert found.timed_call
  with pytest.raises(ConfigError, match="Unknown runtime 'tensorrt'.*onnx"):
    registry.get('tensorrt')


def test_the_push_and_the_server_read_each_runtime_s_files_from_it():
  assert push.MODEL_FILE == registry.get('tflite').model_file
  for name in ('openvino', 'onnx'):
    assert push.RUNTIME_FILES[name] == registry.get(name).files
  assert push.RUNTIME_FILES['openvino'] == ('model.xml', 'model.bin')
  assert push.RUNTIME_FILES['onnx'] == ('model.onnx',)
  assert servable.TFLITE_FILENAME == 'model.tflite'
  # Every runtime is served, found by its model file.
  assert set(loading.SERVABLES) == set(registry.BY_NAME.values())


def test_artifact_paths_round_trip(tmp_path):
  # OpenVINO's model is two files: its folder is what is sized and pushed.
  folder = str(tmp_path / 'openvino_float32')
  openvino = registry.get('openvino')
  xml = openvino.model_path(folder)
  assert xml == os.path.join(folder, 'model.xml')
  assert openvino.artifact_path(xml) == folder
  assert openvino.model_in_artifact(folder) == xml
  onnx = registry.get('onnx')
  path = onnx.model_path(folder)
  assert onnx.artifact_path(path) == path == onnx.model_in_artifact(path)


def _export(name, model, folder):
  if name == 'tflite':
    saved_model = tflite_export.save_serving_model(
        model, os.path.join(folder, 'saved_model'))
    path = os.path.join(folder, 'model.tflite')
    tflite_export.export_saved_model_tflite(saved_model, 'float32',
                                            output_path=path)
    return path
  return runtime_variants.export(name, model, 'float32', None,
                                 os.path.join(folder, name), 0,
                                 {'scratch': folder})


@pytest.mark.parametrize('name', registry.RUNTIMES)
def test_each_runtime_predicts_and_times_its_float32_export(
    name, teacher, digits, tmp_path):
  if registry.missing_modules(name):
    pytest.skip(f'{name} is not installed')
  found = registry.get(name)
  path = _export(name, teacher, str(tmp_path))
  assert os.path.basename(path) == found.model_file
  data = measure.LabeledData.from_dataset(digits.eval_ds())
  batch = {n: v[:EXAMPLES] for n, v in data.features.items()}
  expected = teacher.predict(batch, verbose=0)

  predictor = found.predictor(path, 1)
  got = np.concatenate([
      predictor.predict({n: v[i:i + 1] for n, v in batch.items()})
      for i in range(EXAMPLES)])
  np.testing.assert_allclose(got, expected, atol=FLOAT32_ATOL)

  timer = found.timer(f'c/{name}', path, 1, data.example(0))
  assert isinstance(timer, timing.RuntimeTimer)
  assert timer.variant.label == f'c/{name}' and timer.batch_size == 1
  durations = timer.time_invokes(3, time.perf_counter)
  assert len(durations) == 3 and all(d > 0 for d in durations)
