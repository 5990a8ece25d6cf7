"""Tests for figure 6 of benchmarks/bench_optimize.py (``image_accuracy_rows``).

The section's MobileNetV2 takes minutes to train and tens of seconds to
trace, so the rows test stands a small CNN with the same input contract
({'image_xf': [192]}, the digits as 3-channel 8x8 images) in for
``train_image_model`` and runs everything else for real: the TFLite,
OpenVINO and ONNX float32/int8 exports calibrated on a few train rows, and
each runtime's scorer on the whole eval split. Spies record what the
scorers return, so the rows must be computed from them. The model itself
is checked by building it (``build_image_model``) without training.
"""
import numpy as np
import pytest
import tf_keras

from benchmarks import bench_optimize
from leantfx.components.optimize.techniques import _keras_utils
from leantfx.components.optimize.evaluation import measure
from leantfx.runtimes import onnx as onnx_runtime
from leantfx.runtimes import openvino as openvino_runtime
from leantfx.components.optimize.export import runtime_variants
from leantfx.runtimes import registry as runtimes
from leantfx.runtimes import serving_export
from leantfx.models import architectures

pytestmark = pytest.mark.unit

CALIBRATION = 8
EPOCHS, ALPHA, SIDE = 3, 0.5, 48
PREFIX = f'MobileNetV2 {ALPHA:g} {SIDE}px digits'


def _small_cnn(data, *, epochs, alpha, side):
  """Stands in for train_image_model: a small CNN, 1 epoch, same inputs."""
  assert (epochs, alpha, side) == (EPOCHS, ALPHA, SIDE)
  tf_keras.utils.set_random_seed(0)
  image = tf_keras.Input(shape=(192,), name=bench_optimize.FEATURE)
  x = tf_keras.layers.Reshape((8, 8, 3))(image)
  x = tf_keras.layers.Conv2D(8, 3, activation='relu')(x)
  x = tf_keras.layers.Flatten()(x)
  x = tf_keras.layers.Dense(10, name='logits')(x)
  probabilities = tf_keras.layers.Activation('softmax',
                                             name='probabilities')(x)
  model = tf_keras.Model({bench_optimize.FEATURE: image}, probabilities)
  _keras_utils.compile_classifier(model, 3e-3)
  model.fit(data['train_ds'], epochs=1, verbose=0)
  return model


def _runtime_rows(label):
  return [f'{PREFIX}: {label} float32 eval accuracy',
          f'{PREFIX}: {label} int8 eval accuracy',
          f'{PREFIX}: {label} int8 drop vs {label} float32',
          f'{PREFIX}: {label} int8 drop vs Keras float32',
          f'{PREFIX}: {label} size float32 / int8']


def _by_figure(rows):
  return {row['figure']: row for row in rows}


@pytest.fixture
def spies(monkeypatch):
  """Records each scorer's answers and the calibration data passed on."""
  seen = {'scores': {}, 'keras': [], 'calibration': []}
  real_tflite, real_server = measure.measure_tflite, runtime_variants.scores
  real_keras = _keras_utils.accuracy
  real_samples = serving_export.calibration_samples

  def tflite_scores(path, data, **kwargs):
    found = real_tflite(path, data, **kwargs)
    seen['scores'][path] = (found.accuracy, found.class_ids, len(data))
    return found

  def server_scores(run, data, *args, **kwargs):
    found = real_server(run, data, *args, **kwargs)
    seen['scores'][run.path] = (found['accuracy'], found['class_ids'],
                                len(data))
    return found

  def keras_accuracy(model, dataset):
    found = real_keras(model, dataset)
    seen['keras'].append(found)
    return found

  def calibration_samples(data, specs, num_samples=CALIBRATION):
    samples = real_samples(data, specs, num_samples)
    seen['calibration'].append((data, samples))
    return samples

  monkeypatch.setattr(bench_optimize, 'train_image_model', _small_cnn)
  monkeypatch.setattr(measure, 'measure_tflite', tflite_scores)
  monkeypatch.setattr(runtime_variants, 'scores', server_scores)
  monkeypatch.setattr(_keras_utils, 'accuracy', keras_accuracy)
  monkeypatch.setattr(serving_export, 'calibration_samples',
                      calibration_samples)
  return seen


