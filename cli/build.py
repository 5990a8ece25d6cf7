"""The one PipelineConfig builder: ``run``, ``compile`` and ``watch`` call it.

``build_pipeline_config(args, target)`` turns the pipeline option set
(cli/options.py) into the PipelineConfig that ``pipeline.create_pipeline``
takes. What differs between runners is only the target: where the pipeline
writes (a local output folder, or the cluster's pipeline root, serving and
TFLite directories) and, for Kubeflow, ``kubeflow_pipeline_config``'s runner
facts (no local ML Metadata, runtime parameters, the span window read by
ExampleGen). An option a runner cannot honour is refused with a message that
names it; nothing is dropped silently.
"""
import argparse
import dataclasses
import os
import posixpath
import re
from typing import Any, Dict, List, Optional, Tuple, Union

from leantfx import config as config_lib
from leantfx import datasets
from leantfx import sizing
from leantfx import slicing
from leantfx.cli import argtypes
from leantfx.cli import dataset as dataset_lib
from leantfx.cli import options
from leantfx.components.optimize import config as optimize_config
from leantfx.runtimes import registry as runtimes
from leantfx.components.optimize.evaluation import selection
from leantfx.errors import ConfigError
from leantfx.kubeflow import compiler
from leantfx.pipeline import beam_presets

# The floor of the passes rule: the bundled datasets (digits 1,797 rows,
# penguins 344, diabetes 442: one pass is under 50 steps of 32) keep the
# 1,000 steps they trained for before the rule; other data 2,000.
_MIN_TRAIN_STEPS = {'digits': 1000, 'penguins': 1000, 'diabetes': 1000}
_PASSES_OPTIONS = ('train_passes', 'min_train_steps', 'max_train_steps')
# Bundled datasets whose default model has other hidden layers: diabetes
# (442 rows, a nearly linear target) is a linear model: chosen on
# cross-validation folds of its train split, reported on the eval split with
# its seed spread (`bench_regression --heldout`; docs/measurements.md,
# "Regression"; the current figures in docs/figures.md).
_DEFAULT_HIDDEN_UNITS = {'diabetes': ()}
# The ModelOptimizer's budget term of the other task: refused when set.
_OTHER_TASK_BUDGET = {
    'classification': ('tflite_max_rmse_increase', 'a regression target'),
    'regression': ('tflite_max_accuracy_drop', 'a classification label'),
}
# A cluster reaches object stores and mounted volumes, never this machine's
# relative paths.
# OUTPUT/model_cards/<model>/<version>/: each push's model card.
MODEL_CARDS_DIR = 'model_cards'
_URI_RE = re.compile(r'^[a-z][a-z0-9+.-]*://\S+$')


@dataclasses.dataclass(frozen=True)
class LocalTarget:
  """``leantfx run`` on this machine: everything below one output folder."""
  output: str  # Absolute.


@dataclasses.dataclass(frozen=True)
class KubeflowTarget:
  """``leantfx compile --target kubeflow``: paths as the cluster sees them.

  Attributes:
    pipeline_root: where components write (gs://, s3://, or a mounted path).
    data_root: the default of the data_root parameter.
    serving_dir: the Pusher's base directory.
    tflite_dir: the ModelOptimizer's TFLite push base (None: optimization
      off is then required).
    scratch: a local folder for the sample data of a bundled dataset.
    kfp_backend: the KFP backend compiled for (compiler.BACKENDS).
  """
  pipeline_root: str
  data_root: str
  serving_dir: str
  tflite_dir: Optional[str]
  scratch: str
  kfp_backend: str = compiler.DEFAULT_BACKEND


Target = Union[LocalTarget, KubeflowTarget]


@dataclasses.dataclass(frozen=True)
class Built:
  """A built configuration and the data it was built from.

  Attributes:
    config: the PipelineConfig.
    data: the data it was resolved from (task decision included).
    notes: lines the command prints about choices made for the user.
    beam: what --beam-mode auto chose (None: not auto, not the
      DirectRunner, or compiled).
  """
  config: config_lib.PipelineConfig
  data: dataset_lib.ResolvedData
  notes: Tuple[str, ...] = ()
  beam: Optional[sizing.BeamChoice] = None


