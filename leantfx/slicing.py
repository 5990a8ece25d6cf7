"""Slices: the columns ``--slice-by`` names, resolved against the data.

``--slice-by COLUMN`` (repeatable) reports and gates the model on every value
of COLUMN; ``--slice-by a,b`` on every pair of values of a and b (a cross).
Users name columns as they wrote them; the Evaluator slices the raw Examples
ExampleGen wrote, which hold each column under its feature key
(leantfx/columns.py), so each name is resolved to its key here, once, for
the Evaluator's TFMA slicing specs and the ModelOptimizer's per-slice gate
alike.

A slice column must be a feature column of the data (not the label, not an
image), and a numeric column must hold few distinct values: slicing on a
continuous column makes a slice per value, each too small to judge. The
values are counted in the span the command reads (``run``: the data root;
``compile``: the sample data; CSV or TFRecord), before anything runs.
"""
from typing import Iterable, List, Mapping, Optional, Sequence, Tuple

from leantfx import config as config_lib
from leantfx.errors import ConfigError

# A numeric slice column may hold at most this many distinct values in the
# span: more and it is a measurement, not a group (penguins' island has 3,
# a year column a handful; a float column hundreds).
MAX_NUMERIC_SLICE_VALUES = 50
# How a slicing spec and a slice are written in reports: island, island,sex;
# island=Biscoe, island=Biscoe,sex=MALE.
SPEC_SEPARATOR = ','


def parse_flags(values: Iterable[str],
                columns: Optional[Sequence[str]] = None
               ) -> Tuple[Tuple[str, ...], ...]:
  """--slice-by values as slicing specs of column names as written.

  A value that is a column name as it stands is one column (a header may
  hold a comma: "a,b" quoted); otherwise it is split at its commas into a
  cross of columns.

  Args:
    values: the --slice-by values, in order.
    columns: the data's column names as written, when known.

  Raises:
    ConfigError: an empty name, a column twice in a cross, or a spec twice.
  """
  specs = []
  for value in values:
    if columns is not None and value in columns:
      spec = (value,)
    else:
      spec = tuple(part.strip() for part in value.split(SPEC_SEPARATOR))
    if not all(spec):
      raise ConfigError(
          f'--slice-by {value!r} has an empty column name: give COLUMN, or '
          'COLUMN,COLUMN for a cross of two columns.')
    specs.append(spec)
  try:
    return config_lib.check_slices(specs)
  except ConfigError as e:
    raise ConfigError(f'--slice-by: {e}') from e


def resolve(values: Iterable[str], spec: config_lib.DatasetSpec
           ) -> Tuple[Tuple[str, ...], ...]:
  """--slice-by values as slicing specs of feature keys of the raw Examples.

  Raises:
    ConfigError: a name that is no feature column of the data (the label
      and image columns included), naming the columns it could be.
  """
  by_name = {spec.original_name(k): k for k in spec.feature_columns}
  images = set(spec.image_features) | ({spec.image_key} - {None})
  label = spec.original_name(spec.label)
  sliceable = sorted(spec.original_name(k) for k in
                     spec.numeric_features + spec.categorical_features)
  result = []
  for names in parse_flags(values, list(by_name) + [label]):
    keys = []
    for name in names:
      if name == label:
        raise ConfigError(
            f'--slice-by {name!r} is the label: every slice of it holds one '
            'class (or one target value), so accuracy per slice is recall '
            'per class. Slice by a feature column: one of '
            f'{_listed(sliceable)}.')
      if name not in by_name or by_name[name] in images:
        raise ConfigError(
            f'--slice-by {name!r} is not a column of {spec.name!r}. Slice '
            f'by a feature column, as written in the data: one of '
            f'{_listed(sliceable)}.')
      keys.append(by_name[name])
    result.append(tuple(keys))
  return tuple(result)


def _listed(names: Sequence[str], most: int = 20) -> str:
  shown = ', '.join(repr(n) for n in names[:most])
  return shown + (f' (and {len(names) - most} more)' if len(names) > most
                  else '')


