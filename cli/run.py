"""``leantfx run``: the whole pipeline once, on this machine.

Exit codes: 0 pushed (or already pushed, from cache); 2 bad input or option,
nothing ran; 3 a component failed, nothing pushed; 4 the model was not
blessed, nothing pushed; 143 / 130 stopped by SIGTERM / SIGINT (every
process the run started is stopped; the line it prints says what was
pushed). Every run writes a run record (JSON) beside its log, or to
--run-record: what ``leantfx watch`` decides from; a stopped run's record
has status 'stopped'.
"""
import argparse
import dataclasses
import logging
import os
import time
from typing import Any, Dict

from leantfx import disk_plan
from leantfx import input_checks
from leantfx import stopping
from leantfx.cli import baseline_summary
from leantfx.cli import console
from leantfx.cli import options
from leantfx.cli import summary as summary_lib
from leantfx.errors import LeantfxError

DEFAULT_OUTPUT = 'leantfx-output'
RUNNERS = ('local', 'beam')


def _print_summary(summary, config, seconds: float, log_path: str,
                   beam_line: str = '') -> None:
  """Prints the closing summary (beam_line: what --beam-mode auto chose)."""
  states = [e.state for e in summary.executions.values()]
  cached = states.count('cached')
  print(f'\nleantfx run finished in {seconds:.1f}s '
        f'({len(states)} components: {len(states) - cached} ran, '
        f'{cached} from cache)')
  for line in summary_lib.metric_lines(summary, config):
    print(line)
  for line in summary_lib.slice_lines(summary, config):
    print(line)
  for line in baseline_summary.baseline_lines(summary):
    print(line)
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
    if summary.model_card_dir:
      print(f'  model card: {summary.model_card_page()}')
    for line in summary_lib.serving_graph_lines(summary):
      print(line)
  elif summary.blessed and summary.infra_blessed is False:
    print('  pushed: nothing (the model did not pass the InfraValidator: '
          f'{summary.infra_reason}; the serving directory is unchanged)')
  else:
    print('  pushed: nothing (the model did not pass the Evaluator gate; the '
          'serving directory is unchanged)')
    for line in baseline_summary.not_blessed_lines(summary):
      print(line)
  for line in summary_lib.infra_lines(summary):
    print(line)
  for line in summary_lib.summary_lines(summary, config):
    print(line)
  if beam_line:
    print(f'  {beam_line}')
  print(f'  log: {log_path}')


