"""Activation checkpointing: recompute a block's activations in the backward pass.

A block wrapped in ``RecomputeBlock`` keeps only its input for the backward
pass; ``tf.recompute_grad`` runs the block's forward again when its gradient
is needed. Peak memory then holds the block boundaries plus one block's
activations, for one extra forward pass of compute. Grouping n layers into
about sqrt(n) blocks (Chen et al. 2016, "Training Deep Nets with Sublinear
Memory Cost") balances the two.

Blocks must be deterministic and free of state updates in the forward pass:
no Dropout (the recomputed mask would differ) and no BatchNormalization (its
moving statistics would be updated twice). The builders only wrap Dense and
Conv2D/MaxPooling2D stacks.
"""
import math
from typing import Any, Dict, List, Sequence

import tensorflow as tf
import tf_keras

# Layers whose forward pass is random or updates state: not recomputable.
_UNSAFE_LAYERS = (tf_keras.layers.Dropout, tf_keras.layers.BatchNormalization)


class RecomputeBlock(tf_keras.layers.Layer):
  """Runs a stack of layers; with recompute on, through tf.recompute_grad.

  The inner layers are built in ``build`` (outside the recomputed function,
  so their variables are created once), and their weights come in the order
  of the stack, the same order an unwrapped stack of the same layers has.
  """

  def __init__(self, block_layers: Sequence[tf_keras.layers.Layer],
               recompute: bool = True, **kwargs):
    super().__init__(**kwargs)
    unsafe = [l.name for l in block_layers if isinstance(l, _UNSAFE_LAYERS)]
    if unsafe:
      raise ValueError(
          f'Layers {unsafe} cannot be recomputed: Dropout would draw a new '
          'mask and BatchNormalization would update its statistics twice.')
    self.block_layers = list(block_layers)
    self.recompute = recompute

  def build(self, input_shape):
    shape = tf.TensorShape(input_shape)
    for layer in self.block_layers:
      with tf.name_scope(layer.name):
        layer.build(shape)
      layer.built = True
      shape = layer.compute_output_shape(shape)
    super().build(input_shape)

  def _forward(self, x):
    for layer in self.block_layers:
      x = layer(x)
    return x

  def call(self, inputs):
    if self.recompute:
      return tf.recompute_grad(self._forward)(inputs)
    return self._forward(inputs)

  def compute_output_shape(self, input_shape):
    shape = tf.TensorShape(input_shape)
    for layer in self.block_layers:
      shape = layer.compute_output_shape(shape)
    return shape

  def get_config(self) -> Dict[str, Any]:
    config = super().get_config()
    config.update({
        'block_layers': [
            tf_keras.layers.serialize(l) for l in self.block_layers
        ],
        'recompute': self.recompute,
    })
    return config

  @classmethod
  def from_config(cls, config):
    config = dict(config)
    config['block_layers'] = [
        tf_keras.layers.deserialize(c) for c in config['block_layers']
    ]
    return cls(**config)


def sqrt_blocks(layers: Sequence[tf_keras.layers.Layer]
               ) -> List[List[tf_keras.layers.Layer]]:
  """Splits n layers into ceil(sqrt(n)) consecutive blocks of near-equal size."""
  n = len(layers)
  if n == 0:
    return []
  count = int(math.ceil(math.sqrt(n)))
  size = int(math.ceil(n / count))
  return [list(layers[i:i + size]) for i in range(0, n, size)]


def apply_block(layers: Sequence[tf_keras.layers.Layer], x: tf.Tensor,
                recompute: bool) -> tf.Tensor:
  """Applies a stack of layers, as one RecomputeBlock when recompute is on."""
  if not recompute:
    for layer in layers:
      x = layer(x)
    return x
  return RecomputeBlock(layers)(x)
