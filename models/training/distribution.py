"""tf.distribute strategies, TF_CONFIG checks and batch sizes.

  auto          multi_worker when TF_CONFIG names a cluster of 2+ tasks,
                mirrored on 2+ GPUs, else TensorFlow's default strategy (one
                device, no overhead).
  one_device    OneDeviceStrategy on the first GPU, else the CPU.
  mirrored      MirroredStrategy over every GPU, else every logical CPU device
                (one, unless the process split the CPU into logical devices).
  multi_worker  MultiWorkerMirroredStrategy over the workers TF_CONFIG names
                (ring all-reduce, which works on CPUs and over loopback).

Models and optimizers are built in ``strategy.scope()``. ``batch_size`` is
per replica, so the global batch grows with ``num_replicas_in_sync``; with
``global_batch_size`` the global batch is fixed instead and must split evenly
over replicas x accumulation steps.
"""
import dataclasses
import json
import os
import re
from typing import Any, Dict, Mapping, Optional

from absl import logging
import tensorflow as tf

from leantfx import config as config_lib
from leantfx.errors import ConfigError

AUTO = 'auto'
ONE_DEVICE = 'one_device'
MIRRORED = 'mirrored'
MULTI_WORKER = 'multi_worker'
TF_CONFIG = 'TF_CONFIG'
_WORKER_TASK_TYPES = ('chief', 'worker')
_ADDRESS_RE = re.compile(r'^[^\s:]+:\d{1,5}$')
_EXAMPLE_TF_CONFIG = ('{"cluster": {"worker": ["10.0.0.1:12345", '
                      '"10.0.0.2:12345"]}, "task": {"type": "worker", '
                      '"index": 0}}')


def parse_tf_config(text: Optional[str]) -> Dict[str, Any]:
  """Parses and checks a TF_CONFIG for multi-worker training.

  Args:
    text: the TF_CONFIG environment variable's value (None if unset).

  Returns:
    The parsed dict: 'cluster' ({task type: [host:port, ...]}) and 'task'
    ({'type', 'index'}).

  Raises:
    ConfigError: when it is missing, not JSON, or inconsistent; the message
      says which part and shows a valid example.
  """
  fix = (f' Set {TF_CONFIG} on every worker, e.g. {_EXAMPLE_TF_CONFIG} '
         '(same cluster everywhere, each worker its own index), or train '
         'on one machine with --strategy auto, one_device or mirrored.')
  if not text or not text.strip():
    raise ConfigError(
        f'strategy multi_worker reads the cluster from the {TF_CONFIG} '
        'environment variable, which is not set.' + fix)
  try:
    tf_config = json.loads(text)
  except ValueError as e:
    raise ConfigError(f'{TF_CONFIG} is not valid JSON ({e}): {text[:200]!r}.'
                      + fix) from None
  if not isinstance(tf_config, dict):
    raise ConfigError(f'{TF_CONFIG} must be a JSON object, got '
                      f'{type(tf_config).__name__}.' + fix)
  cluster = tf_config.get('cluster')
  if not isinstance(cluster, dict) or not any(
      cluster.get(t) for t in _WORKER_TASK_TYPES):
    raise ConfigError(f'{TF_CONFIG} has no "cluster" with a "worker" (or '
                      f'"chief") list: {text[:200]!r}.' + fix)
  for task_type, addresses in cluster.items():
    if task_type not in _WORKER_TASK_TYPES:
      raise ConfigError(
          f'{TF_CONFIG} cluster has a {task_type!r} task; '
          'MultiWorkerMirroredStrategy only knows "chief" and "worker" '
          '(parameter servers and evaluators belong to other strategies).' +
          fix)
    if not isinstance(addresses, list) or not all(
        isinstance(a, str) and _ADDRESS_RE.match(a) for a in addresses):
      raise ConfigError(f'{TF_CONFIG} cluster {task_type!r} must be a list '
                        f'of "host:port" strings, got {addresses!r}.' + fix)
  if len(cluster.get('chief', [])) > 1:
    raise ConfigError(f'{TF_CONFIG} names {len(cluster["chief"])} chiefs; '
                      'there can be at most one.' + fix)
  task = tf_config.get('task')
  if not isinstance(task, dict) or 'type' not in task or 'index' not in task:
    raise ConfigError(f'{TF_CONFIG} has no "task" with "type" and "index" '
                      f'(which worker this process is): {text[:200]!r}.' + fix)
  members = cluster.get(task['type'])
  if not members:
    raise ConfigError(f'{TF_CONFIG} task type {task["type"]!r} is not in the '
                      f'cluster ({sorted(cluster)}).' + fix)
  index = task['index']
  if not isinstance(index, int) or not 0 <= index < len(members):
    raise ConfigError(
        f'{TF_CONFIG} task index {index!r} is out of range: the cluster has '
        f'{len(members)} {task["type"]!r} task(s), so use 0..'
        f'{len(members) - 1}.' + fix)
  return tf_config


