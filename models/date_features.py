"""Date and timestamp columns in the Transform graph: calendar features.

A date column (role 'date', DatasetSpec.date_features) arrives as the string
written in the data and is parsed by its column's one stated format
(DatasetSpec.date_formats, a strptime pattern) with tf.strings ops only, so
the serving graph takes the date as written:

  the format becomes an anchored regular expression with one group per
  field ('%Y-%m-%d' -> '^(\\d{4})-(\\d{1,2})-(\\d{1,2})$'); each field is
  the row's text with the match rewritten to that group
  (tf.strings.regex_replace), then a number (tf.strings.to_number); the
  calendar arithmetic is civil-date arithmetic on int64 tensors
  (days_from_civil: Howard Hinnant's algorithm, proleptic Gregorian).

The column becomes one float32 block ``<column>_xf`` [batch, len(PARTS)]:

  elapsed_days  days since 1970-01-01 UTC (a %z offset applied), as a
                z-score over the train split's parsed values;
  year          the year, z-scored the same way;
  month, day, weekday, hour
                each as (sin, cos) of its angle on its cycle, so December
                sits next to January and 23:00 next to midnight (a format
                without a time gives hour 0);
  missing       1 for an empty or unparseable value, else 0.

A value that does not follow the format, or names an impossible date
(2023-02-30, month 13, hour 25), is missing: its z-scores are 0 (the mean)
and its cycles (0, 0). Transform counts parsed, empty and unparseable
values over the train split and keeps the most frequent unparseable ones
(record_parse_counts; parse_report reads them back), so a run can name what
it could not read.
"""
import re
from typing import Any, Callable, Dict, List, Mapping, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from leantfx.errors import ConfigError
from leantfx.models import features

PARTS = ('elapsed_days', 'year', 'month_sin', 'month_cos', 'day_sin',
         'day_cos', 'weekday_sin', 'weekday_cos', 'hour_sin', 'hour_cos',
         'missing')
# The most frequent unparseable values a run keeps, to name them.
UNPARSEABLE_EXAMPLES = 5
_PARSED, _EMPTY, _UNPARSEABLE = 'parsed', 'empty', 'unparseable'

# strptime directive -> (regex fragment, the fields its groups fill).
_DIRECTIVES = {
    '%Y': (r'(\d{4})', ('year',)),
    '%m': (r'(\d{1,2})', ('month',)),
    '%d': (r'(\d{1,2})', ('day',)),
    '%H': (r'(\d{1,2})', ('hour',)),
    '%M': (r'(\d{2})', ('minute',)),
    # Fractional seconds are accepted and dropped (ISO 8601 allows them).
    '%S': (r'(\d{2})(?:[.,]\d+)?', ('second',)),
    # 'Z', or +hh:mm / +hhmm: sign, hours, minutes (empty groups for 'Z').
    '%z': (r'(?:[Zz]|([+-])(\d{2}):?(\d{2}))',
           ('offset_sign', 'offset_hours', 'offset_minutes')),
}
_DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def format_pattern(date_format: str) -> Tuple[str, Dict[str, int]]:
  """The anchored regex of a strptime format and each field's group number.

  Args:
    date_format: e.g. '%Y-%m-%dT%H:%M:%S%z' or '%d/%m/%Y'.

  Returns:
    (pattern, {field: 1-based group}); the fields are year, month, day and,
    when the format has them, hour, minute, second, offset_sign,
    offset_hours, offset_minutes.

  Raises:
    ConfigError: a directive other than %Y %m %d %H %M %S %z, or a format
      without a year, a month and a day.
  """
  pattern, groups = [], {}
  for piece in re.split(r'(%.)', date_format):
    if not piece:
      continue
    if piece.startswith('%') and len(piece) == 2 and piece != '%%':
      if piece not in _DIRECTIVES:
        raise ConfigError(
            f'Date format {date_format!r}: {piece} is not supported; use '
            f'{", ".join(_DIRECTIVES)} and literal characters.')
      fragment, fields = _DIRECTIVES[piece]
      for field in fields:
        groups[field] = len(groups) + 1
      pattern.append(fragment)
    else:
      pattern.append(re.escape(piece.replace('%%', '%')))
  if not {'year', 'month', 'day'} <= set(groups):
    raise ConfigError(
        f'Date format {date_format!r} needs a year, a month and a day '
        '(%Y, %m, %d).')
  return '^' + ''.join(pattern) + '$', groups


