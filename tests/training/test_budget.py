"""The Trainer's step budget: passes over the train split, a floor and a cap.

The expected steps are worked by hand from the rule in
models/training/budget.py: ceil(passes x rows / examples per step), clamped
to [floor, cap]. The rows are counted from real gzipped TFRecord files.
"""
import os

import pytest

from leantfx import config as config_lib
from leantfx.cli import build
from leantfx.cli import main
from leantfx.errors import ConfigError
from leantfx.models.training import budget as budget_lib
from tests import helpers

pytestmark = pytest.mark.unit


@pytest.mark.parametrize('rows, batch, passes, floor, cap, expected', [
    # The user's 500k-row span: 400k train rows, batch 32, one pass.
    (400_000, 32, 1.0, 2000, 20_000, 12_500),
    # 100k rows: 80k train rows -> 2,500 steps.
    (80_000, 32, 1.0, 2000, 20_000, 2500),
    # digits: ~1,437 train rows are 45 steps a pass: the floor (1,000) wins.
    (1437, 32, 1.0, 1000, 20_000, 1000),
    # A split the cap decides: 10M rows would be 312,500 steps.
    (10_000_000, 32, 1.0, 2000, 20_000, 20_000),
    # Part of a row's batch still needs a step: ceil(2.5 x 100 / 32) = 8.
    (100, 32, 2.5, 1, 100, 8),
    # An empty split trains the floor.
    (0, 32, 1.0, 5, 10, 5),
])
def test_steps_for_passes(rows, batch, passes, floor, cap, expected):
  assert budget_lib.steps_for_passes(rows, batch, passes, floor,
                                     cap) == expected


def _write_split(directory, rows):
  helpers.write_gzip_split(directory, rows)
  return [os.path.join(directory, '*')]


def test_count_records_counts_every_record_and_stops_at_the_limit(tmp_path):
  pattern = _write_split(str(tmp_path / 'train'), 1001)
  assert budget_lib.count_records(pattern) == 1001
  assert budget_lib.count_records(pattern, limit=200) == 200
  assert budget_lib.count_records([str(tmp_path / 'none' / '*')]) == 0


def test_resolve_counts_the_rows_and_applies_the_rule(tmp_path):
  pattern = _write_split(str(tmp_path / 'train'), 1000)
  training = config_lib.TrainingConfig(
      train_steps=500, train_passes=2.0, min_train_steps=10, epochs=10)
  budget = budget_lib.resolve(training, 500, pattern, examples_per_step=32)
  # ceil(2 x 1000 / 32) = 63.
  assert (budget.steps, budget.train_rows, budget.rows_capped) == (63, 1000,
                                                                    False)
  applied = budget.applied_to(training)
  assert (applied.train_steps, applied.train_passes, applied.epochs) == (
      63, None, 10)
  record = budget.record(steps_run=63)
  assert record['examples'] == 63 * 32
  assert record['passes'] == pytest.approx(63 * 32 / 1000, abs=1e-3)


def test_resolve_stops_counting_where_the_cap_decides(tmp_path):
  pattern = _write_split(str(tmp_path / 'train'), 1000)
  training = config_lib.TrainingConfig(
      train_steps=8, train_passes=1.0, min_train_steps=1, epochs=1)
  budget = budget_lib.resolve(training, 8, pattern, examples_per_step=32)
  # 8 steps x 32 = 256 rows decide the cap; 257 are counted, not 1000.
  assert (budget.steps, budget.train_rows, budget.rows_capped) == (8, 257,
                                                                    True)
  assert 'passes' not in budget.record(steps_run=8)


def test_exact_steps_count_nothing(tmp_path):
  training = config_lib.TrainingConfig(train_steps=77, epochs=7)
  budget = budget_lib.resolve(training, 77, [str(tmp_path / 'missing*')], 32)
  assert (budget.steps, budget.rule, budget.train_rows) == (77, 'exact', None)


def _training(argv, dataset=None):
  args = main.build_parser().parse_args(['run'] + argv)
  return build.training_config(args, dataset)


def test_the_command_line_default_is_one_pass_with_a_floor_and_a_cap():
  bundled = _training([], 'digits')
  assert (bundled.train_passes, bundled.min_train_steps,
          bundled.train_steps) == (1.0, 1000, 20_000)
  own = _training([], None)
  assert (own.train_passes, own.min_train_steps) == (1.0, 2000)
  tuned = _training(['--train-passes', '3', '--min-train-steps', '50',
                     '--max-train-steps', '900'])
  assert (tuned.train_passes, tuned.min_train_steps, tuned.train_steps) == (
      3.0, 50, 900)


def test_train_steps_is_exact_and_refuses_the_passes_options():
  exact = _training(['--train-steps', '123'], 'digits')
  assert (exact.train_steps, exact.train_passes) == (123, None)
  with pytest.raises(ConfigError, match='--train-passes'):
    _training(['--train-steps', '123', '--train-passes', '2'])
  with pytest.raises(ConfigError, match='floor'):
    _training(['--min-train-steps', '500', '--max-train-steps', '400'])
