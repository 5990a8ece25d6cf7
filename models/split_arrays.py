"""A transformed split as numpy columns, sampled uniformly past a row cap.

The tree family (models/trees.py) trains in memory, and the family choice
(models/model_family.py) scores both families on the same eval rows, so
both read a split here once: every row when the split holds at most
``max_rows``, else a uniform sample of about ``max_rows`` rows (each row
kept with probability max_rows / rows, a fixed seed), so a sorted file does
not hand the trees only its first rows. Rows are counted first (records of
the gzipped TFRecords, models/training/budget.py) to know the probability,
and only the kept records are parsed.
"""
import dataclasses
from typing import Dict, List

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from leantfx.models import features
from leantfx.models.training import budget as budget_lib

_BATCH = 4096


@dataclasses.dataclass
class SplitArrays:
  """Numpy columns of a split's rows, and how they were chosen.

  Attributes:
    arrays: transformed feature name -> [rows] or [rows, k] array (the
      label under features.LABEL_KEY).
    split_rows: rows in the split.
    rows: rows kept (all, or the sample).
  """
  arrays: Dict[str, np.ndarray]
  split_rows: int
  rows: int

  @property
  def sampled(self) -> bool:
    return self.rows < self.split_rows


def _batches(file_pattern: List[str], keep: float, seed: int
            ) -> tf.data.Dataset:
  """Batches of the split's serialized records, each kept with ``keep``.

  The draw is stateless per batch index (one vectorized draw a batch), so
  the sample is the same on every read; only kept records are parsed later.
  """
  files = sorted(f for pattern in file_pattern
                 for f in tf.io.gfile.glob(pattern))
  batches = tf.data.TFRecordDataset(
      files, compression_type='GZIP').batch(_BATCH)
  if keep >= 1.0:
    return batches

  def sample(index, records):
    draw = tf.random.stateless_uniform(
        tf.shape(records), seed=tf.stack([tf.constant(seed, tf.int64), index]))
    return tf.boolean_mask(records, draw < keep)

  return batches.enumerate().map(sample)


def read(file_pattern: List[str],
         tf_transform_output: tft.TFTransformOutput, max_rows: int,
         seed: int) -> SplitArrays:
  """Reads a transformed split; a uniform sample past max_rows rows.

  Args:
    file_pattern: the split's gzipped TFRecord files of tf.Examples
      (fn_args.train_files or eval_files).
    tf_transform_output: the Transform's output (its transformed feature
      spec).
    max_rows: the most rows to keep, about (a Bernoulli sample).
    seed: the sample's seed.

  Returns:
    The rows as numpy columns, label included.
  """
  split_rows = budget_lib.count_records(file_pattern, limit=None)
  keep = 1.0 if split_rows <= max_rows else max_rows / split_rows
  spec = tf_transform_output.transformed_feature_spec()
  batches = _batches(file_pattern, keep, seed).map(
      lambda serialized: tf.io.parse_example(serialized, spec),
      num_parallel_calls=tf.data.AUTOTUNE)
  parts: Dict[str, List[np.ndarray]] = {}
  for batch in batches.as_numpy_iterator():
    for name, values in batch.items():
      parts.setdefault(name, []).append(values)
  arrays = {name: np.concatenate(values) for name, values in parts.items()}
  if features.LABEL_KEY in arrays:
    arrays[features.LABEL_KEY] = arrays[features.LABEL_KEY].reshape(-1)
  rows = int(len(arrays[features.LABEL_KEY])) if arrays else 0
  return SplitArrays(arrays=arrays, split_rows=split_rows, rows=rows)