def days_from_civil(year: tf.Tensor, month: tf.Tensor,
                    day: tf.Tensor) -> tf.Tensor:
  """Days since 1970-01-01 of proleptic Gregorian dates (int64 tensors).

  Howard Hinnant's days_from_civil: the year is shifted to start in March,
  so the leap day is the last day of the year; floor division keeps years
  before 1970 right.
  """
  year = year - tf.cast(month <= 2, tf.int64)
  era = tf.math.floordiv(year, 400)
  year_of_era = year - era * 400
  shifted_month = tf.where(month > 2, month - 3, month + 9)
  day_of_year = (153 * shifted_month + 2) // 5 + day - 1
  day_of_era = (year_of_era * 365 + year_of_era // 4 - year_of_era // 100 +
                day_of_year)
  return era * 146097 + day_of_era - 719468


def _days_in_month(year: tf.Tensor, month: tf.Tensor) -> tf.Tensor:
  leap = tf.logical_and(
      tf.equal(year % 4, 0),
      tf.logical_or(tf.not_equal(year % 100, 0), tf.equal(year % 400, 0)))
  days = tf.gather(tf.constant(_DAYS_IN_MONTH, tf.int64),
                   tf.clip_by_value(month - 1, 0, 11))
  return days + tf.cast(tf.logical_and(leap, tf.equal(month, 2)), tf.int64)


class StringTests:
  """The string tests the parse makes beyond regex_replace: TensorFlow's.

  A runtime whose converter lacks one of these kernels (OpenVINO has no
  StringToNumber, and compares no strings) parses with a subclass
  answering the same from lookup tables
  (components/optimize/export/openvino_strings.py).
  """

  def equals(self, texts: tf.Tensor, literal: str) -> tf.Tensor:
    """bool [batch]: each text is ``literal`` ('' or '-')."""
    return tf.equal(texts, literal)

  def to_int(self, texts: tf.Tensor, usable: tf.Tensor) -> tf.Tensor:
    """int64 [batch]: each usable text's number (1 to 4 ASCII digits), 0
    elsewhere."""
    return tf.strings.to_number(tf.where(usable, texts, '0'),
                                out_type=tf.int64)


def _fields(texts: tf.Tensor, date_format: str, tests: StringTests
           ) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
  """(matches the format, {field: int64 [batch]}); 0 where absent."""
  pattern, groups = format_pattern(date_format)
  # A full match rewrites the whole text to '' (the pattern is anchored and
  # never matches ''): regex_replace is in every runtime's string library,
  # regex_full_match is not in ONNX's.
  matched = tf.logical_and(
      tests.equals(tf.strings.regex_replace(texts, pattern, ''), ''),
      tf.logical_not(tests.equals(texts, '')))
  fields = {}
  for field in ('year', 'month', 'day', 'hour', 'minute', 'second',
                'offset_hours', 'offset_minutes'):
    if field not in groups:
      fields[field] = tf.zeros_like(texts, tf.int64)
      continue
    text = tf.strings.regex_replace(texts, pattern, f'\\{groups[field]}')
    usable = tf.logical_and(matched, tf.logical_not(tests.equals(text, '')))
    fields[field] = tests.to_int(text, usable)
  sign = tf.ones_like(texts, tf.int64)
  if 'offset_sign' in groups:
    text = tf.strings.regex_replace(texts, pattern,
                                    f'\\{groups["offset_sign"]}')
    sign = tf.where(tests.equals(text, '-'), -sign, sign)
  fields['offset_seconds'] = sign * (fields['offset_hours'] * 3600 +
                                     fields['offset_minutes'] * 60)
  return matched, fields


