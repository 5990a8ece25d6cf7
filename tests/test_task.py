"""The label decides the task (classification or regression): the rules and
the bad inputs.

The rules of leantfx/task.py are checked on label values alone; the bad
inputs (a text label for a regression, a fractional one for a
classification, a target with NaN or infinity, a constant target, an
undecidable label, class-only options on a regression) go through ``main``
in-process (--verbose keeps fd 2 the test's), as tests/test_frontend.py
does: each must end with exit 2, one error line that says what to do, and
nothing written to serving/.
"""
import os
import re

import pytest

from leantfx import task as task_lib
from leantfx.cli import build
from leantfx.cli import main
from leantfx.cli import options
from leantfx.errors import ConfigError

pytestmark = pytest.mark.unit


def _ints(n):
  return [str(i) for i in range(n)]


@pytest.mark.parametrize('values,rows,task,why', [
    (['Adelie', 'Gentoo'], 10, 'classification', 'text'),
    (['true', 'false'], 10, 'classification', 'text'),
    (_ints(10), 1797, 'classification', '10 distinct integers'),
    (['151.0', '75.5', '141.0'], 442, 'regression', 'float column'),
    # Diabetes' target as integers: 214 distinct values in 442 rows.
    (_ints(214), 442, 'regression', '214 distinct integers in 442 rows'),
])
def test_auto_decides_from_the_label_values(values, rows, task, why):
  decision = task_lib.decide('y', values, rows)
  assert decision.task == task
  assert why in decision.reason
  assert decision.requested == 'auto'


def test_auto_asks_for_task_when_it_cannot_decide():
  # The in-between case docs/training.md gives: 40 distinct integers in 200
  # rows.
  with pytest.raises(ConfigError, match='Pass --task classification or '
                     '--task regression'):
    task_lib.decide('y', _ints(40), 200)


def test_an_explicit_task_is_checked_against_the_values():
  assert task_lib.decide('y', _ints(40), 200,
                         'classification').task == 'classification'
  assert task_lib.decide('y', _ints(40), 200, 'regression').task == (
      'regression')
  # Integral floats are classes if the user says so.
  assert task_lib.decide('y', ['1.0', '2.0'], 9,
                         'classification').task == 'classification'
  with pytest.raises(ConfigError, match='needs a numeric label'):
    task_lib.decide('species', ['Adelie', '1.5'], 9, 'regression')
  with pytest.raises(ConfigError, match='fractional part'):
    task_lib.decide('y', ['1.0', '2.5'], 9, 'classification')


def _write_span(tmp_path, header, rows):
  span = tmp_path / 'data' / 'span-1'
  span.mkdir(parents=True, exist_ok=True)
  (span / 'd.csv').write_text(
      '\n'.join([header] + rows) + '\n', encoding='utf-8')
  return str(tmp_path / 'data')


def _regression_rows(n=60):
  return [f'{i % 7},{(i * 37) % 11}.5,{i * 1.25}' for i in range(n)]


def _run_error(tmp_path, capsys, data_root, *extra):
  out = str(tmp_path / 'out')
  argv = ['run', '--data-root', data_root, '--label', 'y', '--output', out,
          '--verbose'] + list(extra)
  code = main.main(argv)
  err = capsys.readouterr().err
  assert code == 2, err
  assert 'Traceback' not in err
  assert not os.path.exists(os.path.join(out, 'serving'))
  lines = [l for l in err.splitlines() if 'error:' in l]
  assert lines, err
  return lines[-1]


def test_nan_and_infinite_targets_are_refused_naming_the_rows(
    tmp_path, capsys):
  rows = _regression_rows()
  rows[4] = '1,2.5,nan'
  rows[9] = '1,2.5,inf'
  root = _write_span(tmp_path, 'a,b,y', rows)
  error = _run_error(tmp_path, capsys, root)
  assert 'NaN or infinite in 2 row(s)' in error
  # Line 1 is the header: data row i is on line i + 2.
  assert 'd.csv line 6' in error and 'd.csv line 11' in error


