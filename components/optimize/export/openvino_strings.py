"""Free text and dates in string ops OpenVINO converts (openvino-tokenizers).

The Transform preprocesses a text (models/text_features.py) and a date
(models/date_features.py) with TensorFlow string kernels. openvino-tokenizers
2026.4.1.0 gives OpenVINO's TensorFlow frontend StringLower, StaticRegexReplace,
StringSplitV2, AsString and string-keyed LookupTableFindV2 (a VocabEncoder),
but no StringJoin and no StringToNumber, and the CPU plugin compares no
strings (NotEqual, Select on strings fail; a string RaggedTensorToTensor
converts to a Pad whose string output aborts the process when the compiled
model is freed). This module builds the same features from what converts:

Text (``TextLookups``): normalize and split as the Transform does
  (text_features.normalize, split on ' '), look each word up in a table of
  the words the vocabulary's terms are made of, then pad the int64 ids to
  MAX_WORDS. A word pair is not joined: its id is looked up by the decimal
  string (AsString) of ``left word index * words + right word index``. The
  ids go through text_features.tfidf_from_ids, the Transform's own TF-IDF.
Dates (``DateLookups``): the Transform's calendar (date_features.calendar)
  with its string tests answered by lookups: a field's digits by a table of
  every 1-, 2- and 4-digit string, '' and '-' by one-key tables. The
  z-scores' means and standard deviations are the Transform's, read back
  from its layer on two probe dates (``date_scales``).

Lowercasing is OpenVINO's CaseFold (a sentencepiece lower-case map), not
ICU's (``normalize``): the letters CaseFold folds and ICU keeps (the final
'ς', 'µ', 'ſ', Greek symbol letters) cross it in private-use placeholders,
and a word-final capital 'Σ' becomes 'ς' as ICU makes it. What still
differs, 205 code points of the Basic Multilingual Plane, is listed in
tests/optimize/test_openvino_strings.py: NUL, 'İ', U+0345, Cherokee, old
Cyrillic variants, and letters newer than TensorFlow's RE2 tables.
"""
import datetime
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np
import tensorflow as tf

from leantfx import column_roles
from leantfx import raw_serving
from leantfx.errors import ConfigError
from leantfx.models import date_features
from leantfx.models import features
from leantfx.models import text_features

# Lowercase letters TensorFlow's lower (ICU) keeps and OpenVINO's CaseFold
# folds to another letter (the final sigma to 'σ', the micro sign to 'μ',
# the long s to 's', Greek symbol letters, U+1FBE to 'ι'): each is held in a
# private-use placeholder across the CaseFold (tests/optimize/
# test_openvino_strings.py finds these by sweeping the plane).
_KEPT_LOWERCASE = 'ςµſϐϑϕϖϰϱϵẛ\u1fbe'
_PLACEHOLDER = 0xE000
# ICU lowers a capital sigma that ends a word (a cased letter before it, none
# after) to the final 'ς'; CaseFold gives 'σ'.
_FINAL_CAPITAL_SIGMA = r'([\p{Lu}\p{Ll}\p{Lt}])Σ([^\p{L}]|$)'
# Two dates far apart, to read the Transform's z-score constants back.
_PROBES = (datetime.datetime(1900, 1, 1, tzinfo=datetime.timezone.utc),
           datetime.datetime(2100, 12, 31, 23, 59, 59,
                             tzinfo=datetime.timezone.utc))


def _string_table(keys: Sequence[bytes], values: Sequence[int],
                  default: int) -> tf.lookup.StaticHashTable:
  return tf.lookup.StaticHashTable(
      tf.lookup.KeyValueTensorInitializer(
          tf.constant(list(keys), tf.string),
          tf.constant(np.asarray(values, np.int64))), default)


def normalize(texts: tf.Tensor) -> tf.Tensor:
  """text_features.normalize in ops OpenVINO converts, with CaseFold's
  departures from ICU's lowercase mended where a placeholder can.

  Private-use characters in a text become spaces first (TensorFlow's
  normalize makes them spaces anyway), so no text holds a placeholder.
  """
  texts = tf.strings.regex_replace(
      texts, f'[{chr(_PLACEHOLDER)}-{chr(_PLACEHOLDER + 0xFF)}]', ' ')
  final_sigma = chr(_PLACEHOLDER + len(_KEPT_LOWERCASE))
  texts = tf.strings.regex_replace(texts, _FINAL_CAPITAL_SIGMA,
                                   f'\\1{final_sigma}\\2')
  for index, letter in enumerate(_KEPT_LOWERCASE):
    texts = tf.strings.regex_replace(texts, letter,
                                     chr(_PLACEHOLDER + index))
  texts = tf.strings.lower(texts, encoding='utf-8')
  for index, letter in enumerate(_KEPT_LOWERCASE + 'ς'):
    texts = tf.strings.regex_replace(texts, chr(_PLACEHOLDER + index),
                                     letter)
  texts = tf.strings.regex_replace(texts, text_features.NOT_A_WORD, ' ')
  return tf.strings.regex_replace(texts, '^ | $', '')


