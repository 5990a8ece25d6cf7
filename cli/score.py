"""The ``score`` command: a span's rows through a pushed model, on Beam.

serving/bulk_score.py does the work (plan, score the blocks on Beam, check
rows in == rows out, move the folder into place); this module parses the
options, picks the Beam mode from the span's rows (the run's rule,
cli/build.py ``beam_args``) and prints what was scored.
"""
import argparse
import shutil

from leantfx.cli import argtypes
from leantfx.cli import options
from leantfx.errors import ConfigError

# Runners whose workers write the parts to this machine's --out folder.
LOCAL_RUNNERS = ('direct', 'portable')


def add_commands(subparsers) -> None:
  """Registers ``leantfx score``."""
  p = subparsers.add_parser(
      'score', help="score a span's CSV rows with a pushed model (any "
      'runtime), writing predictions as CSV and TF Serving PredictionLogs',
      description='Scores the raw rows of a CSV span with a version a push '
      'wrote (SavedModel, TFLite, OpenVINO or ONNX; loaded as `leantfx '
      'serve` loads it, the columns by their names as written), on Beam. '
      'Writes OUT/predictions.csv (file, row, the label, every output), '
      'OUT/prediction_logs/*.tfrecord.gz (PredictionLog) and '
      'OUT/summary.json; rows in == rows out is checked, and OUT appears only '
      'when all of it was written.')
  p.add_argument('--model-base-path', required=True, metavar='DIR',
                 help='the folder of the pushed versions (OUTPUT/tflite/NAME),'
                 ' or the folder of models a push writes into (OUTPUT/tflite, '
                 'as `leantfx serve` takes it) with --model NAME')
  p.add_argument('--model', metavar='NAME',
                 help='the model in a folder of models (needed when it holds '
                 'several), and the name the PredictionLogs carry (default: '
                 'the versions\' folder name)')
  p.add_argument('--version', type=argtypes.positive_int,
                 help='the version to score with (default: the newest)')
  p.add_argument('--data-root', required=True, metavar='DIR',
                 help='folder of span-<N>/ folders of CSV files')
  p.add_argument('--span', type=argtypes.positive_int,
                 help='the span to score (default: the newest)')
  p.add_argument('--out', required=True, metavar='DIR',
                 help='a new or empty folder for the predictions')
  p.add_argument('--label', metavar='COLUMN',
                 help='the label column, copied beside each prediction; the '
                 'summary then gives accuracy (classification) or RMSE')
  p.add_argument('--split', choices=('all', 'train', 'eval'), default='all',
                 help="all (default) or only the rows the pipeline's "
                 'ExampleGen put in this split (needs --label: a row\'s split '
                 'follows from all its columns); --split eval scores the '
                 "Evaluator's rows")
  p.add_argument('--normalize-labels', action='store_true',
                 help='the run used --normalize-labels (labels compared '
                 'without surrounding white space, and split as the run did)')
  options.add_beam_options(p, 'beam (the scoring pipeline)')
  p.set_defaults(func=cmd_score)


def cmd_score(args: argparse.Namespace) -> int:
  """Plans, scores on Beam, checks and writes; prints the summary."""
  if args.beam_runner not in LOCAL_RUNNERS:
    raise ConfigError(
        f'leantfx score --beam-runner {args.beam_runner}: the scoring workers '
        'write their parts to this machine\'s --out folder, which workers on '
        f'a {args.beam_runner} cluster cannot reach. Use --beam-runner '
        'direct (default) or portable.')
  # Imported here: --help and a bad option answer without TensorFlow.
  from leantfx.cli import build  # pylint: disable=g-import-not-at-top
  from leantfx.serving import bulk_score  # pylint: disable=g-import-not-at-top
  work = bulk_score.work_dir_for(args.out)
  try:
    job = bulk_score.plan(
        args.model_base_path, args.data_root, args.span,
        version=args.version, model_name=args.model, label=args.label,
        split=args.split, normalize_labels=args.normalize_labels)
    rows = sum(job.rows.values())
    print(f'leantfx score: {job.model_name} version {job.version} '
          f'({job.version_dir})')
    print(f'  span: {job.span_dir}, {len(job.rows)} file(s), {rows:,} rows, '
          f'{len(job.blocks)} block(s); scoring '
          + ('every row' if job.split == 'all' else
             f'the {job.split} split\'s rows'))
    choice = build.beam_choice(args, rows)
    if choice is not None:
      print(f'  {choice.line()}')
    bulk_score.run_beam(job, work, build.beam_args(args, rows))
    summary = bulk_score.finish(job, work, args.out)
  except BaseException:
    shutil.rmtree(work, ignore_errors=True)
    raise
  line = f'  rows: {summary["rows_read"]:,} read, {summary["rows_scored"]:,} scored'
  if 'accuracy' in summary:
    line += (f'; accuracy {summary["accuracy"]:.4f} on '
             f'{summary["labeled_rows"]:,} labeled rows')
  elif 'rmse' in summary:
    line += (f'; RMSE {summary["rmse"]:.6g} on '
             f'{summary["labeled_rows"]:,} labeled rows')
  print(line)
  print(f'  wrote: {args.out} ({bulk_score.PREDICTIONS_FILE}, '
        f'{bulk_score.LOGS_DIR}/, {bulk_score.SUMMARY_FILE})')
  return 0
