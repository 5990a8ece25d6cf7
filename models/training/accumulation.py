"""Gradient accumulation: N micro-batches per optimizer step.

Each fit step receives one optimizer step's worth of examples (N micro-
batches per replica). The train step slices it into N micro-batches, runs
forward and backward on one at a time (a while loop with one iteration in
flight, so only one micro-batch's activations are alive), adds each
micro-batch's gradient weighted by its share of the examples, and applies the
sum once. With a mean loss that sum is exactly the gradient of the whole
batch, so N=4 x 16 examples gives the same update as 64 examples at once, in
a quarter of the activation memory.

Not identical for layers whose forward pass depends on the batch
(BatchNormalization normalises by each micro-batch's statistics) or on
randomness (Dropout masks are drawn per micro-batch); the update is still a
valid step, just not bit-for-bit the big-batch one.
"""
from typing import Any, Dict, Type

import tensorflow as tf
import tf_keras


class AccumulatingModel(tf_keras.Model):
  """A functional model whose train step accumulates micro-batch gradients.

  Build it like a functional model:
  ``AccumulatingModel(inputs=..., outputs=..., accumulation_steps=4)``.
  """

  def __init__(self, *args, accumulation_steps: int = 1, **kwargs):
    super().__init__(*args, **kwargs)
    if not isinstance(accumulation_steps, int) or accumulation_steps < 1:
      raise ValueError(
          f'accumulation_steps must be an integer >= 1, got '
          f'{accumulation_steps!r}.')
    self.accumulation_steps = accumulation_steps

  def get_config(self) -> Dict[str, Any]:
    config = super().get_config()
    config['accumulation_steps'] = self.accumulation_steps
    return config

  def train_step(self, data):
    x, y, sample_weight = tf_keras.utils.unpack_x_y_sample_weight(data)
    steps = self.accumulation_steps
    total = tf.shape(tf.nest.flatten(y)[0])[0]
    variables = self.trainable_variables
    optimizer = self.optimizer
    scaled = isinstance(optimizer, tf_keras.mixed_precision.LossScaleOptimizer)

    def micro_slice(structure, start, end):
      if structure is None:
        return None
      return tf.nest.map_structure(lambda t: t[start:end], structure)

    accumulated = [tf.zeros_like(v) for v in variables]
    for i in tf.range(steps):
      # One micro-batch in flight: its activations are freed before the next
      # one's forward pass starts.
      tf.autograph.experimental.set_loop_options(parallel_iterations=1)
      start = i * total // steps
      end = (i + 1) * total // steps
      x_i = micro_slice(x, start, end)
      y_i = micro_slice(y, start, end)
      w_i = micro_slice(sample_weight, start, end)
      with tf.GradientTape() as tape:
        y_pred = self(x_i, training=True)
        loss = self.compute_loss(x_i, y_i, y_pred, w_i)
        if scaled:
          loss = optimizer.get_scaled_loss(loss)
      gradients = tape.gradient(loss, variables)
      if scaled:
        gradients = optimizer.get_unscaled_gradients(gradients)
      # Each micro-batch's mean-loss gradient, weighted by its share.
      share = tf.cast(end - start, tf.float32) / tf.cast(total, tf.float32)
      accumulated = [
          a + tf.cast(share, a.dtype) * (
              tf.convert_to_tensor(g) if g is not None else tf.zeros_like(a))
          for a, g in zip(accumulated, gradients)
      ]
      self.compute_metrics(x_i, y_i, y_pred, w_i)
    optimizer.apply_gradients(zip(accumulated, variables))
    return self.get_metrics_result()


def model_class(accumulation_steps: int) -> Type[tf_keras.Model]:
  """tf_keras.Model for 1 step, AccumulatingModel otherwise."""
  return tf_keras.Model if accumulation_steps == 1 else AccumulatingModel


def make_model(inputs, outputs, accumulation_steps: int) -> tf_keras.Model:
  """Builds the functional model, accumulating when steps > 1."""
  if not isinstance(accumulation_steps, int) or accumulation_steps < 1:
    raise ValueError(f'accumulation_steps must be an integer >= 1, got '
                     f'{accumulation_steps!r}.')
  if accumulation_steps == 1:
    return tf_keras.Model(inputs=inputs, outputs=outputs)
  return AccumulatingModel(inputs=inputs, outputs=outputs,
                           accumulation_steps=accumulation_steps)
