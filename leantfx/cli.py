"""The ``leantfx`` command line.

Subcommands: ``run`` (the main job), ``data prepare``, and those the modules
in COMMAND_MODULES add (serving, optimization reports, ...). Heavy imports
(TensorFlow, TFX) happen inside the handlers so ``--help`` stays fast, and
after TF_USE_LEGACY_KERAS is in place.

Exit codes: 0 success; 2 bad input or option (nothing ran); 3 the pipeline
failed in a component (nothing pushed); 4 the pipeline ran but the model was
not blessed (nothing pushed); 130 interrupted.
"""
import argparse
import dataclasses
import importlib
import os
import re
import sys
import time
import warnings
from typing import List, Optional, Sequence

from leantfx import config as config_lib
from leantfx import data_options
from leantfx import datasets
from leantfx import optimize_options
from leantfx.errors import ConfigError, LeantfxError
from leantfx.models.training import cli_options as training_options
from leantfx.pipeline import beam_presets

EXIT_NOT_BLESSED = 4
# Modules that add their own subcommands: each has add_commands(subparsers),
# and every parser it adds sets func=<handler(args) -> exit code>.
COMMAND_MODULES = (
    'leantfx.kubeflow.cli',
    'leantfx.memory_plan',
    'leantfx.pipeline.watch',
    'leantfx.schema_infer',
    'leantfx.serving.cli',
    'leantfx.optimize_options',
)
DEFAULT_OUTPUT = 'leantfx-output'
BEAM_MODES = ('in_memory', 'multi_threading', 'multi_processing')
# Bundled datasets train for different budgets: digits' CNN needs more steps.
_DEFAULT_TRAIN_STEPS = {'digits': 1000, 'penguins': 1000}


def _schema_dir() -> str:
  from leantfx import schemas  # pylint: disable=g-import-not-at-top
  return os.path.dirname(os.path.abspath(schemas.__file__))


def bundled_schema(name: str) -> Optional[str]:
  """Returns the curated schema.pbtxt of a bundled dataset, if it exists."""
  path = os.path.join(_schema_dir(), name, 'schema.pbtxt')
  return path if os.path.isfile(path) else None


def beam_pipeline_args(mode: str, workers: int,
                       extra: Sequence[str] = ()) -> List[str]:
  """DirectRunner arguments for a running mode, plus passthrough arguments.

  Args:
    mode: one of BEAM_MODES.
    workers: --direct_num_workers (ignored by in_memory).
    extra: more Beam arguments, passed through unchanged.

  Returns:
    The argument list every Beam-based component gets.

  Raises:
    ConfigError: for an unknown mode or fewer than 1 worker.
  """
  if mode not in BEAM_MODES:
    raise ConfigError(f'Unknown Beam mode {mode!r}; use one of {BEAM_MODES}.')
  if workers < 1:
    raise ConfigError(f'--beam-workers must be >= 1, got {workers}.')
  args = [f'--direct_running_mode={mode}', f'--direct_num_workers={workers}']
  return args + list(extra)


def _name_from_path(path: str) -> str:
  base = re.sub(r'[^A-Za-z0-9_-]', '_', os.path.basename(os.path.abspath(path)))
  return base if re.match(r'^[A-Za-z]', base) else f'data_{base}'