def _run(args: argparse.Namespace, output: str, log_path: str,
         record: Dict[str, Any], stop_facts: Dict[str, Any]) -> int:
  """Builds and runs the pipeline; stop_facts gets its config and start time
  (milliseconds) once it runs, for the line a stopped run prints."""
  # pylint: disable=g-import-not-at-top
  # Lazy: TensorFlow and TFX load only once the options and data passed.
  from leantfx import span_scoring
  from leantfx.cli import build
  from leantfx.pipeline import beam_preflight
  from leantfx.pipeline import local_runner
  from leantfx.pipeline import run_summary
  # pylint: enable=g-import-not-at-top
  started = time.monotonic()
  built = build.build_pipeline_config(args, build.LocalTarget(output))
  config, data = built.config, built.data
  # The local Trainer runs here: check its precision/strategy options now.
  build.preflight_local_trainer(config.training)
  record.update(dataset=config.dataset.name, data_root=data.data_root,
                data_format=data.data_format, span=data.profile.span,
                # What the checks counted; the run adds read and used.
                rows={'checked': data.profile.num_rows},
                columns=[dict(column=config.dataset.original_name(key),
                              role=role, reason=reason,
                              date_format=config.dataset.date_format.get(key))
                         for key, role, reason in config.dataset.column_roles],
                task=data.task.task, task_reason=data.task.reason,
                task_requested=data.task.requested,
                pipeline_name=config.pipeline_name,
                metadata_path=config.metadata_path,
                beam=(dataclasses.asdict(built.beam) if built.beam else
                      None))
  what = (f'regression on {config.dataset.label!r}'
          if config.dataset.is_regression else
          f'{len(config.dataset.classes)} classes')
  print(f'leantfx run: dataset {config.dataset.name} ({data.profile.num_rows} '
        f'rows in span {data.profile.span} of {data.data_root}, '
        f'{what}), runner {args.runner}, output {output}')
  print(f'  task: {data.task.task} ({data.task.reason})')
  for note in built.notes:
    print(note)
  _check_disk(args, config, data, output)
  # A portable run's job service and SDK workers are checked before any
  # component runs: Beam would wait for workers that never come, for ever.
  reports = beam_preflight.check(config.beam_pipeline_args,
                                 config.pipeline_root)
  if reports:
    workers = sorted({(r['python'], r['leantfx']) for r in reports})
    print('  beam preflight: the SDK workers answered ('
          + '; '.join(f'{p}, leantfx {v}' for p, v in workers) + ')')
  since_ms = int(time.time() * 1000)
  stop_facts.update(config=config, since_ms=since_ms)
  local_runner.run_pipeline(config, args.runner, log_path,
                            quiet_console=not args.verbose)
  summary = run_summary.summarize(config.metadata_path, config.pipeline_name,
                                  since_ms)
  _print_summary(summary, config, time.monotonic() - started, log_path,
                 built.beam.line() if built.beam else '')
  facts = summary_lib.run_record(summary, config)
  facts['rows'] = dict(record['rows'], **(facts['rows'] or {}))
  record.update(facts)
  if config.orchestration.bulk_score:
    scored = span_scoring.score_span(
        config.serving_model_dir, data.data_root, data.profile.span, output,
        config.dataset.label, config.ingestion.normalize_labels)
    print(f'  {span_scoring.describe(scored)}')
    record['bulk_score'] = {k: scored[k] for k in (
        'scored', 'reason', 'version', 'out', 'rows_read', 'rows_scored',
        'accuracy', 'rmse') if k in scored}
  return summary_lib.STATUS_EXIT_CODES[record['status']]


def _check_disk(args: argparse.Namespace, config, data, output: str) -> None:
  """Prints the artifacts' estimated size; refuses a run that cannot fit.

  Raises:
    ConfigError: less than disk_plan.SAFETY_MARGIN times the estimate is
      free, and --skip-disk-check was not given.
  """
  estimated = disk_plan.estimate(
      disk_plan.span_input(data.data_root, data.profile.span,
                           args.span_window),
      data.data_format, optimize=config.optimization is not None)
  if estimated is None or args.skip_disk_check:
    print(disk_plan.describe(estimated) + (
        '; the free space is not checked (--skip-disk-check)'
        if estimated is not None else ''))
    return
  available = disk_plan.check_free_space(estimated, output)
  print(disk_plan.describe(estimated, available, output))


def _pushed_by_this_run(config, since_ms: int) -> str:
  """What a stopped run pushed, from ML Metadata: 'nothing was pushed' or
  where the Pusher's SavedModel went."""
  # pylint: disable=g-import-not-at-top
  from leantfx.pipeline import run_summary
  # pylint: enable=g-import-not-at-top
  try:
    summary = run_summary.summarize(config.metadata_path,
                                    config.pipeline_name, since_ms)
  except Exception:  # pylint: disable=broad-except
    logging.exception('Could not read what the stopped run pushed.')
    return ('what was pushed is unknown (ML Metadata could not be read; '
            'see the log)')
  pusher = summary.executions.get('Pusher')
  if summary.pushed and pusher is not None and pusher.state == 'complete':
    optimizer = summary.executions.get(summary_lib.OPTIMIZER_NODE)
    variants = ('' if config.optimization is None or (
        optimizer is not None and optimizer.state == 'complete') else
                '; no optimized variant was pushed')
    return (f'the SavedModel was pushed to {summary.pushed_path} before the '
            f'stop{variants}')
  return 'nothing was pushed'