class TextLookups:
  """A text column's vocabulary as word and pair tables.

  Args:
    vocabulary: the Transform's terms, in vocabulary order (a pair is two
      words and one space).
    frequencies: rows holding each term.
    documents: the train rows.
  """

  def __init__(self, vocabulary: Sequence[bytes], frequencies: Sequence[int],
               documents: int):
    self.size = len(vocabulary)
    self.frequencies = list(frequencies)
    self.documents = documents
    words: Dict[bytes, int] = {}
    for term in vocabulary:
      for word in term.split(b' '):
        words.setdefault(word, len(words))
    self.word_count = len(words)
    # word index -> its own term id; the last row (no word) and words
    # found only in pairs take the OOV id.
    unigrams = np.full(len(words) + 1, self.size, np.int64)
    pairs: Dict[bytes, int] = {}
    for term_id, term in reversed(list(enumerate(vocabulary))):
      parts = term.split(b' ')
      if len(parts) == 1:
        unigrams[words[term]] = term_id
      elif len(parts) == 2:
        key = words[parts[0]] * len(words) + words[parts[1]]
        pairs[str(key).encode()] = term_id
    self.unigrams = unigrams
    self.word_table = _string_table(list(words), range(len(words)), -1)
    self.pair_table = _string_table(list(pairs), list(pairs.values()),
                                    self.size)

  @property
  def tables(self) -> List[Any]:
    return [self.word_table, self.pair_table]

  def outputs(self, texts: tf.Tensor, column: str) -> Dict[str, tf.Tensor]:
    """serving_text's two outputs of string [batch] ``texts``."""
    split = tf.strings.split(normalize(texts), sep=' ')
    # Looked up before padding: padding the strings themselves is the Pad
    # that aborts OpenVINO (module docstring).
    index = tf.ragged.map_flat_values(self.word_table.lookup, split).to_tensor(
        default_value=-1, shape=[None, text_features.MAX_WORDS])
    known = index >= 0
    unigram = tf.gather(tf.constant(self.unigrams),
                        tf.where(known, index, tf.fill(tf.shape(index),
                                                       tf.constant(
                                                           self.word_count,
                                                           tf.int64))))
    left, right = index[:, :-1], index[:, 1:]
    both = tf.logical_and(known[:, :-1], known[:, 1:])
    key = tf.where(both, left * self.word_count + right,
                   tf.fill(tf.shape(left), tf.constant(-1, tf.int64)))
    pair = self.pair_table.lookup(tf.strings.as_string(key))
    ids = tf.concat([unigram, pair], axis=1)
    return text_features.tfidf_from_ids(ids, ids < self.size, column,
                                        self.frequencies, self.documents)


class _LookupTests(date_features.StringTests):
  """date_features' string tests from string-keyed lookup tables."""

  def __init__(self):
    digits = [str(n).zfill(width).encode() for width in (1, 2, 4)
              for n in range(10**width)]
    self.numbers = _string_table(digits, [int(d) for d in digits], 0)
    self.literals = {
        literal: _string_table([literal.encode()], [1], 0)
        for literal in ('', '-')
    }

  @property
  def tables(self) -> List[Any]:
    return [self.numbers] + list(self.literals.values())

  def equals(self, texts: tf.Tensor, literal: str) -> tf.Tensor:
    return tf.equal(self.literals[literal].lookup(texts), 1)

  def to_int(self, texts: tf.Tensor, usable: tf.Tensor) -> tf.Tensor:
    # A usable field is the 1 to 4 ASCII digits its group matched
    # (date_features._DIRECTIVES), every one of them a key.
    return tf.where(usable, self.numbers.lookup(texts),
                    tf.zeros_like(texts, tf.int64))


