"""The models the soak bench (and the request-limit tests) serve.

A digits model as the pipeline pushes it: 64 named float columns
(``pixel_0`` .. ``pixel_63``, shape [None]) in, ``probabilities`` [None, 10]
out, through one hidden layer, as a SavedModel and as its TFLite conversion.
Small (a few thousand weights, built in a few seconds), so a soak or a test
spends its time on requests, not on training.
"""
import os

import numpy as np
import tensorflow as tf

COLUMNS = tuple(f'pixel_{i}' for i in range(64))
HIDDEN = 32


class _WideDigits(tf.Module):
  """64 named pixel columns -> 10 class probabilities."""

  def __init__(self, seed: int):
    super().__init__()
    rng = np.random.default_rng(seed)
    self.hidden = tf.Variable(
        rng.normal(size=(64, HIDDEN)).astype(np.float32) / 8)
    self.out = tf.Variable(rng.normal(size=(HIDDEN, 10)).astype(np.float32))

  @tf.function(input_signature=[
      {c: tf.TensorSpec([None], tf.float32, c) for c in COLUMNS}])
  def serve(self, columns):
    x = tf.stack([columns[c] for c in COLUMNS], axis=1) / 16.0
    return {'probabilities': tf.nn.softmax(tf.nn.relu(x @ self.hidden) @
                                           self.out)}


def saved_model(path: str, seed: int = 0) -> str:
  """Writes the SavedModel version directory at `path`; returns it."""
  module = _WideDigits(seed)
  tf.saved_model.save(module, path, signatures={'serving_default':
                                                    module.serve})
  return path


def tflite_model(saved_model_dir: str, path: str) -> str:
  """Writes <path>/model.tflite, the float conversion; returns path."""
  converter = tf.lite.TFLiteConverter.from_saved_model(saved_model_dir)
  content = converter.convert()
  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, 'model.tflite'), 'wb') as f:
    f.write(content)
  return path


def columnar_body(rows: int, seed: int = 0) -> bytes:
  """A columnar predict body of `rows` digits: small ints, as pixels are."""
  rng = np.random.default_rng(seed)
  pixels = rng.integers(0, 17, size=(64, rows))
  parts = [f'"{c}":[' + ','.join(map(str, pixels[i].tolist())) + ']'
           for i, c in enumerate(COLUMNS)]
  return ('{"inputs":{' + ','.join(parts) + '}}').encode()


def row_body(rows: int, seed: int = 0) -> bytes:
  """A row-format predict body of `rows` digits."""
  rng = np.random.default_rng(seed)
  pixels = rng.integers(0, 17, size=(rows, 64)).tolist()
  return ('{"instances":[' + ','.join(
      '{' + ','.join(f'"{c}":{v}' for c, v in zip(COLUMNS, row)) + '}'
      for row in pixels) + ']}').encode()
