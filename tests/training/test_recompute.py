"""Activation checkpointing: identical gradients, lower peak memory."""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from leantfx.models import architectures
from leantfx.models.training import recompute
from tests.training import helpers

pytestmark = pytest.mark.unit

# A deep, narrow MLP: 4 widths x depth 8 = 32 Dense layers of 128 units, in
# ceil(sqrt(32)) = 6 recompute blocks. A batch of 2048 makes activations
# (2048 x 128 x 4 B = 1 MB per layer output) dominate the weights (64 KB).
DEEP = dict(hidden_units=(128, 128, 128, 128), depth_multiplier=8.0)
BATCH = 2048


def _deep_model(recompute_on):
  tf_keras.utils.set_random_seed(11)
  training = helpers.training(recompute=recompute_on, **DEEP)
  return architectures.build_compiled(helpers.TABULAR, training, {})


def _gradient_fn(model):
  """One forward and backward pass, run eagerly.

  Eager ops run one after another in program order, so the peak is the same
  in every process. Inside a tf.function the executor may run independent
  ops in any order, and the peak moved with it: 11.5 to 27 MB with
  recompute on 2 threads (27 MB in a CI run whose other worker was busy),
  26 to 51 MB with one inter-op thread. benchmarks/bench_training.py
  reports the graph-mode figure.
  """
  loss_fn = tf_keras.losses.SparseCategoricalCrossentropy()

  def gradients(x, y):
    with tf.GradientTape() as tape:
      loss = loss_fn(y, model(x, training=True))
    return tape.gradient(loss, model.trainable_variables)

  return gradients


def _peak_bytes(fn, *args):
  """Peak CPU allocator bytes above the current level during one call."""
  fn(*args)  # Warm up: the first call allocates Keras' and TF's caches.
  tf.config.experimental.reset_memory_stats('CPU:0')
  base = tf.config.experimental.get_memory_info('CPU:0')['current']
  result = fn(*args)
  peak = tf.config.experimental.get_memory_info('CPU:0')['peak']
  return peak - base, result


def test_blocks_follow_sqrt_grouping():
  layers = [tf_keras.layers.Dense(4) for _ in range(32)]
  blocks = recompute.sqrt_blocks(layers)
  assert len(blocks) == 6 and sum(len(b) for b in blocks) == 32
  assert recompute.sqrt_blocks(layers[:1]) == [layers[:1]]


def test_recompute_gives_identical_gradients_and_lower_peak_memory():
  plain, checkpointed = _deep_model(False), _deep_model(True)
  assert architectures.count_layers(checkpointed, recompute.RecomputeBlock
                                   ) == 6
  # 32 hidden layers and the logits, wrapped or not.
  assert architectures.count_layers(plain, tf_keras.layers.Dense) == 33
  assert architectures.count_layers(checkpointed, tf_keras.layers.Dense) == 33
  checkpointed.set_weights(plain.get_weights())
  x, y = helpers.tabular_arrays(BATCH)
  x = {k: tf.constant(v) for k, v in x.items()}
  y = tf.constant(y)
  plain_peak, plain_grads = _peak_bytes(_gradient_fn(plain), x, y)
  ckpt_peak, ckpt_grads = _peak_bytes(_gradient_fn(checkpointed), x, y)
  # The same ops on the same inputs: the gradients agree to float32
  # rounding (they are bitwise equal on this machine).
  for a, b in zip(plain_grads, ckpt_grads):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
  # Without recompute all 32 layers' outputs (~1 MB each) are held by the
  # tape for the backward pass; with it, 6 block inputs plus one block's
  # recomputed activations. Measured here, eagerly: 35.7 vs 14.7 MB (2.4x)
  # in every run; the test asks for at least 1.5x.
  assert ckpt_peak * 1.5 < plain_peak, (ckpt_peak, plain_peak)


def test_recompute_model_trains_and_exports_its_weights_in_order():
  model = _deep_model(True)
  x, y = helpers.tabular_arrays(64)
  model.fit(x, y, epochs=1, batch_size=32, verbose=0)
  plain = _deep_model(False)
  plain.set_weights(model.get_weights())
  np.testing.assert_allclose(plain.predict(x, verbose=0),
                             model.predict(x, verbose=0), atol=1e-6)


def test_unsafe_layers_are_not_recomputed():
  with pytest.raises(ValueError, match='cannot be recomputed'):
    recompute.RecomputeBlock([tf_keras.layers.Dense(2),
                              tf_keras.layers.Dropout(0.5)])
