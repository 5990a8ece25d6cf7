"""The Evaluator's metrics per task (classification or regression): R² and
the eval configs.

R² is leantfx's own TFMA metric (pipeline/regression_metrics.py); its
combiner is checked against scikit-learn's r2_score on the same numbers, with
the accumulators split and merged as Beam would.
"""
import numpy as np
import pytest
from sklearn import metrics as sk_metrics
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis.metrics import metric_types

from leantfx import config as config_lib
from leantfx import datasets
from leantfx.pipeline import pipeline
from leantfx.pipeline import regression_metrics

pytestmark = pytest.mark.unit


def _r2(labels, predictions, splits=1):
  computation = regression_metrics.CoefficientOfDetermination(
  ).computations(eval_config=tfma.EvalConfig(model_specs=[tfma.ModelSpec()]))[0]
  combiner = computation.combiner
  accumulators = []
  for part in np.array_split(np.arange(len(labels)), splits):
    acc = combiner.create_accumulator()
    for i in part:
      acc = combiner.add_input(acc, metric_types.StandardMetricInputs(
          labels=np.array([labels[i]]),
          predictions=np.array([predictions[i]]),
          example_weights=np.array([1.0])))
    accumulators.append(acc)
  merged = combiner.merge_accumulators(accumulators)
  (key, value), = combiner.extract_output(merged).items()
  assert key.name == 'r2_score'
  return value


def test_r2_matches_scikit_learn():
  rng = np.random.default_rng(0)
  labels = rng.uniform(25, 346, size=50)  # diabetes' target range
  predictions = labels + rng.normal(0, 40, size=50)
  expected = sk_metrics.r2_score(labels, predictions)
  assert _r2(labels, predictions) == pytest.approx(expected, rel=1e-9)
  assert _r2(labels, predictions, splits=3) == pytest.approx(expected,
                                                             rel=1e-9)
  # Predicting the mean is 0; a constant label has no R².
  assert _r2(labels, np.full(50, labels.mean())) == pytest.approx(0, abs=1e-9)
  assert np.isnan(_r2(np.ones(5), np.arange(5.0)))


def _metric_names(eval_config):
  return {m.class_name: (spec, m) for spec in eval_config.metrics_specs
          for m in spec.metrics}


def test_regression_eval_config_gates_on_r2_and_rmse():
  spec = datasets.BUNDLED['diabetes']
  evaluation = config_lib.EvaluationConfig(min_r2=0.3, max_rmse=60.0,
                                           max_rmse_increase=0.1)
  found = _metric_names(pipeline._eval_config(spec, evaluation))  # pylint: disable=protected-access
  assert {'MeanAbsoluteError', 'MeanSquaredError', 'RootMeanSquaredError',
          'CoefficientOfDetermination'} <= set(found)
  assert 'SparseCategoricalAccuracy' not in found
  _, rmse = found['RootMeanSquaredError']
  assert rmse.threshold.value_threshold.upper_bound.value == 60.0
  assert rmse.threshold.change_threshold.direction == (
      tfma.MetricDirection.LOWER_IS_BETTER)
  assert rmse.threshold.change_threshold.relative.value == pytest.approx(0.1)
  _, r2 = found['CoefficientOfDetermination']
  assert r2.module == 'leantfx.pipeline.regression_metrics'
  assert r2.threshold.value_threshold.lower_bound.value == 0.3


def test_binary_labels_get_auc_precision_recall_and_an_auc_gate():
  spec = config_lib.DatasetSpec(name='b', label='y', classes=('no', 'yes'),
                                numeric_features=('x',))
  found = _metric_names(pipeline._eval_config(  # pylint: disable=protected-access
      spec, config_lib.EvaluationConfig(min_auc=0.8)))
  for name in ('AUC', 'Precision', 'Recall'):
    metrics_spec, _ = found[name]
    assert list(metrics_spec.binarize.class_ids.values) == [1]
  assert found['AUC'][1].threshold.value_threshold.lower_bound.value == 0.8
  # Three classes: accuracy only.
  found = _metric_names(pipeline._eval_config(  # pylint: disable=protected-access
      datasets.BUNDLED['penguins'], config_lib.EvaluationConfig()))
  assert 'AUC' not in found and 'SparseCategoricalAccuracy' in found