def resolve_dataset(args: argparse.Namespace, output: str):
  """Decides the data root and DatasetSpec, and checks the data.

  Args:
    args: parsed ``run`` arguments.
    output: the absolute output directory.

  Returns:
    (data_root, DatasetSpec, CsvProfile).

  Raises:
    LeantfxError: for unusable data or options.
  """
  from leantfx import input_checks  # pylint: disable=g-import-not-at-top
  if args.dataset is None and args.data_root is None:
    args.dataset = datasets.DEFAULT_DATASET
  # TFRecord and image data roots have their own checks (issue 3).
  args.resolved_format = data_options.data_format(args)
  if args.resolved_format != 'csv':
    return data_options.resolve_dataset(
        args, output, args.resolved_format, datasets.BUNDLED,
        datasets.prepare, _schema_dir(), _name_from_path)
  if args.dataset is not None:
    spec = datasets.BUNDLED[args.dataset]
    if args.label and args.label != spec.label:
      raise ConfigError(
          f'--label {args.label!r} does not match the bundled dataset '
          f'{args.dataset!r}, whose label column is {spec.label!r}. Drop '
          '--label, or drop --dataset to train on your own columns.')
    data_root = args.data_root
    if data_root is None:
      data_root = os.path.join(output, 'data', args.dataset)
      datasets.prepare(args.dataset, data_root)
    profile = input_checks.profile_csv_data_root(
        data_root,
        spec.label,
        numeric_columns=spec.numeric_features + spec.image_features,
        categorical_columns=spec.categorical_features,
        required_columns=spec.feature_columns,
        span=getattr(args, 'span', None))
    unknown = sorted(set(profile.label_values) - set(spec.classes))
    if unknown:
      raise ConfigError(
          f'Span {profile.span} of {data_root} has label values {unknown} in '
          f'column {spec.label!r} that the {args.dataset!r} model does not '
          f'know (its classes are {list(spec.classes)}). Fix the labels, or '
          'train on your own columns without --dataset.')
    schema = args.schema or bundled_schema(args.dataset)
    spec = dataclasses.replace(spec, schema_file=schema)
    return os.path.abspath(data_root), spec, profile
  if not args.label:
    raise ConfigError(
        f'--data-root {args.data_root} needs --label COLUMN: the column that '
        'holds the class to predict.')
  profile = input_checks.profile_csv_data_root(
      args.data_root, args.label, categorical_columns=args.categorical,
      span=getattr(args, 'span', None))
  spec = config_lib.DatasetSpec(
      name=args.name or _name_from_path(args.data_root),
      label=args.label,
      classes=tuple(profile.label_values),
      numeric_features=tuple(profile.numeric_columns),
      categorical_features=tuple(profile.categorical_columns),
      model='mlp',
      schema_file=args.schema)
  return os.path.abspath(args.data_root), spec, profile


def _training_config(args: argparse.Namespace,
                     spec: config_lib.DatasetSpec) -> config_lib.TrainingConfig:
  defaults = config_lib.TrainingConfig()
  steps = args.train_steps or _DEFAULT_TRAIN_STEPS.get(spec.name,
                                                       defaults.train_steps)
  return config_lib.TrainingConfig(
      train_steps=steps,
      epochs=min(args.epochs or defaults.epochs, steps),
      batch_size=args.batch_size or defaults.batch_size,
      learning_rate=args.learning_rate or defaults.learning_rate,
      seed=defaults.seed if args.seed is None else args.seed,
      **training_options.config_kwargs(args))


def _print_summary(summary, config: config_lib.PipelineConfig, seconds: float,
                   log_path: str) -> int:
  """Prints the closing summary; returns the exit code."""
  states = [e.state for e in summary.executions.values()]
  cached = states.count('cached')
  print(f'\nleantfx run finished in {seconds:.1f}s '
        f'({len(states)} components: {len(states) - cached} ran, '
        f'{cached} from cache)')
  if summary.accuracy is not None:
    count = (f', {summary.example_count} examples'
             if summary.example_count is not None else '')
    print(f'  accuracy (eval split{count}): {summary.accuracy:.4f} '
          f'(gate: >= {config.evaluation.min_accuracy}, at most '
          f'{config.evaluation.max_accuracy_drop} below the last blessed '
          'model)')
  blessed = {True: 'yes', False: 'no', None: 'unknown'}[summary.blessed]
  print(f'  blessed: {blessed}')
  pusher = summary.executions.get('Pusher')
  if summary.pushed:
    note = ''
    if pusher and pusher.state == 'cached':
      note = ' (cached: inputs unchanged since that push)'
    elif summary.reused_version:
      note = ' (already the newest version there: not pushed again)'
    print(f'  pushed: {summary.pushed_path}{note}')
  else:
    print('  pushed: nothing (the model did not pass the Evaluator gate; the '
          'serving directory is unchanged)')
  for line in data_options.summary_lines(summary):
    print(line)
  for line in training_options.summary_lines(summary):
    print(line)  # How the model trained; where its TensorBoard logs are.
  for line in optimize_options.summary_lines(summary, config):
    print(line)
  print(f'  log: {log_path}')
  return 0 if summary.pushed else EXIT_NOT_BLESSED


