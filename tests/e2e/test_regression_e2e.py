"""End to end: a regression from `leantfx run` to TF Serving's APIs.

One small run on the bundled diabetes data (442 rows, a continuous target;
few train steps; the ModelOptimizer gating its TFLite variants on RMSE, with
few latency runs). The pushed SavedModel must reproduce the Evaluator's MAE
and RMSE on the eval split, the pushed TFLite model must answer in target
units within the optimizer's RMSE budget of them, and the in-process server
must answer REST :predict (serving_default) and :regress (the 'regression'
signature, tf.Examples) with the model's own predictions, example by example,
and gRPC Regress likewise. The run is sliced by sex (--slice-by sex): the
Evaluator reports each sex's figures and count, and the optimizer gates and
reports each variant on them.
"""
import glob
import json
import os

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_service_pb2_grpc
from tensorflow_serving.apis import regression_pb2

from leantfx import datasets
from leantfx.pipeline import run_summary
from tests.e2e import pushed
from tests.helpers import run_cli

pytestmark = pytest.mark.e2e

# 200 steps (about 18 epochs of the 350 train rows at batch 32) of diabetes'
# linear default model reach R² 0.135 on the eval split (measured with the
# same model, split and seed), above this test's gate of R² >= 0; 1000 steps
# reach Ridge's figure (benchmarks/bench_regression.py). The relative gate is
# off: it refuses the 200-step model (a run measured RMSE 64.79 against the
# bound 56.84 of beating the train mean's 70.12 significantly on 92 eval
# rows; Ridge 56.30), and this test is about the regression's serving path.
TRAIN_STEPS = '200'


@pytest.fixture(scope='module')
def diabetes_run(tmp_path_factory):
  output = str(tmp_path_factory.mktemp('diabetes'))
  record = os.path.join(output, 'record.json')
  result = run_cli(['run', '--dataset', 'diabetes', '--output', output,
                    '--train-steps', TRAIN_STEPS, '--run-record', record,
                    '--tflite-latency-runs', '20', '--slice-by', 'sex',
                    '--baseline-margin', 'off'],
                   optimize=True)
  summary = run_summary.summarize(
      os.path.join(output, 'metadata.sqlite'), 'leantfx-diabetes')
  with open(record, encoding='utf-8') as f:
    return result, summary, json.load(f), output


def _features(serialized):
  """Each tf.Example as {feature: float}, the label apart."""
  rows, labels = [], []
  for record in serialized:
    feature = tf.train.Example.FromString(record).features.feature
    row = {name: float(f.float_list.value[0]) for name, f in feature.items()}
    labels.append(row.pop('target'))
    rows.append(row)
  return rows, np.array(labels)


def test_diabetes_run_pushes_a_regression_at_its_reported_errors(diabetes_run):
  result, summary, record, _ = diabetes_run
  assert result.returncode == 0, result.stdout + result.stderr
  assert 'task: regression (the bundled dataset' in result.stdout
  assert record['task'] == 'regression' and record['task_reason']
  metrics = summary.metrics
  for name in ('mean_absolute_error', 'root_mean_squared_error', 'r2_score',
               'mean_squared_error'):
    assert name in metrics, metrics
    assert name in record['metrics']
  assert metrics['r2_score'] > 0.05, metrics
  assert 'regression (eval split' in result.stdout
  assert summary.blessed and summary.pushed
  assert 'ModelOptimizer' in summary.executions
  # ML Metadata holds the task: the Trainer's custom_config property.
  store = run_summary.open_store(record['metadata_path'])
  trainer = store.get_executions_by_id(
      [summary.executions['Trainer'].execution_id])[0]
  custom = json.loads(
      trainer.custom_properties['custom_config'].string_value)
  assert custom['dataset']['task'] == 'regression'

  # The pushed model reproduces the Evaluator's figures.
  serialized = pushed.eval_examples(summary)
  rows, labels = _features(serialized)
  assert len(labels) == summary.example_count
  model = tf.saved_model.load(summary.pushed_path)
  predictions = model.signatures['predict_examples'](
      examples=tf.constant(serialized))['predictions'].numpy()
  errors = predictions - labels
  assert np.sqrt(np.mean(errors**2)) == pytest.approx(
      metrics['root_mean_squared_error'], rel=1e-4)
  assert np.mean(np.abs(errors)) == pytest.approx(
      metrics['mean_absolute_error'], rel=1e-4)


