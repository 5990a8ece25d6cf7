"""The smaller commands: ``data prepare``, ``report``, ``memory-plan``, ``schema infer``.

Each handler takes the parsed arguments and returns the exit code; the work
itself lives in the modules they call (datasets, the optimization report,
the ZeRO memory planner, the schema inference).
"""
import argparse
import dataclasses
import datetime
import glob
import json
import os
from typing import Optional

from google.protobuf import text_format

from leantfx import config as config_lib
from leantfx import data_formats
from leantfx import datasets
from leantfx import column_roles
from leantfx import input_checks
from leantfx import memory_plan
from leantfx import schema_infer
from leantfx import task as task_lib
from leantfx.cli import argtypes
from leantfx.errors import ConfigError, InputDataError

OPTIMIZER_NODE = 'ModelOptimizer'


def cmd_data_prepare(args: argparse.Namespace) -> int:
  """Handler of ``leantfx data prepare``."""
  path = datasets.prepare(args.dataset, args.data_root, args.span,
                          args.data_format)
  print(f'wrote {path}')
  return 0


def _add_data_prepare(subparsers) -> None:
  data_cmd = subparsers.add_parser('data', help='bundled data').add_subparsers(
      dest='data_command', metavar='ACTION', required=True)
  prepare = data_cmd.add_parser(
      'prepare', help='write a bundled dataset as span-organised data',
      description='Writes DATA_ROOT/span-N/NAME.csv (or .tfrecord, or '
      'class folders of PNGs) from data the installed packages ship (nothing '
      'is downloaded).')
  prepare.add_argument('--dataset', choices=sorted(datasets.BUNDLED),
                       default=datasets.DEFAULT_DATASET)
  prepare.add_argument('--data-root', required=True)
  prepare.add_argument('--span', type=argtypes.positive_int, default=1)
  prepare.add_argument('--format', choices=config_lib.DATA_FORMATS,
                       default='csv', dest='data_format',
                       help='csv, tfrecord (tf.Examples) or images (digits '
                       'only: span-N/<digit>/*.png)')
  prepare.set_defaults(func=cmd_data_prepare)


def _newest_report_dir(path: str) -> Optional[str]:
  """The newest ModelOptimizer report below a run's output directory."""
  candidates = glob.glob(
      os.path.join(path, 'tfx', OPTIMIZER_NODE, 'report', '*',
                   'variants.json'))
  if not candidates:
    return None
  return os.path.dirname(max(candidates, key=os.path.getmtime))


def cmd_report(args: argparse.Namespace) -> int:
  """Handler of `leantfx report PATH`."""
  # Lazy: the report module imports matplotlib and TensorFlow.
  from leantfx.components.optimize.evaluation import report as report_lib  # pylint: disable=g-import-not-at-top
  path = os.path.abspath(args.path)
  if not os.path.exists(path):
    raise ConfigError(f'{path} does not exist: pass a `leantfx run` output '
                      'folder or a report folder holding variants.json.')
  report_dir = path
  if not os.path.isfile(os.path.join(path, 'variants.json')):
    report_dir = _newest_report_dir(path)
    if report_dir is None:
      raise ConfigError(
          f'No optimization report under {path}: run `leantfx run` (without '
          '--no-optimize) there first, or pass a report folder holding '
          'variants.json.')
  written = report_lib.regenerate(report_dir)
  print(f"report: {written['html']}")
  print(f"markdown: {written['markdown']}")
  return 0


def _add_report(subparsers) -> None:
  """Adds `leantfx report`."""
  parser = subparsers.add_parser(
      'report',
      help='regenerate the optimization report (HTML and Markdown)',
      description='Rebuilds report.html, report.md and the plots from a '
      'ModelOptimizer report folder, or from the newest one under a '
      '`leantfx run` output folder.')
  parser.add_argument('path', help='a run output folder or a report folder')
  parser.set_defaults(func=cmd_report)