def cluster_path(option: str, value: Optional[str]) -> Optional[str]:
  """Checks that a path is one the cluster's containers can reach.

  Raises:
    ConfigError: for a relative local path.
  """
  if value is None:
    return None
  if _URI_RE.match(value) or value.startswith('/'):
    return value.rstrip('/') or '/'
  raise ConfigError(
      f'{option} {value!r} is a relative path on this machine, which the '
      "cluster's containers cannot reach. Pass an object-store URI (gs://, "
      's3://, minio://) or an absolute path of a volume mounted in every '
      'component.')


def allowed_kinds(values) -> Tuple[str, ...]:
  """--allow-anomalies values (comma-separated, repeatable) as kinds."""
  kinds = []
  for value in values:
    for kind in value.split(','):
      kind = kind.strip().upper()
      if kind and kind not in kinds:
        kinds.append(kind)
  return tuple(kinds)


def _training_fields(args: argparse.Namespace) -> Dict[str, Any]:
  fields = dict(
      precision=args.precision, strategy=args.strategy,
      global_batch_size=args.global_batch_size,
      accumulation_steps=args.accumulation_steps, recompute=args.recompute,
      architecture=args.architecture,
      width_multiplier=args.width_multiplier,
      depth_multiplier=args.depth_multiplier, image_size=args.image_size,
      dropout=args.dropout, l2=args.l2,
      early_stopping_patience=args.early_stopping_patience,
      warmup_steps=args.warmup_steps, lr_decay=args.lr_decay,
      regression_loss=args.regression_loss,
      model_family=args.model_family,
      tuner_algorithm=args.tuner, tuner_steps=args.tuner_steps,
      tuner_epochs=args.tuner_epochs)
  if args.tune == 'auto':
    fields.update(tune=True, tune_auto=True,
                  tuner_trials=config_lib.AUTO_TUNER_TRIALS)
  elif args.tune is not None:
    fields.update(tune=True, tuner_trials=args.tune)
  return fields


def training_config(args: argparse.Namespace,
                    dataset_name: Optional[str]) -> config_lib.TrainingConfig:
  """The TrainingConfig of the options.

  --train-steps trains exactly that many steps. Otherwise the passes rule:
  --train-passes over the train split (counted at run time), at least
  --min-train-steps (default by dataset) and at most --max-train-steps.

  Raises:
    ConfigError: --train-steps beside an option of the passes rule, or a
      floor above the cap.
  """
  defaults = config_lib.TrainingConfig()
  given = [f'--{name.replace("_", "-")}' for name in _PASSES_OPTIONS
           if getattr(args, name, None) is not None]
  if args.train_steps and given:
    raise ConfigError(
        f'--train-steps trains exactly {args.train_steps} steps; '
        f'{", ".join(given)} belong to the passes rule it replaces. Leave '
        'out one or the other.')
  if args.train_steps:
    steps, passes, floor = args.train_steps, None, 1
  else:
    steps = args.max_train_steps or config_lib.DEFAULT_MAX_TRAIN_STEPS
    passes = args.train_passes or config_lib.DEFAULT_TRAIN_PASSES
    floor = args.min_train_steps or min(
        steps, _MIN_TRAIN_STEPS.get(dataset_name, defaults.train_steps))
    if floor > steps:
      raise ConfigError(
          f'--min-train-steps {floor} is above --max-train-steps {steps}: '
          'the floor of the passes rule must not exceed its cap.')
  return config_lib.TrainingConfig(
      train_steps=steps, train_passes=passes, min_train_steps=floor,
      epochs=min(args.epochs or defaults.epochs, floor if passes else steps),
      batch_size=args.batch_size or defaults.batch_size,
      learning_rate=args.learning_rate or defaults.learning_rate,
      seed=defaults.seed if args.seed is None else args.seed,
      hidden_units=_DEFAULT_HIDDEN_UNITS.get(dataset_name,
                                             defaults.hidden_units),
      **_training_fields(args))