def _stopped(stop: stopping.StopRequested, record: Dict[str, Any],
             stop_facts: Dict[str, Any]) -> str:
  """The one line a stopped run prints; puts its facts in the run record."""
  where = stop.during or 'before the pipeline started'
  pushed = 'nothing was pushed'
  if stop_facts:
    pushed = _pushed_by_this_run(stop_facts['config'],
                                 stop_facts['since_ms'])
  line = (f'leantfx run: stopped by {stopping.signal_name(stop.signum)} '
          f'{where}; stopped {stop.stopped} child process'
          f'{"" if stop.stopped == 1 else "es"}; {pushed}')
  record.update(status='stopped', signal=stopping.signal_name(stop.signum),
                stopped_during=where, stopped_processes=stop.stopped,
                error=line)
  return line


def cmd_run(args: argparse.Namespace) -> int:
  """Handler of ``leantfx run``."""
  started_at = time.time()
  record: Dict[str, Any] = {'status': 'rejected', 'argv': args.argv,
                            'started_at': started_at}
  record_paths = [args.run_record] if args.run_record else []
  stop_facts: Dict[str, Any] = {}
  # A process whose own parent dies below this one (a Beam worker's helper)
  # is re-parented here, so a stop finds it.
  stopping.become_subreaper()

  def before_forced_exit(stop: stopping.StopRequested) -> None:
    # The run did not unwind in time: its record still says it stopped.
    stop.during = stop.during or stopping.current_activity()
    line = _stopped(stop, record, stop_facts)
    print(line, file=console.terminal(), flush=True)
    record.update(exit_code=stop.exit_code,
                  seconds=round(time.time() - started_at, 1))
    for path in record_paths:
      summary_lib.write_record(path, record)

  with stopping.stop_on_signals(
      say=lambda line: print(f'leantfx run: {line}', file=console.terminal(),
                             flush=True),
      before_forced_exit=before_forced_exit) as guard:
    try:
      output = input_checks.check_output_dir(args.output)
      os.makedirs(os.path.join(output, 'logs'), exist_ok=True)
      log_path = os.path.join(
          output, 'logs', time.strftime('run-%Y%m%d-%H%M%S.log'))
      record_paths.append(log_path[:-len('.log')] + '.json')
      record.update(output=output, log=log_path)
      if not args.verbose:
        console.divert_stderr(log_path)
      code = _run(args, output, log_path, record, stop_facts)
    except stopping.StopRequested as stop:
      guard.acknowledge()
      stop.during = stop.during or stopping.current_activity()
      # What the signal handler stopped, and whatever started since.
      stop.stopped += stopping.stop_processes(stopping.descendants())
      print(_stopped(stop, record, stop_facts), file=console.terminal(),
            flush=True)
      code = stop.exit_code
    except LeantfxError as e:
      record.update(status='rejected' if e.exit_code == 2 else 'failed',
                    error=str(e))
      raise
    except BaseException as e:
      record.update(status='failed', error=f'{type(e).__name__}: {e}')
      raise
    finally:
      record.update(
          exit_code=(code if record['status'] == 'stopped' else
                     summary_lib.STATUS_EXIT_CODES[record['status']]),
          seconds=round(time.time() - started_at, 1))
      for path in record_paths:
        summary_lib.write_record(path, record)
      stopping.become_subreaper(False)
  return code


def add_commands(subparsers) -> None:
  """Registers ``leantfx run``."""
  run = subparsers.add_parser(
      'run',
      help='run the whole pipeline once (the main job)',
      description='Runs ExampleGen -> statistics -> schema -> validation -> '
      'Augment -> Transform -> Trainer -> Evaluator -> Pusher -> '
      'ModelOptimizer on the newest span. Without --dataset or --data-root '
      'it trains on the bundled digits data. Exit codes: 0 pushed, 2 bad '
      'input, 3 a component failed, 4 not blessed (nothing pushed), '
      '143/130 stopped by SIGTERM/SIGINT (every process it started is '
      'stopped).')
  run.add_argument('--output', default=DEFAULT_OUTPUT,
                   help=f'output folder (default ./{DEFAULT_OUTPUT})')
  run.add_argument('--runner', choices=RUNNERS, default='local',
                   help='LocalDagRunner (default) or BeamDagRunner')
  run.add_argument('--run-record', metavar='FILE',
                   help='write the run record (JSON) here too (default: '
                   'OUTPUT/logs/run-<time>.json beside the log)')
  options.add_pipeline_options(run, 'run')
  run.set_defaults(func=cmd_run, own_log=True)
