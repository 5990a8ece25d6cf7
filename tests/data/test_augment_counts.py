"""components/augment/counts.py: a batch's counts equal the row-by-row ones.

The row-by-row definitions are examples.label_of, examples.row_problems and
Domain.contains (what CleanRows and CountPerClass apply); the rows here hit
each case: absent and empty features, NaN and values out of a numeric
range, text and integers outside a set of categories, a float label.
"""
import collections
import math

import pytest
import tensorflow as tf
from tfx_bsl.coders import example_coder

from leantfx.components.augment import counts
from leantfx.components.augment import examples as examples_lib

pytestmark = pytest.mark.unit

DOMAINS = {
    'size': examples_lib.Domain(minimum=0.0, maximum=10.0),
    'age': examples_lib.Domain(minimum=1, maximum=99),
    'colour': examples_lib.Domain(values=frozenset({'red', 'blue'})),
    'grade': examples_lib.Domain(values=frozenset({'1', '2'})),
}
COLUMNS = ('size', 'age', 'colour', 'grade', 'free', 'label')


EMPTY_FLOATS, EMPTY_TEXTS = object(), object()


def _example(label=None, **features):
  example = tf.train.Example()
  for name, value in dict(features, label=label).items():
    if value is None:
      continue  # Absent.
    feature = example.features.feature[name]
    if value is EMPTY_FLOATS:
      feature.float_list.SetInParent()  # Present, empty.
    elif value is EMPTY_TEXTS:
      feature.bytes_list.SetInParent()
    elif isinstance(value, (bytes, str)):
      feature.bytes_list.value.append(
          value.encode() if isinstance(value, str) else value)
    elif isinstance(value, float):
      feature.float_list.value.append(value)
    else:
      feature.int64_list.value.append(value)
  return example


ROWS = [
    _example(1.0, size=2.5, age=30, colour='red', grade=1, free='x'),
    _example(1.0, size=math.nan, age=0, colour='green', grade=3, free=EMPTY_TEXTS),
    _example(2.5, size=11.0, age=None, colour=b'\xff', grade=2),
    _example(None, size=EMPTY_FLOATS, age=5, colour='blue', grade=2, free='y'),
    _example(3.0, size=-1.0, age=120, colour=None, grade=None, free='z'),
    _example(1.0, size=0.0, age=99, colour='blue', grade=1, free='w'),
]


def _expected(rows, drop):
  found = collections.Counter()
  before, after = collections.Counter(), collections.Counter()
  noisy = dropped = 0
  for example in rows:
    problems = examples_lib.row_problems(example, COLUMNS, DOMAINS)
    found.update(problems)
    label = examples_lib.label_of(example, 'label')
    before[label] += 1
    noisy += bool(problems)
    if problems and (drop or any(f == 'label' for f, _ in problems)):
      dropped += 1
    else:
      after[label] += 1
  return dict(found), dict(before), dict(after), noisy, dropped


# A feature whose kind differs between rows (an empty float list where the
# others are text): tfx_bsl cannot decode the batch, counted row by row.
MIXED = ROWS[:1] + [_example(1.0, size=1.0, age=2, colour='red', grade=1,
                             free=EMPTY_FLOATS)] + ROWS[1:]


@pytest.mark.parametrize('rows', [ROWS, MIXED], ids=['columns', 'mixed'])
@pytest.mark.parametrize('drop', [False, True])
def test_batch_counts_equal_the_row_by_row_counts(drop, rows):
  entries, kept = counts.batch_counts(
      [e.SerializeToString() for e in rows], 'label', COLUMNS, DOMAINS, drop)
  found = {key: n for what, key, n in entries if what == 'problems'}
  before = {key: n for what, key, n in entries
            if what == 'class_counts_before'}
  after = {key: n for what, key, n in entries if what == 'class_counts_after'}
  totals = {what: n for what, _, n in entries
            if what in ('noisy_rows', 'dropped_rows')}
  assert (found, before, after, totals['noisy_rows'],
          totals['dropped_rows']) == _expected(rows, drop)
  assert int((~kept).sum()) == totals['dropped_rows']
  if rows is ROWS:  # Counted on Arrow columns, not row by row.
    example_coder.ExamplesToRecordBatchDecoder().DecodeBatch(
        [e.SerializeToString() for e in rows])
  # The cases above are all hit.
  assert found[('size', 'out_of_domain')] == 3
  assert found[('colour', 'out_of_domain')] == 2
  assert before['2.5'] == 1 and before[''] == 1
