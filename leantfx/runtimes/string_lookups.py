"""Vocabularies beside a model whose runtime runs no lookup table.

A raw-feature export takes each vocabulary column as a string, and the
Transform's vocabulary maps it to an id inside the graph (a constant hash
table: leantfx/raw_serving.vocabulary_table). A runtime that runs no such
table (OpenVINO: its Exporter's ``lookups_outside``) takes the ids instead,
and the export writes the vocabularies beside its model file
(``STRING_LOOKUPS_FILE``, in the Runtime's ``optional_files``, pushed and
hashed with it). Whoever calls such a model maps a request's strings to ids
with ``read_string_lookups``' ``StringLookup``s first: the runtime's
predictor (its ``lookups``) and its serving session.

TensorFlow (``tf.io.gfile``, for object-store folders) is imported inside
the functions that read and write the file, not with the module.
"""
import json
import os
from typing import Any, Dict, Mapping, Sequence

import numpy as np

# {column: [term, ...]} in vocabulary-file order.
STRING_LOOKUPS_FILE = 'string_lookups.json'


class StringLookup:
  """raw_serving.vocabulary_table's mapping in numpy, for a runtime without
  hash tables.

  A term's id is its position in the vocabulary; every other value (unseen,
  '' for missing) takes the one OOV id, ``len(vocabulary)``: exactly the
  ids the table (and so the Transform) gives.
  """

  def __init__(self, vocabulary: Sequence[Any]):
    terms = [t if isinstance(t, bytes) else str(t).encode('utf-8')
             for t in vocabulary]
    self.oov_id = len(terms)
    self._ids = {t: i for i, t in reversed(list(enumerate(terms)))}
    # str keys too: ONNX- and JSON-shaped requests carry str, not bytes.
    self._ids.update({t.decode('utf-8', 'replace'): i
                      for t, i in list(self._ids.items())})

  def __call__(self, values) -> np.ndarray:
    """int64 ids of a [batch] array of strings (bytes or str)."""
    values = np.asarray(values)
    get, oov = self._ids.get, self.oov_id
    return np.fromiter((get(v, oov) for v in values.ravel()), dtype=np.int64,
                       count=values.size).reshape(values.shape)


def write_string_lookups(folder: str,
                         vocabularies: Mapping[str, Sequence[Any]]) -> str:
  """Writes STRING_LOOKUPS_FILE into ``folder``; returns its path."""
  path = os.path.join(folder, STRING_LOOKUPS_FILE)
  as_text = {
      column: [t.decode('utf-8') if isinstance(t, bytes) else str(t)
               for t in terms]
      for column, terms in vocabularies.items()
  }
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tf.io.gfile.GFile(path, 'w') as f:
    f.write(json.dumps(as_text, indent=1, sort_keys=True))
  return path


def read_string_lookups(folder: str) -> Dict[str, StringLookup]:
  """{column: StringLookup} from ``folder``'s STRING_LOOKUPS_FILE; {} if none.

  Raises:
    ValueError: the file is not {column: [term, ...]}.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  path = os.path.join(folder, STRING_LOOKUPS_FILE)
  if not tf.io.gfile.exists(path):
    return {}
  with tf.io.gfile.GFile(path, 'r') as f:
    try:
      vocabularies = json.loads(f.read())
    except json.JSONDecodeError as e:
      raise ValueError(f'{path} is not JSON: {e}') from e
  if not isinstance(vocabularies, dict) or not all(
      isinstance(v, list) for v in vocabularies.values()):
    raise ValueError(f'{path} must map each column to its list of terms.')
  return {column: StringLookup(terms)
          for column, terms in vocabularies.items()}
