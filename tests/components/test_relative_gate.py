"""The relative gate: its rule, and the bound it writes into the EvalConfig.

Expected values are worked by hand from rule.py's formulas, z being the
0.99 normal quantile, statistics.NormalDist().inv_cdf(0.99) = 2.3263479.
"""
import dataclasses
import math

import pytest
import tensorflow_model_analysis as tfma

from leantfx import config as config_lib
from leantfx import datasets
from leantfx.components.relative_gate import rule
from leantfx.components.relative_gate import thresholds
from leantfx.pipeline import pipeline

pytestmark = pytest.mark.unit

Z = 2.3263479


@pytest.mark.parametrize('p0, n, expected', [
    # 0.5 + z * sqrt(0.25 / 100) = 0.5 + z * 0.05.
    (0.5, 100, 0.5 + Z * 0.05),
    # Digits' majority class on its 360 eval rows, about 0.1.
    (0.1, 360, 0.1 + Z * math.sqrt(0.09 / 360)),
    # One class only: the majority is always right, so must the model be.
    (1.0, 50, 1.0),
    # 20 rows, 95% one class: 0.95 + z * 0.0487 > 1, no model can show it
    # beats the majority on so few rows.
    (0.95, 20, 0.95 + Z * math.sqrt(0.95 * 0.05 / 20)),
])
def test_majority_bound_is_the_one_sided_binomial_normal_test(p0, n,
                                                              expected):
  assert rule.majority_bound(p0, n) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize('rmse0, n, expected', [
    # 10 * sqrt(1 - z * sqrt(2 / 200)) = 10 * sqrt(1 - z * 0.1).
    (10.0, 200, 10.0 * math.sqrt(1 - Z * 0.1)),
    # z * sqrt(2 / 2) > 1: two rows can show nothing, the bound is 0.
    (10.0, 2, 0.0),
])
def test_mean_bound_is_the_chi_square_spread_of_the_mse(rmse0, n, expected):
  assert rule.mean_bound(rmse0, n) == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize('kwargs, combined, value, failed', [
    # Strong 0.97 less the 0.01 margin is above the majority's 0.1368.
    (dict(margin=0.01), 0.96, 0.95, [rule.STRONG]),
    (dict(margin=0.01), 0.96, 0.965, []),
    # --min-accuracy 0.98 is the highest bound.
    (dict(margin=0.01, absolute=0.98), 0.98, 0.97, [rule.ABSOLUTE]),
    # --baseline-margin off: only --min-accuracy.
    (dict(margin=None, absolute=0.5), 0.5, 0.4, [rule.ABSOLUTE]),
    (dict(margin=None), None, 0.0, []),
    # A wider margin: 0.97 - 0.1 = 0.87.
    (dict(margin=0.1), 0.87, 0.86, [rule.STRONG]),
])
def test_classification_gate(kwargs, combined, value, failed):
  gate = rule.gate(rule.ACCURACY, trivial_value=0.1, strong_value=0.97,
                   strong_model='HistGradientBoostingClassifier',
                   eval_rows=360, **kwargs)
  assert gate.combined == (None if combined is None else
                           pytest.approx(combined))
  assert [b.source for b in gate.failed(value)] == failed
  assert rule.Gate.from_json(gate.to_json()) == gate


def test_a_model_at_the_majority_class_is_not_blessed():
  # The 12,000-row case of issue 43: 2,400 eval rows, majority 0.40; a
  # model at 0.41 is within chance of it (bound 0.40 + z * 0.0100 = 0.4233).
  gate = rule.gate(rule.ACCURACY, 0.40, None, '', 2400, margin=0.01)
  assert [b.source for b in gate.failed(0.41)] == [rule.TRIVIAL]
  assert gate.failed(0.43) == []


