"""Tiny models and data for the training tests (no pipeline, no download).

TABULAR is a synthetic 8-feature, 3-class dataset in the Trainer's input
format (transformed feature names, int64 labels); the models come from the
Trainer's own build_model, so the tests exercise what run_fn trains.
"""
import dataclasses
from typing import Dict, Tuple

import numpy as np
import tensorflow as tf

from leantfx import config as config_lib
from leantfx.models import features

NUM_FEATURES = 8
NUM_CLASSES = 3
TABULAR = config_lib.DatasetSpec(
    name='tiny',
    label='y',
    classes=tuple(f'c{i}' for i in range(NUM_CLASSES)),
    numeric_features=tuple(f'f{i}' for i in range(NUM_FEATURES)))
DIGITS = config_lib.DatasetSpec(
    name='digits',
    label='digit',
    classes=tuple(str(d) for d in range(10)),
    image_features=tuple(f'pixel_{i:02d}' for i in range(64)),
    image_shape=(8, 8, 1),
    image_max_value=16.0,
    model='cnn')
# No dropout by default: the equality tests need deterministic forward passes.
TINY_TRAINING = config_lib.TrainingConfig(
    train_steps=20, epochs=1, batch_size=16, hidden_units=(16, 8),
    dropout=0.0, precision='float32', strategy='auto', seed=7)


def training(**changes) -> config_lib.TrainingConfig:
  return dataclasses.replace(TINY_TRAINING, **changes)


def tabular_arrays(rows: int = 256, seed: int = 0
                  ) -> Tuple[Dict[str, np.ndarray], np.ndarray]:
  """Features {f<i>_xf: [rows, 1]} and labels from a fixed linear rule."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(rows, NUM_FEATURES)).astype(np.float32)
  weights = rng.normal(size=(NUM_FEATURES, NUM_CLASSES))
  y = np.argmax(x @ weights, axis=1).astype(np.int64)
  columns = {
      features.transformed_name(f'f{i}'): x[:, i:i + 1]
      for i in range(NUM_FEATURES)
  }
  return columns, y


def tabular_dataset(batch: int, rows: int = 256, seed: int = 0,
                    repeat: bool = True) -> tf.data.Dataset:
  """Batches in a fixed order (no shuffle), optionally repeated."""
  x, y = tabular_arrays(rows, seed)
  ds = tf.data.Dataset.from_tensor_slices((x, y))
  if repeat:
    ds = ds.repeat()
  return ds.batch(batch, drop_remainder=True)


def digits_arrays(limit: int = 1797) -> Tuple[Dict[str, np.ndarray],
                                              np.ndarray]:
  """scikit-learn's digits, scaled to [0, 1] like Transform does."""
  from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top
  digits = load_digits()
  order = np.random.default_rng(0).permutation(len(digits.target))[:limit]
  x = (digits.data[order] / 16.0).astype(np.float32)
  return {features.IMAGE_KEY: x}, digits.target[order].astype(np.int64)