def check_numeric_values(slices: Sequence[Sequence[str]],
                         spec: config_lib.DatasetSpec,
                         distinct: Mapping[str, int]) -> None:
  """Refuses a numeric slice column with too many distinct values.

  Args:
    slices: slicing specs of feature keys (resolve).
    spec: the dataset.
    distinct: {feature key: distinct values counted in the span}, for the
      numeric slice columns (counting stops past
      MAX_NUMERIC_SLICE_VALUES).

  Raises:
    ConfigError: naming the column and its count.
  """
  for key in sorted({k for s in slices for k in s}):
    if key in spec.numeric_features and (
        distinct.get(key, 0) > MAX_NUMERIC_SLICE_VALUES):
      raise ConfigError(
          f'--slice-by {spec.original_name(key)!r} is a numeric column with '
          f'more than {MAX_NUMERIC_SLICE_VALUES} distinct values in the '
          'span: each value would be its own slice, too small to judge. '
          'Slice by a column of a few groups (a category, a year), or add '
          'such a column (e.g. ranges of this one) to the data.')


def count_csv_values(files: Sequence[str], header: Sequence[str],
                     columns: Sequence[str],
                     most: int = MAX_NUMERIC_SLICE_VALUES) -> dict:
  """{column: distinct non-empty values} in CSV files, stopping past most.

  Args:
    files: the span's CSV files.
    header: their header (column names as written).
    columns: the columns to count, as written.
    most: once a column has more than this many values it is not counted
      further (the answer is "too many").
  """
  # Lazy: pyarrow is only needed when a numeric column is sliced.
  from leantfx import csv_format  # pylint: disable=g-import-not-at-top
  seen = {c: set() for c in columns}
  for path in files:
    for batch in csv_format.batches(path, header):
      for column in columns:
        values = seen[column]
        if len(values) > most:
          continue
        values.update(v for v in batch.column(header.index(column))
                      .to_pylist() if v is not None)
      if all(len(v) > most for v in seen.values()):
        return {c: len(v) for c, v in seen.items()}
  return {c: len(v) for c, v in seen.items()}


def count_tfrecord_values(files: Sequence[str], columns: Sequence[str],
                          most: int = MAX_NUMERIC_SLICE_VALUES) -> dict:
  """{feature: distinct values} in TFRecord files of tf.Examples, stopping
  past most (as count_csv_values). A file ending .gz is read as gzip."""
  # Lazy: TensorFlow is only needed when a TFRecord span is sliced by a
  # numeric feature.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  seen = {c: set() for c in columns}
  for path in files:
    compression = 'GZIP' if path.endswith('.gz') else ''
    for record in tf.data.TFRecordDataset(
        path, compression_type=compression).as_numpy_iterator():
      feature = tf.train.Example.FromString(record).features.feature
      for column in columns:
        if column in feature and len(seen[column]) <= most:
          values = feature[column]
          seen[column].update(values.float_list.value or
                              values.int64_list.value)
      if all(len(v) > most for v in seen.values()):
        return {c: len(v) for c, v in seen.items()}
  return {c: len(v) for c, v in seen.items()}


def spec_name(columns: Sequence[str]) -> str:
  """A slicing spec as reports write it: island, or island,sex."""
  return SPEC_SEPARATOR.join(columns)


def slice_name(columns: Sequence[str], values: Sequence[str]) -> str:
  """A slice as reports write it: island=Biscoe, or island=Biscoe,sex=MALE."""
  return SPEC_SEPARATOR.join(f'{c}={v}' for c, v in zip(columns, values))


def names_as_written(slices: Sequence[Sequence[str]],
                     spec: config_lib.DatasetSpec) -> List[Tuple[str, ...]]:
  """Slicing specs of feature keys back in the names as written."""
  return [tuple(spec.original_name(k) for k in s) for s in slices]
