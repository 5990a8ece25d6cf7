"""The columns' names as written, carried by every pushed model.

A model is trained and exported under feature keys (leantfx/columns.py): the
SavedModel's ``serving_default``, the TFLite signature, the OpenVINO and
ONNX inputs all take the keys, which TensorFlow and the runtimes accept.
Each pushed version carries ``feature_names.json``, ``{"format": 1,
"inputs": {name as written: key}}`` over every raw input column, and
``leantfx serve`` takes requests in the names as written
(serving/feature_names.py reads the file):

* a SavedModel keeps it in ``assets.extra/`` (TF Serving loads nothing from
  there but warm-up requests, and copies of the model keep it);
* TFLite, OpenVINO and ONNX versions keep it beside the model file.
"""
import json
import os
from typing import Dict, Mapping

FILE_NAME = 'feature_names.json'
SAVED_MODEL_DIR = 'assets.extra'
FORMAT = 1


def document(inputs: Mapping[str, str]) -> Dict[str, object]:
  """The file's content for {name as written: feature key}.

  Raises:
    ValueError: a name or key that is no string, or a key used twice.
  """
  if not all(isinstance(k, str) and isinstance(v, str)
             for k, v in inputs.items()):
    raise ValueError(f'feature names must map strings to strings, got '
                     f'{dict(inputs)!r}.')
  if len(set(inputs.values())) != len(inputs):
    raise ValueError(f'feature keys repeat in {dict(inputs)!r}.')
  return {'format': FORMAT, 'inputs': dict(sorted(inputs.items()))}


def write(folder: str, inputs: Mapping[str, str]) -> str:
  """Writes FILE_NAME into ``folder`` (created if missing); returns its path."""
  # Lazy: gfile writes to any filesystem a push goes to (gs://, s3://).
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.io.gfile.makedirs(folder)
  path = os.path.join(folder, FILE_NAME)
  with tf.io.gfile.GFile(path, 'w') as f:
    f.write(json.dumps(document(inputs), ensure_ascii=False, indent=1))
  return path


def write_for_saved_model(saved_model_dir: str,
                          inputs: Mapping[str, str]) -> str:
  """Writes the file into a SavedModel's assets.extra/."""
  return write(os.path.join(saved_model_dir, SAVED_MODEL_DIR), inputs)
