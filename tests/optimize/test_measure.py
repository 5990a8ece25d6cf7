"""Tests of measure.py: accuracy, sizes, latency and sparsity of a variant."""
import gzip
import os

import numpy as np
import pytest
import tf_keras

from leantfx.components.optimize import _keras_utils
from leantfx.components.optimize import measure
from leantfx.components.optimize import tflite_export
from leantfx.errors import ConfigError
from tests.optimize import conftest

pytestmark = pytest.mark.unit


@pytest.fixture(scope='module')
def eval_data(digits):
  return measure.LabeledData.from_dataset(digits.eval_ds())


@pytest.fixture(scope='module')
def teacher_accuracy_keras(teacher, digits):
  return _keras_utils.accuracy(teacher, digits.eval_ds())


@pytest.fixture(scope='module')
def float_tflite(teacher, tmp_path_factory):
  path = str(tmp_path_factory.mktemp('measure') / 'float32.tflite')
  tflite_export.export_tflite(teacher, 'float32', output_path=path)
  return path


@pytest.fixture(scope='module')
def keras_saved_model(teacher, tmp_path_factory):
  """The teacher saved the way run_fn writes Format-Keras."""
  path = str(tmp_path_factory.mktemp('measure') / 'Format-Keras')
  teacher.save(path, save_format='tf')
  return path


def test_labeled_data_from_batched_and_unbatched_datasets(digits):
  batched = measure.LabeledData.from_dataset(digits.eval_ds(batch_size=100))
  unbatched = measure.LabeledData.from_dataset(digits.eval_ds().unbatch())
  assert len(batched) == len(unbatched) == len(digits.y) - conftest.NUM_TRAIN
  np.testing.assert_array_equal(batched.labels, unbatched.labels)
  assert batched.features[conftest.FEATURE].shape == (len(batched), 64)
  assert batched.example(3)[conftest.FEATURE].shape == (1, 64)


def test_tflite_accuracy_is_the_keras_accuracy(float_tflite, eval_data,
                                               teacher_accuracy_keras, teacher):
  metrics = measure.measure_tflite(
      float_tflite, eval_data, tflite_mode='float32', latency_runs=30,
      warmup_runs=3, keras_model=teacher)
  # float32 TFLite computes the same function; at most one borderline
  # example may flip.
  assert abs(metrics.accuracy - teacher_accuracy_keras) <= 1 / len(eval_data)
  assert metrics.runtime == 'tflite' and metrics.num_threads == 1
  assert metrics.name == 'baseline/float32'
  assert 0 < metrics.latency_p50_ms <= metrics.latency_p99_ms
  assert metrics.latency_runs == 30
  assert metrics.size_bytes == os.path.getsize(float_tflite)
  with open(float_tflite, 'rb') as f:
    assert metrics.gzipped_bytes == len(gzip.compress(f.read(), 9, mtime=0))
  assert metrics.params == teacher.count_params() == 34186
  assert metrics.sparsity == 0.0  # a dense, unpruned model
  assert set(metrics.details['layer_sparsity']) == {
      'conv3x3', 'conv1x1', 'hidden', 'logits'}


def test_saved_model_is_measured_in_tensorflow(keras_saved_model, eval_data,
                                               teacher_accuracy_keras, teacher):
  metrics = measure.measure(keras_saved_model, eval_data, latency_runs=20,
                            warmup_runs=2, tflite_mode='ignored')
  assert metrics.runtime == 'tensorflow' and metrics.tflite_mode is None
  assert metrics.accuracy == pytest.approx(teacher_accuracy_keras, abs=1e-9)
  assert 0 < metrics.latency_p50_ms <= metrics.latency_p99_ms
  # Without the Keras model the counts come from the SavedModel's variables.
  assert metrics.params == teacher.count_params()
  assert metrics.sparsity == 0.0
  assert metrics.size_bytes == measure.size_on_disk(keras_saved_model)
  assert 0 < metrics.gzipped_bytes < metrics.size_bytes


def test_gzipped_size_of_a_directory_is_deterministic(tmp_path):
  (tmp_path / 'a').write_bytes(b'0' * 10000)
  (tmp_path / 'sub').mkdir()
  (tmp_path / 'sub' / 'b').write_bytes(os.urandom(2000))
  first = measure.gzipped_size(str(tmp_path))
  os.utime(tmp_path / 'a', (1, 1))  # mtimes do not change the size
  assert measure.gzipped_size(str(tmp_path)) == first
  # The random file does not compress, the zeros do.
  assert 2000 < first < 4000
  assert measure.size_on_disk(str(tmp_path)) == 12000


def test_weight_stats_counts_zero_kernel_weights(teacher):
  model = tf_keras.models.clone_model(teacher)
  model.set_weights(teacher.get_weights())
  logits = model.get_layer('logits')
  kernel, bias = logits.get_weights()
  kernel[:32] = 0.0  # 32 of 64 input rows: half of the logits kernel
  logits.set_weights([kernel, np.zeros_like(bias)])
  params, sparsity, per_layer = measure.weight_stats(model)
  assert params == 34186
  assert per_layer['logits'] == 0.5
  kernel_sizes = {'conv3x3': 3 * 3 * 1 * 16, 'conv1x1': 16 * 32,
                  'hidden': 4 * 4 * 32 * 64, 'logits': 64 * 10}
  # Zero biases do not count: only the 320 kernel zeros do.
  assert sparsity == pytest.approx(320 / sum(kernel_sizes.values()))


def test_int8_inputs_are_quantized_with_the_tensor_scale():
  detail = {'dtype': np.int8, 'quantization': (1 / 255, -128)}
  # q = round(x / scale + zero_point), clipped to int8.
  q = measure._quantize(np.array([[0.0, 0.2, 1.0, 2.0]]), detail)
  assert q.dtype == np.int8
  np.testing.assert_array_equal(q, [[-128, -77, 127, 127]])  # 2.0 saturates
  np.testing.assert_allclose(
      measure._dequantize(q, detail), [[0.0, 0.2, 1.0, 1.0]], rtol=1e-6)
  float_detail = {'dtype': np.float32, 'quantization': (0.0, 0)}
  assert measure._quantize(np.array([1.5]), float_detail)[0] == 1.5


def test_bad_inputs_are_config_errors(float_tflite, eval_data, tmp_path):
  with pytest.raises(ConfigError, match='latency_runs must be >= 1'):
    measure.measure_tflite(float_tflite, eval_data, latency_runs=0)
  with pytest.raises(ConfigError, match='num_threads must be >= 1'):
    measure.measure_tflite(float_tflite, eval_data, num_threads=0)
  other = tmp_path / 'model.h5'
  other.write_bytes(b'x')
  with pytest.raises(ConfigError, match='expected a .tflite file'):
    measure.measure(str(other), eval_data)
  wrong = measure.LabeledData({'pixels': eval_data.features['image_xf']},
                              eval_data.labels)
  with pytest.raises(ConfigError, match=r"lack the TFLite input\(s\)"):
    measure.measure_tflite(float_tflite, wrong, latency_runs=1)


def test_variant_metrics_round_trip(float_tflite, eval_data):
  metrics = measure.measure_tflite(float_tflite, eval_data, latency_runs=2,
                                   warmup_runs=0, technique='pruning')
  again = measure.VariantMetrics.from_dict(metrics.to_dict())
  assert again == metrics
  with pytest.raises(ConfigError, match='Unknown VariantMetrics field'):
    measure.VariantMetrics.from_dict({**metrics.to_dict(), 'speed': 1})