@pytest.mark.parametrize('value, failed', [
    (5.04, []),  # Within 1% of the strong baseline's 5.0.
    (6.0, [rule.STRONG]),
    # Above the mean's bound 10 * sqrt(1 - z * 0.1) = 8.7599 too.
    (9.0, [rule.TRIVIAL, rule.STRONG]),
])
def test_regression_gate_bounds_rmse_from_above(value, failed):
  gate = rule.gate(rule.RMSE, trivial_value=10.0, strong_value=5.0,
                   strong_model='HistGradientBoostingRegressor',
                   eval_rows=200, margin=0.01)
  assert gate.combined == pytest.approx(5.05)
  assert [b.source for b in gate.failed(value)] == failed


def test_a_model_five_points_under_the_strong_baseline_is_not_blessed():
  # Issue 43's "done when": 0.86 against HistGradientBoosting's 0.91.
  gate = rule.gate(rule.ACCURACY, 0.34, 0.91, 'HistGradientBoosting', 2400,
                   margin=0.01)
  (failed,) = gate.failed(0.86)
  assert failed.source == rule.STRONG and failed.value == pytest.approx(0.90)
  assert 'HistGradientBoosting: 0.9100' in failed.reason


@pytest.mark.parametrize('bad', [
    dict(metric='auc'), dict(margin=-0.1)])
def test_gate_refuses_bad_arguments(bad):
  kwargs = dict(metric=rule.ACCURACY, trivial_value=0.1, strong_value=0.9,
                strong_model='m', eval_rows=10, margin=0.01)
  kwargs.update(bad)
  with pytest.raises(ValueError):
    rule.gate(**kwargs)


def _overall_value_threshold(eval_config, class_name):
  for spec in eval_config.metrics_specs:
    for metric in spec.metrics:
      if metric.class_name != class_name:
        continue
      if metric.HasField('threshold'):
        return metric.threshold
      (per_slice,) = metric.per_slice_thresholds
      assert list(per_slice.slicing_specs) == [tfma.SlicingSpec()]
      return per_slice.threshold
  raise AssertionError(class_name)


@pytest.mark.parametrize('evaluation, absolute', [
    (config_lib.EvaluationConfig(), None),
    (config_lib.EvaluationConfig(min_accuracy=0.97), 0.97),
    # With slices the overall bound is a per-slice threshold of the overall
    # slice (pipeline._overall).
    (config_lib.EvaluationConfig(slices=(('island',),)), None),
])
def test_the_gate_moves_the_pipelines_accuracy_bound(evaluation, absolute):
  eval_config = pipeline._eval_config(datasets.BUNDLED['penguins'],
                                      evaluation)
  assert thresholds.absolute_bound(eval_config, rule.ACCURACY) == (
      None if absolute is None else pytest.approx(absolute))
  gate = rule.gate(rule.ACCURACY, 0.44, 0.99, 'HGB', 70, margin=0.01,
                   absolute=absolute)
  gated = thresholds.with_gate(eval_config, gate)
  threshold = _overall_value_threshold(gated, 'SparseCategoricalAccuracy')
  assert threshold.value_threshold.lower_bound.value == pytest.approx(
      max(0.98, absolute or 0))
  # The change threshold against the last blessed model is kept as built.
  built = _overall_value_threshold(eval_config, 'SparseCategoricalAccuracy')
  assert threshold.change_threshold == built.change_threshold
  # The built config itself is unchanged (a copy was gated).
  assert built.value_threshold.lower_bound.value == pytest.approx(
      absolute or 0)


def test_the_gate_moves_a_regressions_rmse_bound():
  spec = dataclasses.replace(datasets.BUNDLED['diabetes'])
  eval_config = pipeline._eval_config(
      spec, config_lib.EvaluationConfig(max_rmse=80.0))
  assert thresholds.absolute_bound(eval_config, rule.RMSE) == 80.0
  gate = rule.gate(rule.RMSE, 75.0, 55.0, 'HGB', 88, margin=0.01,
                   absolute=80.0)
  gated = thresholds.with_gate(eval_config, gate)
  threshold = _overall_value_threshold(gated, 'RootMeanSquaredError')
  assert threshold.value_threshold.upper_bound.value == pytest.approx(55.55)
