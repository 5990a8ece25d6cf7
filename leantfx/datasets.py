"""The bundled datasets, written as span-organised CSV from installed packages.

Nothing is downloaded: penguins come from the ``palmerpenguins`` package,
digits (8x8 grey images, 0..16) and diabetes (442 patients, ten measurements
and a continuous disease-progression target: a regression) from
scikit-learn's bundled files. ``prepare`` writes
``<data_root>/span-<N>/<name>.csv`` atomically and leaves an identical file
untouched, so re-preparing never invalidates the pipeline's cache.
"""
import csv
import io
import os
import tempfile
from typing import Callable, Dict, List, Sequence

from leantfx import data_formats
from leantfx import spans
from leantfx.config import DatasetSpec
from leantfx.errors import ConfigError

_PENGUIN_NUMERIC = ('bill_length_mm', 'bill_depth_mm', 'flipper_length_mm',
                    'body_mass_g')
_PENGUIN_CATEGORICAL = ('island', 'sex')
_DIGIT_PIXELS = tuple(f'pixel_{i:02d}' for i in range(64))
# scikit-learn's load_diabetes feature names, unscaled values (sex is 1 or 2).
_DIABETES_FEATURES = ('age', 'sex', 'bmi', 'bp', 's1', 's2', 's3', 's4', 's5',
                      's6')

BUNDLED: Dict[str, DatasetSpec] = {
    'penguins':
        DatasetSpec(
            name='penguins',
            label='species',
            classes=('Adelie', 'Chinstrap', 'Gentoo'),
            numeric_features=_PENGUIN_NUMERIC,
            categorical_features=_PENGUIN_CATEGORICAL,
            model='mlp'),
    'digits':
        DatasetSpec(
            name='digits',
            label='digit',
            classes=tuple(str(d) for d in range(10)),
            image_features=_DIGIT_PIXELS,
            image_shape=(8, 8, 1),
            image_max_value=16.0,
            model='cnn'),
    'diabetes':
        DatasetSpec(
            name='diabetes',
            label='target',
            classes=(),
            task='regression',
            numeric_features=_DIABETES_FEATURES,
            model='mlp'),
}
DEFAULT_DATASET = 'digits'


def _penguin_rows() -> List[List[str]]:
  """Rows of palmerpenguins' penguins.csv, 'NA' turned into empty (missing)."""
  # Imported on use, like scikit-learn below: each pulls in pandas or SciPy,
  # and the CLI imports this module for BUNDLED without preparing anything.
  import palmerpenguins  # pylint: disable=g-import-not-at-top
  path = os.path.join(
      os.path.dirname(palmerpenguins.__file__), 'data', 'penguins.csv')
  columns = ('species',) + _PENGUIN_CATEGORICAL[:1] + _PENGUIN_NUMERIC + (
      'sex',)
  with open(path, newline='', encoding='utf-8') as f:
    reader = csv.DictReader(f)
    rows = [list(columns)]
    for record in reader:
      rows.append(
          ['' if record[c] == 'NA' else record[c] for c in columns])
  return rows


def _digit_rows() -> List[List[str]]:
  """Rows of scikit-learn's digits: 64 integer pixels and the digit."""
  # Imported on use, as palmerpenguins above.
  from sklearn import datasets as sk_datasets  # pylint: disable=g-import-not-at-top
  digits = sk_datasets.load_digits()
  rows = [list(_DIGIT_PIXELS) + ['digit']]
  for pixels, target in zip(digits.data, digits.target):
    rows.append([str(int(p)) for p in pixels] + [str(int(target))])
  return rows


def _diabetes_rows() -> List[List[str]]:
  """Rows of scikit-learn's diabetes data: ten features and the target."""
  # Imported on use, as palmerpenguins above.
  from sklearn import datasets as sk_datasets  # pylint: disable=g-import-not-at-top
  diabetes = sk_datasets.load_diabetes(scaled=False)
  rows = [list(_DIABETES_FEATURES) + ['target']]
  for values, target in zip(diabetes.data, diabetes.target):
    # repr keeps every digit of the file; the target stays a float column
    # (151.0), as pandas' to_csv writes it.
    rows.append([repr(float(v)) for v in values] + [repr(float(target))])
  return rows


_ROWS: Dict[str, Callable[[], List[List[str]]]] = {
    'penguins': _penguin_rows,
    'digits': _digit_rows,
    'diabetes': _diabetes_rows,
}


def _to_csv(rows: Sequence[Sequence[str]]) -> bytes:
  buf = io.StringIO()
  csv.writer(buf, lineterminator='\n').writerows(rows)
  return buf.getvalue().encode('utf-8')


def write_atomically(path: str, data: bytes) -> bool:
  """Writes ``data`` to ``path`` via a temporary file and a rename.

  Args:
    path: destination file.
    data: bytes to write.

  Returns:
    False when the file already held exactly these bytes (left untouched),
    True when it was written.
  """
  if os.path.isfile(path):
    with open(path, 'rb') as f:
      if f.read() == data:
        return False
  directory = os.path.dirname(path)
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix='.tmp-')
  try:
    with os.fdopen(fd, 'wb') as f:
      f.write(data)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise
  return True


def prepare(name: str, data_root: str, span: int = 1,
            data_format: str = 'csv') -> str:
  """Writes a bundled dataset as ``<data_root>/span-<span>/<name>.csv``.

  Args:
    name: 'penguins', 'digits' or 'diabetes'.
    data_root: the folder that holds span-<N>/ folders.
    span: span number to write.
    data_format: 'csv', 'tfrecord' (span-N/<name>.tfrecord of tf.Examples)
      or 'images' (digits only: span-N/<digit>/<row>.png).

  Returns:
    The CSV or TFRecord path, or the span folder of the images.

  Raises:
    ConfigError: for an unknown dataset or a span below 1.
  """
  if name not in _ROWS:
    raise ConfigError(
        f'Unknown dataset {name!r}: the bundled datasets are '
        f'{sorted(_ROWS)}. For your own CSV files use --data-root DIR '
        '--label COLUMN.')
  if span < spans.FIRST_SPAN:
    raise ConfigError(
        f'Span numbers start at {spans.FIRST_SPAN}, got {span}.')
  if data_format != 'csv':
    data_formats.bundled_spec(name, data_format, BUNDLED[name])  # Checks it.
    if data_format == 'images':
      return data_formats.write_digit_images(_ROWS[name](), data_root, span,
                                             write_atomically)
    # A class label is text, as the CSV ExampleGen reads it, so both
    # formats validate against the one curated schema.
    spec = BUNDLED[name]
    return data_formats.write_tfrecord(
        name, _ROWS[name](), data_root, span, write_atomically,
        text_columns=() if spec.is_regression else (spec.label,))
  path = os.path.join(spans.span_path(data_root, span), f'{name}.csv')
  write_atomically(path, _to_csv(_ROWS[name]()))
  return path
