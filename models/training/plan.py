"""How one training run will execute: strategy, batches, precision, export.

``models/model.py``'s run_fn calls ``prepare`` before building the model and
``float32_twin`` before exporting; the tests and benchmarks call the same
functions on tiny models, so what they check is what the Trainer runs.
"""
import dataclasses
import json
from typing import Any, Callable, Dict, Mapping, Optional

from absl import logging
import tensorflow as tf
import tf_keras

from leantfx import config as config_lib
from leantfx.models.training import callbacks as callbacks_lib
from leantfx.models.training import distribution
from leantfx.models.training import precision

# Batches of real training data the precision probe cycles through.
PROBE_BATCHES = 4


@dataclasses.dataclass
class Plan:
  """The execution plan of a run.

  Attributes:
    strategy: the tf.distribute strategy.
    batches: the BatchPlan.
    decision: the precision Decision (None until decide_precision ran).
  """
  strategy: tf.distribute.Strategy
  batches: distribution.BatchPlan
  decision: Optional[precision.Decision] = None

  @property
  def multi_worker(self) -> bool:
    return isinstance(self.strategy,
                      tf.distribute.MultiWorkerMirroredStrategy)

  @property
  def is_chief(self) -> bool:
    return distribution.is_chief(self.strategy)

  def input(self, dataset: tf.data.Dataset) -> tf.data.Dataset:
    """The dataset as the strategy needs it (DATA sharding on a cluster)."""
    return distribution.shard_by_data(dataset) if self.multi_worker else (
        dataset)

  def record(self) -> Dict[str, Any]:
    """The plan as JSON-ready facts for the run record."""
    return {
        'strategy': distribution.describe(self.strategy),
        'replicas': self.strategy.num_replicas_in_sync,
        'batches': self.batches.to_json(),
        'precision': self.decision.to_json() if self.decision else None,
    }


def prepare(training: config_lib.TrainingConfig,
            environ: Optional[Mapping[str, str]] = None) -> Plan:
  """Creates the strategy and sizes the batches.

  Raises:
    ConfigError: bad strategy / TF_CONFIG, or a global batch that does not
      split over the replicas.
  """
  strategy = distribution.make_strategy(training.strategy, environ)
  batches = distribution.plan_batches(training,
                                      strategy.num_replicas_in_sync)
  logging.info('Strategy %s; batches %s.', distribution.describe(strategy),
               batches.to_json())
  return Plan(strategy=strategy, batches=batches)


def decide_precision(plan: Plan, training: config_lib.TrainingConfig,
                     build_fn: Callable[[], tf_keras.Model],
                     train_ds: tf.data.Dataset,
                     devices: Optional[precision.DeviceInfo] = None
                    ) -> precision.Decision:
  """Resolves the precision (probing 'auto' on bf16 CPUs) into plan.decision.

  Args:
    plan: from prepare().
    training: precision and precision_cache.
    build_fn: builds the compiled model under the current global policy; it
      is called inside the strategy scope here.
    train_ds: the training batches (a few are cached for the probe).
    devices: the machine (detected when None).

  Returns:
    The Decision (also stored in plan.decision).
  """

  def build_in_scope():
    with plan.strategy.scope():
      return build_fn()

  plan.decision = precision.resolve(
      training.precision,
      build_in_scope,
      lambda: train_ds.take(PROBE_BATCHES).cache().repeat(),
      plan.batches.dataset_batch,
      distribution.describe(plan.strategy),
      cache_path=training.precision_cache,
      devices=devices,
      can_probe=not plan.multi_worker)
  # The probe's models drew from the global RNG; the real model must start
  # from the same weights whatever the probe did.
  tf_keras.utils.set_random_seed(training.seed)
  return plan.decision


def float32_twin(model: tf_keras.Model,
                 rebuild_fn: Callable[[], tf_keras.Model]) -> tf_keras.Model:
  """The trained model rebuilt as a plain float32 model with its weights.

  The export contract (Format-Keras for the optimizers and TFLite, and
  Format-Serving) is a plain functional float32 model whatever the run used:
  a mixed policy, recompute blocks or gradient accumulation. Mixed-policy
  variables are float32 already, so the weights carry over unchanged.

  Args:
    model: the trained model.
    rebuild_fn: builds the same architecture without recompute or
      accumulation (called under the float32 policy, outside any strategy).

  Returns:
    The float32 model, holding model's weights.

  Raises:
    ValueError: when the weight shapes do not line up.
  """
  with precision.policy_scope(precision.FLOAT32):
    twin = rebuild_fn()
  source = model.get_weights()
  target_shapes = [tuple(w.shape) for w in twin.weights]
  source_shapes = [tuple(w.shape) for w in source]
  if source_shapes != target_shapes:
    raise ValueError(
        'The float32 export model does not match the trained model: '
        f'{source_shapes} vs {target_shapes}.')
  twin.set_weights(source)
  return twin


def job_identity(fn_args: Any) -> Dict[str, Any]:
  """What identifies a training job for its backup dir: config and inputs."""
  return {
      'custom_config': json.loads(
          json.dumps(fn_args.custom_config or {}, default=str)),
      'train_files': list(fn_args.train_files or []),
      'transform_output': fn_args.transform_output,
      'train_steps': fn_args.train_steps,
      'hyperparameters': fn_args.hyperparameters,
      'base_model': getattr(fn_args, 'base_model', None),
  }


def backup_dir(fn_args: Any) -> str:
  """The BackupAndRestore working dir of this Trainer job."""
  return callbacks_lib.backup_dir_for(fn_args.model_run_dir,
                                      job_identity(fn_args))
