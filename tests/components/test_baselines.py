"""The baselines: reading a split (every row, or every k-th) and the fits.

The fits run on small constructed spans whose answer is known by
construction: a label that a column decides exactly is predicted exactly.
"""
import gzip
import math

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2

from leantfx.components.baselines import fits
from leantfx.components.baselines import report
from leantfx.components.baselines import rows
from leantfx.errors import InputDataError

pytestmark = pytest.mark.unit


def _write(path, examples):
  with tf.io.TFRecordWriter(str(path), options='GZIP') as writer:
    for example in examples:
      writer.write(example.SerializeToString())
  return str(path)


def _example(x=None, colour=None, label='a'):
  feature = {'label': tf.train.Feature(
      bytes_list=tf.train.BytesList(value=[label.encode()]))}
  if x is not None:
    feature['x'] = tf.train.Feature(float_list=tf.train.FloatList(value=[x]))
  if colour is not None:
    feature['colour'] = tf.train.Feature(
        bytes_list=tf.train.BytesList(value=[colour.encode()]))
  return tf.train.Example(features=tf.train.Features(feature=feature))


def _schema():
  schema = schema_pb2.Schema()
  for name, kind in (('label', schema_pb2.BYTES), ('x', schema_pb2.FLOAT),
                     ('colour', schema_pb2.BYTES)):
    schema.feature.add(name=name, type=kind)
  return schema


@pytest.mark.parametrize('total, max_rows, expected_x', [
    (10, 100, list(range(10))),  # Under the cap: every row.
    # ceil(10 / 3) = 4: records 0, 4 and 8.
    (10, 3, [0, 4, 8]),
    (10, 5, [0, 2, 4, 6, 8]),
])
def test_read_split_reads_every_kth_record_over_the_cap(tmp_path, total,
                                                        max_rows, expected_x):
  path = _write(tmp_path / 'data.gz',
                [_example(float(i), 'red', 'a') for i in range(total)])
  split = rows.read_split([path], rows.feature_spec(_schema(), ['x', 'label']),
                          max_rows)
  assert split.columns['x'].tolist() == expected_x
  assert split.total_rows == total and split.rows == len(expected_x)
  assert split.sampled == (len(expected_x) < total)


def test_read_split_reads_a_missing_value_as_nan_or_empty(tmp_path):
  path = _write(tmp_path / 'data.gz',
                [_example(1.0, 'red'), _example(None, None)])
  split = rows.read_split(
      [path], rows.feature_spec(_schema(), ['x', 'colour', 'label']), 10)
  assert split.columns['x'][0] == 1.0 and math.isnan(split.columns['x'][1])
  assert split.columns['colour'].tolist() == ['red', '']


def test_read_split_refuses_unknown_columns_and_empty_splits(tmp_path):
  with pytest.raises(InputDataError, match="columns \\['age'\\]"):
    rows.feature_spec(_schema(), ['age'])
  path = _write(tmp_path / 'empty.gz', [])
  with pytest.raises(InputDataError, match='hold no example'):
    rows.read_split([path], rows.feature_spec(_schema(), ['x']), 10)
  bad = tmp_path / 'bad.gz'
  with gzip.open(bad, 'wb') as f:
    f.write(b'not a TFRecord at all')
  with pytest.raises(InputDataError, match='Cannot read'):
    rows.read_split([str(bad)], rows.feature_spec(_schema(), ['x']), 10)


@pytest.mark.parametrize('task, train_y, eval_y, expected', [
    # 'a' is the most frequent train class; 1 of 4 eval rows is 'a'.
    ('classification', ['a', 'a', 'b'], ['a', 'b', 'b', 'b'], 0.25),
    # Mean 2; errors 0 and 2: RMSE sqrt((0 + 4) / 2).
    ('regression', [1.0, 2.0, 3.0], [2.0, 4.0], math.sqrt(2.0)),
])
def test_trivial_baseline(task, train_y, eval_y, expected):
  found = fits.trivial(task, np.array(train_y, dtype=object if
                                      task == 'classification' else float),
                       np.array(eval_y, dtype=object if
                                task == 'classification' else float))
  assert found.value == pytest.approx(expected)
  assert found.name == (fits.MAJORITY if task == 'classification' else
                        fits.MEAN)


def _span(n, seed):
  """x uniform; colour decides the label ('red' -> 'r', else 'o')."""
  rng = np.random.default_rng(seed)
  colour = rng.choice(['red', 'green', 'blue'], n)
  return {'x': rng.uniform(size=n), 'colour': colour.astype(object),
          'label': np.where(colour == 'red', 'r', 'o').astype(object)}


