"""End to end: one real `leantfx run` with the Tuner, read back from MLMD.

One pipeline run on penguins with a tiny tuning budget proves the wiring the
unit tests cannot: Tuner -> best hyperparameters -> Trainer, the run record
(precision decision, strategy) as a file and as ML Metadata custom
properties, the TensorBoard logs the CLI points to, and the float32
Format-Keras export.
"""
import glob
import json
import os
import re

import pytest
import tensorflow as tf
import tf_keras

from leantfx.models import hyperparameters
from leantfx.models.training import callbacks as callbacks_lib
from leantfx.models.training import trainer_executor
from leantfx.pipeline import run_summary
from tests.helpers import run_cli

pytestmark = pytest.mark.e2e

TRIALS = 2


@pytest.fixture(scope='module')
def tuned_run(tmp_path_factory):
  output = str(tmp_path_factory.mktemp('tuned'))
  result = run_cli(['run', '--dataset', 'penguins', '--output', output,
                    '--tune', str(TRIALS), '--tuner-steps', '20',
                    '--tuner-epochs', '2', '--train-steps', '300',
                    '--epochs', '3', '--no-optimize'])
  assert result.returncode == 0, result.stdout + result.stderr
  summary = run_summary.summarize(
      os.path.join(output, 'metadata.sqlite'), 'leantfx-penguins')
  return output, result, summary


def _record(summary):
  uri = summary.executions['Trainer'].outputs['model_run'][0].uri
  with open(os.path.join(uri, callbacks_lib.RECORD_FILE)) as f:
    return json.load(f)


def test_tuner_feeds_its_best_hyperparameters_to_the_trainer(tuned_run):
  _, result, summary = tuned_run
  assert re.search(r'\] Tuner +running', result.stdout), result.stdout
  assert summary.executions['Tuner'].state == 'complete'
  tuner_out = summary.executions['Tuner'].outputs
  best_uri = tuner_out['best_hyperparameters'][0].uri
  with open(os.path.join(best_uri, 'best_hyperparameters.txt')) as f:
    best = json.load(f)
  with open(glob.glob(os.path.join(tuner_out['tuner_results'][0].uri,
                                   '*'))[0]) as f:
    trials = json.load(f)
  assert len(trials) == TRIALS
  record = _record(summary)
  assert record['hyperparameters'] == best
  values = best['values']
  assert tuple(record['training']['hidden_units']) == (
      hyperparameters.hidden_units(values['units'], values['depth']))
  assert record['training']['learning_rate'] == pytest.approx(
      values['learning_rate'])
  assert record['training']['dropout'] == pytest.approx(values['dropout'])
  assert f'tuner: best hyperparameters in {best_uri}' in result.stdout


def test_precision_and_strategy_are_in_the_run_metadata(tuned_run):
  _, result, summary = tuned_run
  record = _record(summary)
  decision = record['precision']
  assert decision['requested'] == 'auto'
  assert decision['policy'] in ('float32', 'mixed_bfloat16')
  if decision['probe']:  # CPUs with bf16 units probe (or reuse a probe).
    assert set(decision['probe']['examples_per_s']) == {
        'float32', 'mixed_bfloat16'}
  assert record['strategy'] == 'default x1'
  assert record['batches']['dataset_batch'] == 32
  # The same facts as ML Metadata custom properties of both artifacts.
  trainer = summary.executions['Trainer']
  for artifact in (trainer.outputs['model'][0], trainer.outputs['model_run'][0]):
    props = artifact.custom_properties
    assert props[trainer_executor.PRECISION_POLICY].string_value == (
        decision['policy'])
    assert props[trainer_executor.REPLICAS].int_value == 1
  assert f'training: precision {decision["policy"]}' in result.stdout
  # A finished run leaves no backup behind.
  backup_root = os.path.join(
      os.path.dirname(trainer.outputs['model_run'][0].uri),
      callbacks_lib.BACKUP_DIR_NAME)
  assert not glob.glob(os.path.join(backup_root, '*', 'chief', 'ckpt-*'))


def test_cli_points_to_the_tensorboard_logs(tuned_run):
  _, result, summary = tuned_run
  uri = summary.executions['Trainer'].outputs['model_run'][0].uri
  assert f'tensorboard: tensorboard --logdir {uri}' in result.stdout
  assert glob.glob(os.path.join(uri, 'train', 'events.out.tfevents.*'))
  assert glob.glob(os.path.join(uri, 'validation', 'events.out.tfevents.*'))


def test_format_keras_is_a_float32_model_and_the_push_happened(tuned_run):
  _, _, summary = tuned_run
  assert summary.pushed and summary.accuracy >= 0.9
  model_uri = summary.executions['Trainer'].outputs['model'][0].uri
  keras_model = tf_keras.models.load_model(
      os.path.join(model_uri, 'Format-Keras'), compile=False)
  # The run trained in a mixed policy or float32; the export is float32
  # whatever it was (inputs keep their own dtypes, e.g. int64 categories).
  assert not {l.compute_dtype for l in keras_model.layers} & {
      'bfloat16', 'float16'}
  assert {l.dtype_policy.name for l in keras_model.layers
          if not isinstance(l, tf_keras.layers.InputLayer)} == {'float32'}
  assert {v.dtype for v in keras_model.weights} == {tf.float32}
  assert keras_model.get_layer('logits') and keras_model.layers[-1].name == (
      'probabilities')
  serving = tf.saved_model.load(os.path.join(model_uri, 'Format-Serving'))
  assert set(serving.signatures) >= {'serving_default', 'predict_examples',
                                     'transform_features'}
