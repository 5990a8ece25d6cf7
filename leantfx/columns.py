"""Column names as users write them, and the feature keys the pipeline uses.

A CSV header can hold any text: ``alcohol (%)``, ``größe``, ``a,b`` (quoted),
``label``, ``Age`` beside ``age``. TensorFlow cannot: SavedModel signature
arguments, Keras inputs, TFLite/ONNX/OpenVINO input names and vocabulary
file names need plain identifiers, and the pipeline's own keys (the
transformed ``<column>_xf`` features, ``label_xf``, ``image_xf``) must not
collide with a column. So every column gets a *feature key*:

* its own name when that is a plain identifier (a letter, then letters,
  digits or ``_``; at most ``MAX_KEY_LENGTH``), not reserved (``label``,
  ``image``, anything ending ``_xf``) and not equal to another column's name
  but for case (two such columns would share vocabulary files on a
  case-insensitive file system);
* otherwise its name folded to such an identifier, plus a short hash of the
  original name, so the key is the same in every span and for every
  entry point (``alcohol (%)`` -> ``alcohol_c1d2e3``).

ExampleGen writes the examples under the keys; everything downstream trains
and exports with them; every push carries the mapping, and the server takes
requests in the original names (serving/feature_names.py). The mapping is a
pure function of the header, so the CLI, ExampleGen and the compiled
Kubeflow pipeline agree on it without passing it around.
"""
import hashlib
import json
import re
import unicodedata
from typing import Dict, Sequence

MAX_KEY_LENGTH = 48
_IDENTIFIER_RE = re.compile(r'[A-Za-z][A-Za-z0-9_]*')
# Names the pipeline uses for its own features (models/features.py): a
# column named so would collide with them once transformed.
RESERVED_NAMES = frozenset({'label', 'image'})
RESERVED_SUFFIX = '_xf'
_HASH_CHARS = 6
# The Examples artifact's record of {feature key: name as written} for the
# columns whose key differs (JSON), set by the CSV ExampleGen.
FEATURE_NAMES_PROPERTY = 'feature_names'


def recorded_names(examples) -> Dict[str, str]:
  """{feature key: name as written} an Examples artifact records.

  Only the columns whose key differs from their name are recorded (by the
  CSV ExampleGen); {} when none is.
  """
  if not examples.has_custom_property(FEATURE_NAMES_PROPERTY):
    return {}
  return json.loads(examples.get_string_custom_property(
      FEATURE_NAMES_PROPERTY))


def is_plain(name: str) -> bool:
  """Whether a name can be a feature key as it is (case collisions aside)."""
  return (bool(_IDENTIFIER_RE.fullmatch(name)) and
          len(name) <= MAX_KEY_LENGTH and
          name.lower() not in RESERVED_NAMES and
          not name.lower().endswith(RESERVED_SUFFIX))


def _folded(name: str) -> str:
  """The name reduced to ASCII letters, digits and single underscores."""
  ascii_text = unicodedata.normalize('NFKD', name).encode('ascii', 'ignore')
  text = re.sub(r'[^A-Za-z0-9]+', '_', ascii_text.decode('ascii'))
  text = text.strip('_').lower()
  if not text or not text[0].isalpha():
    text = 'c_' + text
  return text[:MAX_KEY_LENGTH - _HASH_CHARS - 1].rstrip('_')


def derived_key(name: str) -> str:
  """The key of a name that cannot be its own key: folded text + a hash."""
  digest = hashlib.sha256(name.encode('utf-8')).hexdigest()[:_HASH_CHARS]
  return f'{_folded(name)}_{digest}'


def feature_keys(columns: Sequence[str]) -> Dict[str, str]:
  """{column name as written: feature key} for a header, in header order.

  Args:
    columns: the header's column names, distinct.

  Returns:
    One key per column; keys are distinct plain identifiers.

  Raises:
    ValueError: two columns share a name, or (vanishingly unlikely) two
      derived keys collide; the message names them.
  """
  if len(set(columns)) != len(columns):
    raise ValueError(f'Column names repeat in {list(columns)!r}.')
  lower_counts: Dict[str, int] = {}
  for name in columns:
    lower_counts[name.lower()] = lower_counts.get(name.lower(), 0) + 1
  keys = {}
  for name in columns:
    keep = is_plain(name) and lower_counts[name.lower()] == 1
    keys[name] = name if keep else derived_key(name)
  by_key: Dict[str, str] = {}
  for name, key in keys.items():
    lowered = key.lower()
    if lowered in by_key:
      raise ValueError(
          f'Columns {by_key[lowered]!r} and {name!r} map to the same feature '
          f'key {key!r}; rename one of them.')
    by_key[lowered] = name
  return keys


def renamed(columns: Sequence[str]) -> Dict[str, str]:
  """{key: name as written} of the columns whose key differs from the name."""
  return {key: name for name, key in feature_keys(columns).items()
          if key != name}
