"""Validation that knows the columns' roles: free text and dates.

TFDV's statistics and comparators see a text or date column as strings: the
top values of a free-text column are whole sentences, each seen once, and
an L-infinity comparator over them measures nothing. This module profiles
those columns the way their role reads them, on the drift split of the span
(at most MAX_EXAMPLES examples), and compares the profile with the previous
validated span's:

  text   the share of empty values, and the distribution of words
         (lowercased, split at non-word characters, as the Transform's
         tokens) over the most frequent TOP_TOKENS words of either span, the
         rest pooled: Jensen-Shannon divergence in bits (TFDV's measure for
         numeric drift) above TOKEN_JS_THRESHOLD is drift;
  dates  values that do not follow the column's format (a compiled run has
         no pre-flight to refuse them), dates after the validation's time
         (more than FUTURE_SLACK_DAYS ahead), and a span whose dates all lie
         before the previous span's first date (an old export delivered
         again).

Each finding is a report row of its own kind (the *_KIND names), blocking
unless ``--allow-anomalies KIND``. The profile is kept with the span's
statistics (ROLES_FILE) for the next span's comparison.
"""
import collections
import datetime
import math
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from leantfx import column_roles
from leantfx.components.validation_gate import checks

TOKEN_DRIFT_KIND = 'TEXT_TOKEN_DISTRIBUTION_DRIFT'
EMPTY_DRIFT_KIND = 'TEXT_EMPTY_SHARE_DRIFT'
UNPARSEABLE_KIND = 'DATE_UNPARSEABLE'
FUTURE_KIND = 'DATE_IN_FUTURE'
BEFORE_BASELINE_KIND = 'DATE_RANGE_BEFORE_BASELINE'
ROLES_FILE = 'roles.json'
MAX_EXAMPLES = 100_000
TOP_TOKENS = 500
# Measured on benchmarks/column_spans.py's text (tests/components/
# test_role_checks.py): two disjoint 5,000-row samples of one span 0.043
# bits (the sampling noise of 500 words); 2,541 rows of two of its eight
# classes against 5,000 of all 0.19.
TOKEN_JS_THRESHOLD = 0.1
EMPTY_SHARE_THRESHOLD = 0.1
FUTURE_SLACK_DAYS = 1
_WORD_RE = re.compile(r'\w+')
_SHOWN = 3


def profile_values(text_values: Mapping[str, Iterable[str]],
                   date_values: Mapping[str, Iterable[str]],
                   date_formats: Mapping[str, str],
                   now: datetime.datetime) -> Dict[str, Any]:
  """The role profile of one span's columns (JSON-able).

  Args:
    text_values: {text feature: its values, '' for missing}.
    date_values: {date feature: its values, '' for missing}.
    date_formats: {date feature: its strptime format}.
    now: the validation's time (timezone-aware): later dates are future.

  Returns:
    {'text': {feature: {rows, empty, words, top}}, 'dates': {feature:
    {rows, missing, unparseable, unparseable_examples, future,
    future_examples, min, max}}, 'now': ISO time}.
  """
  text = {}
  for feature, values in text_values.items():
    counter = collections.Counter()
    rows = empty = 0
    for value in values:
      rows += 1
      words = _WORD_RE.findall(value.lower())
      if not words:
        empty += 1
      counter.update(words)
    text[feature] = {'rows': rows, 'empty': empty,
                     'words': sum(counter.values()),
                     'top': dict(counter.most_common(TOP_TOKENS))}
  dates = {}
  horizon = now + datetime.timedelta(days=FUTURE_SLACK_DAYS)
  for feature, values in date_values.items():
    fmt = date_formats[feature]
    found = {'rows': 0, 'missing': 0, 'unparseable': 0,
             'unparseable_examples': [], 'future': 0, 'future_examples': [],
             'min': None, 'max': None}
    low = high = None
    for value in values:
      found['rows'] += 1
      if not value:
        found['missing'] += 1
        continue
      parsed = column_roles.parse_date(value, fmt)
      if parsed is None:
        found['unparseable'] += 1
        if len(found['unparseable_examples']) < _SHOWN:
          found['unparseable_examples'].append(value)
        continue
      if parsed > horizon:
        found['future'] += 1
        if len(found['future_examples']) < _SHOWN:
          found['future_examples'].append(value)
      low = parsed if low is None or parsed < low else low
      high = parsed if high is None or parsed > high else high
    found['min'] = low.isoformat() if low else None
    found['max'] = high.isoformat() if high else None
    dates[feature] = found
  return {'text': text, 'dates': dates, 'now': now.isoformat()}