def test_linear_and_strong_baselines_find_a_label_a_category_decides():
  roles = fits.Roles(numeric=('x',), categorical=('colour',), text=(),
                     dates=())
  found = {b.name: b for b in fits.fit_all(
      'classification', roles, 'label', _span(600, 0), _span(200, 1))}
  # One column decides the label exactly: both models get it right.
  assert found[fits.LINEAR].value == 1.0, found[fits.LINEAR]
  assert found[fits.STRONG].value == 1.0, found[fits.STRONG]
  assert 'HistGradientBoostingClassifier on 1 numeric, 1 categorical' in (
      found[fits.STRONG].model)
  assert found[fits.MAJORITY].value < 0.8


def test_text_makes_the_strong_baseline_tf_idf_logistic_regression():
  rng = np.random.default_rng(0)

  def span(n):
    label = rng.choice(['pos', 'neg'], n)
    filler = rng.choice(['the order', 'a parcel', 'my box'], n)
    text = [f'{f} was {"good" if y == "pos" else "bad"}'
            for f, y in zip(filler, label)]
    return {'review': np.array(text, dtype=object),
            'label': label.astype(object)}

  roles = fits.Roles(numeric=(), categorical=(), text=('review',), dates=())
  found = {b.name: b for b in fits.fit_all('classification', roles, 'label',
                                           span(400), span(100))}
  # The word 'good' or 'bad' decides the label.
  assert found[fits.STRONG].value == 1.0
  assert found[fits.STRONG].model.startswith(
      'LogisticRegression on TF-IDF 1-2-grams of 1 text')
  # No tabular column: no linear model on them, said.
  assert found[fits.LINEAR].value is None
  assert 'no tabular column' in found[fits.LINEAR].note


def test_dates_become_calendar_numbers():
  rng = np.random.default_rng(0)

  def span(n):
    days = rng.integers(0, 700, n)
    dates = (np.datetime64('2024-01-01') + days).astype(str)
    weekday = (days + 0) % 7  # 2024-01-01 was a Monday (weekday 0).
    return {'ordered': dates.astype(object),
            'label': np.where(weekday >= 5, 'weekend', 'week').astype(object)}

  roles = fits.Roles(numeric=(), categorical=(), text=(),
                     dates=(('ordered', '%Y-%m-%d'),))
  found = {b.name: b for b in fits.fit_all('classification', roles, 'label',
                                           span(700), span(200))}
  # The weekday decides the label; trees split on it exactly.
  assert found[fits.STRONG].value == 1.0
  frame = fits.frame({'ordered': np.array(['2024-03-02', 'not a date'],
                                          dtype=object)}, roles)
  assert frame['ordered.weekday'].tolist()[0] == 5.0  # A Saturday.
  assert math.isnan(frame['ordered.days'].tolist()[1])


def test_regression_baselines_and_the_document():
  rng = np.random.default_rng(0)

  def span(n):
    x = rng.uniform(-1, 1, n)
    return {'x': x, 'label': 3.0 * x + 1.0}

  roles = fits.Roles(numeric=('x',), categorical=(), text=(), dates=())
  found = fits.fit_all('regression', roles, 'label', span(300), span(100))
  by_name = {b.name: b for b in found}
  # y = 3x + 1 exactly: ridge (alpha 1 on 300 rows) is all but exact; the
  # mean's RMSE is the spread of 3x, 3 / sqrt(3) = 1.73 for x ~ U(-1, 1).
  assert by_name[fits.LINEAR].value < 0.05
  assert by_name[fits.MEAN].value == pytest.approx(math.sqrt(3.0), rel=0.15)
  doc = report.document('regression', found, 300, 300, 100, 100, 200_000,
                        1.0)
  assert doc['metric'] == report.RMSE and not doc['rows']['sampled']
  assert report.figure(doc, report.trivial_name(doc)) == by_name[
      fits.MEAN].value
  assert report.rows_text(doc) == '300 train / 100 eval rows'
  lines = report.lines(doc)
  assert lines[0].startswith('mean: rmse ') and len(lines) == 3


def test_a_failed_fit_is_a_note_not_a_crash():
  # One class in train: logistic regression cannot fit, and says so.
  roles = fits.Roles(numeric=('x',), categorical=(), text=(), dates=())
  span = {'x': np.arange(10.0), 'label': np.array(['a'] * 10, dtype=object)}
  found = fits.linear('classification', roles,
                      (fits.frame(span, roles), span['label']),
                      (fits.frame(span, roles), span['label']))
  assert found.value is None and found.note.startswith('not fit: ')
