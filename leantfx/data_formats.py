"""The three input formats: bundled data written in each, and format inference.

* csv: ``span-N/*.csv`` (CsvExampleGen);
* tfrecord: ``span-N/*`` files of serialized tf.Examples, gzip when the name
  ends in .gz (ImportExampleGen);
* images: ``span-N/<class name>/*.png|jpg`` (ImageExampleGen).

``write_tfrecord`` and ``write_images`` turn the bundled rows into the other
two formats so every ingestion path runs end to end on data that ships with
the installed packages.
"""
import io
import os
import re
from typing import Dict, List, Optional, Sequence

from leantfx import config as config_lib
from leantfx.errors import ConfigError

IMAGE_EXTENSIONS = ('.png', '.jpg', '.jpeg')
TFRECORD_HINTS = ('.tfrecord', '.tfrecords', '.tfr', '.gz')
_SPAN_RE = re.compile(r'span-([0-9]+)')
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


def bundled_schema_name(data_format: str) -> str:
  """The schema file name of a bundled dataset in a format."""
  return 'schema_images.pbtxt' if data_format == 'images' else 'schema.pbtxt'


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


def rows_to_examples(rows: List[List[str]]) -> List[bytes]:
  """CSV rows (header first) -> serialized tf.Examples, typed as CsvExampleGen.

  A column is int64 when every non-empty value is an integer, float when
  every one is a number, else bytes; an empty field is an absent feature.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  header, data = rows[0], rows[1:]
  kinds = [_kind([r[i] for r in data]) for i in range(len(header))]
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
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tempfile  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, 'data.tfrecord')
    with tf.io.TFRecordWriter(path) as writer:
      for record in records:
        writer.write(record)
    with open(path, 'rb') as f:
      return f.read()


def write_tfrecord(name: str, rows: List[List[str]], data_root: str,
                   span: int, write) -> str:
  """Writes span-N/<name>.tfrecord; ``write(path, bytes)`` writes atomically."""
  path = os.path.join(data_root, f'span-{span}', f'{name}.tfrecord')
  write(path, tfrecord_bytes(rows_to_examples(rows)))
  return path


def digit_png(pixels: Sequence[int]) -> bytes:
  """An 8x8 grey PNG of 64 pixels in 0..16 scaled to 0..255."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from PIL import Image  # pylint: disable=g-import-not-at-top
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
  span_dir = os.path.join(data_root, f'span-{span}')
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
    names = [n for n in os.listdir(span_dir)
             if not n.startswith('.') and n != '_SUCCESS']
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


def newest_span_dir(data_root: str) -> Optional[str]:
  """The span-N folder with the highest N, without any checks (or None)."""
  try:
    names = os.listdir(data_root)
  except OSError:
    return None
  spans: Dict[int, str] = {}
  for name in names:
    match = _SPAN_RE.fullmatch(name)
    if match and os.path.isdir(os.path.join(data_root, name)):
      spans[int(match.group(1))] = name
  if not spans:
    return None
  return os.path.join(data_root, spans[max(spans)])