def augment_config(args: argparse.Namespace,
                   spec: Optional[config_lib.DatasetSpec]
                  ) -> config_lib.AugmentConfig:
  """The AugmentConfig; spec None checks the values alone (watch start-up).

  Raises:
    ConfigError: for options this dataset cannot use.
  """
  is_image = spec is None or bool(spec.image_key or spec.image_features)
  augment = is_image if args.augment is None else args.augment
  if augment and not is_image:
    raise ConfigError(
        f'--augment makes augmented copies of images, and {spec.name!r} '
        'has no images. For tabular data use --oversample random|smote '
        '(optionally with --jitter) or --class-weights auto.')
  copies = 0
  if augment:
    copies = (options.DEFAULT_IMAGE_COPIES if args.augment_copies is None
              else args.augment_copies)
  config = config_lib.AugmentConfig(
      copies=copies,
      rotation_degrees=args.rotation,
      shift_fraction=args.shift,
      zoom_fraction=args.zoom,
      brightness=args.brightness,
      contrast=args.contrast,
      noise_stddev=args.noise,
      horizontal_flip=args.flip_horizontal,
      vertical_flip=args.flip_vertical,
      oversample=args.oversample,
      target_ratio=args.oversample_ratio,
      smote_neighbors=args.smote_neighbors,
      jitter_stddev=args.jitter,
      seed=config_lib.TrainingConfig().seed if args.seed is None else args.seed)
  if (spec is not None and config.oversample == 'smote' and
      not spec.numeric_features):
    raise ConfigError(
        f'--oversample smote interpolates numeric features and '
        f'{spec.name!r} has none; use --oversample random.')
  return config


def optimization_config(
    args: argparse.Namespace, task: Optional[str] = None
) -> Optional[optimize_config.OptimizationConfig]:
  """The ModelOptimizer's config for the dataset's task, or None.

  None with --no-optimize. A classifier is gated on
  --tflite-max-accuracy-drop, a regression model on
  --tflite-max-rmse-increase; the other task's option is refused when set.
  With task None (the data not read yet) only the values are checked.

  Raises:
    ConfigError: a bad value, or the other task's budget option.
  """
  if not args.optimize:
    return None
  if task is None:
    task, dest = 'classification', None
  else:
    dest, other = _OTHER_TASK_BUDGET[task]
  if dest and getattr(args, dest) != options.pipeline_defaults()[dest]:
    flag = '--' + dest.replace('_', '-')
    raise ConfigError(
        f'{flag} is a budget for {other}, and this run is a {task}. Drop '
        f'{flag}' + (' (the regression budget is --tflite-max-rmse-increase).'
                     if task == 'regression' else '.'))
  return optimize_config.OptimizationConfig(
      budget=selection.Budget(
          max_accuracy_drop=args.tflite_max_accuracy_drop,
          max_rmse_increase=args.tflite_max_rmse_increase,
          max_size_bytes=args.tflite_max_size_bytes,
          max_p99_ms=args.tflite_max_p99_ms),
      policy=args.tflite_policy,
      latency_runs=args.tflite_latency_runs,
      num_threads=args.latency_threads,
      runtimes=_runtimes(args),
      candidates=optimize_config.chosen_candidates(_techniques(args), task),
      task=task)


def _techniques(args: argparse.Namespace) -> Optional[Tuple[str, ...]]:
  """--techniques as chosen_candidates takes it (None: all, (): none)."""
  if args.techniques == argtypes.ALL_TECHNIQUES:
    return None
  if args.techniques == argtypes.NO_TECHNIQUES:
    return ()
  return tuple(args.techniques.split(','))


def _runtimes(args: argparse.Namespace) -> Optional[Tuple[str, ...]]:
  """The optimizer's runtimes: --target-cpu's, or --runtimes (None: all).

  Raises:
    ConfigError: both were given.
  """
  if args.target_cpu is None:
    return (None if args.runtimes == runtimes.ALL else
            tuple(args.runtimes.split(',')))
  if args.runtimes != options.pipeline_defaults()['runtimes']:
    raise ConfigError(
        f'--target-cpu {args.target_cpu} and --runtimes {args.runtimes} both '
        f'choose the runtimes (--target-cpu {args.target_cpu} means '
        f"--runtimes {','.join(runtimes.TARGET_CPUS[args.target_cpu])}); "
        'pass one of them.')
  return runtimes.TARGET_CPUS[args.target_cpu]


