"""The task's quality metric: RMSE gates, ranks and reports a regression model.

No TensorFlow models: VariantMetrics are written out, the report is built
from them (see test_executor for a real regression model end to end).
"""
import math
import os

import numpy as np
import pytest

from leantfx.components.optimize import config as optimize_config
from leantfx.components.optimize.evaluation import quality
from leantfx.components.optimize.evaluation import report
from leantfx.components.optimize.evaluation import selection
from leantfx.components.optimize.evaluation.measure import VariantMetrics
from leantfx.errors import ConfigError

pytestmark = pytest.mark.unit


def regression_metrics(name, rmse, size):
  return VariantMetrics(
      name=name, technique='baseline', tflite_mode=name.split('/')[-1],
      runtime='tflite', path=f'/tmp/{name}', accuracy=None, num_examples=44,
      size_bytes=size, gzipped_bytes=size // 2, latency_p50_ms=0.01,
      latency_p99_ms=0.02, latency_runs=200, rmse=rmse, mae=rmse * 0.8)


# Diabetes-sized figures: RMSE in target units (the target spans 25-346).
BASELINE = regression_metrics('baseline/savedmodel', 50.0, 9_000)
FLOAT16 = regression_metrics('baseline/float16', 50.0, 1_500)
INT8 = regression_metrics('baseline/int8', 51.0, 1_200)  # +2%
WORSE = regression_metrics('baseline/dynamic', 54.0, 1_000)  # +8%


def test_rmse_and_mae_of_predictions_in_target_units():
  predictions = np.array([[10.0], [20.0], [33.0]])  # [n, 1], as a model gives
  labels = np.array([10.0, 24.0, 30.0])
  scores = quality.RMSE.scores(predictions, labels)
  # errors 0, -4, 3: MSE 25/3, MAE 7/3.
  assert scores['rmse'] == pytest.approx(math.sqrt(25 / 3))
  assert scores['mae'] == pytest.approx(7 / 3)
  assert quality.RMSE.drop(50.0, 54.0) == pytest.approx(0.08)
  assert quality.ACCURACY.drop(0.97, 0.95) == pytest.approx(0.02)
  with pytest.raises(ConfigError, match='one number per example'):
    quality.RMSE.scores(np.zeros((3, 2)), labels)
  with pytest.raises(ConfigError, match='Unknown task'):
    quality.for_task('ranking')


def test_gate_rejects_an_rmse_increase_beyond_the_bound_with_the_reason():
  budget = selection.Budget(max_accuracy_drop=0.01, max_rmse_increase=0.05)
  decisions = selection.gate(BASELINE, [INT8, WORSE], budget, quality.RMSE)
  assert [d.blessed for d in decisions] == [True, False]
  assert decisions[0].reasons == ('RMSE increase 0.020 <= 0.05',)
  assert decisions[1].reasons == ('RMSE increase 0.080 > 0.05',)
  assert decisions[1].rmse_increase == pytest.approx(0.08)
  assert decisions[1].accuracy_drop is None
  # Without the blessed int8, nothing is: the smaller, worse one never wins.
  assert selection.select(decisions[1:], selection.SMALLEST,
                          quality.RMSE) is None
  assert selection.select(decisions, selection.SMALLEST,
                          quality.RMSE).variant is INT8


def test_most_accurate_means_lowest_rmse():
  decisions = selection.gate(BASELINE, [INT8, FLOAT16],
                             selection.Budget(0.01), quality.RMSE)
  assert selection.select(decisions, selection.MOST_ACCURATE,
                          quality.RMSE).variant is FLOAT16


def test_regression_config_builds_every_mode_and_refuses_techniques():
  config = optimize_config.OptimizationConfig(task='regression')
  assert config.quality is quality.RMSE
  assert [c.name for c in config.candidates] == ['baseline']
  assert 'int8' in config.candidates[0].tflite_modes
  again = optimize_config.OptimizationConfig.from_json(config.to_json())
  assert again.task == 'regression' and again.candidates == config.candidates
  pruning = optimize_config.Candidate(
      (optimize_config.TechniqueStep('pruning'),), ('float32',))
  with pytest.raises(ConfigError, match="'pruning' on a regression"):
    optimize_config.OptimizationConfig(candidates=(pruning,),
                                       task='regression')
  both = optimize_config.OptimizationConfig(runtimes=('tflite', 'onnx'),
                                            task='regression')
  assert both.runtimes == ('tflite', 'onnx')


def test_report_names_rmse_and_the_techniques_left_out(tmp_path):
  budget = selection.Budget(0.01, max_rmse_increase=0.05)
  decisions = selection.gate(BASELINE, [INT8, WORSE], budget, quality.RMSE)
  held = {
      'baseline/savedmodel': selection.HeldOut(
          'baseline/savedmodel', 44, rmse=52.0, mae=41.0, rmse_increase=0.0),
      'baseline/int8': selection.HeldOut(
          'baseline/int8', 44, rmse=53.0, mae=42.0, rmse_increase=1 / 52),
  }
  report.write_report(
      str(tmp_path), BASELINE, decisions, decisions[0], budget=budget,
      policy='smallest', held_out=held, quality=quality.RMSE,
      left_out=optimize_config.REGRESSION_LEFT_OUT)
  with open(os.path.join(tmp_path, report.REPORT_MD), encoding='utf-8') as f:
    text = f.read()
  assert 'Budget: RMSE increase <= 0.05' in text
  assert '| rmse | mae | increase vs baseline |' in text
  assert 'RMSE increase 0.080 > 0.05' in text
  assert ('Not run for a regression model: distillation (trains a student '
          "on the teacher's class probabilities (soft labels))") in text
  assert 'accuracy' not in text.split('| variant |')[1].split('\n')[0]
  # regenerate reads the task back from variants.json.
  assert report.regenerate(str(tmp_path))['markdown']
