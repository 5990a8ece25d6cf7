"""Gradient accumulation: N micro-batches give the big batch's update."""
import numpy as np
import pytest
import tensorflow as tf

from leantfx.errors import ConfigError
from leantfx.models import architectures
from leantfx.models.training import accumulation
from tests.training import helpers

pytestmark = pytest.mark.unit


def _train(accumulation_steps, batch, steps, sample_weight=False):
  """Weights after `steps` optimizer steps on the same 64-example batches."""
  training = helpers.training(accumulation_steps=accumulation_steps,
                              batch_size=batch)
  tf.keras.utils.set_random_seed(3)
  model = architectures.build_compiled(helpers.TABULAR, training, {})
  x, y = helpers.tabular_arrays(64 * steps)
  ds = tf.data.Dataset.from_tensor_slices((x, y))
  if sample_weight:
    weights = np.linspace(0.5, 2.0, len(y)).astype(np.float32)
    ds = tf.data.Dataset.from_tensor_slices((x, y, weights))
  # The input pipeline yields one optimizer step's examples per fit step:
  # batch x accumulation_steps (models/training/distribution.py).
  ds = ds.batch(batch * accumulation_steps)
  history = model.fit(ds, epochs=1, verbose=0)
  return model, history


@pytest.mark.parametrize('sample_weight', [False, True])
def test_four_micro_batches_of_16_equal_one_batch_of_64(sample_weight):
  big, big_history = _train(1, 64, steps=3, sample_weight=sample_weight)
  acc, acc_history = _train(4, 16, steps=3, sample_weight=sample_weight)
  assert isinstance(acc, accumulation.AccumulatingModel)
  # One optimizer step per 64 examples in both.
  assert int(big.optimizer.iterations) == int(acc.optimizer.iterations) == 3
  # float32 sums in a different order: agreement to ~1e-6 relative, far
  # below one step's change (learning rate 3e-3).
  for a, b in zip(big.get_weights(), acc.get_weights()):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(acc_history.history['loss'],
                             big_history.history['loss'], rtol=1e-5)


def test_accumulation_differs_from_four_separate_steps():
  """The control: 4 optimizer steps of 16 are not the 64-batch update."""
  big, _ = _train(1, 64, steps=1)
  small, _ = _train(1, 16, steps=1)
  assert int(small.optimizer.iterations) == 4
  assert max(np.abs(a - b).max()
             for a, b in zip(big.get_weights(), small.get_weights())) > 1e-4


def test_accumulation_steps_below_one_are_rejected():
  with pytest.raises(ConfigError, match='accumulation_steps'):
    helpers.training(accumulation_steps=0)
  inputs = tf.keras.Input((2,))
  with pytest.raises(ValueError, match='accumulation_steps'):
    accumulation.make_model(inputs, tf.keras.layers.Dense(1)(inputs), 0)