def check_option_values(args: argparse.Namespace) -> None:
  """Checks every option value that does not depend on the data.

  ``watch`` calls it before it starts polling, so a bad option is refused
  with the message ``run`` would give, before any span arrives.

  Raises:
    ConfigError: for a bad value.
  """
  training = training_config(args, args.dataset)
  if args.dataset is not None:
    # A bundled dataset's columns are known before any span arrives.
    config_lib.check_model_family(datasets.BUNDLED[args.dataset],
                                  training)
  augment_config(args, None)
  optimization_config(args, dataset_lib.known_task(args))
  evaluation_config(args)
  model_card_config(args)
  config_lib.ValidationConfig(allow_anomalies=allowed_kinds(
      args.allow_anomalies))
  config_lib.OrchestrationConfig(span=getattr(args, 'span', None),
                                 span_window=args.span_window,
                                 warm_start=args.warm_start,
                                 bulk_score=args.bulk_score)
  serve_args(args.serve_args)
  beam_args(args)
  if args.image_shape is not None:
    dataset_lib.image_shape(args.image_shape)


# `leantfx serve` options the InfraValidator and the serve check set
# themselves (leantfx/infra_check.py): a deployment's value means nothing
# there.
_CHECK_OWN_SERVE_OPTIONS = (
    '--model-base-path', '--model-name', '--model-config-file', '--rest-port',
    '--grpc-port', '--host', '--file-system-poll-wait-seconds',
    '--max-num-load-retries', '--request-timeout-s', '--verbose')


def serve_args(text: str) -> Tuple[str, ...]:
  """--serve-args: the deployment's ``leantfx serve`` options, checked.

  Parsed with ``leantfx serve``'s own parser, so an option the server would
  refuse is refused here, before the run.

  Raises:
    ConfigError: unparsable, unknown to ``leantfx serve``, or one the check
      sets itself.
  """
  # pylint: disable=g-import-not-at-top
  import shlex
  from leantfx.cli import serving as serving_commands
  # pylint: enable=g-import-not-at-top
  try:
    tokens = tuple(shlex.split(text or ''))
  except ValueError as e:
    raise ConfigError(f'--serve-args {text!r} cannot be split into options: '
                      f'{e}.') from e
  own = sorted({t.split('=', 1)[0] for t in tokens} &
               set(_CHECK_OWN_SERVE_OPTIONS))
  if own:
    raise ConfigError(
        f'--serve-args sets {", ".join(own)}, which the InfraValidator sets '
        'itself (it serves the candidates on free loopback ports from its '
        'own folder); leave them out.')

  class _Refusing(argparse.ArgumentParser):

    def error(self, message):
      raise ConfigError(
          f'--serve-args {text!r}: `leantfx serve` would refuse it: '
          f'{message}. See `leantfx serve --help`.')

  parser = _Refusing(prog='leantfx')
  serving_commands.add_commands(parser.add_subparsers())
  parser.parse_args(['serve', '--model-base-path', '.', *tokens])
  return tokens


def beam_choice(args: argparse.Namespace,
                rows: Optional[int]) -> Optional[sizing.BeamChoice]:
  """What --beam-mode auto chooses for a run of ``rows`` rows.

  None when the mode is not auto or the runner is not the DirectRunner
  (a portable or cluster runner takes its parallelism from --beam-workers
  and --beam-arg).
  """
  if args.beam_mode != sizing.AUTO or args.beam_runner != 'direct':
    return None
  return sizing.beam_mode(rows, sizing.machine_cores(), args.beam_workers)


def beam_args(args: argparse.Namespace,
              rows: Optional[int] = None) -> List[str]:
  """The beam_pipeline_args of the options (pipeline/beam_presets.py).

  Args:
    args: the options.
    rows: the rows the run reads, for --beam-mode auto (None: not known, as
      when compiling: the compiled tasks are sized per task instead).

  Raises:
    ConfigError: for a combination the runner preset does not take.
  """
  mode, workers = args.beam_mode, args.beam_workers
  choice = beam_choice(args, rows)
  if choice is not None:
    mode, workers = choice.mode, choice.workers
  elif mode == sizing.AUTO:  # Not the DirectRunner: no mode to set.
    mode = 'in_memory'
  return beam_presets.beam_pipeline_args(
      args.beam_runner, mode, workers or 1, args.beam_arg,
      job_endpoint=args.job_endpoint, environment=args.environment)