def cmd_memory_plan(args: argparse.Namespace) -> int:
  """Handler of ``leantfx memory-plan``."""
  if (args.params is None) == (args.model is None):
    raise ConfigError('Give the model size as exactly one of --params N (e.g. '
                      '7.5B) or --model PATH (a SavedModel or Keras model).')
  if args.devices < 1:
    raise ConfigError(f'--devices must be >= 1, got {args.devices}.')
  if args.batch_size is not None and args.batch_size < 1:
    raise ConfigError(f'--batch-size must be >= 1, got {args.batch_size}.')
  if args.activations_gb is not None and args.activations_gb < 0:
    raise ConfigError(f'--activations-gb must be >= 0, got '
                      f'{args.activations_gb}.')
  activations = (args.activations_gb or 0.0) * memory_plan.GB
  if args.model is not None:
    params, estimate = memory_plan.model_facts(args.model, args.batch_size,
                                   args.precision)
    if estimate is not None and args.activations_gb is None:
      activations = estimate
  else:
    params = memory_plan.parse_count(args.params)
  stages = memory_plan.STAGES if args.stage is None else (args.stage,)
  plans = memory_plan.plan(params, args.devices, args.precision, args.optimizer,
               activations, stages)
  if args.json:
    print(json.dumps({
        'parameters': params,
        'devices': args.devices,
        'precision': args.precision,
        'optimizer': args.optimizer,
        'gb': memory_plan.GB,
        'stages': [dict(dataclasses.asdict(p), total=p.total) for p in plans],
    }, indent=2))
  else:
    print(memory_plan.format_plan(plans, params, args.devices, args.precision,
                      args.optimizer))
  return 0


def _add_memory_plan(subparsers) -> None:
  """Adds ``memory-plan``."""
  parser = subparsers.add_parser(
      'memory-plan',
      help='per-device memory under data parallelism and ZeRO stages 1-3',
      description='Prints per-device memory for parameters, gradients, '
      'optimizer state and activations under plain data parallelism (stage '
      '0) and ZeRO stages 1-3 (Rajbhandari et al. 2020). Example, the '
      "paper's: leantfx memory-plan --params 7.5B --devices 64 --precision "
      'mixed_float16  ->  120.0, 31.4, 16.6, 1.9 GB.')
  size = parser.add_argument_group('model size (one of)')
  size.add_argument('--params', help='parameter count: 7500000000, 7.5e9, '
                    '7.5B, 125M')
  size.add_argument('--model', help='a SavedModel folder, a .keras/.h5 file '
                    'or a Trainer model artifact: its trainable parameters')
  parser.add_argument('--devices', type=int, default=1,
                      help='data-parallel devices N_d (default 1)')
  parser.add_argument('--precision', choices=memory_plan.PRECISIONS, default='float32',
                      help='training precision (default float32)')
  parser.add_argument('--optimizer', choices=memory_plan.OPTIMIZERS, default='adam',
                      help='optimizer whose state is planned (default adam)')
  parser.add_argument('--stage', type=int, choices=memory_plan.STAGES,
                      help='print only this stage (default: all four)')
  parser.add_argument('--activations-gb', type=float,
                      help='activation memory per device, in memory_plan.GB (10^9 B)')
  parser.add_argument('--batch-size', type=int,
                      help='with --model: per-device batch for an activation '
                      'estimate (sum of layer outputs)')
  parser.add_argument('--json', action='store_true',
                      help='print the plan as JSON (bytes)')
  parser.set_defaults(func=cmd_memory_plan)


