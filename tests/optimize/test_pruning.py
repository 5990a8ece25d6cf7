"""Tests for leantfx.components.optimize.techniques.pruning on the digits CNN fixture."""
import json

import numpy as np
import pytest
import tf_keras

from leantfx.components.optimize.techniques import pruning
from leantfx.errors import ConfigError
from tests.optimize import conftest

# Prunable layers of conftest.build_digits_cnn (the kernels tfmot prunes).
PRUNABLE = ['conv3x3', 'conv1x1', 'hidden', 'logits']
# tfmot zeroes round(sparsity * size) weights per kernel; the smallest kernel
# (logits, 640 weights) lands within 1/640 of the target. 0.01 leaves room for
# weights that were already exactly zero.
SPARSITY_TOLERANCE = 0.01
# Allowed accuracy drop on the 397 eval digits (1 digit = 0.0025). Measured on
# this fixture: 80% sparsity costs ~0.03 (0.985 -> 0.952) after 3 epochs,
# 50% and 2:4 cost <= 0.01. A broken fine-tune falls far below (~0.1-0.5).
ACCURACY_TOLERANCE = 0.05


@pytest.mark.unit
def test_polynomial_schedule_reaches_target_and_keeps_accuracy(
    teacher, teacher_accuracy, digits, teacher_weights_unchanged):
  # 3 epochs of 44 batches = 132 steps; the ramp ends at step 88 so the last
  # third of the run recovers accuracy at the final sparsity.
  config = pruning.PruningConfig(
      target_sparsity=0.8, schedule='polynomial', frequency=10, end_step=88,
      epochs=3, learning_rate=2e-3)

  result = pruning.prune(teacher, digits.train_ds(), config, digits.eval_ds())

  assert result.technique == 'pruning'
  json.dumps(result.details)  # types.py: details are JSON-serialisable
  assert result.details['pruned_layers'] == PRUNABLE
  for name, fraction in result.details['sparsity']['per_layer'].items():
    assert fraction == pytest.approx(0.8, abs=SPARSITY_TOLERANCE), name
  assert result.details['sparsity']['overall'] == pytest.approx(
      0.8, abs=SPARSITY_TOLERANCE)
  # The details are measured on the returned model, not copied from config.
  kernel = result.model.get_layer('hidden').kernel.numpy()
  assert np.mean(kernel == 0) == pytest.approx(0.8, abs=SPARSITY_TOLERANCE)
  assert not any(
      isinstance(layer, tf_keras.layers.Wrapper)
      for layer in result.model.layers)
  # 1400 examples in batches of 32 = 44 steps per epoch.
  assert result.details['training_steps'] == 132
  assert result.details['last_mask_update_step'] == 80
  assert result.details['params'] == 34186
  assert result.details['nonzero_params'] < 0.25 * 34186
  assert result.details['accuracy_before'] == pytest.approx(teacher_accuracy)
  assert result.details['accuracy_after'] >= (
      teacher_accuracy - ACCURACY_TOLERANCE)


@pytest.mark.unit
def test_structured_2_4_rejects_single_channel_conv_unless_skipped(
    teacher, teacher_accuracy, digits):
  # conv3x3 sees 1 input channel: no group of 4 exists, so 2:4 cannot apply.
  with pytest.raises(ConfigError, match=r"'conv3x3' \(Conv2D\)"):
    pruning.prune(teacher, digits.train_ds(),
                  pruning.PruningConfig(structured_2_4=True, frequency=10,
                                        epochs=1), digits.eval_ds())

  config = pruning.PruningConfig(
      structured_2_4=True, skip_unsupported_layers=True, frequency=10,
      epochs=1, learning_rate=1e-3)
  result = pruning.prune(teacher, digits.train_ds(), config, digits.eval_ds())

  assert result.details['skipped_layers'] == [{
      'name': 'conv3x3',
      'class': 'Conv2D'
  }]
  assert result.details['pruned_layers'] == ['conv1x1', 'hidden', 'logits']
  assert result.details['is_2_4'] == {
      'conv1x1': True,
      'hidden': True,
      'logits': True
  }
  for name in ['conv1x1', 'hidden', 'logits']:
    assert result.details['sparsity']['per_layer'][name] == pytest.approx(
        0.5, abs=SPARSITY_TOLERANCE)
  assert result.details['accuracy_after'] >= (
      teacher_accuracy - ACCURACY_TOLERANCE)


@pytest.mark.unit
def test_is_2_4_sparse_checks_groups_of_input_channels():
  dense = np.ones((8, 3), np.float32)  # [in, out]
  dense[0::2, :] = 0  # two zeros in each group of 4 inputs
  assert pruning.is_2_4_sparse(dense)
  dense[0, 1] = 1  # one group now has a single zero
  assert not pruning.is_2_4_sparse(dense)
  assert not pruning.is_2_4_sparse(np.zeros((6, 3)))  # 6 inputs: no groups of 4


@pytest.mark.unit
def test_custom_layer_is_named_in_error_or_skipped_constant_schedule(digits):
  model = conftest.build_model_with_custom_layer()
  config = pruning.PruningConfig(frequency=10, epochs=1)

  with pytest.raises(ConfigError, match=r"'my_scale' \(ScaleLayer\)"):
    pruning.prune(model, digits.train_ds(), config)

  # Also the constant schedule's run: 5 batches suffice (masks update at
  # every step), and one training run less keeps the suite short.
  skipping = pruning.PruningConfig(
      target_sparsity=0.5, schedule='constant', frequency=1, epochs=1,
      skip_unsupported_layers=True)
  result = pruning.prune(model, digits.train_ds().take(5), skipping)
  assert result.details['skipped_layers'] == [{
      'name': 'my_scale',
      'class': 'ScaleLayer'
  }]
  assert result.details['pruned_layers'] == ['hidden', 'logits']
  for name, fraction in result.details['sparsity']['per_layer'].items():
    assert fraction == pytest.approx(0.5, abs=SPARSITY_TOLERANCE), name
  assert result.details['last_mask_update_step'] == 5


@pytest.mark.unit
def test_end_step_beyond_training_is_a_config_error(teacher, digits):
  config = pruning.PruningConfig(end_step=1000, frequency=10, epochs=1)
  with pytest.raises(ConfigError, match='end_step'):
    pruning.prune(teacher, digits.train_ds(), config)


@pytest.mark.unit
@pytest.mark.parametrize('field, value', [
    ('target_sparsity', 1.0),
    ('target_sparsity', -0.1),
    ('target_sparsity', float('nan')),
    ('schedule', 'cubic'),
    ('frequency', 0),
    ('begin_step', -1),
    ('epochs', 0),
    ('learning_rate', 0.0),
    ('structured_2_4', 'yes'),
])
def test_invalid_config_values_raise(field, value):
  with pytest.raises(ConfigError, match=f'PruningConfig.{field}'):
    pruning.PruningConfig(**{field: value})


@pytest.mark.unit
def test_end_step_before_first_update_is_rejected():
  with pytest.raises(ConfigError, match='end_step'):
    pruning.PruningConfig(begin_step=50, frequency=100, end_step=120)


@pytest.mark.unit
def test_config_round_trips_through_dict():
  config = pruning.PruningConfig(
      target_sparsity=0.6, schedule='constant', begin_step=5, end_step=500,
      frequency=7, structured_2_4=True, epochs=3, learning_rate=2e-4,
      skip_unsupported_layers=True)
  assert pruning.PruningConfig.from_dict(config.to_dict()) == config
  with pytest.raises(ConfigError, match='sparsity_target'):
    pruning.PruningConfig.from_dict({'sparsity_target': 0.5})
