"""The training options of ``leantfx run``: flags, preflight checks, summary.

``leantfx/cli.py`` adds these flags to its 'training' argument group, turns
them into TrainingConfig fields, runs ``preflight`` before the pipeline
starts (so a bad option exits 2 with nothing run), and prints
``summary_lines`` after the run. This module imports no TensorFlow at import
time, so ``leantfx --help`` stays fast.
"""
import argparse
from typing import Any, Dict, List

from leantfx import config as config_lib


def _int(text: str) -> int:
  try:
    return int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f'{text!r} is not a whole number')


def add_arguments(group) -> None:
  """Adds the precision, distribution, memory, regularization and tuner flags."""
  defaults = config_lib.TrainingConfig()
  group.add_argument(
      '--precision', choices=config_lib.PRECISIONS, default=defaults.precision,
      help='auto (default): mixed_float16 on GPUs with compute capability '
      '>= 7.0, mixed_bfloat16 on TPUs, on CPUs with bf16 units the faster of '
      'float32 and mixed_bfloat16 in a short probe (cached)')
  group.add_argument(
      '--strategy', choices=config_lib.STRATEGIES, default=defaults.strategy,
      help='tf.distribute strategy (auto: multi_worker when TF_CONFIG names a '
      'cluster, mirrored on 2+ GPUs, else one device)')
  group.add_argument('--global-batch-size', type=_int, metavar='N',
                     help='fixed global batch split over the replicas '
                     '(default: --batch-size per replica)')
  group.add_argument('--accumulation-steps', type=_int, metavar='N',
                     default=defaults.accumulation_steps,
                     help='micro-batches per optimizer step (gradient '
                     'accumulation; default 1)')
  group.add_argument('--recompute', action='store_true',
                     help='activation checkpointing: recompute block '
                     'activations in the backward pass (mlp, cnn)')
  group.add_argument('--architecture', choices=config_lib.ARCHITECTURES,
                     default=defaults.architecture,
                     help="model architecture (auto: the dataset's mlp/cnn)")
  group.add_argument('--width-multiplier', type=float,
                     default=defaults.width_multiplier,
                     help='scales units/filters (MobileNetV2 alpha)')
  group.add_argument('--depth-multiplier', type=float,
                     default=defaults.depth_multiplier,
                     help='scales layers per stage (rounded up)')
  group.add_argument('--image-size', type=_int, default=defaults.image_size,
                     help='resize images to this side for mobilenet_v2 and '
                     'efficientnet_b0 (0: own size, at least 32)')
  group.add_argument('--dropout', type=float, default=defaults.dropout)
  group.add_argument('--l2', type=float, default=defaults.l2,
                     help='L2 penalty on kernels (default 0: off)')
  group.add_argument('--early-stopping-patience', type=_int,
                     default=defaults.early_stopping_patience, metavar='EPOCHS',
                     help='stop after this many epochs without a lower '
                     'validation loss, keeping the best weights (0: off)')
  group.add_argument('--warmup-steps', type=_int,
                     default=defaults.warmup_steps,
                     help='linear learning-rate warm-up steps (default 0)')
  group.add_argument('--lr-decay', choices=config_lib.LR_DECAYS,
                     default=defaults.lr_decay,
                     help='after warm-up: constant (default), linear, cosine')
  group.add_argument('--tune', type=_int, metavar='TRIALS',
                     help='run the TFX Tuner with this trial budget first; '
                     'the Trainer uses its best hyperparameters')
  group.add_argument('--tuner', choices=config_lib.TUNER_ALGORITHMS,
                     default=defaults.tuner_algorithm,
                     help='search algorithm (default random)')
  group.add_argument('--tuner-steps', type=_int, default=defaults.tuner_steps,
                     help='training steps per trial')
  group.add_argument('--tuner-epochs', type=_int,
                     default=defaults.tuner_epochs,
                     help="epochs per trial (Hyperband's max_epochs)")


# TrainingConfig field <- flag destination (the flags add_arguments adds).
_FIELDS = {
    'precision': 'precision',
    'strategy': 'strategy',
    'global_batch_size': 'global_batch_size',
    'accumulation_steps': 'accumulation_steps',
    'recompute': 'recompute',
    'architecture': 'architecture',
    'width_multiplier': 'width_multiplier',
    'depth_multiplier': 'depth_multiplier',
    'image_size': 'image_size',
    'dropout': 'dropout',
    'l2': 'l2',
    'early_stopping_patience': 'early_stopping_patience',
    'warmup_steps': 'warmup_steps',
    'lr_decay': 'lr_decay',
    'tuner_algorithm': 'tuner',
    'tuner_steps': 'tuner_steps',
    'tuner_epochs': 'tuner_epochs',
}


def config_kwargs(args: argparse.Namespace) -> Dict[str, Any]:
  """TrainingConfig fields from the flags add_arguments added.

  Flags missing from args (callers that build their own Namespace, e.g.
  `leantfx compile`) keep TrainingConfig's defaults.
  """
  kwargs = {
      field: getattr(args, dest)
      for field, dest in _FIELDS.items()
      if getattr(args, dest, None) is not None
  }
  if getattr(args, 'tune', None) is not None:
    kwargs.update(tune=True, tuner_trials=args.tune)
  return kwargs


def preflight(training: config_lib.TrainingConfig) -> None:
  """Checks what the local Trainer will run on, before the pipeline starts.

  The local runners train in this process, so this machine's devices and
  TF_CONFIG are the Trainer's. TensorFlow is imported only for the checks
  that need it.

  Raises:
    ConfigError: mixed_float16 without a GPU; multi_worker with a missing or
      invalid TF_CONFIG; a global batch that does not split over the
      replicas.
  """
  if training.strategy == 'multi_worker':
    from leantfx.models.training import distribution  # pylint: disable=g-import-not-at-top
    distribution.parse_tf_config(distribution.env_tf_config(None))
  if training.precision == 'mixed_float16':
    from leantfx.models.training import precision  # pylint: disable=g-import-not-at-top
    precision.check_supported(training.precision)
  if training.global_batch_size is not None:
    from leantfx.models.training import distribution  # pylint: disable=g-import-not-at-top
    replicas = distribution.expected_replicas(training.strategy)
    distribution.plan_batches(training, replicas)


def summary_lines(summary) -> List[str]:
  """Where the TensorBoard logs are, and how the model trained."""
  trainer = summary.executions.get('Trainer')
  if not trainer or not trainer.outputs.get('model_run'):
    return []
  model_run = trainer.outputs['model_run'][0]
  lines = []
  props = model_run.custom_properties
  if 'precision_policy' in props:
    strategy = props['strategy'].string_value if 'strategy' in props else '?'
    lines.append(f'  training: precision {props["precision_policy"].string_value}'
                 f' ({props["precision_reason"].string_value}); strategy '
                 f'{strategy}')
  tuner = summary.executions.get('Tuner')
  if tuner and tuner.outputs.get('best_hyperparameters'):
    lines.append('  tuner: best hyperparameters in '
                 f'{tuner.outputs["best_hyperparameters"][0].uri}')
  lines.append(f'  tensorboard: tensorboard --logdir {model_run.uri}')
  return lines
