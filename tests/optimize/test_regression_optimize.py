"""The ModelOptimizer on a regression model: RMSE gates, a TFLite model ships.

A tiny diabetes-shaped model (leantfx's own build_model on the bundled
diabetes spec: ten numeric inputs, no hidden layer, the Rescaling head that
puts predictions in target units) is fitted for a few epochs on synthetic
rows, saved as run_fn saves it, and run through ``flow.optimize`` (every
step the executor's Do runs after its input checks, which test_executor
covers): float32/float16/dynamic_range/int8 TFLite variants, measured by RMSE on
the selection split, gated on the relative RMSE increase, re-measured on the
report split, the smallest blessed one pushed.
"""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from leantfx import config as config_lib
from leantfx import datasets
from leantfx.components.optimize import config as optimize_config
from leantfx.components.optimize import flow
from leantfx.components.optimize.evaluation import measure
from leantfx.runtimes import push
from leantfx.components.optimize.evaluation.selection import Budget
from leantfx.models import model as model_lib

pytestmark = pytest.mark.unit

# Diabetes' target: mean about 152, standard deviation about 77 (442 rows).
TARGET_SCALE = (152.0, 77.0)
NUM_TRAIN, NUM_EVAL = 320, 120


def _rows(rng, n, names):
  features = {f'{c}_xf': rng.normal(size=(n, 1)).astype('float32')
              for c in names}
  weights = np.linspace(-1.0, 1.0, len(names))
  stacked = np.concatenate([features[f'{c}_xf'] for c in names], axis=1)
  target = (TARGET_SCALE[0] + 40.0 * stacked @ weights +
            rng.normal(scale=20.0, size=n)).astype('float32')
  return features, target


@pytest.fixture(scope='module')
def regression_run(tmp_path_factory):
  spec = datasets.BUNDLED['diabetes']
  tf.keras.utils.set_random_seed(0)
  model = model_lib.build_model(
      spec, config_lib.TrainingConfig(hidden_units=()), {}, TARGET_SCALE)
  rng = np.random.default_rng(0)
  train = _rows(rng, NUM_TRAIN, spec.numeric_features)
  evaluation = _rows(rng, NUM_EVAL, spec.numeric_features)
  train_ds = tf.data.Dataset.from_tensor_slices(train).batch(32)
  eval_ds = tf.data.Dataset.from_tensor_slices(evaluation).batch(32)
  model.fit(train_ds, epochs=30, verbose=0)
  root = tmp_path_factory.mktemp('regression_optimizer')
  model_dir = str(root / 'model' / 'Format-Keras')
  model.save(model_dir, save_format='tf')
  config = optimize_config.OptimizationConfig(
      task='regression', budget=Budget(0.01, max_rmse_increase=0.05),
      latency_runs=20, warmup_runs=2, runtimes=('tflite', 'openvino', 'onnx'))
  outcome = flow.optimize(
      model, model_dir, str(root / 'model'), train_ds, eval_ds, config,
      str(root / 'report'), str(root / 'tflite'), 'diabetes')
  return model, evaluation, outcome, root


def test_regression_variants_are_gated_on_rmse_and_one_is_pushed(
    regression_run):
  _, _, outcome, root = regression_run
  names = [d.variant.name for d in outcome.decisions]
  assert names == ['baseline/float32', 'baseline/float16',
                   'baseline/dynamic_range', 'baseline/int8',
                   'baseline/openvino_float32', 'baseline/openvino_int8',
                   'baseline/onnx_float32', 'baseline/onnx_int8']
  assert outcome.baseline.accuracy is None and outcome.baseline.rmse > 0
  for d in outcome.decisions:
    assert d.reasons[0].startswith('RMSE increase ')
    assert d.rmse_increase == pytest.approx(
        (d.variant.rmse - outcome.baseline.rmse) / outcome.baseline.rmse)
  # The same float model in TFLite, OpenVINO and ONNX Runtime: the same
  # predictions in target units, the same RMSE.
  for d in outcome.decisions:
    if d.variant.tflite_mode == 'float32':
      assert d.variant.rmse == pytest.approx(outcome.baseline.rmse,
                                             rel=1e-4), d.variant.name
  assert outcome.selected is not None and outcome.pushed is not None

  manifest = push.read_manifest(outcome.pushed.directory)
  metrics = manifest['metrics']
  for key in ('rmse', 'mae', 'baseline_rmse', 'rmse_increase',
              'selection_rmse', 'selection_rmse_increase'):
    assert isinstance(metrics[key], float), key
  assert 'accuracy' not in metrics and 'accuracy_drop' not in metrics
  assert metrics['selection_rmse_increase'] <= 0.05
  assert metrics['eval_examples'] + metrics['selection_examples'] == NUM_EVAL
  with open(os.path.join(root, 'report', 'variants.json')) as f:
    record = json.load(f)
  assert record['metric'] == 'rmse'
  assert sorted(record['left_out']) == sorted(
      optimize_config.REGRESSION_LEFT_OUT)
  # Each server runtime's pick is pushed with its RMSE, re-measured through
  # that runtime on the report split.
  assert set(outcome.runtime_pushes) == {'openvino', 'onnx'}
  # The fastest blessed variant over the three runtimes, for the summary.
  blessed = [d.variant for d in outcome.decisions if d.blessed]
  assert outcome.fastest.p50_ms == min(v.latency_p50_ms for v in blessed)
  same_float32 = [d.variant.latency_p50_ms for d in outcome.decisions
                  if d.variant.runtime == outcome.fastest.runtime
                  and d.variant.technique == 'baseline'
                  and d.variant.tflite_mode.endswith('float32')]
  assert outcome.fastest.vs_float32 == pytest.approx(
      same_float32[0] / outcome.fastest.p50_ms)
  for runtime, pushed in outcome.runtime_pushes.items():
    figures = push.read_manifest(pushed.directory)['metrics']
    assert figures['rmse'] == pytest.approx(
        outcome.held_out[outcome.runtime_picks[runtime].variant.name].rmse)
    assert figures['baseline_rmse'] == metrics['baseline_rmse']
    assert 'accuracy' not in figures


def test_pushed_tflite_answers_in_target_units_like_the_savedmodel(
    regression_run):
  model, (features, target), outcome, _ = regression_run
  predictor = measure.TFLitePredictor(outcome.pushed.model_path)
  tflite = np.concatenate([
      predictor.predict({k: v[i:i + 1] for k, v in features.items()})
      for i in range(NUM_EVAL)]).reshape(-1)
  keras = model.predict(features, verbose=0).reshape(-1)
  # Target units (the model's Rescaling is inside the .tflite): mean near
  # the target's, not near 0.
  assert abs(np.mean(tflite) - np.mean(target)) < 20.0
  # int8 steps the output by (range / 255): about 1 unit of a target that
  # spans ~350; the float variants agree to float16 precision.
  np.testing.assert_allclose(tflite, keras, atol=3.0)