def test_a_constant_target_is_refused(tmp_path, capsys):
  root = _write_span(tmp_path, 'a,b,y',
                     [f'{i},{i}.5,42.5' for i in range(20)])
  error = _run_error(tmp_path, capsys, root, '--task', 'regression')
  assert 'single value' in error and 'constant target' in error


def test_task_regression_on_a_string_label_is_refused(tmp_path, capsys):
  root = _write_span(tmp_path, 'a,b,y',
                     [f'{i},{i}.5,{"ab"[i % 2]}' for i in range(20)])
  error = _run_error(tmp_path, capsys, root, '--task', 'regression')
  assert '--task regression needs a numeric label' in error


def test_task_classification_on_a_fractional_label_is_refused(
    tmp_path, capsys):
  root = _write_span(tmp_path, 'a,b,y', _regression_rows())
  error = _run_error(tmp_path, capsys, root, '--task', 'classification')
  assert 'fractional part' in error and '--task regression' in error


def test_undecidable_label_asks_for_task(tmp_path, capsys):
  root = _write_span(tmp_path, 'a,b,y',
                     [f'{i},{i}.5,{i % 40}' for i in range(200)])
  error = _run_error(tmp_path, capsys, root)
  assert 'Pass --task classification or --task regression' in error


@pytest.mark.parametrize('flags,named', [
    (['--oversample', 'smote'], '--oversample smote'),
    (['--oversample', 'random'], '--oversample random'),
    (['--class-weights', 'auto'], '--class-weights auto'),
    (['--tune', '3'], '--tune'),
    (['--tflite-max-accuracy-drop', '0.02'], '--tflite-max-accuracy-drop'),
    (['--min-auc', '0.8'], '--min-auc'),
])
def test_class_only_options_are_refused_for_a_regression(
    tmp_path, capsys, flags, named):
  root = _write_span(tmp_path, 'a,b,y', _regression_rows())
  error = _run_error(tmp_path, capsys, root, *flags)
  assert named in error


def _build(tmp_path, *argv):
  args = main.build_parser().parse_args(['run', '--output', str(tmp_path / 'out')] +
                           list(argv))
  return build.build_pipeline_config(args, build.LocalTarget(
      str(tmp_path / 'out')))


def test_a_float_label_builds_a_regression_with_an_rmse_optimizer(tmp_path):
  root = _write_span(tmp_path, 'a,b,y', _regression_rows())
  built = _build(tmp_path, '--data-root', root, '--label', 'y')
  assert built.data.task.task == 'regression'
  assert "'y' is a float column" in built.data.task.reason
  spec = built.config.dataset
  assert spec.task == 'regression' and spec.classes == ()
  optimization = built.config.optimization
  assert optimization.task == 'regression'
  assert optimization.quality.name == 'rmse'
  assert optimization.budget.max_rmse_increase == 0.05
  assert built.config.tflite_push_base.endswith('tflite')
  # A classification run refuses the regression budget.
  with pytest.raises(ConfigError, match='--tflite-max-rmse-increase is a '
                     'budget for a regression target'):
    _build(tmp_path, '--dataset', 'penguins', '--tflite-max-rmse-increase',
           '0.1')


def test_diabetes_is_a_bundled_regression(tmp_path):
  built = _build(tmp_path, '--dataset', 'diabetes')
  assert built.config.dataset.task == 'regression'
  assert built.data.profile.num_rows == 442
  assert len(built.data.profile.label_values) == 214
  # The same values decide regression on their own too.
  assert task_lib.decide('target', built.data.profile.label_values,
                         442).task == 'regression'
  with pytest.raises(ConfigError, match='does not match the bundled'):
    _build(tmp_path, '--dataset', 'diabetes', '--task', 'classification')


def test_task_is_a_pipeline_option_of_every_command():
  assert 'task' in options.pipeline_defaults()
  assert options.pipeline_defaults()['task'] == 'auto'
