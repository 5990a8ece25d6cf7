"""A transformed split as numpy columns, sampled uniformly past a row cap.

The tree family (models/trees.py) trains in memory, and the family choice
(models/model_family.py) scores both families on the same eval rows, so
both read a split here once: every row when the split holds at most
``max_rows``, else a uniform sample of about ``max_rows`` rows (each row
kept with probability max_rows / rows, a fixed seed), so a sorted file does
not hand the trees only its first rows. Rows are counted first (records of
the gzipped TFRecords, models/training/budget.py) to know the probability.
"""
import dataclasses
from typing import Dict, List

import numpy as np
import tensorflow_transform as tft
from tfx import v1 as tfx
from tfx_bsl.public import tfxio

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


def read(file_pattern: List[str],
         data_accessor: tfx.components.DataAccessor,
         tf_transform_output: tft.TFTransformOutput, max_rows: int,
         seed: int) -> SplitArrays:
  """Reads a transformed split; a uniform sample past max_rows rows.

  Args:
    file_pattern: the split's files (fn_args.train_files or eval_files).
    data_accessor: the Trainer's data accessor.
    tf_transform_output: the Transform's output (its transformed schema).
    max_rows: the most rows to keep, about (a Bernoulli sample).
    seed: the sample's seed.

  Returns:
    The rows as numpy columns, label included.
  """
  split_rows = budget_lib.count_records(file_pattern, limit=None)
  keep = 1.0 if split_rows <= max_rows else max_rows / split_rows
  rng = np.random.default_rng(seed)
  dataset = data_accessor.tf_dataset_factory(
      file_pattern,
      tfxio.TensorFlowDatasetOptions(
          batch_size=_BATCH, label_key=features.LABEL_KEY, num_epochs=1,
          shuffle=False),
      tf_transform_output.transformed_metadata.schema)
  parts: Dict[str, List[np.ndarray]] = {}
  for batch, label in dataset.as_numpy_iterator():
    batch = dict(batch, **{features.LABEL_KEY: label})
    size = len(label)
    mask = rng.random(size) < keep if keep < 1.0 else slice(None)
    for name, values in batch.items():
      parts.setdefault(name, []).append(np.asarray(values)[mask])
  arrays = {name: np.concatenate(values) for name, values in parts.items()}
  rows = int(arrays[features.LABEL_KEY].shape[0]) if arrays else 0
  return SplitArrays(arrays=arrays, split_rows=split_rows, rows=rows)
