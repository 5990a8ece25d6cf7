"""Curated TFDV schemas, one folder per bundled dataset.

``schemas/<dataset>/schema.pbtxt`` describes the dataset's CSV (and TFRecord)
columns; ``schema_images.pbtxt`` beside it, when present, describes the same
dataset read as images (an encoded image and the label).
"""
import os
from typing import Optional

SCHEMAS_DIR = os.path.dirname(os.path.abspath(__file__))
_SCHEMA_FILE = 'schema.pbtxt'
_IMAGES_SCHEMA_FILE = 'schema_images.pbtxt'


def bundled_schema(dataset: str, data_format: str = 'csv') -> Optional[str]:
  """The curated schema of a bundled dataset in a data format, if there is one.

  Args:
    dataset: the bundled dataset's name, e.g. 'penguins'.
    data_format: 'csv', 'tfrecord' (both read the schema.pbtxt) or 'images'
      (schema_images.pbtxt).

  Returns:
    The absolute path of the schema file, or None when this dataset has no
    curated schema for the format.
  """
  name = _IMAGES_SCHEMA_FILE if data_format == 'images' else _SCHEMA_FILE
  path = os.path.join(SCHEMAS_DIR, dataset, name)
  return path if os.path.isfile(path) else None
