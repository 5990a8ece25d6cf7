"""The three input formats: bundled data written in each, and format inference.

* csv: ``span-N/*.csv`` (CsvExampleGen);
* tfrecord: ``span-N/*`` files of serialized tf.Examples, gzip when the name
  ends in .gz (ImportExampleGen);
* images: ``span-N/<class name>/*.png|jpg`` (ImageExampleGen).

The span layout itself (folder names, marker, ExampleGen patterns) is
leantfx/spans.py.

``write_tfrecord`` and ``write_digit_images`` turn the bundled rows into the
other two formats so every ingestion path runs end to end on data that ships
with the installed packages.
"""
import io
import os
import tempfile
from typing import List, Optional, Sequence

import numpy as np
from PIL import Image

from leantfx import config as config_lib
from leantfx import spans
from leantfx.errors import ConfigError

IMAGE_EXTENSIONS = ('.png', '.jpg', '.jpeg')
TFRECORD_HINTS = ('.tfrecord', '.tfrecords', '.tfr', '.gz')
# Digits pixels are 0..16 (scikit-learn); PNGs hold 0..255.
_DIGIT_MAX = 16
IMAGE_FEATURE = 'image'

# The digits as images: one encoded 8x8 grey PNG per example; a model name of
# its own, because its raw inputs (PNG bytes) differ from the pixel columns'.
DIGITS_IMAGES = config_lib.DatasetSpec(
    name='digits-images',
    label='digit',
    classes=tuple(str(d) for d in range(10)),
    image_key=IMAGE_FEATURE,
    image_shape=(8, 8, 1),
    image_max_value=255.0,
    model='cnn')


def bundled_spec(name: str, data_format: str,
                 csv_spec: config_lib.DatasetSpec) -> config_lib.DatasetSpec:
  """The DatasetSpec of a bundled dataset in a format.

  Raises:
    ConfigError: for images of a dataset that has none.
  """
  if data_format != 'images':
    return csv_spec
  if name != 'digits':
    raise ConfigError(
        f'The bundled {name!r} dataset has no images; --format images works '
        'with --dataset digits or with your own image folders '
        '(--data-root DIR with DIR/span-1/<class name>/*.png).')
  return DIGITS_IMAGES


def _kind(values: Sequence[str]) -> str:
  present = [v for v in values if v != '']
  try:
    for v in present:
      int(v)
    return 'int'
  except ValueError:
    pass
  try:
    for v in present:
      float(v)
    return 'float'
  except ValueError:
    return 'bytes'


def rows_to_examples(rows: List[List[str]],
                     text_columns: Sequence[str] = ()) -> List[bytes]:
  """CSV rows (header first) -> serialized tf.Examples, typed as ExampleGen.

  A column is int64 when every non-empty value is an integer, float when
  every one is a number, else bytes, as leantfx's CSV ExampleGen types it;
  ``text_columns`` (a class label) are bytes as written whatever they
  hold. An empty field is an absent feature.
  """
  # TensorFlow is imported on use: the CLI imports this module to infer
  # formats and check options, and must start without loading TensorFlow.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  header, data = rows[0], rows[1:]
  kinds = [
      'bytes' if name in text_columns else _kind([r[i] for r in data])
      for i, name in enumerate(header)
  ]
  out = []
  for row in data:
    example = tf.train.Example()
    for name, kind, value in zip(header, kinds, row):
      if value == '':
        continue
      feature = example.features.feature[name]
      if kind == 'int':
        feature.int64_list.value.append(int(value))
      elif kind == 'float':
        feature.float_list.value.append(float(value))
      else:
        feature.bytes_list.value.append(value.encode('utf-8'))
    out.append(example.SerializeToString(deterministic=True))
  return out


def tfrecord_bytes(records: Sequence[bytes]) -> bytes:
  """The bytes of an uncompressed TFRecord file holding records."""
  # Lazy, as in rows_to_examples: the CLI must start without TensorFlow.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, 'data.tfrecord')
    with tf.io.TFRecordWriter(path) as writer:
      for record in records:
        writer.write(record)
    with open(path, 'rb') as f:
      return f.read()


def write_tfrecord(name: str, rows: List[List[str]], data_root: str,
                   span: int, write, text_columns: Sequence[str] = ()) -> str:
  """Writes span-N/<name>.tfrecord; ``write(path, bytes)`` writes atomically.

  ``text_columns`` are written as text (rows_to_examples).
  """
  path = os.path.join(spans.span_path(data_root, span), f'{name}.tfrecord')
  write(path, tfrecord_bytes(rows_to_examples(rows, text_columns)))
  return path


def digit_png(pixels: Sequence[int]) -> bytes:
  """An 8x8 grey PNG of 64 pixels in 0..16 scaled to 0..255."""
  array = np.asarray(pixels, dtype=np.float64).reshape(8, 8)
  scaled = np.round(array * 255.0 / _DIGIT_MAX).astype(np.uint8)
  buf = io.BytesIO()
  Image.fromarray(scaled, mode='L').save(buf, format='PNG')
  return buf.getvalue()


def write_digit_images(rows: List[List[str]], data_root: str, span: int,
                       write) -> str:
  """Writes span-N/<digit>/<row:04d>.png for the digits rows; returns the span dir."""
  header, data = rows[0], rows[1:]
  label_index = header.index('digit')
  span_dir = spans.span_path(data_root, span)
  for number, row in enumerate(data):
    pixels = [int(v) for i, v in enumerate(row) if i != label_index]
    write(os.path.join(span_dir, row[label_index], f'{number:04d}.png'),
          digit_png(pixels))
  return span_dir


def infer_format(span_dir: str) -> Optional[str]:
  """Guesses the format of one span folder; None when it is ambiguous.

  csv: every data file ends in .csv; images: only class folders; tfrecord:
  every data file has a TFRecord-like name (.tfrecord, .tfr, .gz, ...).
  """
  try:
    names = [n for n in os.listdir(span_dir) if spans.is_data_entry(n)]
  except OSError:
    return None
  if not names:
    return None
  folders = [n for n in names if os.path.isdir(os.path.join(span_dir, n))]
  files = [n for n in names if n not in folders]
  if folders and not files:
    return 'images'
  if files and not folders:
    lower = [n.lower() for n in files]
    if all(n.endswith('.csv') for n in lower):
      return 'csv'
    if all(any(h in n for h in TFRECORD_HINTS) for n in lower):
      return 'tfrecord'
  return None


# The span layout lives in leantfx/spans.py; this name stays for the importers
# that still reach it here (cli/options_data.py).
newest_span_dir = spans.newest_span_dir