def cmd_run(args: argparse.Namespace) -> int:
  """Handler of ``leantfx run``."""
  from leantfx import input_checks  # pylint: disable=g-import-not-at-top
  started = time.monotonic()
  output = input_checks.check_output_dir(args.output)
  data_root, spec, profile = resolve_dataset(args, output)
  spec = data_options.with_noisy_rows(args, spec)
  config = config_lib.PipelineConfig(
      pipeline_name=f'leantfx-{spec.name}',
      pipeline_root=os.path.join(output, 'tfx'),
      data_root=data_root,
      serving_model_dir=os.path.join(output, 'serving', spec.name),
      dataset=spec,
      training=_training_config(args, spec),
      evaluation=config_lib.EvaluationConfig(
          min_accuracy=args.min_accuracy,
          max_accuracy_drop=args.max_accuracy_drop),
      metadata_path=os.path.join(output, 'metadata.sqlite'),
      beam_pipeline_args=tuple(
          beam_presets.beam_pipeline_args(args.beam_runner, args.beam_mode,
                                          args.beam_workers, args.beam_arg)),
      enable_cache=not args.no_cache,
      orchestration=config_lib.OrchestrationConfig(
          span=args.span, span_window=args.span_window,
          warm_start=args.warm_start),
      **data_options.pipeline_fields(args, spec),
      **optimize_options.pipeline_fields(args, output))
  # The local Trainer runs here: check its precision/strategy options now.
  training_options.preflight(config.training)
  os.makedirs(os.path.join(output, 'logs'), exist_ok=True)
  log_path = os.path.join(
      output, 'logs', time.strftime('run-%Y%m%d-%H%M%S.log'))
  print(f'leantfx run: dataset {spec.name} ({profile.num_rows} rows in span '
        f'{profile.span} of {data_root}, {len(spec.classes)} classes), '
        f'runner {args.runner}, output {output}')
  from leantfx.pipeline import local_runner  # pylint: disable=g-import-not-at-top
  from leantfx.pipeline import run_summary  # pylint: disable=g-import-not-at-top
  since_ms = int(time.time() * 1000)
  local_runner.run_pipeline(config, args.runner, log_path,
                            quiet_console=not args.verbose)
  summary = run_summary.summarize(config.metadata_path, config.pipeline_name,
                                  since_ms)
  return _print_summary(summary, config, time.monotonic() - started, log_path)


def cmd_data_prepare(args: argparse.Namespace) -> int:
  """Handler of ``leantfx data prepare``."""
  path = datasets.prepare(args.dataset, args.data_root, args.span,
                          args.data_format)
  print(f'wrote {path}')
  return 0


def _positive_int(text: str) -> int:
  try:
    value = int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f'{text!r} is not a whole number')
  if value < 1:
    raise argparse.ArgumentTypeError(f'must be >= 1, got {value}')
  return value


def _fraction(text: str) -> float:
  try:
    value = float(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f'{text!r} is not a number')
  if not 0.0 <= value <= 1.0:
    raise argparse.ArgumentTypeError(f'must be in [0, 1], got {value}')
  return value