def cluster_size(tf_config: Mapping[str, Any]) -> int:
  """Number of worker processes (chief included) in a parsed TF_CONFIG."""
  return sum(len(tf_config['cluster'].get(t, [])) for t in _WORKER_TASK_TYPES)


def env_tf_config(environ: Optional[Mapping[str, str]]) -> Optional[str]:
  return (os.environ if environ is None else environ).get(TF_CONFIG)


def resolve_name(name: str,
                 environ: Optional[Mapping[str, str]] = None) -> str:
  """Turns 'auto' into a concrete strategy name (see the module docstring)."""
  if name != AUTO:
    return name
  text = env_tf_config(environ)
  if text:
    try:
      tf_config = json.loads(text)
      if isinstance(tf_config, dict) and isinstance(
          tf_config.get('cluster'), dict) and sum(
              len(v) for v in tf_config['cluster'].values()
              if isinstance(v, list)) > 1:
        return MULTI_WORKER
    except ValueError:
      pass  # A broken TF_CONFIG is only an error when multi_worker is asked.
  if len(tf.config.list_physical_devices('GPU')) > 1:
    return MIRRORED
  return AUTO


def make_strategy(name: str,
                  environ: Optional[Mapping[str, str]] = None
                 ) -> tf.distribute.Strategy:
  """Creates the strategy for a configured name.

  Args:
    name: one of config.STRATEGIES.
    environ: where TF_CONFIG is read from (os.environ when None).

  Returns:
    The strategy; 'auto' on one device is TensorFlow's default strategy.

  Raises:
    ConfigError: unknown name; multi_worker with a missing or invalid
      TF_CONFIG, or created after TensorFlow already ran in this process.
  """
  if name not in config_lib.STRATEGIES:
    raise ConfigError(f'Unknown strategy {name!r}; use one of '
                      f'{config_lib.STRATEGIES}.')
  concrete = resolve_name(name, environ)
  if concrete == MULTI_WORKER:
    # Before anything initialises TensorFlow's devices (collective ops are
    # configured at context start-up).
    return _multi_worker(environ)
  gpus = tf.config.list_logical_devices('GPU')
  if concrete == AUTO:
    return tf.distribute.get_strategy()
  if concrete == ONE_DEVICE:
    return tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else
                                           '/cpu:0')
  if concrete == MIRRORED:
    devices = [d.name for d in (gpus or tf.config.list_logical_devices('CPU'))]
    if len(devices) == 1:
      logging.info('mirrored strategy over a single device (%s).', devices[0])
    return tf.distribute.MirroredStrategy(devices)
  raise AssertionError(f'unhandled strategy {concrete}')


def _multi_worker(environ: Optional[Mapping[str, str]]
                 ) -> tf.distribute.MultiWorkerMirroredStrategy:
  """MultiWorkerMirroredStrategy over TF_CONFIG's cluster, ring all-reduce."""
  tf_config = parse_tf_config(env_tf_config(environ))
  resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
      tf.train.ClusterSpec(tf_config['cluster']),
      task_type=tf_config['task']['type'],
      task_id=tf_config['task']['index'],
      rpc_layer='grpc')
  try:
    return tf.distribute.MultiWorkerMirroredStrategy(
        cluster_resolver=resolver,
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation
            .RING))
  except RuntimeError as e:
    raise ConfigError(
        f'strategy multi_worker could not start ({e}). Collective ops must be '
        'configured before TensorFlow runs anything in the process, so each '
        'worker must run the Trainer in a process of its own (e.g. one '
        'Kubeflow/Vertex replica per TF_CONFIG task), not inside a pipeline '
        'process that already ran other components.') from None


