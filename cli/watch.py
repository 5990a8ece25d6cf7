"""``leantfx watch``: retrain once per new complete span, locally or on Kubeflow.

The watcher itself (spans, completeness, order, exactly-once state) is
pipeline/watch.py; this module gives it a runner and the option set.

Local target: each span runs ``leantfx run --data-root D --span N`` in a
subprocess with every pipeline option the watcher was given (cli/options.py,
the same set ``run`` takes, checked with the same messages before the first
poll) and the column roles of the first pushed run (pipeline/watch_roles.py),
and the outcome is read from the run record (JSON) that ``run``
writes: pushed, not_blessed, rejected (bad input, not retried) or failed. A
subprocess per run keeps TensorFlow, Beam and absl state of one run out of
the next, lets SIGTERM stop a run with its Beam workers (its own process
group), and a failed run is retried in a clean process. A stopped watcher
stops the run in progress (and every process below it), prints one line
saying so and exits 128 + the signal number.

Kubeflow target: each span is submitted as a run of a compiled package, with
range_config pinning the span. The pipeline options were compiled into the
package; only those that are pipeline parameters (--train-steps,
--span-window) can be set per run, and any other is refused by name.
"""
import argparse
import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import List, NamedTuple, Optional, Sequence

from leantfx import stopping
from leantfx.cli import argtypes
from leantfx.cli import console
from leantfx.cli import options
from leantfx.cli import summary as summary_lib
from leantfx.errors import ConfigError, LeantfxError
from leantfx.pipeline import watch as watch_lib
from leantfx.pipeline import watch_roles

LOG = watch_lib.LOG
# A stopped run gets this long before SIGKILL: its own exit deadline (it
# exits by then, its run record written, however stuck) and a margin.
STOP_GRACE_S = stopping.EXIT_DEADLINE_S + 10.0
# Pipeline options that are parameters of a compiled Kubeflow pipeline.
_KUBEFLOW_RUN_PARAMETERS = ('--train-steps', '--span-window')


class PinnedRoles(NamedTuple):
  """Where a local watcher pins column roles, and what the user gave."""
  path: str
  given_roles: Sequence[str]
  given_formats: Sequence[str]


def _tail(text: str, lines: int = 3) -> str:
  kept = [l for l in text.strip().splitlines() if l.strip()][-lines:]
  return ' | '.join(kept)[-600:]


def _result_from_record(record, code: int, output: str,
                        seconds: float) -> watch_lib.RunResult:
  """What a finished ``leantfx run`` did, from its run record."""
  if record is None:
    return watch_lib.RunResult(
        'failed', f'exit code {code} and no run record: {_tail(output)}',
        code, seconds)
  status = record.get('status')
  if status == 'pushed':
    detail = record.get('pushed_path') or ''
  elif status == 'not_blessed':
    detail = ('the Evaluator did not bless the model; serving keeps the '
              'previous version')
  else:
    status = 'rejected' if status == 'rejected' else 'failed'
    detail = f"exit code {code}: {record.get('error') or _tail(output)}"
  return watch_lib.RunResult(status, detail, code, seconds)


def local_runner(data_root: str, run_args: Sequence[str],
                 records_dir: str,
                 pinned_roles: Optional[PinnedRoles] = None
                 ) -> watch_lib.Runner:
  """Runs `leantfx run --data-root D --span N RUN_ARGS` in a subprocess.

  With ``pinned_roles``, the first pushed run's column roles are written to
  its file and given to every later run (pipeline/watch_roles.py).
  """

  def run(span: int, stop: threading.Event) -> watch_lib.RunResult:
    os.makedirs(records_dir, exist_ok=True)
    record_path = os.path.join(
        records_dir, time.strftime(f'span-{span}-%Y%m%d-%H%M%S.json'))
    cmd = [sys.executable, '-m', 'leantfx.cli', 'run', '--data-root',
           data_root, '--span', str(span), '--run-record', record_path,
           *run_args]
    if pinned_roles is not None:
      cmd += watch_roles.run_args(watch_roles.read(pinned_roles.path),
                                  pinned_roles.given_roles,
                                  pinned_roles.given_formats)
    started = time.monotonic()
    LOG.info('span %d: leantfx %s', span, ' '.join(cmd[3:]))
    with tempfile.TemporaryFile('w+') as out:
      child = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                               start_new_session=True)
      while child.poll() is None:
        if stop.wait(0.5):
          stopped = _stop_child(child)
          record = summary_lib.read_record(record_path) or {}
          # The run's own line says where it stopped and what it pushed.
          detail = (record.get('error') if record.get('status') == 'stopped'
                    else f'exit code {child.returncode}, no run record')
          return watch_lib.RunResult(
              'stopped', f'{stopped} process{"" if stopped == 1 else "es"} '
              f'stopped ({detail})', child.returncode,
              time.monotonic() - started)
      out.seek(0)
      output = out.read()
    record = summary_lib.read_record(record_path)
    if record is not None:
      for key in ('accuracy', 'blessed', 'pushed_path'):
        LOG.info('span %d: %s: %s', span, key, record.get(key))
      if pinned_roles is not None and watch_roles.pin(pinned_roles.path,
                                                      record, span):
        LOG.info('span %d: column roles pinned for the next spans in %s',
                 span, pinned_roles.path)
    return _result_from_record(record, child.returncode, output,
                               time.monotonic() - started)

  return run


