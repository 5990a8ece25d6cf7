"""The pipeline side of training: the Tuner component and the Trainer class.

``pipeline/pipeline.py``'s ``_train`` stage calls ``add_tuner`` (a TFX Tuner
when TrainingConfig.tune is on; its best hyperparameters feed the Trainer)
and builds ``Trainer``: TFX's Trainer whose executor also records the run's
precision and strategy in ML Metadata (trainer_executor.py). Nothing here
imports keras_tuner: the Tuner references ``tuner_fn`` by dotted path.
"""
import hashlib
import inspect
import os
from typing import Any, Dict, List, Optional

from tfx import v1 as tfx
from tfx.dsl.components.base import executor_spec

from leantfx import config as config_lib
from leantfx.models import architectures
from leantfx.models import auto_tune
from leantfx.models import hyperparameters
from leantfx.models import model_family
from leantfx.models import split_arrays
from leantfx.models import transformed_data
from leantfx.models import trees
from leantfx.models.training import accumulation
from leantfx.models.training import callbacks
from leantfx.models.training import distribution
from leantfx.models.training import plan
from leantfx.models.training import precision
from leantfx.models.training import recompute
from leantfx.models.training import schedules
from leantfx.models.training import trainer_executor

TUNER_FN = 'leantfx.models.tuning.tuner_fn'
# Modules run_fn trains with, for the pipeline's code fingerprint (a change
# to any of them must be a cache miss of Transform/Trainer).
CODE_MODULES = (architectures, hyperparameters, transformed_data,
                accumulation, callbacks, distribution, plan, precision,
                recompute, schedules, model_family, split_arrays, trees)
_TUNING_SOURCE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'tuning.py')
# What tuner_fn runs beside tuning.py. tuning.py itself is read as a file:
# importing it would load keras_tuner, and with it Keras 3.
_TUNING_MODULES = (hyperparameters, transformed_data, auto_tune)


class Trainer(tfx.components.Trainer):
  """TFX's Trainer; its executor also writes the run record to MLMD."""

  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(trainer_executor.Executor)


def _tuning_fingerprint() -> str:
  digest = hashlib.sha256()
  with open(_TUNING_SOURCE, 'rb') as f:
    digest.update(f.read())
  for module in _TUNING_MODULES:
    digest.update(inspect.getsource(module).encode('utf-8'))
  return digest.hexdigest()[:16]


def add_tuner(config: config_lib.PipelineConfig,
              transform: tfx.components.Transform,
              schema: tfx.types.BaseChannel,
              custom_config: Dict[str, Any],
              nodes: List[tfx.types.BaseNode]
             ) -> Optional[tfx.types.BaseChannel]:
  """Adds the Tuner when tuning is on; returns its best hyperparameters.

  Args:
    config: the pipeline config (training.tune and the tuner settings).
    transform: the Transform component (transformed examples and graph).
    schema: the schema channel.
    custom_config: the Trainer's custom_config; the Tuner gets a copy with
      the tuner code's fingerprint, so a change to tuning.py or to the
      modules it shares with run_fn re-runs it.
    nodes: the pipeline's node list; the Tuner is appended.

  Returns:
    The 'best_hyperparameters' channel for the Trainer, or None.
  """
  training = config.training
  if not training.tune:
    return None
  tuner = tfx.components.Tuner(
      tuner_fn=TUNER_FN, **tuner_arguments(config, transform, schema,
                                           custom_config))
  nodes.append(tuner)
  return tuner.outputs['best_hyperparameters']


def tuner_arguments(config: config_lib.PipelineConfig,
                    transform: tfx.components.Transform,
                    schema: tfx.types.BaseChannel,
                    custom_config: Dict[str, Any]) -> Dict[str, Any]:
  """The Tuner's inputs, trial steps and custom_config (with the tuner
  code's fingerprint), for TFX's Tuner and --tune auto's AutoTuner alike."""
  training = config.training
  return dict(
      examples=transform.outputs['transformed_examples'],
      transform_graph=transform.outputs['transform_graph'],
      schema=schema,
      train_args=tfx.proto.TrainArgs(num_steps=training.tuner_steps),
      eval_args=tfx.proto.EvalArgs(num_steps=training.eval_steps),
      custom_config=dict(custom_config,
                         tuning_fingerprint=_tuning_fingerprint()))