def check_cluster_beam_args(beam_pipeline_args) -> None:
  """Refuses portable addresses that only mean something on this machine.

  On Kubeflow every component runs in its own pod: no worker pool or job
  server listens on that pod's localhost, and embed with an external
  environment would contact one there.

  Raises:
    ConfigError: naming --job-endpoint or --environment.
  """
  target = beam_presets.portable_target(beam_pipeline_args)
  if target is None:
    return
  if target.job_endpoint != beam_presets.EMBED and target.runs_here:
    raise ConfigError(
        f'--job-endpoint {target.job_endpoint} names this machine, which '
        "the cluster's component pods cannot reach. Compile with the job "
        'server\'s cluster address (e.g. beam-job-server:8099, from '
        '`leantfx deploy flink|spark`).')
  if target.pool_address is not None and beam_presets.is_local_host(
      target.pool_address[0]):
    raise ConfigError(
        f'--environment {target.environment} with --job-endpoint '
        f'{target.job_endpoint}: each Kubeflow component runs in its own '
        'pod, where no worker pool listens on localhost. Use --beam-runner '
        'flink|spark --job-endpoint JOB_SERVER:8099 (their task managers '
        'run the pool as a sidecar), or an external pool Service address.')


def _local_root(args: argparse.Namespace, target: Target) -> Optional[str]:
  if isinstance(target, KubeflowTarget):
    return args.sample_data
  return args.data_root


