"""A split's tf.Examples as columns: every row, or an even sample of them.

The baselines fit on ExampleGen's own splits, so they see the rows the
Trainer and the Evaluator see. On a large span they read every k-th record
(k = ceil(rows / max_rows)): a sample spread over all the split's files, the
same on every run of the same data.
"""
import dataclasses
import math
from typing import Dict, Mapping, Sequence

import numpy as np
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2

from leantfx.errors import InputDataError

_BATCH = 4096
_DTYPES = {
    schema_pb2.FLOAT: tf.float32,
    schema_pb2.INT: tf.int64,
    schema_pb2.BYTES: tf.string,
}


@dataclasses.dataclass(frozen=True)
class SplitColumns:
  """One split's columns.

  Attributes:
    columns: {feature key: [n] array}: float64 with NaN for a missing
      number, object (str) with '' for a missing string.
    rows: the rows read (n).
    total_rows: the rows the split holds.
  """
  columns: Dict[str, np.ndarray]
  rows: int
  total_rows: int

  @property
  def sampled(self) -> bool:
    return self.rows < self.total_rows


def feature_spec(schema: schema_pb2.Schema,
                 keys: Sequence[str]) -> Dict[str, tf.io.VarLenFeature]:
  """A parsing spec of the keys: VarLen, so that a missing value parses.

  Raises:
    InputDataError: a key is not in the schema.
  """
  types = {f.name: f.type for f in schema.feature}
  absent = [k for k in keys if k not in types]
  if absent:
    raise InputDataError(
        f'The baselines need columns {absent}, which the schema does not '
        f'have (it has {sorted(types)}).')
  return {k: tf.io.VarLenFeature(_DTYPES.get(types[k], tf.string))
          for k in keys}


def count_records(files: Sequence[str]) -> int:
  """The records in gzipped TFRecord files (one graph pass, no parsing)."""
  dataset = tf.data.TFRecordDataset(list(files), compression_type='GZIP')
  return int(dataset.batch(_BATCH * 4).reduce(
      tf.constant(0, tf.int64),
      lambda count, batch: count + tf.shape(batch, out_type=tf.int64)[0]))


def _first_values(sparse: tf.SparseTensor) -> np.ndarray:
  """Each row's first value; NaN or '' where a row has none."""
  missing = '' if sparse.dtype == tf.string else float('nan')
  values = sparse.values
  if sparse.dtype != tf.string:
    values = tf.cast(values, tf.float64)
  dense = tf.sparse.to_dense(
      tf.SparseTensor(sparse.indices, values, sparse.dense_shape),
      default_value=missing)
  if dense.shape[1] == 0:
    rows = int(sparse.dense_shape[0])
    return (np.full(rows, '', dtype=object) if sparse.dtype == tf.string
            else np.full(rows, np.nan))
  first = dense[:, 0].numpy()
  if sparse.dtype == tf.string:
    return np.array([v.decode('utf-8', 'replace') for v in first],
                    dtype=object)
  return first


def read_split(files: Sequence[str], spec: Mapping[str, tf.io.VarLenFeature],
               max_rows: int) -> SplitColumns:
  """Reads a split's columns; every k-th record when it holds more than max_rows.

  Args:
    files: the split's gzipped TFRecord files of tf.Examples.
    spec: feature_spec() of the columns to read.
    max_rows: read at most this many rows.

  Returns:
    The SplitColumns.

  Raises:
    InputDataError: the files cannot be read or hold no record.
  """
  try:
    total = count_records(files)
    if not total:
      raise InputDataError(f'The split files {list(files)} hold no example.')
    stride = max(1, math.ceil(total / max_rows))
    dataset = tf.data.TFRecordDataset(list(files), compression_type='GZIP')
    if stride > 1:
      dataset = dataset.shard(stride, 0)
    dataset = dataset.batch(_BATCH).map(
        lambda batch: tf.io.parse_example(batch, dict(spec)))
    parts: Dict[str, list] = {key: [] for key in spec}
    for batch in dataset:
      for key in spec:
        parts[key].append(_first_values(batch[key]))
  except tf.errors.OpError as e:
    raise InputDataError(f'Cannot read the examples {list(files)}: '
                         f'{e.message}') from None
  columns = {key: np.concatenate(values) for key, values in parts.items()}
  rows = len(next(iter(columns.values()))) if columns else 0
  return SplitColumns(columns=columns, rows=rows, total_rows=total)