class DateLookups:
  """A date column's calendar block with lookup-only string tests.

  Args:
    date_format: the column's strptime format.
    scales: ((elapsed mean, std), (year mean, std)): date_scales.
  """

  def __init__(self, date_format: str,
               scales: Tuple[Tuple[float, float], Tuple[float, float]]):
    self.date_format = date_format
    self.scales = scales
    self.tests = _LookupTests()

  @property
  def tables(self) -> List[Any]:
    return self.tests.tables

  def block(self, texts: tf.Tensor) -> tf.Tensor:
    """transform_date's float32 [batch, len(PARTS)] block."""
    valid, raw = date_features.calendar(
        texts, self.date_format, self.tests)
    constants = iter(self.scales)

    def scale(value, valid_rows):
      mean, std = next(constants)
      scaled = tf.math.divide_no_nan(value - mean, tf.constant(std,
                                                               tf.float32))
      return tf.where(tf.logical_and(valid_rows, tf.math.is_finite(scaled)),
                      scaled, tf.zeros_like(scaled))

    return date_features.calendar_block(valid, raw, scale)


def _probe_block(tft_layer, serving_spec: Mapping[str, Any], column: str,
                 values: Sequence[bytes]) -> np.ndarray:
  """The Transform's calendar block of ``values`` in ``column``."""
  rows = len(values)
  raw = {c: (np.array([b''] * rows, object) if f.dtype == tf.string else
             np.full(rows, np.nan, np.float32))
         for c, f in serving_spec.items()}
  raw[column] = np.array(list(values), object)
  parsed = raw_serving.raw_to_parsed(
      {c: tf.constant(v) for c, v in raw.items()}, serving_spec)
  return tft_layer(parsed)[features.transformed_name(column)].numpy()


def transform_date_format(tft_layer, serving_spec: Mapping[str, Any],
                          column: str) -> str:
  """The one format of column_roles.DATE_FORMATS the Transform parses.

  A date column is parsed by one format of DATE_FORMATS (--date-format
  takes no other); the same date written in each parses in exactly one of
  them (31 > 12 tells day-first from month-first, the anchored patterns
  tell the rest apart), so the format is read from the Transform itself.

  Raises:
    ConfigError: no format, or more than one, parses (a Transform that is
      not leantfx's date block).
  """
  formats = list(column_roles.DATE_FORMATS)
  probes = [_PROBES[1].strftime(f).encode() for f in formats]
  missing = _probe_block(tft_layer, serving_spec, column, probes)[
      :, date_features.PARTS.index('missing')]
  parsed = [f for f, m in zip(formats, missing) if m == 0]
  if len(parsed) != 1:
    raise ConfigError(
        f'The date column {column!r}: the Transform parses {parsed or "none"}'
        f' of the formats {formats} written as {_PROBES[1]:%Y-%m-%d %H:%M:%S}'
        '; its date block is not the one models/date_features.py builds. '
        'Export with the transform graph the model was trained with.')
  return parsed[0]


def date_scales(tft_layer, serving_spec: Mapping[str, Any], column: str,
                date_format: str
               ) -> Tuple[Tuple[float, float], Tuple[float, float]]:
  """The Transform's (mean, std) of elapsed days and of the year.

  The Transform's z-scores of two probe dates against their unscaled
  values: z = (v - mean) / std twice gives both (float32 z-scores: the
  constants agree to about 1e-7 relative). A std of 0 (one train date)
  made every z-score 0; it is returned as 0, so the export's
  divide_no_nan answers 0 too.

  Args:
    tft_layer: the Transform's layer.
    serving_spec: the raw serving feature spec (raw_serving).
    column: the date column.
    date_format: its strptime format.

  Returns:
    ((elapsed mean, elapsed std), (year mean, year std)).
  """
  probes = [d.strftime(date_format).encode() for d in _PROBES]
  scaled = _probe_block(tft_layer, serving_spec, column, probes)
  _, unscaled = date_features.calendar(tf.constant(probes), date_format)
  unscaled = unscaled.numpy().astype(np.float64)
  scales = []
  for part in (0, 1):  # elapsed days, year: the block's first two parts.
    (v1, v2), (z1, z2) = unscaled[:, part], scaled[:, part].astype(np.float64)
    if z1 == z2:
      scales.append((0.0, 0.0))
      continue
    std = (v1 - v2) / (z1 - z2)
    scales.append((float(v1 - z1 * std), float(std)))
  return scales[0], scales[1]


def date_lookups(tft_layer, serving_spec: Mapping[str, Any],
                 column: str) -> DateLookups:
  """A date column's DateLookups, its format and scales the Transform's."""
  date_format = transform_date_format(tft_layer, serving_spec, column)
  return DateLookups(date_format, date_scales(tft_layer, serving_spec,
                                              column, date_format))
