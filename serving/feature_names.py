"""``feature_names.json``: a pushed version's map from column names to model inputs.

A CSV column can be named anything (``alcohol (%)``, ``größe``, ``a,b``), but
SavedModel signatures, TFLite, ONNX and OpenVINO take plain identifiers only,
so the pipeline trains and exports each column under a safe key
(``alcohol_a1b2c3``; a column already named by a plain identifier keeps its
name). Every version it pushes carries the map, and ``leantfx serve`` takes
requests, and shows its signature metadata, in the original names
(:mod:`renamed_inputs`).

The contract, written by the pipeline and read by the server::

  {"format": 1, "inputs": {"<original name>": "<model input key>", ...}}

listing every raw input column of the version's ``serving_default`` (original
== key for the columns not renamed). A SavedModel version keeps it in
``<version>/assets.extra/`` (beside TF Serving's warm-up file, so it is not
mistaken for part of the SavedModel); a TFLite, OpenVINO or ONNX version
directly in ``<version>/``. The reader checks both places for any runtime.

The file's name, place and format, and the writing, are the pipeline's
(``leantfx/feature_names.py``, the layer below both); this module is the
server's reading side, with the checks a file from any source must pass, and
a writer that refuses what the reader would.
"""
import json
import os
from typing import Dict, List, Mapping, Optional, Tuple

from leantfx import feature_names as contract

FEATURE_NAMES_FILE = contract.FILE_NAME
# Where a SavedModel version keeps it, relative to the version directory.
SAVED_MODEL_FOLDER = contract.SAVED_MODEL_DIR
FORMAT = contract.FORMAT
_FORMAT_FIELD = 'format'
_INPUTS_FIELD = 'inputs'


class FeatureNamesError(ValueError):
  """A feature_names.json is malformed; the message names the file."""


def locations(version_dir: str) -> Tuple[str, str]:
  """The two places a version's feature_names.json may be, in lookup order.

  Args:
    version_dir: a pushed version directory (``<base>/<model>/<version>``).

  Returns:
    (``<version>/assets.extra/feature_names.json``,
    ``<version>/feature_names.json``).
  """
  return (os.path.join(version_dir, SAVED_MODEL_FOLDER, FEATURE_NAMES_FILE),
          os.path.join(version_dir, FEATURE_NAMES_FILE))


def validate_mapping(mapping: object, where: str) -> Dict[str, str]:
  """Checks an ``inputs`` map: str -> non-empty str, model keys distinct.

  Args:
    mapping: the value to check (original name -> model input key).
    where: what holds it, for the message (a file path, or 'the mapping').

  Returns:
    A plain dict copy, in the given order.

  Raises:
    FeatureNamesError: not an object of strings, an empty model key, or two
      names mapped to one key; the message names `where` and the entries.
  """
  if not isinstance(mapping, Mapping):
    raise FeatureNamesError(
        f'{where}: "{_INPUTS_FIELD}" must be an object of original column '
        f'name -> model input key, not {type(mapping).__name__}.')
  result: Dict[str, str] = {}
  by_key: Dict[str, str] = {}
  for name, key in mapping.items():
    if not isinstance(name, str) or not isinstance(key, str):
      raise FeatureNamesError(
          f'{where}: the entry {name!r}: {key!r} is not a string -> string '
          'pair.')
    if not key:
      raise FeatureNamesError(
          f'{where}: column {name!r} maps to an empty model input key.')
    if key in by_key:
      raise FeatureNamesError(
          f'{where}: columns {by_key[key]!r} and {name!r} both map to the '
          f'model input {key!r}; each input belongs to one column.')
    by_key[key] = name
    result[name] = key
  if not result:
    raise FeatureNamesError(f'{where}: "{_INPUTS_FIELD}" lists no columns.')
  return result


def _object_without_repeats(pairs: List[Tuple[str, object]]) -> Dict:
  """json's object hook: a repeated name is an error, not 'last one wins'."""
  result = {}
  for name, value in pairs:
    if name in result:
      raise FeatureNamesError(f'the name {name!r} appears twice in one object')
    result[name] = value
  return result