def _stop_child(child: subprocess.Popen) -> int:
  """Stops a run and every process below it; returns how many there were.

  SIGTERM to the child's process group (the run stops its own processes and
  says what it pushed in its run record), SIGKILL after STOP_GRACE_S; then
  whatever of the run's tree is still alive (a process in a session of its
  own, re-parented here: cmd_watch makes the watcher a subreaper) is
  stopped too.
  """
  below = stopping.descendants(child.pid)
  with contextlib.suppress(ProcessLookupError):
    os.killpg(child.pid, signal.SIGTERM)
  try:
    child.wait(timeout=STOP_GRACE_S)
  except subprocess.TimeoutExpired:
    with contextlib.suppress(ProcessLookupError):
      os.killpg(child.pid, signal.SIGKILL)
    child.wait()
  stopping.stop_processes(below)
  return 1 + len(below)


def kubeflow_runner(host: str, package: str, experiment: str,
                    data_root: str, train_steps: Optional[int],
                    span_window: Optional[int]) -> watch_lib.Runner:
  """Submits one KFP run per span (range_config pins the span)."""
  from leantfx.kubeflow import submit  # pylint: disable=g-import-not-at-top  # Lazy: requests.

  def run(span: int, stop: threading.Event) -> watch_lib.RunResult:
    del stop  # A submission takes seconds.
    started = time.monotonic()
    params = submit.run_parameters(data_root=data_root, span=span,
                                   train_steps=train_steps,
                                   span_window=span_window)
    name = f'{os.path.basename(package).rsplit(".", 1)[0]}-span-{span}'
    try:
      run_id = submit.submit_run(host, package, experiment, name, params)
    except LeantfxError as e:
      return watch_lib.RunResult('failed', str(e), e.exit_code,
                                 time.monotonic() - started)
    return watch_lib.RunResult('submitted', f'KFP run {run_id}', 0,
                               time.monotonic() - started, run_id=run_id)

  return run


def _install_signal_handlers(stop: threading.Event,
                             received: List[int]) -> None:
  """SIGTERM/SIGINT set stop (the watcher saves its state and ends the run
  in progress); the first signal is appended to received."""

  def handler(signum, frame):
    del frame
    LOG.info('received %s; stopping', signal.Signals(signum).name)
    if not received:
      received.append(signum)
    stop.set()

  signal.signal(signal.SIGTERM, handler)
  signal.signal(signal.SIGINT, handler)


def _kubeflow_target(args: argparse.Namespace, data_root: str,
                     given: Sequence[str]) -> watch_lib.Runner:
  if not (args.host and args.package):
    raise ConfigError('--target kubeflow needs --host URL and --package '
                      'FILE.yaml (from `leantfx compile`).')
  compiled_in = [o for o in given if o not in _KUBEFLOW_RUN_PARAMETERS]
  if compiled_in:
    raise ConfigError(
        f'{", ".join(compiled_in)} cannot be set per run on Kubeflow: the '
        'pipeline options are compiled into the package. Pass them to '
        '`leantfx compile` and watch the new package; per run only '
        f'{" and ".join(_KUBEFLOW_RUN_PARAMETERS)} (pipeline parameters) '
        'can be set.')
  return kubeflow_runner(args.host, args.package, args.experiment,
                         args.cluster_data_root or data_root,
                         args.train_steps,
                         args.span_window if '--span-window' in given else None)


