"""The Trainer executor: TFX's GenericExecutor, plus the run record in MLMD.

run_fn writes ``training_metadata.json`` (precision decision and probe
figures, strategy, batches, backups, early stopping) into the model-run
artifact. This executor runs run_fn unchanged, then copies the headline
facts into custom properties of the ``model`` and ``model_run`` output
artifacts, so ML Metadata (and `leantfx run`'s summary) can show which
precision a model trained in without opening files, and the executor's
wall seconds and cores (leantfx/compute_cost.py).
"""
import json
import os
import time
from typing import Any, Dict, List

from absl import logging
import tensorflow as tf
from tfx import types
from tfx.components.trainer import executor as trainer_executor
from tfx.types import artifact_utils
from tfx.types import standard_component_specs

from leantfx import compute_cost
from leantfx.models import model_layout
from leantfx.models.training import callbacks as callbacks_lib

# Custom property names on the Model and ModelRun artifacts.
PRECISION_POLICY = 'precision_policy'
PRECISION_REASON = 'precision_reason'
PRECISION_PROBE = 'precision_probe'
STRATEGY = 'strategy'
REPLICAS = 'replicas'
GLOBAL_BATCH = 'global_batch'
RESUMED_AFTER_EPOCH = 'resumed_after_epoch'
TENSORBOARD_LOGS = 'tensorboard_logs'
# The budget the Trainer trained for (models/training/budget.py): steps and
# examples it saw, the train rows and the passes that is (a string: MLMD
# custom properties hold no floats here). The ModelOptimizer ties its
# techniques' steps to TRAIN_STEPS.
TRAIN_STEPS = model_layout.TRAIN_STEPS_PROPERTY
TRAIN_EXAMPLES = 'train_examples'
TRAIN_ROWS = 'train_rows'
TRAIN_PASSES = 'train_passes'
# 1: the rows were counted only up to where the cap decides the steps.
TRAIN_ROWS_AT_LEAST = 'train_rows_at_least'
TRAIN_BUDGET_RULE = 'train_budget_rule'
# The family Format-Serving holds ('network' or 'trees', models/
# model_family.py), why, and the whole comparison (JSON: both eval figures).
MODEL_FAMILY = 'model_family'
MODEL_FAMILY_REASON = 'model_family_reason'
MODEL_FAMILY_RECORD = 'model_family_record'


def record_properties(record: Dict[str, Any]) -> Dict[str, Any]:
  """The custom properties (str or int values) of a run record."""
  properties: Dict[str, Any] = {}
  decision = record.get('precision') or {}
  if decision:
    properties[PRECISION_POLICY] = str(decision.get('policy'))
    properties[PRECISION_REASON] = str(decision.get('reason', ''))[:1000]
    if decision.get('probe'):
      properties[PRECISION_PROBE] = json.dumps(
          decision['probe'].get('examples_per_s', {}), sort_keys=True)
  if record.get('strategy'):
    properties[STRATEGY] = str(record['strategy'])
  if record.get('replicas') is not None:
    properties[REPLICAS] = int(record['replicas'])
  batches = record.get('batches') or {}
  if batches.get('dataset_batch') is not None:
    properties[GLOBAL_BATCH] = int(batches['dataset_batch'])
  if record.get('resumed_after_epoch') is not None:
    properties[RESUMED_AFTER_EPOCH] = int(record['resumed_after_epoch'])
  budget = record.get('budget') or {}
  if budget:
    properties[TRAIN_STEPS] = int(budget['steps'])
    properties[TRAIN_EXAMPLES] = int(budget['examples'])
    properties[TRAIN_BUDGET_RULE] = str(budget['rule'])
    if budget.get('train_rows') is not None:
      properties[TRAIN_ROWS] = int(budget['train_rows'])
      properties[TRAIN_ROWS_AT_LEAST] = int(bool(
          budget.get('train_rows_at_least')))
    if budget.get('passes') is not None:
      properties[TRAIN_PASSES] = f"{budget['passes']:g}"
  if record.get('tensorboard_logs'):
    properties[TENSORBOARD_LOGS] = str(record['tensorboard_logs'])
  family = record.get('model_family') or {}
  if family:
    properties[MODEL_FAMILY] = str(family['chosen'])
    properties[MODEL_FAMILY_REASON] = str(family.get('reason', ''))[:1000]
    properties[MODEL_FAMILY_RECORD] = json.dumps(family, sort_keys=True)
  return properties


class Executor(trainer_executor.GenericExecutor):
  """GenericExecutor that records the run's training facts in MLMD."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    started = time.monotonic()
    super().Do(input_dict, output_dict, exec_properties)
    model_run = artifact_utils.get_single_instance(
        output_dict[standard_component_specs.MODEL_RUN_KEY])
    # The run's training core-hours (the model card's cost).
    seconds = time.monotonic() - started
    for artifact in [model_run] + list(
        output_dict[standard_component_specs.MODEL_KEY]):
      compute_cost.record_compute(artifact, seconds)
    path = os.path.join(model_run.uri, callbacks_lib.RECORD_FILE)
    if not tf.io.gfile.exists(path):
      logging.warning('No training record at %s.', path)
      return
    with tf.io.gfile.GFile(path) as f:
      record = json.load(f)
    properties = record_properties(record)
    targets = [model_run] + list(
        output_dict[standard_component_specs.MODEL_KEY])
    for artifact in targets:
      for key, value in properties.items():
        if isinstance(value, int):
          artifact.set_int_custom_property(key, value)
        else:
          artifact.set_string_custom_property(key, value)
    logging.info('Training record %s -> custom properties %s.', path,
                 sorted(properties))