def _valid(matched: tf.Tensor, f: Mapping[str, tf.Tensor]) -> tf.Tensor:
  """Matches the format and names a real date and time of day."""
  checks = [
      matched, f['month'] >= 1, f['month'] <= 12, f['day'] >= 1,
      f['day'] <= _days_in_month(f['year'], f['month']), f['hour'] <= 23,
      f['minute'] <= 59, f['second'] <= 60
  ]
  return tf.reduce_all(tf.stack(checks, axis=0), axis=0)


def _cycle(value: tf.Tensor, period: float, valid: tf.Tensor
          ) -> List[tf.Tensor]:
  angle = 2.0 * np.pi * tf.cast(value, tf.float32) / period
  zero = tf.zeros_like(angle)
  return [tf.where(valid, tf.sin(angle), zero),
          tf.where(valid, tf.cos(angle), zero)]


def _z_score(value: tf.Tensor, valid: tf.Tensor) -> tf.Tensor:
  """(value - mean) / std over the train split's valid values; 0 if missing."""
  present = tf.boolean_mask(value, valid)
  mean = tft.mean(present)
  std = tf.sqrt(tft.var(present))
  scaled = tf.math.divide_no_nan(value - mean, std)
  return tf.where(tf.logical_and(valid, tf.math.is_finite(scaled)), scaled,
                  tf.zeros_like(scaled))


def _strip(texts: tf.Tensor) -> tf.Tensor:
  """Without white space at either end (StringStrip has no ONNX kernel)."""
  return tf.strings.regex_replace(texts, r'^\s+|\s+$', '')


def calendar(texts: tf.Tensor, date_format: str,
             tests: StringTests = StringTests()
            ) -> Tuple[tf.Tensor, tf.Tensor]:
  """The unscaled calendar of [batch] date strings.

  Args:
    texts: string [batch] as written.
    date_format: the column's strptime format.
    tests: the string tests (TensorFlow's kernels by default).

  Returns:
    (valid bool [batch], float32 [batch, 6]: elapsed days since 1970-01-01
    UTC, year, month, day, day of week (0 = Monday), hour of day with its
    minutes as a fraction); invalid rows hold zeros.
  """
  texts = _strip(texts)
  matched, f = _fields(texts, date_format, tests)
  valid = _valid(matched, f)
  days = days_from_civil(f['year'], f['month'], f['day'])
  seconds = f['hour'] * 3600 + f['minute'] * 60 + f['second'] - (
      f['offset_seconds'])
  # float32 throughout (days are exact in it): a float64 op in the graph
  # breaks TFLite's int8 calibration of the flex ops around it.
  elapsed = tf.cast(days, tf.float32) + tf.cast(seconds, tf.float32) / 86400
  # 1970-01-01 was a Thursday: day 0 is weekday 3 counting Monday as 0.
  weekday = tf.math.floormod(days + 3, 7)
  hour = tf.cast(f['hour'], tf.float32) + tf.cast(f['minute'], tf.float32) / 60
  columns = [elapsed] + [
      tf.cast(v, tf.float32) for v in (f['year'], f['month'], f['day'],
                                       weekday)] + [hour]
  block = tf.stack(columns, axis=1)
  return valid, tf.where(valid[:, None], block, tf.zeros_like(block))


def record_parse_counts(texts: tf.Tensor, valid: tf.Tensor,
                        column: str) -> None:
  """Makes Transform count parsed / empty / unparseable values of a column
  and keep the most frequent unparseable ones (parse_report reads both)."""
  empty = tf.equal(texts, '')
  outcome = tf.where(empty, _EMPTY, tf.where(valid, _PARSED, _UNPARSEABLE))
  tft.vocabulary(outcome, vocab_filename=_counts_name(column),
                 store_frequency=True)
  bad = tf.boolean_mask(texts, tf.logical_and(tf.logical_not(valid),
                                              tf.logical_not(empty)))
  tft.vocabulary(bad, top_k=UNPARSEABLE_EXAMPLES,
                 vocab_filename=_examples_name(column), store_frequency=True)


