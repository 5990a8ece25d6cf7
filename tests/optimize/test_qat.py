"""Tests for leantfx.components.optimize.techniques.qat (QAT and PQAT)."""
import json

import numpy as np
import pytest
import tf_keras

from leantfx.components.optimize.techniques import _keras_utils
from leantfx.components.optimize.techniques import qat
from leantfx.errors import ConfigError
from tests.optimize import conftest

KERNEL_LAYERS = ['conv3x3', 'conv1x1', 'hidden', 'logits']
# Allowed accuracy change on the 397 eval digits (1 digit = 0.0025). Measured
# on this fixture: one QAT epoch moves accuracy by < 0.01 either way.
ACCURACY_TOLERANCE = 0.02


def magnitude_sparsified_copy(model, sparsity):
  """A copy of ``model`` with the smallest |w| of each kernel set to 0.

  Independent of pruning.py so these tests only exercise QAT.
  """
  copy = _keras_utils.copy_model(model)
  for name in KERNEL_LAYERS:
    layer = copy.get_layer(name)
    kernel = layer.kernel.numpy()
    threshold = np.quantile(np.abs(kernel), sparsity)
    layer.kernel.assign(np.where(np.abs(kernel) <= threshold, 0.0, kernel))
  return copy


@pytest.fixture(scope='module')
def half_sparse_teacher(teacher):
  return magnitude_sparsified_copy(teacher, 0.5)


@pytest.mark.unit
def test_qat_wraps_every_layer_keeps_accuracy_and_regrows_pruned_zeros(
    half_sparse_teacher, digits):
  before = _keras_utils.kernel_sparsity(half_sparse_teacher)
  assert before['overall'] == pytest.approx(0.5, abs=0.01)
  weights_before = [w.copy() for w in half_sparse_teacher.get_weights()]
  config = qat.QatConfig(epochs=1, learning_rate=1e-4)

  result = qat.quantization_aware_train(
      half_sparse_teacher, digits.train_ds(), config, digits.eval_ds())

  assert result.technique == 'qat'
  json.dumps(result.details)  # types.py: details are JSON-serialisable
  assert result.details['stripped'] is False
  assert result.details['skipped_layers'] == []
  assert result.details['quantized_layers'] == [
      'to_image', 'conv3x3', 'conv1x1', 'pool', 'flatten', 'hidden', 'dropout',
      'logits', 'probabilities'
  ]
  wrapper_classes = {
      type(layer).__name__
      for layer in result.model.layers
      if isinstance(layer, tf_keras.layers.Wrapper)
  }
  assert wrapper_classes == {'QuantizeWrapperV2'}
  assert result.details['params'] == 34186
  assert result.details['accuracy_after'] >= (
      result.details['accuracy_before'] - ACCURACY_TOLERANCE)
  # Outputs are still probabilities.
  features, _ = _keras_utils.first_examples(digits.eval_ds(), 16)
  sums = np.sum(result.model(features).numpy(), axis=-1)
  np.testing.assert_allclose(sums, 1.0, atol=1e-2)
  # Without the prune-preserving scheme the zeroed weights get gradients and
  # regrow (Adam moves every weight with a non-zero gradient): measured ~0.16
  # overall sparsity left, weights into dead ReLUs staying at 0.
  assert result.details['sparsity_after']['overall'] < 0.25
  # The caller's model is untouched.
  assert all(
      np.array_equal(b, a)
      for b, a in zip(weights_before, half_sparse_teacher.get_weights()))


@pytest.mark.unit
def test_pqat_keeps_the_zeros_of_a_pruned_model(half_sparse_teacher, digits):
  before = _keras_utils.kernel_sparsity(half_sparse_teacher)
  config = qat.QatConfig(
      epochs=1, learning_rate=1e-4, preserve_sparsity=True)

  result = qat.quantization_aware_train(
      half_sparse_teacher, digits.train_ds(), config, digits.eval_ds())

  assert result.technique == 'pqat'
  for name in KERNEL_LAYERS:
    kept = result.details['sparsity_after']['per_layer'][name]
    assert kept >= before['per_layer'][name] - 1e-6, name
  assert result.details['accuracy_after'] >= (
      result.details['accuracy_before'] - ACCURACY_TOLERANCE)


@pytest.mark.unit
def test_preserve_sparsity_on_a_dense_model_is_a_config_error(teacher, digits):
  config = qat.QatConfig(preserve_sparsity=True)
  with pytest.raises(ConfigError, match='no zero kernel weights'):
    qat.quantization_aware_train(teacher, digits.train_ds(), config)


@pytest.mark.unit
def test_custom_layer_is_named_in_error_or_kept_in_float(digits):
  model = conftest.build_model_with_custom_layer()

  with pytest.raises(ConfigError, match=r"'my_scale' \(ScaleLayer\)"):
    qat.quantization_aware_train(model, digits.train_ds(), qat.QatConfig())

  result = qat.quantization_aware_train(
      model, digits.train_ds().take(5),
      qat.QatConfig(skip_unsupported_layers=True))
  assert result.details['skipped_layers'] == [{
      'name': 'my_scale',
      'class': 'ScaleLayer'
  }]
  assert 'my_scale' not in result.details['quantized_layers']
  assert 'hidden' in result.details['quantized_layers']
  assert isinstance(result.model.get_layer('my_scale'), conftest.ScaleLayer)


@pytest.mark.unit
@pytest.mark.parametrize('field, value', [
    ('epochs', 0),
    ('epochs', 1.5),
    ('learning_rate', -1e-3),
    ('preserve_sparsity', 1),
    ('skip_unsupported_layers', None),
])
def test_invalid_config_values_raise(field, value):
  with pytest.raises(ConfigError, match=f'QatConfig.{field}'):
    qat.QatConfig(**{field: value})


@pytest.mark.unit
def test_config_round_trips_through_dict():
  config = qat.QatConfig(
      epochs=3, learning_rate=5e-5, preserve_sparsity=True,
      skip_unsupported_layers=True)
  assert qat.QatConfig.from_dict(config.to_dict()) == config
  with pytest.raises(ConfigError, match='preserve_zeros'):
    qat.QatConfig.from_dict({'preserve_zeros': True})