def build_pipeline_config(args: argparse.Namespace, target: Target) -> Built:
  """Builds the PipelineConfig of the options for a target.

  Args:
    args: the parsed pipeline option set (cli/options.py).
    target: LocalTarget or KubeflowTarget.

  Returns:
    The Built config and the data it was resolved from.

  Raises:
    LeantfxError: for a bad option or unusable data (exit 2).
  """
  check_option_values(args)
  on_cluster = isinstance(target, KubeflowTarget)
  scratch = target.scratch if on_cluster else target.output
  data = dataset_lib.resolve_dataset(args, _local_root(args, target), scratch)
  spec = data.spec
  if args.noisy_rows:
    spec = dataclasses.replace(spec, noisy_rows=args.noisy_rows)
  evaluation = evaluation_config(args, data)
  optimization = optimization_config(args, spec.task)
  if optimization is not None and evaluation.slices:
    optimization = dataclasses.replace(
        optimization, slices=slice_gate(evaluation, spec))
  notes = list(role_notes(spec))
  if data.dropped is not None:
    notes.append(data.dropped.line())
  if args.min_auc is not None and len(spec.classes) != 2:
    raise ConfigError(
        f'--min-auc gates on the AUC of a two-class label, and '
        f'{spec.label!r} is ' + (
            'a regression target' if spec.is_regression else
            f'{len(spec.classes)} classes') + '. Drop --min-auc.')
  if on_cluster:
    paths = dict(
        pipeline_root=target.pipeline_root,
        data_root=target.data_root,
        serving_model_dir=f'{target.serving_dir}/{spec.name}',
        # A sibling of the serving folder, as OUTPUT/model_cards locally.
        model_card_base=posixpath.join(
            posixpath.dirname(target.serving_dir.rstrip('/')),
            MODEL_CARDS_DIR),
        metadata_path=None,
        tflite_push_base=target.tflite_dir if optimization else None)
    check_cluster_beam_args(beam_args(args))
    if optimization is not None and not target.tflite_dir:
      raise ConfigError(
          'The ModelOptimizer pushes TFLite models: pass --tflite-dir DIR '
          '(where the cluster writes them, e.g. gs://BUCKET/tflite), or '
          '--no-optimize to compile without it.')
    if data.data_format != 'csv' and args.span_window > 1:
      raise ConfigError(
          f'--span-window {args.span_window} cannot work on Kubeflow with '
          f'{data.data_format} data: the Kubeflow ExampleGen reads a window '
          'of CSV spans only (TFX 1.16 cannot compile the local span-window '
          'resolver). Compile with --span-window 1, or use CSV data.')
    rows = None
  else:
    rows = sum(count for _, count in dataset_lib.expected_rows(data))
    output = target.output
    paths = dict(
        pipeline_root=os.path.join(output, 'tfx'),
        data_root=data.data_root,
        serving_model_dir=os.path.join(output, 'serving', spec.name),
        model_card_base=os.path.join(output, MODEL_CARDS_DIR),
        metadata_path=os.path.join(output, 'metadata.sqlite'),
        tflite_push_base=(os.path.join(output, runtimes.TFLITE)
                          if optimization else None))
  serve_options = serve_args(args.serve_args)
  if args.bulk_score and data.data_format != 'csv':
    raise ConfigError(
        f'--bulk-score scores the raw rows of a CSV span; this run reads '
        f'{data.data_format} data. Leave --bulk-score out (score a CSV copy '
        'of the span with `leantfx score`).')
  config = config_lib.PipelineConfig(
      pipeline_name=f'leantfx-{spec.name}',
      dataset=spec,
      training=training_config(args, spec.name),
      evaluation=evaluation,
      beam_pipeline_args=tuple(beam_args(args, rows)),
      enable_cache=not args.no_cache,
      orchestration=config_lib.OrchestrationConfig(
          span=getattr(args, 'span', None), span_window=args.span_window,
          warm_start=args.warm_start, bulk_score=args.bulk_score),
      ingestion=config_lib.IngestionConfig(
          data_format=data.data_format, bad_images=args.bad_images,
          normalize_labels=args.normalize_labels,
          min_rows_per_class=args.min_rows_per_class),
      validation=config_lib.ValidationConfig(
          allow_anomalies=allowed_kinds(args.allow_anomalies),
          check_drift=not args.no_drift_check,
          # A compiled pipeline reads data the command never saw.
          expected_rows=(None if on_cluster else
                         dataset_lib.expected_rows(data))),
      augment=augment_config(args, spec),
      class_weights=args.class_weights,
      serve_args=serve_options,
      optimization=optimization,
      model_card=model_card_config(args),
      **paths)
  if on_cluster:
    config = compiler.kubeflow_pipeline_config(config, target.pipeline_root,
                                               target.kfp_backend)
  choice = None if on_cluster else beam_choice(args, rows)
  if choice is not None:
    notes.append(f'  {choice.line()}')
  return Built(config, data, tuple(notes), choice)


def role_notes(spec: config_lib.DatasetSpec) -> List[str]:
  """The plan's lines of each column's role and why (leantfx/column_roles.py)."""
  if not spec.column_roles:
    return []
  lines = ['  columns (roles inferred from the span; --column-role COLUMN=ROLE '
           'overrides):']
  for key, role, reason in spec.column_roles:
    lines.append(f'    {spec.original_name(key)}: {role} ({reason})')
  return lines


def model_card_config(args: argparse.Namespace
                     ) -> config_lib.ModelCardConfig:
  """What the model card prices, of the options."""
  return config_lib.ModelCardConfig(target_qps=args.target_qps,
                                    core_hour_price=args.core_hour_price)


