"""Tests for the ValidationGate's role checks (components/validation_gate/role_checks.py).

The text is benchmarks/column_spans.py's generated ticket text, the dates
are written by hand; the thresholds' anchors in role_checks.py are the
divergences measured here.
"""
import datetime

import pytest

from benchmarks import column_spans
from leantfx.components.validation_gate import role_checks

_NOW = datetime.datetime(2026, 12, 7, tzinfo=datetime.timezone.utc)


def _text_profile(rows):
  return role_checks.profile_values(
      {'d': [r[column_spans.TEXT] for r in rows]}, {}, {}, _NOW)


def _kinds(rows):
  return sorted((r.feature, r.kind) for r in rows)


@pytest.fixture(scope='module')
def text_rows():
  return column_spans.rows(20_000)


@pytest.mark.unit
def test_words_of_one_span_do_not_drift_and_a_class_shift_does(text_rows):
  first = _text_profile(text_rows[:5000])
  second = _text_profile(text_rows[5000:10000])
  shifted = _text_profile([r for r in text_rows[10000:]
                           if r[column_spans.LABEL] in column_spans.CLASSES[:2]])
  same = role_checks.role_rows(second, first, 2, 'train', 1, ())
  assert same == []
  moved = role_checks.role_rows(shifted, first, 2, 'train', 1, ())
  assert _kinds(moved) == [('d', role_checks.TOKEN_DRIFT_KIND)]
  assert 'Compared with span 1' in moved[0].description
  assert not moved[0].allowed
  allowed = role_checks.role_rows(shifted, first, 2, 'train', 1,
                                  [role_checks.TOKEN_DRIFT_KIND])
  assert allowed[0].allowed


@pytest.mark.unit
def test_empty_texts_drift(text_rows):
  first = _text_profile(text_rows[:2000])
  emptied = [dict(r) for r in text_rows[2000:4000]]
  for r in emptied[::4]:
    r[column_spans.TEXT] = ''  # 25% empty against ~0%
  rows = role_checks.role_rows(_text_profile(emptied), first, 2, 'train', 1, ())
  assert (('d', role_checks.EMPTY_DRIFT_KIND) in _kinds(rows))
  assert '25.0% of texts are empty' in rows[0].description


@pytest.mark.unit
def test_dates_unparseable_future_and_before_the_baseline():
  fmt = '%Y-%m-%d'
  old = role_checks.profile_values(
      {}, {'when': ['2025-01-01', '2025-06-30']}, {'when': fmt}, _NOW)
  new = role_checks.profile_values(
      {}, {'when': ['2024-02-01', '2024-13-01', '', '2027-01-01',
                    '2024-03-01']}, {'when': fmt}, _NOW)
  found = new['dates']['when']
  assert (found['rows'], found['missing'], found['unparseable'],
          found['future']) == (5, 1, 1, 1)
  rows = role_checks.role_rows(new, old, 3, 'train', 2, ())
  assert _kinds(rows) == [('when', role_checks.FUTURE_KIND),
                          ('when', role_checks.UNPARSEABLE_KIND)]
  assert "'2024-13-01'" in [r for r in rows if r.kind ==
                            role_checks.UNPARSEABLE_KIND][0].description
  back = role_checks.profile_values(
      {}, {'when': ['2024-02-01', '2024-03-01']}, {'when': fmt}, _NOW)
  rows = role_checks.role_rows(back, old, 3, 'train', 2, ())
  assert _kinds(rows) == [('when', role_checks.BEFORE_BASELINE_KIND)]


@pytest.mark.unit
def test_values_are_read_from_tf_examples():
  from tensorflow.core.example import example_pb2  # pylint: disable=g-import-not-at-top
  records = []
  for text, date in (('hello world', '2024-01-01'), (None, '')):
    example = example_pb2.Example()
    if text is not None:
      example.features.feature['t'].bytes_list.value.append(text.encode())
    example.features.feature['w'].bytes_list.value.extend(
        [date.encode()] if date else [])
    records.append(example.SerializeToString())
  text, dates = role_checks.read_split_values(records, ['t'], ['w'])
  assert text == {'t': ['hello world', '']}
  assert dates == {'w': ['2024-01-01', '']}
