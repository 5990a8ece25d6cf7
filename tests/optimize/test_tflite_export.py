"""Tests of TFLite export: sizes, accuracy, signatures and the int8 checks.

The model is the digits CNN of the brief (load_digits pixels / 16 as
{'image_xf': float32 [64]}). A .tflite file holds ~3-4 KB of fixed metadata
and ~16 bytes per quantized channel (scale, zero point) besides the weights;
the overlapping pool (stride 1) gives the logits layer a 7x7x128 input, so
~64k weights dominate the file and the int8/float32 size ratio shows the 4x
that the TFLite post-training quantization guide states for weights.
"""
import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from leantfx.components.optimize import measure
from leantfx.components.optimize import tflite_export
from leantfx.errors import ConfigError

pytestmark = pytest.mark.unit

_INPUT = 'image_xf'


def digits_split():
  """(train features, train labels, eval features, eval labels), 80/20."""
  from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top
  digits = load_digits()
  x = (digits.data / 16.0).astype(np.float32)
  y = digits.target.astype(np.int64)
  rng = np.random.default_rng(0)
  order = rng.permutation(len(y))
  x, y = x[order], y[order]
  cut = int(0.8 * len(y))
  return {_INPUT: x[:cut]}, y[:cut], {_INPUT: x[cut:]}, y[cut:]


def build_digits_cnn(filters: int = 128):
  """Input(64) -> Reshape(8,8,1) -> Conv2D -> pool -> Flatten -> logits -> softmax."""
  inputs = tf_keras.Input((64,), name=_INPUT)
  x = tf_keras.layers.Reshape((8, 8, 1))(inputs)
  x = tf_keras.layers.Conv2D(filters, 3, padding='same', activation='relu')(x)
  x = tf_keras.layers.MaxPooling2D(pool_size=2, strides=1)(x)
  x = tf_keras.layers.Flatten()(x)
  x = tf_keras.layers.Dense(10, name='logits')(x)
  outputs = tf_keras.layers.Activation('softmax', name='probabilities')(x)
  return tf_keras.Model({_INPUT: inputs}, outputs)


def trained_digits_model(cache_root: str):
  """A digits CNN trained once per test session, cached under cache_root.

  Args:
    cache_root: a directory shared by the session (tmp_path_factory's base).

  Returns:
    (model, (train_x, train_y, eval_x, eval_y)).
  """
  data = digits_split()
  path = os.path.join(cache_root, 'digits_cnn_keras')
  if os.path.isdir(path):
    return tf_keras.models.load_model(path), data
  tf_keras.utils.set_random_seed(0)
  model = build_digits_cnn()
  model.compile(tf_keras.optimizers.Adam(3e-3),
                'sparse_categorical_crossentropy', metrics=['accuracy'])
  # 8 epochs reach ~0.95 eval accuracy on digits in a few seconds.
  model.fit(data[0], data[1], epochs=8, batch_size=64, verbose=0)
  model.save(path)
  return model, data


@pytest.fixture(scope='module')
def digits(tmp_path_factory):
  return trained_digits_model(str(tmp_path_factory.getbasetemp()))


@pytest.fixture(scope='module')
def exported(digits, tmp_path_factory):
  """Every mode exported and measured once: {mode: (path, VariantMetrics)}."""
  model, (train_x, _, eval_x, eval_y) = digits
  out = tmp_path_factory.mktemp('tflite')
  eval_data = measure.LabeledData(eval_x, eval_y)
  results = {}
  for mode in tflite_export.MODES:
    path = str(out / f'{mode}.tflite')
    tflite_export.export_tflite(model, mode, train_x, output_path=path)
    results[mode] = (path, measure.measure_tflite(
        path, eval_data, tflite_mode=mode, latency_runs=5, warmup_runs=1))
  return results


def test_int8_is_at_most_a_third_of_float32(exported):
  # TFLite post-training quantization guide: int8 weights make the model
  # "4x smaller"; 0.3 leaves room for the fixed metadata and the scales.
  ratio = (exported['int8'][1].size_bytes /
           exported['float32'][1].size_bytes)
  assert ratio <= 0.3, ratio


