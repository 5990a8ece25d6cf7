"""The held-out benchmarks: disjoint splits, and the "within noise" rule.

``benchmarks.heldout.compare`` on hand-made paired differences whose verdict
follows from the rule (|mean| <= t(0.975, n - 1) x SE), and the real split
helpers of bench_compression (digits) and bench_regression (diabetes): the
rows that choose never report. No model is trained.
"""
import math

import numpy as np
import pytest

from benchmarks import bench_compression
from benchmarks import bench_regression
from benchmarks import heldout

pytestmark = pytest.mark.unit

# Student's t, two-sided 95%, from printed tables: 2 and 4 degrees of
# freedom.
T_2DF, T_4DF = 4.303, 2.776


def test_t_quantile_matches_the_printed_table():
  assert heldout.t_quantile(2) == pytest.approx(T_2DF, abs=1e-3)
  assert heldout.t_quantile(4) == pytest.approx(T_4DF, abs=1e-3)


@pytest.mark.parametrize('differences, higher_is_better, verdict', [
    # The audited figure: +0.37 point as 2 of 540 predictions over 3 seeds
    # (per seed +1, +1, 0 examples of 180): mean 0.37 point, SE 0.19, the
    # 95% half-width 0.83 point.
    ((1 / 180, 1 / 180, 0.0), True, heldout.WITHIN_NOISE),
    # Each seed gains 2 to 4 points: mean 3, SE 0.58, half-width 2.48.
    ((0.02, 0.03, 0.04), True, heldout.BETTER),
    # The same as an error (lower is better): worse.
    ((0.02, 0.03, 0.04), False, heldout.WORSE),
    # The same losses as accuracy: worse.
    ((-0.02, -0.03, -0.04), True, heldout.WORSE),
    # Seeds disagree on the sign.
    ((-0.01, 0.02, -0.005, 0.015, 0.0), True, heldout.WITHIN_NOISE),
    # Ties on every seed.
    ((0.0, 0.0, 0.0), True, heldout.WITHIN_NOISE),
    # Every seed agrees exactly (no spread): outside noise.
    ((0.005, 0.005), True, heldout.BETTER),
    # RMSE lower by 1.0 +- 0.1 over 5 seeds: better.
    ((-1.1, -0.9, -1.0, -1.05, -0.95), False, heldout.BETTER),
])
def test_compare_classifies_paired_differences(differences, higher_is_better,
                                               verdict):
  result = heldout.compare(differences, higher_is_better)
  assert result['verdict'] == verdict
  n = len(differences)
  assert result['mean'] == pytest.approx(sum(differences) / n)
  assert result['min'] == min(differences)
  assert result['max'] == max(differences)
  assert result['half_width'] == pytest.approx(
      heldout.t_quantile(n - 1) * result['sd'] / math.sqrt(n))


def test_the_audited_gain_is_within_noise_by_the_numbers():
  result = heldout.compare((1 / 180, 1 / 180, 0.0))
  assert result['mean'] == pytest.approx(2 / 540)
  # SE = sd / sqrt(3) = (1/180) / sqrt(3) / sqrt(3) = 1/540.
  assert result['se'] == pytest.approx(1 / 540)
  assert result['half_width'] == pytest.approx(T_2DF / 540, rel=1e-3)


def test_figure_prints_mean_range_interval_and_verdict():
  result = heldout.compare((0.002, 0.009, -0.006))
  assert heldout.figure(result, scale=100, unit='point') == (
      '+0.17 point (-0.60..+0.90 over 3 seeds, 95% interval +-1.86), '
      'within noise')


def test_one_example_per_seed_is_within_noise_at_that_resolution():
  # The first held-out run of the default distillation recipe: the distilled
  # student one report example (of 360) behind scratch on each of 3 seeds.
  one_behind = (-1 / 360,) * 3
  assert heldout.compare(one_behind)['verdict'] == heldout.WORSE
  result = heldout.compare(one_behind, resolution=1 / 360)
  assert result['verdict'] == heldout.WITHIN_NOISE
  assert result['se'] == pytest.approx((1 / 360) / math.sqrt(3))
  # Three examples behind on every seed is outside that floor.
  assert heldout.compare((-3 / 360,) * 3, resolution=1 / 360)['verdict'] == (
      heldout.WORSE)


@pytest.mark.parametrize('differences', [(), (0.1,), (0.1, float('nan'))])
def test_compare_refuses_what_it_cannot_judge(differences):
  with pytest.raises(ValueError, match='at least 2 seeds|finite'):
    heldout.compare(differences)


def test_digits_splits_are_disjoint_and_report_rows_were_never_scored():
  pipeline_eval = bench_compression.pipeline_eval_rows()
  examples = 1797  # scikit-learn's load_digits()
  splits = bench_compression.split_indices(examples, pipeline_eval)
  train, selection, report = (set(splits[k].tolist())
                              for k in ('train', 'selection', 'report'))
  assert not train & selection and not train & report
  assert not selection & report
  assert train | selection | report == set(range(examples))
  assert len(report) == bench_compression.REPORT_EXAMPLES
  assert len(selection) == examples - int(
      bench_compression.TRAIN_FRACTION * examples)
  # No row the pipeline's eval split holds reports; the split helper found
  # the ExampleGen's 4:1 share of them.
  assert not report & set(pipeline_eval.tolist())
  assert 0.15 < len(pipeline_eval) / examples < 0.25
  # The selection split is the rows the bench chose on before (the old
  # test split), so the report rows are none of them.
  order = np.random.default_rng(bench_compression.SEED).permutation(examples)
  old_test = set(order[int(bench_compression.TRAIN_FRACTION * examples):]
                 .tolist())
  assert selection == old_test
  # Deterministic.
  again = bench_compression.split_indices(examples, pipeline_eval)
  for key, value in splits.items():
    np.testing.assert_array_equal(value, again[key])


def test_diabetes_folds_never_touch_the_eval_split():
  split = bench_regression.diabetes_split()
  # The pipeline's ExampleGen split of the 442 rows (docs/measurements.md,
  # "Regression": 350 train, 92 eval).
  assert (len(split['train']), len(split['eval'])) == (350, 92)
  assert not set(split['train']) & set(split['eval'])
  evaluation = set(split['eval'].tolist())
  folds = bench_regression.cv_folds(split['train'])
  assert len(folds) == bench_regression.CV_FOLDS
  scored = []
  for fit, score in folds:
    assert not set(fit) & set(score)
    assert not (set(fit) | set(score)) & evaluation
    assert set(fit) | set(score) == set(split['train'].tolist())
    scored += score.tolist()
  # Each train row scores in exactly one fold.
  assert sorted(scored) == sorted(split['train'].tolist())