def test_served_predict_and_regress_match_the_model(diabetes_run):
  # pylint: disable=g-import-not-at-top
  from leantfx import serving_client as client
  from leantfx.serving import model_config
  from leantfx.serving import server as server_lib
  from leantfx.serving import server_config
  # pylint: enable=g-import-not-at-top
  _, summary, _, output = diabetes_run
  assert summary.pushed, 'the run must have pushed'
  serialized = pushed.eval_examples(summary)
  rows, _ = _features(serialized)
  model = tf.saved_model.load(summary.pushed_path)
  expected = model.signatures['predict_examples'](
      examples=tf.constant(serialized))['predictions'].numpy()
  config = server_config.ServerConfig(
      rest_port=0, grpc_port=0, file_system_poll_wait_seconds=-1,
      max_num_load_retries=0, request_timeout_s=20.0)
  models = [model_config.ModelConfig(
      name='diabetes', base_path=os.path.join(output, 'serving', 'diabetes'))]
  server = server_lib.ModelServer(models, config).start()
  try:
    rest = client.RestClient('127.0.0.1', server.rest_port, timeout_s=20.0)
    predicted = rest.predict('diabetes', instances=rows)['predictions']
    np.testing.assert_allclose(np.array(predicted, dtype=np.float32),
                               expected, rtol=1e-5, atol=1e-3)
    regressed = rest.regress('diabetes', examples=rows,
                             signature_name='regression')['results']
    np.testing.assert_allclose(np.array(regressed, dtype=np.float32),
                               expected, rtol=1e-5, atol=1e-3)
    # gRPC Regress, TF Serving's own request proto, on the serialized
    # tf.Examples as the eval split holds them (the label included: the
    # signature parses only its features).
    request = regression_pb2.RegressionRequest()
    request.model_spec.name = 'diabetes'
    request.model_spec.signature_name = 'regression'
    for record in serialized:
      request.input.example_list.examples.add().ParseFromString(record)
    with grpc.insecure_channel(f'127.0.0.1:{server.grpc_port}') as channel:
      stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
      response = stub.Regress(request, timeout=20)
    values = [r.value for r in response.result.regressions]
    np.testing.assert_allclose(np.array(values, dtype=np.float32),
                               expected, rtol=1e-5, atol=1e-3)
  finally:
    server.stop(grace_s=5.0)


def test_optimizer_pushes_a_tflite_regression_within_its_rmse_budget(
    diabetes_run):
  # pylint: disable=g-import-not-at-top
  from leantfx.components.optimize.evaluation import measure
  from leantfx.runtimes import push
  # pylint: enable=g-import-not-at-top
  _, summary, _, output = diabetes_run
  base = os.path.join(output, 'tflite')
  versions = push.list_versions(base, 'diabetes')
  assert len(versions) == 1, versions
  version_dir = os.path.join(base, 'diabetes', str(versions[0]))
  metrics = push.read_manifest(version_dir)['metrics']
  assert metrics['rmse_increase'] is not None
  assert metrics['selection_rmse_increase'] <= 0.05  # the default budget
  assert 'accuracy' not in metrics
  # It takes the raw columns (the Transform folded in), as the SavedModel's
  # serving_default does. On the whole raw eval split its RMSE in target
  # units is the Evaluator's SavedModel RMSE within the budget.
  assert metrics['serving_inputs']['inputs'] == 'raw', metrics
  spec = datasets.BUNDLED['diabetes']
  uri = summary.executions['Augment'].outputs['augmented_examples'][0].uri
  files = glob.glob(os.path.join(uri, 'Split-eval', '*'))
  predictor = measure.TFLitePredictor(
      os.path.join(version_dir, push.MODEL_FILE))
  assert set(predictor.input_names) == set(spec.feature_columns)
  errors = []
  for record in tf.data.TFRecordDataset(files, compression_type='GZIP'):
    feature = tf.train.Example.FromString(record.numpy()).features.feature

    def number(name, feature=feature):
      values = feature[name].float_list.value or feature[name].int64_list.value
      return float(values[0])

    inputs = {name: np.array([number(name)], np.float32)
              for name in predictor.input_names}
    errors.append(float(predictor.predict(inputs).reshape(-1)[0]) -
                  number(spec.label))
  rmse = float(np.sqrt(np.mean(np.square(errors))))
  evaluator_rmse = summary.metrics['root_mean_squared_error']
  assert evaluator_rmse * 0.9 < rmse < evaluator_rmse * 1.1, (
      rmse, evaluator_rmse)


def test_the_evaluator_and_the_optimizer_report_every_sex(diabetes_run):
  result, summary, facts, _ = diabetes_run
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  # The Evaluator: both values of sex, with counts that add up to the
  # split, each with its RMSE and the per-slice gate's figure.
  assert set(summary.slices) == {'sex=1', 'sex=2'}, summary.slices
  counts = [int(m['example_count']) for m in summary.slices.values()]
  assert sum(counts) == summary.example_count and min(counts) >= 10, counts
  for name, metrics in summary.slices.items():
    assert metrics['root_mean_squared_error'] > 0, name
    assert metrics['slice_gate_rmse'] == pytest.approx(
        metrics['root_mean_squared_error'], rel=1e-4), name
    count = int(metrics['example_count'])
    assert f'slice {name}: {count} examples, RMSE ' in result.stdout
  # The run record keeps them (--run-record).
  assert facts['slices'] == {'metrics': summary.slices, 'failures': []}
  # The ModelOptimizer: the gate had the slice, and every variant's worst
  # slice is one of them, with its selection-split count.
  report_uri = summary.executions['ModelOptimizer'].outputs['report'][0].uri
  with open(os.path.join(report_uri, 'variants.json'),
            encoding='utf-8') as f:
    record = json.load(f)
  assert record['slices']['columns'] == [['sex']]
  selection_rows = record['baseline']['num_examples']
  for decision in record['decisions']:
    worst = decision['worst_slice']
    assert worst['slice'] in ('sex=1', 'sex=2'), decision['variant']['name']
    assert 10 <= worst['count'] < selection_rows
    assert worst['rmse_increase'] == pytest.approx(
        (worst['rmse'] - worst['baseline']) / worst['baseline'])
  with open(os.path.join(report_uri, 'report.md'), encoding='utf-8') as f:
    assert '| worst slice |' in f.read()
