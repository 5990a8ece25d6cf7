"""The references of benchmarks/bench_columns.py, on generated rows.

Rows straight from the generators (80/20 by position), shaped as
bench_columns reads them back from ExampleGen (a marker is a missing '').
The bounds are loose on purpose: they say the reference learned the signal
each generator puts in its columns, not how well.
"""
import pytest

from benchmarks import bench_columns
from benchmarks import column_spans
from benchmarks import tabular_spans

pytestmark = pytest.mark.unit


def _majority(rows, label):
  values = [r[label] for r in rows]
  return max(values.count(v) for v in set(values)) / len(values)


def test_text_reference_learns_the_words():
  rows = column_spans.rows(3000)
  accuracy, seconds = bench_columns.text_reference(rows[:2400], rows[2400:])
  # 8 classes; the majority is about 1/8.
  assert accuracy > _majority(rows[2400:], column_spans.LABEL) + 0.3
  assert seconds > 0


def test_tabular_reference_reads_numbers_and_dates():
  header, *body = tabular_spans.rows(3000)
  rows = [{k: ('' if v == 'NA' else v) for k, v in zip(header, r)}
          for r in body]
  accuracy, _ = bench_columns.tabular_reference(rows[:2400], rows[2400:])
  assert accuracy > _majority(rows[2400:], tabular_spans.LABEL) + 0.2
  calendar = bench_columns._calendar(['2024-03-01T12:34:56Z', ''])  # pylint: disable=protected-access
  assert list(calendar[0][:4]) == [2024, 3, 4, 12]  # a Friday
  assert all(v != v for v in calendar[1])  # NaN: missing