def cmd_watch(args: argparse.Namespace) -> int:
  """Handler of ``leantfx watch``."""
  logging.basicConfig(
      level=logging.INFO, stream=sys.stdout,
      format='%(asctime)s leantfx watch %(levelname)s %(message)s')
  data_root = os.path.abspath(args.data_root)
  if not os.path.isdir(data_root):
    raise ConfigError(
        f'--data-root {args.data_root} is not a folder. Create it (span-<N>/ '
        'folders of data are delivered into it) or pass the right one.')
  given = options.given_options(args.parser, args)
  if args.target == 'local':
    # Lazy: the builder imports TensorFlow; a bad option must stop the
    # watcher now, with run's message, not at the first span.
    from leantfx.cli import build  # pylint: disable=g-import-not-at-top
    build.check_option_values(args)
    output = os.path.abspath(args.output)
    run_args = ['--output', output] + options.pipeline_argv(args.parser, args)
    if args.verbose:
      run_args.append('--verbose')
    state_path = args.state or os.path.join(output, 'watch', 'state.json')
    # A schema given holds the roles already (its options win anyway); a
    # bundled dataset's roles are fixed.
    pinned = None if args.schema or args.dataset else PinnedRoles(
        watch_roles.path_beside(state_path), tuple(args.column_role),
        tuple(args.date_format))
    runner = local_runner(data_root, run_args,
                          os.path.join(os.path.dirname(
                              os.path.abspath(state_path)), 'runs'),
                          pinned)
  else:
    if not args.state:
      raise ConfigError('--target kubeflow needs --state FILE: where the '
                        'watcher records which spans it submitted.')
    state_path = args.state
    runner = _kubeflow_target(args, data_root, given)
  watch_options = watch_lib.WatchOptions(
      data_root=data_root, state_path=state_path, complete=args.complete,
      max_attempts=args.max_attempts, interval_s=args.interval)
  watcher = watch_lib.Watcher(watch_options, runner)
  received: List[int] = []
  _install_signal_handlers(watcher.stop, received)
  # A process of a run whose own parent died is re-parented here, so
  # _stop_child finds it.
  stopping.become_subreaper()
  LOG.info('watching %s every %ss (target %s, complete = %s, state %s)',
           data_root, args.interval, args.target, args.complete,
           watch_options.state_path)
  code = watcher.run_forever(once=args.once, max_polls=args.max_polls)
  if not received:
    return code
  print(_stopped_line(received[0], watcher.stopped_run),
        file=console.terminal(), flush=True)
  return 128 + received[0]


def _stopped_line(signum: int, stopped_run) -> str:
  """The one line a stopped watcher prints."""
  name = stopping.signal_name(signum)
  if stopped_run is None:
    return f'leantfx watch: stopped by {name}; no run was in progress'
  span, result = stopped_run
  return (f'leantfx watch: stopped by {name} during the run of span {span}: '
          f'{result.detail}; the span stays pending (it runs again on the '
          'next start)')


def add_commands(subparsers) -> None:
  """Registers ``leantfx watch``."""
  watch = subparsers.add_parser(
      'watch', help='retrain once per new complete span (continuous)',
      description='Polls DATA_ROOT for new span-<N>/ folders and runs the '
      'pipeline once per complete span (local: `leantfx run` with the '
      'pipeline options given here) or submits a KFP run (kubeflow), '
      'recording each outcome durably so no span is trained twice. Exit '
      'codes: 0 ok, 1 a span was given up, 2 bad option, 143/130 stopped '
      'by SIGTERM/SIGINT (the run in progress and its processes with it).')
  watch.add_argument('--data-root', required=True,
                     help='the folder that receives span-<N>/ folders')
  watch.add_argument('--interval', type=argtypes.positive_float, default=60.0,
                     help='seconds between polls (default 60)')
  watch.add_argument('--target', choices=('local', 'kubeflow'),
                     default='local')
  watch.add_argument('--once', action='store_true',
                     help='one check, then exit (for cron)')
  watch.add_argument('--max-polls', type=argtypes.positive_int,
                     help='stop after this many polls')
  watch.add_argument('--complete', choices=('marker', 'stable'),
                     default='marker', help=f'a span is complete when it has '
                     f'a {watch_lib.MARKER} file (marker, default) or when '
                     'its files are unchanged across two polls (stable)')
  watch.add_argument('--max-attempts', type=argtypes.positive_int, default=3,
                     help='runs of a failing span before giving up')
  watch.add_argument('--state', help='state file (default: '
                     'OUTPUT/watch/state.json for --target local)')
  watch.add_argument('--output', default='leantfx-output',
                     help='local target: the runs\' output folder')
  kfp = watch.add_argument_group('kubeflow target')
  kfp.add_argument('--host', help='KFP API URL')
  kfp.add_argument('--package', help='compiled PipelineSpec .yaml')
  kfp.add_argument('--experiment', default='leantfx')
  kfp.add_argument('--cluster-data-root',
                   help='the data root as the cluster sees it (default: '
                   '--data-root)')
  options.add_pipeline_options(watch, 'watch')
  watch.set_defaults(func=cmd_watch, parser=watch)