def _counts_name(column: str) -> str:
  return f'{column}__date_parse_counts'


def _examples_name(column: str) -> str:
  return f'{column}__date_unparseable'


def transform_date(texts: tf.Tensor, column: str,
                   date_format: str) -> tf.Tensor:
  """The column's calendar block, float32 [batch, len(PARTS)].

  Args:
    texts: string [batch] as written ('' for a missing value).
    column: the feature key (names its parse counts).
    date_format: the column's strptime format.

  Returns:
    The block described in the module docstring.
  """
  texts = _strip(texts)
  valid, raw = calendar(texts, date_format)
  record_parse_counts(texts, valid, column)
  return calendar_block(valid, raw, _z_score)


def calendar_block(valid: tf.Tensor, raw: tf.Tensor,
                   scale: Callable[[tf.Tensor, tf.Tensor], tf.Tensor]
                  ) -> tf.Tensor:
  """The block of PARTS from ``calendar``'s (valid, raw).

  Args:
    valid: bool [batch].
    raw: float32 [batch, 6], calendar's unscaled values.
    scale: (value, valid) -> its z-score; the Transform's analyzers
      (_z_score), or an export's constants read from them.

  Returns:
    float32 [batch, len(PARTS)].
  """
  elapsed, year, month, day, weekday, hour = tf.unstack(raw, axis=1)
  parts = [scale(elapsed, valid), scale(year, valid)]
  # Months and days counted from 0 so the first one sits at angle 0.
  parts += _cycle(month - 1, 12.0, valid) + _cycle(day - 1, 31.0, valid)
  parts += _cycle(weekday, 7.0, valid) + _cycle(hour, 24.0, valid)
  parts.append(1.0 - tf.cast(valid, tf.float32))
  return tf.stack(parts, axis=1)


def _read_counts(path: str) -> Dict[str, int]:
  counts = {}
  with tf.io.gfile.GFile(path, 'r') as f:
    for line in f:
      parts = line.rstrip('\n').split(' ', 1)
      if len(parts) == 2 and parts[0].lstrip('-').isdigit():
        counts[parts[1]] = int(parts[0])
  return counts


def parse_report(tf_transform_output: Any, column: str) -> Dict[str, Any]:
  """What the Transform could read of a date column in the train split.

  Returns:
    {'parsed': n, 'empty': n, 'unparseable': n, 'unparseable_examples':
    {value: count} of the most frequent unparseable values}.
  """
  counts = _read_counts(
      tf_transform_output.vocabulary_file_by_name(_counts_name(column)))
  examples = _read_counts(
      tf_transform_output.vocabulary_file_by_name(_examples_name(column)))
  report: Dict[str, Any] = {k: counts.get(k, 0)
                            for k in (_PARSED, _EMPTY, _UNPARSEABLE)}
  # TFT writes a placeholder line into a vocabulary of no values.
  report['unparseable_examples'] = (examples if report[_UNPARSEABLE] else {})
  return report


def date_outputs(inputs: Dict[str, Any], spec, to_dense) -> Dict[str, Any]:
  """transform_date for every date column of the DatasetSpec ``spec``.

  Args:
    inputs: raw features by key.
    spec: the DatasetSpec (date_features, date_format).
    to_dense: preprocessing's [batch, 1] densifier (value, default).

  Returns:
    {'<column>_xf': float32 [batch, len(PARTS)]} per date column.
  """
  formats = spec.date_format
  outputs = {}
  for column in spec.date_features:
    texts = tf.reshape(to_dense(inputs[column], ''), [-1])
    if texts.dtype != tf.string:
      texts = tf.strings.as_string(texts)
    outputs[features.transformed_name(column)] = transform_date(
        texts, column, formats[column])
  return outputs