def token_divergence(current: Mapping[str, int],
                     previous: Mapping[str, int]) -> float:
  """Jensen-Shannon divergence (bits) of two word-count maps.

  Words outside both maps' top TOP_TOKENS are pooled into one 'other'
  bucket (each map's total minus its kept words: the maps are top lists,
  so their totals are passed as the '' key when known).
  """
  keep = set(sorted(current, key=current.get, reverse=True)[:TOP_TOKENS]) | (
      set(sorted(previous, key=previous.get, reverse=True)[:TOP_TOKENS]))
  keep.discard('')

  def distribution(counts):
    total = counts.get('', 0) or sum(v for k, v in counts.items() if k)
    kept = [counts.get(w, 0) for w in sorted(keep)]
    other = max(0, total - sum(kept))
    values = kept + [other]
    norm = float(sum(values)) or 1.0
    return [v / norm for v in values]

  p, q = distribution(current), distribution(previous)
  m = [(a + b) / 2 for a, b in zip(p, q)]

  def kl(a, b):
    return sum(x * math.log2(x / y) for x, y in zip(a, b) if x > 0)

  return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def _row(span, split, feature, kind, short, description, allowed):
  return checks.AnomalyRow(span=span, split=split, feature=feature, kind=kind,
                           short_description=short, description=description,
                           allowed=kind in allowed)


def role_rows(current: Mapping[str, Any], previous: Optional[Mapping[str, Any]],
              span: int, split: str, baseline_span: Optional[int],
              allowed: Sequence[str]) -> List[checks.AnomalyRow]:
  """Report rows of the role checks (module docstring), by feature."""
  allowed = set(allowed)
  rows = []
  before = previous or {}
  for feature, found in sorted(current.get('dates', {}).items()):
    if found['unparseable']:
      rows.append(_row(
          span, split, feature, UNPARSEABLE_KIND,
          'Dates that do not follow the format',
          f'{found["unparseable"]} of {found["rows"]} values do not follow '
          f'the column\'s date format (e.g. '
          f'{", ".join(repr(v) for v in found["unparseable_examples"])}); '
          'they would train as missing.', allowed))
    if found['future']:
      rows.append(_row(
          span, split, feature, FUTURE_KIND, 'Dates in the future',
          f'{found["future"]} of {found["rows"]} dates lie more than '
          f'{FUTURE_SLACK_DAYS} day after the validation ({current["now"]}), '
          f'e.g. {", ".join(repr(v) for v in found["future_examples"])}.',
          allowed))
    old = before.get('dates', {}).get(feature)
    if old and old.get('min') and found.get('max') and (
        found['max'] < old['min']):
      rows.append(_row(
          span, split, feature, BEFORE_BASELINE_KIND,
          'Dates before the previous span\'s',
          f'Compared with span {baseline_span}: every date ({found["min"]} '
          f'to {found["max"]}) lies before that span\'s first '
          f'({old["min"]}); an old export delivered again?', allowed))
  for feature, found in sorted(current.get('text', {}).items()):
    old = before.get('text', {}).get(feature)
    if not old or not old['rows'] or not found['rows']:
      continue
    share, old_share = (found['empty'] / found['rows'],
                        old['empty'] / old['rows'])
    if abs(share - old_share) > EMPTY_SHARE_THRESHOLD:
      rows.append(_row(
          span, split, feature, EMPTY_DRIFT_KIND, 'Empty texts drifted',
          f'Compared with span {baseline_span}: {share:.1%} of texts are '
          f'empty, against {old_share:.1%} (threshold '
          f'{EMPTY_SHARE_THRESHOLD:.0%} points).', allowed))
    divergence = token_divergence(dict(found['top'], **{'': found['words']}),
                                  dict(old['top'], **{'': old['words']}))
    if divergence > TOKEN_JS_THRESHOLD:
      rows.append(_row(
          span, split, feature, TOKEN_DRIFT_KIND, 'Words drifted',
          f'Compared with span {baseline_span}: the distribution of words '
          f'moved by a Jensen-Shannon divergence of {divergence:.3f} bits '
          f'(threshold {TOKEN_JS_THRESHOLD}).', allowed))
  return rows


def read_split_values(records: Iterable[bytes], text_features: Sequence[str],
                      date_features: Sequence[str],
                      limit: int = MAX_EXAMPLES):
  """{feature: [values]} of the role features in serialized tf.Examples.

  A missing value (an empty list, as the ExampleGen writes an empty field)
  is ''. At most ``limit`` examples are read.
  """
  from tensorflow.core.example import example_pb2  # pylint: disable=g-import-not-at-top
  names = tuple(text_features) + tuple(date_features)
  values: Dict[str, List[str]] = {name: [] for name in names}
  for count, record in enumerate(records):
    if count >= limit:
      break
    feature = example_pb2.Example.FromString(record).features.feature
    for name in names:
      found = feature[name].bytes_list.value if name in feature else ()
      values[name].append(found[0].decode('utf-8', 'replace') if found
                          else '')
  return ({n: values[n] for n in text_features},
          {n: values[n] for n in date_features})
