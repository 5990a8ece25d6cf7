"""--min-rows-per-class and --tune auto through one real, cheap run.

200 classes of 3 rows beside 2 classes of 40 rows: by default the
pre-flight refuses the span (tests/test_split_feasibility.py); with
``--min-rows-per-class 5`` the run trains on the 2 classes, its plan and
summary name the classes dropped and their rows, and the row count (rows
read == rows used + rows dropped by this option, leantfx/row_counts.py)
holds. The same run has ``--tune auto`` with trials of 2 steps: the untuned
network probed for 2 steps trails HistGradientBoosting on classes told apart
by a sign, so the AutoTuner searches its budget, and the Trainer trains the
values the decision names (models/auto_tune.py). Tiny data, few steps, the
network only, no optimizer: one cheap run for both.
"""
import json
import os

import pytest

from leantfx import config as config_lib
from leantfx.models import hyperparameters
from leantfx.models.training import callbacks as callbacks_lib
from leantfx.pipeline import run_summary
from tests.helpers import run_cli


def _write_span(root):
  os.makedirs(os.path.join(root, 'span-1'))
  lines = ['x,z,kind']
  lines += [f'{3 * c + r},{c % 7},c{c:03d}' for c in range(200)
            for r in range(3)]
  # The two kept classes are told apart by x's sign.
  lines += [f'{(i + 1) * (1 if i % 2 else -1)},{i % 5},'
            f'{("big", "large")[i % 2]}' for i in range(80)]
  with open(os.path.join(root, 'span-1', 'rows.csv'), 'w',
            encoding='utf-8') as f:
    f.write('\n'.join(lines) + '\n')


@pytest.fixture(scope='module')
def run(tmp_path_factory):
  tmp = tmp_path_factory.mktemp('rare_classes')
  data = str(tmp / 'data')
  _write_span(data)
  output = str(tmp / 'out')
  record = str(tmp / 'record.json')
  result = run_cli(['run', '--data-root', data, '--label', 'kind', '--output',
                    output, '--run-record', record, '--min-rows-per-class',
                    '5', '--train-steps', '30', '--model-family', 'network',
                    '--baseline-margin', 'off', '--min-accuracy', '0',
                    '--tune', 'auto', '--tuner-steps', '2', '--tuner-epochs',
                    '1'])
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  with open(record, encoding='utf-8') as f:
    facts = json.load(f)
  return result, output, facts


@pytest.mark.e2e
def test_rare_classes_are_dropped_counted_and_named(run):
  result, _, facts = run
  # The plan, before anything runs: which classes, how many rows.
  assert ("--min-rows-per-class 5: 200 class(es) under 5 rows dropped, 600 "
          "row(s): 'c000': 3") in result.stdout
  assert '(680 rows in span 1' in result.stdout and '2 classes' in (
      result.stdout)
  # The summary: read, used, and the rest dropped by the option.
  assert ('rows: 680 read, 80 used, 600 dropped (--min-rows-per-class 5: '
          "200 class(es): 'c000': 3") in result.stdout
  rows = facts['rows']
  assert rows['checked'] == rows['read'] == 680 and rows['used'] == 80
  assert rows['dropped'] == {f'c{c:03d}': 3 for c in range(200)}


@pytest.mark.e2e
def test_tune_auto_searches_when_the_probe_trails_and_says_why(run):
  result, output, facts = run
  decision = facts['tune_auto']
  assert decision['probe'] is not None and decision['strong'] is not None
  # A probe of 2 steps against a model that splits on a sign.
  assert decision['probe'] < decision['strong'] - decision['margin']
  assert 'searched 8 trials' in decision['reason']
  assert decision['trials'] == config_lib.AUTO_TUNER_TRIALS
  assert f"tuner (--tune auto): {decision['reason']}" in result.stdout
  summary = run_summary.summarize(os.path.join(output, 'metadata.sqlite'),
                                  'leantfx-data')
  tuner = summary.executions['Tuner'].outputs
  with open(os.path.join(tuner['best_hyperparameters'][0].uri,
                         'best_hyperparameters.txt')) as f:
    best = json.load(f)
  with open(os.path.join(tuner['tuner_results'][0].uri,
                         'tuner_results.json')) as f:
    assert 1 <= len(json.load(f)) <= config_lib.AUTO_TUNER_TRIALS
  uri = summary.executions['Trainer'].outputs['model_run'][0].uri
  with open(os.path.join(uri, callbacks_lib.RECORD_FILE)) as f:
    trained = json.load(f)
  # The Trainer trained the values the decision names: the best trial's, or
  # (no trial beat the probe) none, the configured network.
  assert trained['hyperparameters'] == best
  if decision['search']:
    assert tuple(trained['training']['hidden_units']) == (
        hyperparameters.hidden_units(best['values']['units'],
                                     best['values']['depth']))
  else:
    assert best['values'] == {}