def test_rows_come_from_each_runtime_s_scores(spies, tmp_path):
  # The runtimes installed here (test_a_runtime_not_installed_gets_a_row
  # covers the others).
  server = tuple(r for r in runtime_variants.SERVER_RUNTIMES
                 if not runtimes.missing_modules(r))
  rows = bench_optimize.image_accuracy_rows(
      str(tmp_path), epochs=EPOCHS, alpha=ALPHA, side=SIDE,
      calibration_samples=CALIBRATION, server_runtimes=server)
  labels = [runtimes.LABELS[r] for r in (runtimes.TFLITE,) + server]
  assert [row['figure'] for row in rows] == (
      [f'{PREFIX}: Keras float32 eval accuracy'] +
      [f for label in labels for f in _runtime_rows(label)])
  by = _by_figure(rows)
  (keras,) = spies['keras']
  assert by[f'{PREFIX}: Keras float32 eval accuracy']['measured'] == keras

  # Each runtime's accuracy is what its own scorer said on all 360 eval
  # digits, scoring the file that runtime's export wrote.
  files = {runtimes.OPENVINO: openvino_runtime.XML_FILE,
           runtimes.ONNX: onnx_runtime.MODEL_FILE}

  def scored(runtime, mode):
    if runtime == runtimes.TFLITE:
      return spies['scores'][str(tmp_path / f'image_{mode}.tflite')]
    return spies['scores'][
        str(tmp_path / f'image_{runtime}_{mode}' / files[runtime])]

  assert len(spies['scores']) == 2 * len(labels)
  for runtime in (runtimes.TFLITE,) + server:
    label = runtimes.LABELS[runtime]
    (f32, f32_ids, n32), (int8, int8_ids, n8) = (
        scored(runtime, mode) for mode in ('float32', 'int8'))
    assert n32 == n8 == 360
    assert 0.0 <= f32 <= 1.0 and 0.0 <= int8 <= 1.0
    assert by[f'{PREFIX}: {label} float32 eval accuracy']['measured'] == f32
    int8_row = by[f'{PREFIX}: {label} int8 eval accuracy']
    assert int8_row['measured'] == int8
    agree = int(np.sum(np.asarray(f32_ids) == np.asarray(int8_ids)))
    assert f'same class as {label} float32 on {agree}/360' in (
        int8_row['detail'])
    own = by[f'{PREFIX}: {label} int8 drop vs {label} float32']
    assert own['measured'] == pytest.approx(f32 - int8)
    assert own['anchor'] == '<= 0.005'
    assert own['anchor source'] == "leantfx's target"
    against_keras = by[f'{PREFIX}: {label} int8 drop vs Keras float32']
    assert against_keras['measured'] == pytest.approx(keras - int8)
    assert against_keras['anchor'] == '<= 0.005'
    size = by[f'{PREFIX}: {label} size float32 / int8']
    f32_bytes, int8_bytes = (int(b) for b in
                             size['detail'].split(' B')[0].split(' / '))
    assert size['measured'] == pytest.approx(f32_bytes / int8_bytes)

  # int8 calibrated on train rows only (the first CALIBRATION of them), the
  # same rows for every runtime.
  train = bench_optimize._image_data(bench_optimize._digits())  # pylint: disable=protected-access
  assert spies['calibration']
  for data, samples in spies['calibration']:
    assert len(samples) == CALIBRATION
    np.testing.assert_array_equal(
        np.concatenate([s[bench_optimize.FEATURE] for s in samples]),
        train['train_x'][bench_optimize.FEATURE][:CALIBRATION])
    assert len(data[bench_optimize.FEATURE]) == 1437

  notes = bench_optimize._image_accuracy_notes(rows)  # pylint: disable=protected-access
  assert any('(< 0.90)' in n for n in notes) == (keras < 0.9)


def test_a_runtime_not_installed_gets_a_row(spies, tmp_path, monkeypatch):
  del spies
  real = runtimes.module_installed
  monkeypatch.setattr(runtimes, 'module_installed',
                      lambda name: name != 'onnxruntime' and real(name))
  rows = bench_optimize.image_accuracy_rows(
      str(tmp_path), epochs=EPOCHS, alpha=ALPHA, side=SIDE,
      calibration_samples=CALIBRATION, server_runtimes=('onnx',))
  assert [row['figure'] for row in rows] == (
      [f'{PREFIX}: Keras float32 eval accuracy'] + _runtime_rows('TFLite') +
      [f'{PREFIX}: ONNX float32 / int8'])
  missing = rows[-1]
  assert np.isnan(missing['measured'])
  assert "runtime 'onnx' is not installed" in missing['detail']
  assert 'onnxruntime' in missing['detail']


def test_three_channel_images_repeat_the_grey_digits():
  data = bench_optimize._digits()  # pylint: disable=protected-access
  images = bench_optimize._image_data(data)  # pylint: disable=protected-access
  grey = data['eval'].features[bench_optimize.FEATURE]
  rgb = images['eval'].features[bench_optimize.FEATURE]
  assert rgb.shape == (360, 192)
  for channel in range(3):
    np.testing.assert_array_equal(rgb.reshape(-1, 8, 8, 3)[..., channel],
                                  grey.reshape(-1, 8, 8))
  np.testing.assert_array_equal(images['eval'].labels, data['eval'].labels)
  assert len(images['train_x'][bench_optimize.FEATURE]) == 1437
  features, _ = next(iter(images['train_ds']))
  assert features[bench_optimize.FEATURE].shape[1:] == (192,)


def test_the_model_is_the_product_s_mobilenet_v2_resizing_inside():
  model = bench_optimize.build_image_model(45, alpha=0.35, side=32)
  assert model.input[bench_optimize.FEATURE].shape.as_list() == [None, 192]
  resize = model.get_layer('resize')
  assert isinstance(resize, tf_keras.layers.Resizing)
  assert resize.output_shape[1:] == (32, 32, 3)
  backbone = model.get_layer('mobilenetv2_0.35_32')
  assert backbone.input_shape[1:] == (32, 32, 3)
  norms = [layer for layer in model.submodules
           if isinstance(layer, tf_keras.layers.BatchNormalization)]
  assert len(norms) == 52
  assert {n.momentum for n in norms} == {architectures.MOBILENET_BN_MOMENTUM}
  assert model.output_shape == (None, 10)
  assert model.layers[-1].name == 'probabilities'
