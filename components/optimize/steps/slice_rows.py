"""Eval rows that know their slice: the per-slice gate's input.

The per-slice gate (selection.SliceGate) needs each scored eval row's slice,
which is a raw column (``island``), while the variants score transformed
rows (``island_xf``, a vocabulary id). Pairing the Transform's output with
the raw Examples row by row would trust that both were written in the same
order, which holds on the DirectRunner only. So with slices, the rows scored
are the raw eval Examples put through the run's transform graph here (the
graph the Transform ran, analyzer results included): each row's transformed
features and its slice come from the same record.
"""
import math
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence

import numpy as np
import tensorflow as tf

from leantfx import slicing
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.evaluation import selection
from leantfx.errors import InputDataError


class SlicedEval(NamedTuple):
  """Transformed eval rows and their slices.

  Attributes:
    data: the rows as the model takes them, with their labels.
    slices: {slicing spec name ('island', 'island,sex'): each row's slice
      name ('island=Biscoe'), None where a slice column is missing}.
  """
  data: measure.LabeledData
  slices: Dict[str, np.ndarray]


def _text(value: Any) -> Optional[str]:
  """A raw column value as a slice name writes it (None: missing)."""
  if isinstance(value, bytes):
    return value.decode('utf-8', errors='replace')
  value = float(value)
  if math.isnan(value):
    return None
  return str(int(value)) if value.is_integer() else repr(value)


def _column(parsed, column: str) -> List[Optional[str]]:
  value = parsed[column]
  if isinstance(value, tf.SparseTensor):
    rows = int(value.dense_shape[0])
    texts: List[Optional[str]] = [None] * rows
    for (row, _), item in zip(value.indices.numpy(), value.values.numpy()):
      if texts[row] is None:
        texts[row] = _text(item)
    return texts
  flat = tf.reshape(value, [tf.shape(value)[0], -1]).numpy()
  return [_text(row[0]) if row.size else None for row in flat]


def read_sliced_eval(files: Sequence[str], tf_transform_output,
                     feature_spec: Mapping[str, Any], label_key: str,
                     slice_gate: selection.SliceGate, limit: int,
                     batch_size: int = 256) -> SlicedEval:
  """Reads raw eval Examples, transformed, with each row's slices.

  Args:
    files: gzipped TFRecords of the raw eval split (the Examples the
      Transform read).
    tf_transform_output: the run's ``tft.TFTransformOutput``.
    feature_spec: the transformed features to keep (the model's inputs and
      the label, as inputs.transformed_feature_spec gives them): each is
      shaped and typed as parsing the Transform's output would give it.
    label_key: the transformed label.
    slice_gate: the slicing specs (feature keys) and their names.
    limit: read at most this many rows.
    batch_size: records transformed at a time.

  Returns:
    The SlicedEval.

  Raises:
    InputDataError: a slice column the raw schema lacks, unreadable files,
      or no rows.
  """
  raw_spec = tf_transform_output.raw_feature_spec()
  columns = sorted({c for spec in slice_gate.columns for c in spec})
  missing = [c for c in columns if c not in raw_spec]
  if missing:
    raise InputDataError(
        f'The slice column(s) {missing} are not in the raw schema the '
        f'Transform read ({sorted(raw_spec)}): --slice-by names columns of '
        'the data as ExampleGen wrote them.')
  parts: Dict[str, List[np.ndarray]] = {n: [] for n in feature_spec}
  raw_columns: Dict[str, List[Optional[str]]] = {c: [] for c in columns}
  dataset = tf.data.TFRecordDataset(list(files), compression_type='GZIP')
  try:
    for serialized in dataset.take(limit).batch(batch_size):
      parsed = tf.io.parse_example(serialized, raw_spec)
      transformed = tf_transform_output.transform_raw_features(
          dict(parsed), drop_unused_features=True)
      rows = int(tf.shape(serialized)[0])
      for name, feature in feature_spec.items():
        value = np.asarray(transformed[name])
        parts[name].append(value.reshape(
            (rows,) + tuple(feature.shape)).astype(feature.dtype.as_numpy_dtype))
      for column in columns:
        raw_columns[column].extend(_column(parsed, column))
  except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
    raise InputDataError(
        f'Cannot read raw eval examples from {list(files)[:3]}: '
        f'{e.message.splitlines()[0]}. They must be the gzipped TFRecords '
        'the Transform read, matching its raw schema.') from e
  if not parts[label_key]:
    raise InputDataError(f'{list(files)[:3]} hold no raw eval examples.')
  values = {n: np.concatenate(v) for n, v in parts.items()}
  labels = values.pop(label_key).reshape(-1)
  slices = {}
  for keys, names in zip(slice_gate.columns, slice_gate.names):
    slices[slicing.spec_name(names)] = np.asarray([
        None if any(v is None for v in row) else slicing.slice_name(names,
                                                                    row)
        for row in zip(*(raw_columns[k] for k in keys))], dtype=object)
  return SlicedEval(measure.LabeledData(values, labels), slices)