def cmd_infer(args: argparse.Namespace) -> int:
  """Handler of ``leantfx schema infer``."""
  out_path = os.path.join(args.out, schema_infer.SCHEMA_FILE)
  if os.path.exists(out_path) and not args.force:
    raise ConfigError(
        f'{out_path} exists; a curated schema is not overwritten. Pass '
        '--force to replace it, or another --out folder.')
  span, span_dir = (input_checks.latest_span(args.data_root)
                    if args.span is None else
                    input_checks.latest_span(args.data_root, args.span))
  data_format = args.data_format or data_formats.infer_format(span_dir)
  if data_format is None:
    raise ConfigError(f'Cannot tell the data format of {span_dir}; pass '
                      '--format csv|tfrecord|images.')
  if data_format == 'images':
    classes = sorted(
        n for n in os.listdir(span_dir)
        if os.path.isdir(os.path.join(span_dir, n)) and any(
            data_formats.IMAGE_EXTENSIONS.__contains__(
                os.path.splitext(f)[1].lower())
            for f in os.listdir(os.path.join(span_dir, n))))
    if not classes:
      raise InputDataError(f'Span {span} ({span_dir}) has no class folder '
                           'with images (span-N/<class name>/*.png).')
    schema = schema_infer.image_schema(classes, label=args.label or 'label')
  else:
    label, categorical, text_columns = args.label, args.categorical, ()
    roles = None
    if data_format == 'csv':
      if not args.label:
        raise ConfigError(
            'leantfx schema infer on CSV data needs --label COLUMN: a class '
            'label is read as text, as the pipeline reads it, and the schema '
            'names the columns by their feature keys.')
      # The CSV checks: readable files, consistent headers, the label.
      profile = input_checks.profile_csv_data_root(
          args.data_root, args.label, categorical_columns=args.categorical,
          span=span,
          role_overrides=column_roles.parse_role_overrides(args.column_role),
          date_formats=column_roles.parse_date_formats(args.date_format))
      decision = task_lib.decide(args.label, profile.label_values,
                                 profile.num_rows, 'auto')
      as_text = [r.column for r in profile.roles
                 if r.role not in (column_roles.NUMERIC,)]
      text_columns = tuple(as_text) + (
          () if decision.task == 'regression' else (args.label,))
      keys = profile.feature_keys
      label = keys[args.label]
      categorical = [keys[c] for c in args.categorical]
      roles = {keys[r.column]: (r.role, r.date_format) for r in profile.roles}
      for line in column_roles.describe(profile.roles):
        print(f'  {line}')
    statistics = schema_infer.span_statistics(
        span_dir, data_format, text_columns,
        roles and [r.column for r in profile.roles
                   if r.role == column_roles.NUMERIC],
        roles and profile.missing_markers)
    if not statistics.datasets or not statistics.datasets[0].num_examples:
      raise InputDataError(f'Span {span} ({span_dir}) holds no example to '
                           'infer a schema from.')
    schema = schema_infer.infer_schema(statistics, label, categorical, roles)
  header = (
      f'# Inferred by `leantfx schema infer` from span {span} of '
      f'{os.path.abspath(args.data_root)} ({data_format}) on '
      f'{datetime.date.today().isoformat()}.\n'
      '# A starting point: review before using it with --schema.\n'
      '# - domains are the OBSERVED ranges and values: widen them to what is\n'
      '#   plausible, or every new extreme value stops the run;\n'
      '# - presence.min_fraction is the observed share of examples with the\n'
      '#   feature: lower it to the share of missing values you tolerate;\n'
      f'# - drift thresholds are defaults (L-infinity {schema_infer.CATEGORICAL_THRESHOLD} '
      f'for categorical, Jensen-Shannon {schema_infer.NUMERIC_THRESHOLD} for numeric):\n'
      '#   measure two samples of the same data and set them above that.\n')
  os.makedirs(args.out, exist_ok=True)
  with open(out_path, 'w', encoding='utf-8') as f:
    f.write(header + text_format.MessageToString(schema))
  print(f'wrote {out_path} ({len(schema.feature)} features, span {span}); '
        'curate it, then pass it with --schema')
  return 0


def _add_schema_infer(subparsers) -> None:
  """Adds ``leantfx schema infer``."""
  schema = subparsers.add_parser(
      'schema', help='schemas for your data').add_subparsers(
          dest='schema_command', metavar='ACTION', required=True)
  infer = schema.add_parser(
      'infer', help='write a starting schema.pbtxt from TFDV statistics',
      description='Computes TFDV statistics of the newest span (or --span) '
      'and writes OUT/schema.pbtxt with drift comparators and the observed '
      'domains, for you to curate and pass with `leantfx run --schema`.')
  infer.add_argument('--data-root', required=True)
  infer.add_argument('--out', required=True, help='folder, e.g. '
                     'schemas/<name>/')
  infer.add_argument('--label', help='the label column (gets a drift '
                     'comparator; INT labels become categorical)')
  infer.add_argument('--categorical', action='append', default=[],
                     metavar='COLUMN', help='an INT column that is '
                     'categorical (repeatable)')
  infer.add_argument('--column-role', action='append', default=[],
                     metavar='COLUMN=ROLE', help='a CSV column\'s role '
                     'instead of the inferred one, recorded in the schema '
                     '(repeatable; as `leantfx run --column-role`)')
  infer.add_argument('--date-format', action='append', default=[],
                     metavar='[COLUMN=]FORMAT', help='the strptime format '
                     'of date columns (as `leantfx run --date-format`)')
  infer.add_argument('--format', dest='data_format',
                     choices=('csv', 'tfrecord', 'images'))
  infer.add_argument('--span', type=int)
  infer.add_argument('--force', action='store_true',
                     help='overwrite an existing schema.pbtxt')
  infer.set_defaults(func=cmd_infer)


def add_commands(subparsers) -> None:
  """Registers data prepare, report, memory-plan and schema infer."""
  _add_data_prepare(subparsers)
  _add_report(subparsers)
  _add_memory_plan(subparsers)
  _add_schema_infer(subparsers)