def evaluation_config(args: argparse.Namespace,
                      data: Optional[dataset_lib.ResolvedData] = None
                     ) -> config_lib.EvaluationConfig:
  """The Evaluator's gate of the options.

  Args:
    args: the options.
    data: the data, which the --slice-by columns are resolved against (to
      the feature keys of the raw Examples); None checks the flags' form
      alone (watch start-up).

  Raises:
    ConfigError: a bad value, a --slice-by column the data lacks (or a
      numeric one of too many values), or a slice threshold of the other
      task.
  """
  if data is None:
    slices = slicing.parse_flags(args.slice_by)
  else:
    slices = slicing.resolve(args.slice_by, data.spec)
    slicing.check_numeric_values(slices, data.spec,
                                 _numeric_slice_values(slices, data))
  defaults = options.pipeline_defaults()
  given = [d for d in _SLICE_THRESHOLDS if getattr(args, d) != defaults[d]]
  if given and not slices:
    raise ConfigError(
        f'{_flags(given)} gate(s) slices, and no --slice-by names any. Add '
        f'--slice-by COLUMN, or drop {_flags(given)}.')
  if data is not None:
    spec = data.spec
    other = [d for d in given if d in _OTHER_TASK_SLICE_THRESHOLDS[spec.task]]
    if other:
      raise ConfigError(
          f'{_flags(other)} gate(s) a '
          f'{"classifier" if spec.is_regression else "regression"}, and '
          f'this run is a {spec.task} on '
          f'{spec.original_name(spec.label)!r}. Drop {_flags(other)}.')
  return config_lib.EvaluationConfig(
      min_accuracy=args.min_accuracy,
      max_accuracy_drop=args.max_accuracy_drop,
      baseline_margin=args.baseline_margin,
      min_auc=args.min_auc, min_r2=args.min_r2, max_rmse=args.max_rmse,
      max_rmse_increase=args.max_rmse_increase,
      slices=slices, min_slice_size=args.min_slice_size,
      min_slice_accuracy=args.min_slice_accuracy,
      max_slice_accuracy_drop=args.max_slice_accuracy_drop,
      max_slice_rmse_increase=args.max_slice_rmse_increase)


_SLICE_THRESHOLDS = ('min_slice_size', 'min_slice_accuracy',
                     'max_slice_accuracy_drop', 'max_slice_rmse_increase')
# The slice thresholds a run of each task refuses (they gate the other one).
_OTHER_TASK_SLICE_THRESHOLDS = {
    'classification': ('max_slice_rmse_increase',),
    'regression': ('min_slice_accuracy', 'max_slice_accuracy_drop'),
}


def _flags(dests) -> str:
  return ', '.join('--' + d.replace('_', '-') for d in dests)


def _numeric_slice_values(slices, data: dataset_lib.ResolvedData
                         ) -> Dict[str, int]:
  """{feature key: distinct values in the span} of numeric slice columns.

  Counted in the span the command read (run: the data root; compile: the
  sample data): a CSV span's files, or a TFRecord span's examples.
  """
  spec = data.spec
  numeric = sorted({k for s in slices for k in s
                    if k in spec.numeric_features})
  profile = data.profile
  if not numeric:
    return {}
  if data.data_format == 'tfrecord':
    files = sorted(os.path.join(profile.span_dir, name)
                   for name in os.listdir(profile.span_dir)
                   if os.path.isfile(os.path.join(profile.span_dir, name)))
    return slicing.count_tfrecord_values(files, numeric)
  header = list(profile.columns)
  names = {spec.original_name(k): k for k in numeric}
  counts = slicing.count_csv_values(profile.files, header, list(names))
  return {names[name]: count for name, count in counts.items()}


def slice_gate(evaluation: config_lib.EvaluationConfig,
               spec: config_lib.DatasetSpec) -> selection.SliceGate:
  """The ModelOptimizer's per-slice gate: the Evaluator's slices."""
  return selection.SliceGate(
      columns=evaluation.slices,
      names=tuple(slicing.names_as_written(evaluation.slices, spec)),
      min_slice_size=evaluation.min_slice_size)


def preflight_local_trainer(training: config_lib.TrainingConfig) -> None:
  """Checks what the local Trainer will run on, before the pipeline starts.

  The local runners train in this process, so this machine's devices and
  TF_CONFIG are the Trainer's (a cluster's are not known when compiling).
  TensorFlow is imported only for the checks that need it.

  Raises:
    ConfigError: mixed_float16 without a GPU; multi_worker with a missing or
      invalid TF_CONFIG; a global batch that does not split over the
      replicas.
  """
  # pylint: disable=g-import-not-at-top
  # Lazy: these import TensorFlow, which only these checks need.
  if training.strategy == 'multi_worker':
    from leantfx.models.training import distribution
    distribution.parse_tf_config(distribution.env_tf_config(None))
  if training.precision == 'mixed_float16':
    from leantfx.models.training import precision
    precision.check_supported(training.precision)
  if training.global_batch_size is not None:
    from leantfx.models.training import distribution
    replicas = distribution.expected_replicas(training.strategy)
    distribution.plan_batches(training, replicas)