def test_float16_is_about_half_of_float32(exported):
  # The guide: float16 quantization makes the model "2x smaller".
  ratio = (exported['float16'][1].size_bytes /
           exported['float32'][1].size_bytes)
  assert 0.4 <= ratio <= 0.6, ratio


def test_quantized_accuracy_stays_within_two_points_of_float(exported):
  float_accuracy = exported['float32'][1].accuracy
  assert float_accuracy > 0.9  # the float model did learn digits
  for mode in ('float16', 'dynamic_range', 'int8', 'int16x8'):
    assert exported[mode][1].accuracy >= float_accuracy - 0.02, mode


def test_float32_tflite_matches_keras_outputs(digits, exported):
  model, (_, _, eval_x, _) = digits
  predictor = measure.TFLitePredictor(exported['float32'][0])
  sample = {_INPUT: eval_x[_INPUT][:1]}
  np.testing.assert_allclose(
      predictor.predict(sample), model.predict(sample, verbose=0),
      atol=1e-5)


@pytest.mark.parametrize('mode', tflite_export.MODES)
def test_signature_keeps_the_model_input_names(exported, mode):
  interpreter = tf.lite.Interpreter(model_path=exported[mode][0])
  runner = interpreter.get_signature_runner('serving_default')
  assert sorted(runner.get_input_details()) == [_INPUT]
  assert sorted(runner.get_output_details()) == ['probabilities']


def test_int8_has_int8_input_and_output(exported):
  runner = tf.lite.Interpreter(
      model_path=exported['int8'][0]).get_signature_runner()
  assert runner.get_input_details()[_INPUT]['dtype'] == np.int8
  assert runner.get_output_details()['probabilities']['dtype'] == np.int8


@pytest.mark.parametrize('mode', ['int8', 'int16x8'])
def test_calibrated_mode_without_data_is_a_config_error(digits, mode):
  with pytest.raises(ConfigError, match='representative data'):
    tflite_export.export_tflite(digits[0], mode)


def test_unknown_mode_is_a_config_error(digits):
  with pytest.raises(ConfigError, match='Unknown TFLite mode'):
    tflite_export.export_tflite(digits[0], 'int4')


def test_representative_data_may_be_a_batched_dataset(digits):
  model, (train_x, train_y, _, _) = digits
  ds = tf.data.Dataset.from_tensor_slices((train_x, train_y)).batch(32)
  specs = tflite_export.serving_input_specs(model)
  samples = tflite_export.calibration_samples(ds, specs, num_samples=40)
  assert len(samples) == 40
  assert samples[0][_INPUT].shape == (1, 64)
  unbatched = tflite_export.calibration_samples(ds.unbatch(), specs, 3)
  assert unbatched[0][_INPUT].shape == (1, 64)


def test_representative_data_missing_an_input_is_a_config_error(digits):
  specs = tflite_export.serving_input_specs(digits[0])
  with pytest.raises(ConfigError, match=r"lack the model input\(s\) \['image_xf'\]"):
    tflite_export.calibration_samples({'pixels': np.zeros((2, 64))}, specs)


def test_qat_model_converts_to_int8_without_representative_data(digits):
  import tensorflow_model_optimization as tfmot  # pylint: disable=g-import-not-at-top
  model, (train_x, train_y, eval_x, eval_y) = digits
  qat = tfmot.quantization.keras.quantize_model(model)
  assert tflite_export.is_quantization_aware(qat)
  assert not tflite_export.is_quantization_aware(model)
  qat.compile('adam', 'sparse_categorical_crossentropy')
  # One short epoch sets the fake-quant ranges from real activations.
  qat.fit(train_x, train_y, epochs=1, batch_size=64, verbose=0)
  flatbuffer = tflite_export.export_tflite(qat, 'int8')
  interpreter = tf.lite.Interpreter(model_content=flatbuffer)
  runner = interpreter.get_signature_runner()
  assert runner.get_input_details()[_INPUT]['dtype'] == np.int8
  assert interpreter.get_signature_list()['serving_default']['inputs'] == [
      _INPUT]