def parse_feature_names(text: str, where: str) -> Dict[str, str]:
  """Parses and checks the content of a feature_names.json.

  Args:
    text: the file's text.
    where: its path, for messages.

  Returns:
    original column name -> model input key, in the file's order.

  Raises:
    FeatureNamesError: not JSON, not an object, another format, unknown or
      missing fields, or an invalid ``inputs`` map (:func:`validate_mapping`).
  """
  try:
    doc = json.loads(text, object_pairs_hook=_object_without_repeats)
  except FeatureNamesError as e:
    raise FeatureNamesError(f'{where} is invalid: {e}.') from None
  except ValueError as e:
    raise FeatureNamesError(f'{where} is not valid JSON: {e}.') from None
  if not isinstance(doc, dict):
    raise FeatureNamesError(
        f'{where} must hold a JSON object {{"{_FORMAT_FIELD}": {FORMAT}, '
        f'"{_INPUTS_FIELD}": {{...}}}}, not {type(doc).__name__}.')
  unknown = sorted(set(doc) - {_FORMAT_FIELD, _INPUTS_FIELD})
  if unknown:
    raise FeatureNamesError(
        f'{where} has unknown fields {unknown}; format {FORMAT} has only '
        f'"{_FORMAT_FIELD}" and "{_INPUTS_FIELD}".')
  version = doc.get(_FORMAT_FIELD)
  # bool is an int in Python: `true` is not format 1.
  if type(version) is not int or version != FORMAT:  # pylint: disable=unidiomatic-typecheck
    raise FeatureNamesError(
        f'{where} has "{_FORMAT_FIELD}": {json.dumps(version)}; this server '
        f'reads format {FORMAT}. Push the version with a matching leantfx.')
  if _INPUTS_FIELD not in doc:
    raise FeatureNamesError(f'{where} has no "{_INPUTS_FIELD}" object.')
  return validate_mapping(doc[_INPUTS_FIELD], where)


def read_feature_names(version_dir: str) -> Optional[Dict[str, str]]:
  """Reads a version's feature_names.json, from either of its places.

  Args:
    version_dir: a pushed version directory.

  Returns:
    original column name -> model input key, or None when the version has
    no feature_names.json (its inputs are served by their own names).

  Raises:
    FeatureNamesError: a file is unreadable or malformed, or both places
      hold one and they differ; the message names the file(s).
  """
  found = []
  for path in locations(version_dir):
    if not os.path.isfile(path):
      continue
    try:
      with open(path, encoding='utf-8') as f:
        text = f.read()
    except (OSError, UnicodeDecodeError) as e:
      raise FeatureNamesError(f'Cannot read {path}: {e}.') from None
    found.append((path, parse_feature_names(text, path)))
  if not found:
    return None
  if len(found) == 2 and found[0][1] != found[1][1]:
    raise FeatureNamesError(
        f'{found[0][0]} and {found[1][0]} map the columns differently; a '
        'version carries one mapping: remove one of them.')
  return found[0][1]


def write_feature_names(folder: str, mapping: Mapping[str, str]) -> str:
  """Writes ``<folder>/feature_names.json`` (format 1).

  The folder is ``<version>/assets.extra`` for a SavedModel version
  (:data:`SAVED_MODEL_FOLDER`) and the version directory itself for a
  TFLite, OpenVINO or ONNX one; it is created when missing. The mapping is
  checked with the reader's rules first, then written by the pipeline's
  writer (``leantfx.feature_names.write``), so there is one file format.

  Args:
    folder: where the file goes (any filesystem ``tf.io.gfile`` writes).
    mapping: original column name -> model input key, for every raw input
      column of the model's ``serving_default`` (original == key for the
      columns not renamed).

  Returns:
    The path written.

  Raises:
    FeatureNamesError: the mapping is not str -> non-empty str with
      distinct keys (:func:`validate_mapping`).
  """
  return contract.write(folder, validate_mapping(mapping, 'the mapping'))