def describe(strategy: tf.distribute.Strategy) -> str:
  """e.g. 'MirroredStrategy x2', 'default x1' (TensorFlow's default)."""
  if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    name = 'MultiWorkerMirroredStrategy'  # Its class is CollectiveAllReduce.
  elif not tf.distribute.has_strategy() and strategy is (
      tf.distribute.get_strategy()):
    name = 'default'
  else:
    name = type(strategy).__name__
  return f'{name} x{strategy.num_replicas_in_sync}'


def is_chief(strategy: tf.distribute.Strategy) -> bool:
  """True unless this is a non-chief worker of a multi-worker cluster."""
  return bool(strategy.extended.should_checkpoint)


@dataclasses.dataclass(frozen=True)
class BatchPlan:
  """Batch sizes of one run.

  Attributes:
    replicas: num_replicas_in_sync.
    per_replica: examples per replica per micro-batch.
    accumulation_steps: micro-batches per optimizer step.
    global_micro_batch: examples per micro-batch over all replicas.
    dataset_batch: examples the input pipeline yields per fit step (one
      optimizer step: every replica's micro-batches).
  """
  replicas: int
  per_replica: int
  accumulation_steps: int
  global_micro_batch: int
  dataset_batch: int

  def to_json(self) -> Dict[str, int]:
    return dataclasses.asdict(self)


def plan_batches(training: config_lib.TrainingConfig,
                 replicas: int) -> BatchPlan:
  """Scales the batch with the replicas (or splits a fixed global batch).

  Args:
    training: batch_size (per replica) or global_batch_size, and
      accumulation_steps.
    replicas: the strategy's num_replicas_in_sync.

  Returns:
    The BatchPlan.

  Raises:
    ConfigError: when global_batch_size does not split evenly over
      replicas x accumulation steps.
  """
  steps = training.accumulation_steps
  if training.global_batch_size is None:
    per_replica = training.batch_size
  else:
    parts = replicas * steps
    if training.global_batch_size % parts:
      raise ConfigError(
          f'global batch size {training.global_batch_size} does not split '
          f'evenly over {replicas} replica(s) x {steps} accumulation '
          f'step(s) = {parts} parts. Use a multiple of {parts} (e.g. '
          f'{max(parts, training.global_batch_size // parts * parts)}), or '
          'set --batch-size (per replica) so the global batch scales with '
          'the replicas.')
    per_replica = training.global_batch_size // parts
  return BatchPlan(
      replicas=replicas,
      per_replica=per_replica,
      accumulation_steps=steps,
      global_micro_batch=per_replica * replicas,
      dataset_batch=per_replica * replicas * steps)


def shard_by_data(dataset: tf.data.Dataset) -> tf.data.Dataset:
  """Sets DATA auto-sharding: workers split each batch, not the files.

  TFX writes a few large files per split, fewer than workers could share by
  file; with DATA sharding every worker reads all and keeps its slice of each
  global batch, so a global step sees the same examples as on one worker.
  """
  options = tf.data.Options()
  options.experimental_distribute.auto_shard_policy = (
      tf.data.experimental.AutoShardPolicy.DATA)
  return dataset.with_options(options)


def expected_replicas(name: str,
                      environ: Optional[Mapping[str, str]] = None) -> int:
  """Replicas a strategy would have here, without creating it (preflight).

  Raises:
    ConfigError: multi_worker with a missing or invalid TF_CONFIG.
  """
  concrete = resolve_name(name, environ)
  if concrete == MULTI_WORKER:
    tf_config = parse_tf_config(env_tf_config(environ))
    local = max(1, len(tf.config.list_physical_devices('GPU')))
    return cluster_size(tf_config) * local
  if concrete == MIRRORED:
    gpus = tf.config.list_physical_devices('GPU')
    return len(gpus) or len(tf.config.list_logical_devices('CPU'))
  return 1