def build_parser() -> argparse.ArgumentParser:
  """Returns the argument parser of every subcommand."""
  parser = argparse.ArgumentParser(
      prog='leantfx',
      description='Train, validate, evaluate and push small, fast models with '
      'TFX.')
  sub = parser.add_subparsers(dest='command', metavar='COMMAND', required=True)

  run = sub.add_parser(
      'run',
      help='run the whole pipeline once (the main job)',
      description='Runs ExampleGen -> statistics -> schema -> validation -> '
      'Transform -> Trainer -> Evaluator -> Pusher on the newest span. '
      'Without --dataset or --data-root it trains on the bundled '
      f'{datasets.DEFAULT_DATASET!r} data. Exit codes: 0 pushed, 2 bad input, '
      '3 a component failed, 4 not blessed (nothing pushed).')
  data = run.add_argument_group('data')
  data.add_argument('--dataset', choices=sorted(datasets.BUNDLED),
                    help='a bundled dataset (its schema and model are used)')
  data.add_argument('--data-root', help='folder with span-<N>/*.csv '
                    '(default for --dataset: OUTPUT/data/NAME, prepared)')
  data.add_argument('--label', help='label column of your own data')
  data.add_argument('--categorical', action='append', default=[],
                    metavar='COLUMN', help='treat COLUMN as categorical even '
                    'if its values look numeric (repeatable)')
  data.add_argument('--schema', help='a curated schema.pbtxt to validate '
                    'against (default: the bundled one, else inferred)')
  data.add_argument('--name', help='model name for your own data (default: '
                    'the data root folder name)')
  run.add_argument('--output', default=DEFAULT_OUTPUT,
                   help=f'output folder (default ./{DEFAULT_OUTPUT})')
  run.add_argument('--runner', choices=('local', 'beam'), default='local',
                   help='LocalDagRunner (default) or BeamDagRunner')
  beam = run.add_argument_group('beam')
  beam.add_argument('--beam-runner', choices=beam_presets.RUNNERS,
                    default='direct', help='direct (default) or a documented '
                    'cluster preset; see pipeline/beam_presets.py')
  beam.add_argument('--beam-mode', choices=BEAM_MODES, default='in_memory',
                    help='DirectRunner running mode (default in_memory)')
  beam.add_argument('--beam-workers', type=_positive_int, default=1,
                    help='DirectRunner workers (e.g. 2 with multi_processing)')
  beam.add_argument('--beam-arg', action='append', default=[],
                    metavar='ARG', help='extra Beam pipeline argument, passed '
                    'through (repeatable), e.g. --beam-arg=--runner=FlinkRunner')
  train = run.add_argument_group('training')
  train.add_argument('--train-steps', type=_positive_int)
  train.add_argument('--epochs', type=_positive_int)
  train.add_argument('--batch-size', type=_positive_int)
  train.add_argument('--learning-rate', type=float)
  train.add_argument('--seed', type=int)
  training_options.add_arguments(train)
  gate = run.add_argument_group('evaluation gate')
  gate.add_argument('--min-accuracy', type=_fraction,
                    default=config_lib.EvaluationConfig().min_accuracy,
                    help='bless only at or above this eval accuracy')
  gate.add_argument('--max-accuracy-drop', type=_fraction,
                    default=config_lib.EvaluationConfig().max_accuracy_drop,
                    help='how far below the last blessed model a new one may '
                    'fall')
  retrain = run.add_argument_group('continuous retraining')
  retrain.add_argument('--span', type=_positive_int, metavar='N',
                       help='ingest span N instead of the newest (the watcher '
                       'pins each run to the span it saw complete)')
  retrain.add_argument('--span-window', type=_positive_int, default=1,
                       metavar='K', help='train on the newest K spans '
                       '(default 1: the newest span only)')
  retrain.add_argument('--warm-start', action='store_true',
                       help='start training from the latest blessed model')
  data_options.add_run_arguments(run)
  optimize_options.add_arguments(run)
  run.add_argument('--no-cache', action='store_true',
                   help='re-run every component')
  run.add_argument('--verbose', action='store_true',
                   help='show the full logs instead of progress lines')
  run.set_defaults(func=cmd_run)

  data_cmd = sub.add_parser('data', help='bundled data').add_subparsers(
      dest='data_command', metavar='ACTION', required=True)
  prepare = data_cmd.add_parser(
      'prepare', help='write a bundled dataset as span-organised CSV',
      description='Writes DATA_ROOT/span-N/NAME.csv from data the installed '
      'packages ship (nothing is downloaded).')
  prepare.add_argument('--dataset', choices=sorted(datasets.BUNDLED),
                       default=datasets.DEFAULT_DATASET)
  prepare.add_argument('--data-root', required=True)
  prepare.add_argument('--span', type=_positive_int, default=1)
  prepare.add_argument('--format', choices=config_lib.DATA_FORMATS,
                       default='csv', dest='data_format',
                       help='csv, tfrecord (tf.Examples) or images (digits '
                       'only: span-N/<digit>/*.png)')
  prepare.set_defaults(func=cmd_data_prepare)
  for module_name in COMMAND_MODULES:
    importlib.import_module(module_name).add_commands(sub)
  return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Entry point of the ``leantfx`` console script."""
  os.environ.setdefault('TF_USE_LEGACY_KERAS', '1')
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  # google-api-core warns on every import that Python 3.10 support ends; TFX
  # 1.16 runs only on 3.10, so the warning is noise to a leantfx user.
  warnings.filterwarnings('ignore', category=FutureWarning,
                          message='You are using a non-supported Python')
  args = build_parser().parse_args(argv)
  try:
    return args.func(args)
  except LeantfxError as e:
    print(f'leantfx: error: {e}', file=sys.stderr)
    return e.exit_code
  except KeyboardInterrupt:
    print('leantfx: interrupted', file=sys.stderr)
    return 130


if __name__ == '__main__':
  sys.exit(main())
