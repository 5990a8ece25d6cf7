"""A span the 4:1 train/eval split cannot serve is refused before anything runs.

Through the CLI (exit 2, nothing written under the output but the prepared
data), and the rule on its own.
"""
import os
import re

import pytest

from leantfx import split_feasibility
from leantfx.errors import ConfigError

pytestmark = pytest.mark.unit


def _span(tmp_path, rows):
  folder = tmp_path / 'data' / 'span-1'
  folder.mkdir(parents=True)
  lines = ['x,z,kind'] + [f'{i},{i % 7},{kind}' for i, kind in rows]
  (folder / 'rows.csv').write_text('\n'.join(lines) + '\n', encoding='utf-8')
  return str(tmp_path / 'data')


def _assert_refused_before_running(result, out, *fragments):
  assert result.returncode == 2, (result.returncode, result.stdout,
                                  result.stderr)
  assert 'Traceback' not in result.stderr + result.stdout
  for fragment in fragments:
    assert fragment in result.stderr, (fragment, result.stderr)
  # Nothing ran: no ML Metadata, no pipeline root, no serving directory.
  for name in ('metadata.sqlite', 'tfx', 'serving'):
    assert not os.path.exists(os.path.join(out, name)), name


def test_eight_rows_exit_2_before_anything_runs(tmp_path, cli):
  data = _span(tmp_path, [(i, 'ab'[i % 2]) for i in range(8)])
  out = str(tmp_path / 'out')
  result = cli(['run', '--data-root', data, '--label', 'kind', '--output',
                out])
  _assert_refused_before_running(result, out, 'holds 8 row(s)',
                                 'at least 10', 'Add rows')


def test_two_hundred_classes_of_three_rows_exit_2_naming_them(tmp_path, cli):
  data = _span(tmp_path, [(3 * c + r, f'c{c:03d}') for c in range(200)
                          for r in range(3)])
  out = str(tmp_path / 'out')
  result = cli(['run', '--data-root', data, '--label', 'kind', '--output',
                out])
  _assert_refused_before_running(
      result, out, "200 of the 200 classes of 'kind' have fewer than 5 rows",
      "'c000': 3, 'c001': 3", 'and 188 more', 'merge', 'drop their rows',
      '--min-rows-per-class 5')


def test_one_rare_class_among_common_ones_is_named(tmp_path, cli):
  rows = [(i, 'common') for i in range(30)] + [(i, 'other') for i in range(
      30)] + [(100, 'rare'), (101, 'rare')]
  data = _span(tmp_path, rows)
  out = str(tmp_path / 'out')
  result = cli(['run', '--data-root', data, '--label', 'kind', '--output',
                out])
  _assert_refused_before_running(result, out, "1 of the 3 classes",
                                 "'rare': 2")


@pytest.mark.parametrize('rows, counts, regression', [
    (10, {'a': 5, 'b': 5}, False),  # 5 = 4 train + 1 eval: enough.
    (10, {}, True),  # A regression has no classes to hold.
    (12, {}, False),  # A profile that counted no classes: rows only.
])
def test_spans_the_split_can_serve_pass(rows, counts, regression):
  split_feasibility.check(rows, counts, 'y', 'span 1', regression)


@pytest.mark.parametrize('rows, counts, message', [
    (9, {'a': 5, 'b': 4}, 'holds 9 row(s)'),
    (9, {}, 'holds 9 row(s)'),
    (14, {'a': 10, 'b': 4}, "'b': 4"),
])
def test_spans_the_split_cannot_serve_are_refused(rows, counts, message):
  with pytest.raises(ConfigError, match=re.escape(message)):
    split_feasibility.check(rows, counts, 'y', 'span 1', False)


def test_rare_classes_rarest_first():
  assert split_feasibility.rare_classes({'a': 4, 'b': 1, 'c': 9, 'd': 1}) == (
      ('b', 1), ('d', 1), ('a', 4))


def _rare_and_common(tmp_path):
  """200 classes of 3 rows beside 2 classes of 40 rows."""
  return _span(tmp_path, [(3 * c + r, f'c{c:03d}') for c in range(200)
                          for r in range(3)] +
               [(1000 + i, ('big', 'large')[i % 2]) for i in range(80)])


def test_min_rows_per_class_states_the_classes_it_drops_in_the_plan(
    tmp_path, cli):
  """compile builds the pipeline as run does and stops: the plan's line and
  the option in the ExampleGen's compiled custom_config."""
  data = _rare_and_common(tmp_path)
  out = str(tmp_path / 'pipeline.yaml')
  result = cli([
      'compile', '--target', 'kubeflow', '--image', 'example/leantfx:1',
      '--sample-data', data, '--label', 'kind', '--data-root',
      'gs://bucket/data', '--pipeline-root', 'gs://bucket/root',
      '--serving-dir', 'gs://bucket/serving', '--no-optimize', '--out', out,
      '--min-rows-per-class', '5'])
  assert result.returncode == 0, result.stdout + result.stderr
  assert ("--min-rows-per-class 5: 200 class(es) under 5 rows dropped, 600 "
          "row(s): 'c000': 3, 'c001': 3") in result.stdout, result.stdout
  with open(out, encoding='utf-8') as f:
    compiled = f.read()
  # The ExampleGen's custom_config carries N (a Struct's number: 5.0); the
  # model's classes are the two kept.
  assert '\\"min_rows_per_class\\": 5.0' in compiled
  assert '"classes": ["big", "large"]' in compiled


@pytest.mark.parametrize('extra, fragment', [
    (['--min-rows-per-class', '50'], 'leaving 0; a classification needs at '
     'least 2'),
    (['--min-rows-per-class', '2'], "200 of the 202 classes of 'kind' have "
     'fewer than 5 rows'),
])
def test_min_rows_per_class_that_cannot_serve_is_refused(tmp_path, cli, extra,
                                                         fragment):
  data = _rare_and_common(tmp_path)
  out = str(tmp_path / 'out')
  result = cli(['run', '--data-root', data, '--label', 'kind', '--output',
                out] + extra)
  _assert_refused_before_running(result, out, fragment)


def test_min_rows_per_class_on_a_regression_is_refused():
  with pytest.raises(ConfigError, match='a regression target'):
    split_feasibility.check(20, {}, 'y', 'span 1', True, 5)


@pytest.mark.parametrize('counts, dropped, left', [
    ({'a': 6, 'b': 5, 'c': 2, 'd': 1}, (('d', 1), ('c', 2)), 11),
    ({'a': 6, 'b': 5}, (), 11),
])
def test_min_rows_per_class_drops_the_classes_under_it(counts, dropped, left):
  drop = split_feasibility.check(sum(counts.values()), counts, 'y', 'span 1',
                                 False, 5)
  assert drop.classes == dropped
  assert sum(counts.values()) - drop.rows == left
  assert ('no row dropped' in drop.line()) == (not dropped)


def test_min_rows_per_class_leaving_too_few_rows_is_refused():
  with pytest.raises(ConfigError, match=re.escape(
      'holds 9 row(s) after --min-rows-per-class dropped 3')):
    split_feasibility.check(12, {'a': 5, 'b': 4, 'c': 3}, 'y', 'span 1',
                            False, 4)
