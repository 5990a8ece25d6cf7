"""``leantfx watch``: retrain once per new complete span, exactly once.

Each poll lists ``DATA_ROOT/span-<N>/`` folders and decides per span:

  * complete?  ``--complete marker`` (default) needs a ``_SUCCESS`` file in the
    folder, written by the producer after its last data file;
    ``--complete stable`` needs the folder's file names and sizes to be the
    same on two consecutive polls (the previous listing is kept in the state
    file, so this works with ``--once`` from cron too);
  * has data?  a complete span without a ``*.csv`` file is rejected;
  * in order?  a span numbered at or below the newest one already handled
    is skipped (a run always trains on the newest data; deliver new data as
    a higher span number); a complete span waits while a lower one is still
    incomplete, so spans run in the order they are numbered.

A span that passes runs the pipeline once, pinned to that span
(``leantfx run --span N``), locally or as a Kubeflow run. Exactly once holds
because every decision is made and recorded while holding an exclusive
``fcntl`` lock on ``STATE.lock``, and the state file (JSON, replaced
atomically) records each span's outcome: a restarted watcher, a second
watcher (it finds the lock taken and skips that poll) and a repeated trigger
all see the span as handled. The lock is released by the OS if the watcher
dies; the span it was running is then found ``running`` and retried, which
trains nothing twice that was pushed: TFX's cache answers the repeated
components with the earlier outputs.

Local runs are subprocesses (``python -m leantfx.cli run ...``), the same code
path as ``leantfx run``. A subprocess per run keeps TensorFlow, Beam and
absl state of one run out of the next, lets SIGTERM stop a run with its
Beam workers (its own process group), and a failed run is retried in a
clean process. Exit codes of ``leantfx run`` decide: 0 pushed, 4 not blessed
(done: serving keeps the old model), 2 bad input (rejected, not retried),
anything else failed: retried on the next polls, at most ``--max-attempts``
times, then reported as given up.

SIGTERM or SIGINT: a running child is stopped (SIGTERM to its process group,
then SIGKILL after a grace period), its span goes back to pending without
counting an attempt, the state is saved and the watcher exits 0.
"""
import argparse
import contextlib
import dataclasses
import errno
import fcntl
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from leantfx.errors import ConfigError, LeantfxError

LOG = logging.getLogger('leantfx.watch')
MARKER = '_SUCCESS'
_SPAN_RE = re.compile(r'^span-([0-9]+)$')
STATE_VERSION = 1
# Outcomes after which a span is never run again.
FINAL = ('pushed', 'not_blessed', 'rejected', 'gave_up', 'submitted',
         'skipped_backwards')
EXIT_PUSHED, EXIT_BAD_INPUT, EXIT_NOT_BLESSED = 0, 2, 4
STOP_GRACE_S = 30.0  # A stopped run gets this long before SIGKILL.


@dataclasses.dataclass(frozen=True)
class SpanFolder:
  """One span-<N>/ folder as a poll saw it."""
  span: int
  path: str
  has_marker: bool
  data_files: Dict[str, int]  # *.csv name -> size in bytes

  @property
  def signature(self) -> str:
    return json.dumps(sorted(self.data_files.items()))


@dataclasses.dataclass
class RunResult:
  """What running (or submitting) one span produced."""
  status: str  # pushed, not_blessed, rejected, failed, submitted, stopped
  detail: str
  exit_code: Optional[int] = None
  seconds: float = 0.0
  run_id: Optional[str] = None


def list_spans(data_root: str) -> List[SpanFolder]:
  """Lists span-<N>/ folders with their marker and CSV files, by span."""
  try:
    names = os.listdir(data_root)
  except OSError as e:
    raise ConfigError(
        f'Cannot list the watched data root {data_root}: {e.strerror}. Pass '
        'the folder that receives span-<N>/ folders with --data-root.'
    ) from None
  spans = []
  for name in names:
    match = _SPAN_RE.match(name)
    path = os.path.join(data_root, name)
    if not match or not os.path.isdir(path):
      continue
    files, marker = {}, False
    for entry in os.scandir(path):
      if entry.name == MARKER:
        marker = True
      elif entry.name.endswith('.csv') and entry.is_file():
        files[entry.name] = entry.stat().st_size
    spans.append(SpanFolder(int(match.group(1)), path, marker, files))
  return sorted(spans, key=lambda s: s.span)


class StateFile:
  """The watcher's durable state: JSON under an exclusive fcntl lock.

  Layout: {"version": 1, "spans": {"<N>": {"status", "attempts", "detail",
  "exit_code", "run_id", "updated"}}, "listings": {"<N>": signature}}.
  """

  def __init__(self, path: str):
    self.path = os.path.abspath(path)
    self.lock_path = self.path + '.lock'
    self.data: Dict[str, Any] = {}
    self._lock_fd: Optional[int] = None

  @contextlib.contextmanager
  def locked(self) -> Iterator[bool]:
    """Yields True holding the lock (state loaded), False if it is taken."""
    os.makedirs(os.path.dirname(self.path), exist_ok=True)
    fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES):
          yield False
          return
        raise
      self._lock_fd = fd
      self.data = self._load()
      try:
        yield True
      finally:
        self._lock_fd = None
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
      os.close(fd)

  def _load(self) -> Dict[str, Any]:
    if not os.path.exists(self.path):
      return {'version': STATE_VERSION, 'spans': {}, 'listings': {}}
    try:
      with open(self.path, encoding='utf-8') as f:
        data = json.load(f)
    except (OSError, ValueError) as e:
      raise ConfigError(
          f'The watch state file {self.path} is unreadable ({e}). It records '
          'which spans were already trained; restore it from a backup, or '
          'delete it only if every span in the data root may be trained '
          'again.') from None
    if data.get('version') != STATE_VERSION:
      raise ConfigError(
          f'The watch state file {self.path} has version '
          f'{data.get("version")!r}; this leantfx writes {STATE_VERSION}.')
    data.setdefault('listings', {})
    return data

  def save(self) -> None:
    """Replaces the state file atomically (only while holding the lock)."""
    assert self._lock_fd is not None, 'save() needs the lock'
    directory = os.path.dirname(self.path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix='.state-')
    with os.fdopen(fd, 'w', encoding='utf-8') as f:
      json.dump(self.data, f, indent=2, sort_keys=True)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, self.path)

  def span(self, span: int) -> Dict[str, Any]:
    return self.data['spans'].get(str(span), {})

  def set_span(self, span: int, **fields) -> None:
    entry = self.data['spans'].setdefault(str(span), {'attempts': 0})
    entry.update(fields, updated=time.time())
    self.save()

  def handled_max(self) -> int:
    """The highest span with a final outcome or a run in progress (0: none)."""
    spans = [int(k) for k, v in self.data['spans'].items()
             if v.get('status') in FINAL + ('running', 'failed')]
    return max(spans, default=0)


@dataclasses.dataclass(frozen=True)
class WatchOptions:
  """How the watcher decides and runs.

  Attributes:
    data_root: the folder that receives span-<N>/ folders.
    state_path: the state file (its lock is STATE.lock).
    complete: 'marker' or 'stable'.
    max_attempts: runs of one span before it is given up.
    interval_s: seconds between polls.
  """
  data_root: str
  state_path: str
  complete: str = 'marker'
  max_attempts: int = 3
  interval_s: float = 60.0

  def __post_init__(self):
    if self.complete not in ('marker', 'stable'):
      raise ConfigError(f'--complete must be marker or stable, got '
                        f'{self.complete!r}.')
    if not 1 <= self.max_attempts <= 100:
      raise ConfigError(f'--max-attempts must be from 1 to 100, got '
                        f'{self.max_attempts}.')
    if not 0 < self.interval_s <= 86400:
      raise ConfigError(f'--interval must be in (0, 86400] seconds, got '
                        f'{self.interval_s}.')


Runner = Callable[[int, threading.Event], RunResult]


class Watcher:
  """Polls the data root and runs each new complete span exactly once."""

  def __init__(self, options: WatchOptions, run_span: Runner):
    self.options = options
    self.run_span = run_span
    self.state = StateFile(options.state_path)
    self.stop = threading.Event()
    self._said: Dict[int, str] = {}  # span -> last logged skip reason
    self.gave_up: List[int] = []

  def _say_once(self, span: int, message: str) -> None:
    """Logs a waiting/skip reason once, not on every poll."""
    if self._said.get(span) != message:
      self._said[span] = message
      LOG.info('span %d: %s', span, message)

  def _complete(self, folder: SpanFolder, listings: Dict[str, str]) -> str:
    """'' when complete, else why not."""
    if self.options.complete == 'marker':
      return '' if folder.has_marker else (
          f'not complete yet: no {MARKER} marker in {folder.path}')
    previous = listings.get(str(folder.span))
    listings[str(folder.span)] = folder.signature
    if previous != folder.signature:
      return ('not complete yet: its files changed since the last poll (or '
              'this is the first poll that saw them)')
    return ''

  def poll(self) -> int:
    """One check of the data root; runs what is due. Returns spans run."""
    with self.state.locked() as held:
      if not held:
        LOG.info('another watcher holds %s; skipping this poll',
                 self.state.lock_path)
        return 0
      return self._poll_locked()

  def _poll_locked(self) -> int:
    state = self.state
    listings = state.data['listings']
    folders = list_spans(self.options.data_root)
    ran = 0
    for folder in folders:
      if self.stop.is_set():
        break
      span = folder.span
      entry = state.span(span)
      status = entry.get('status')
      if status in FINAL:
        continue
      if status == 'running':
        LOG.warning('span %d: a run was interrupted (the watcher that '
                    'started it died); retrying it', span)
        state.set_span(span, status='failed',
                       detail='interrupted: the watcher stopped mid-run')
        status = 'failed'
      newest = state.handled_max()
      if status is None and span <= newest:
        LOG.warning(
            'span %d: skipped: it arrived after span %d was handled, and runs '
            'only move forward (each trains on the newest data). Deliver new '
            'data as span-%d or higher.', span, newest, newest + 1)
        state.set_span(span, status='skipped_backwards',
                       detail=f'arrived after span {newest}')
        continue
      not_complete = self._complete(folder, listings)
      if not_complete:
        state.save()  # The listing is what 'stable' compares next time.
        self._say_once(span, not_complete)
        # Later spans wait: runs follow span numbers.
        for later in folders:
          if later.span > span and state.span(later.span).get(
              'status') not in FINAL:
            self._say_once(later.span, f'waiting for span {span} to complete')
        break
      if not folder.data_files:
        LOG.error('span %d: rejected: %s is complete but holds no *.csv file; '
                  'nothing to train on', span, folder.path)
        state.set_span(span, status='rejected', detail='no *.csv data files')
        continue
      attempts = entry.get('attempts', 0)
      LOG.info('span %d: seen complete (%d CSV file(s), %d bytes); run '
               'started (attempt %d of %d)', span, len(folder.data_files),
               sum(folder.data_files.values()), attempts + 1,
               self.options.max_attempts)
      state.set_span(span, status='running', attempts=attempts + 1)
      result = self.run_span(span, self.stop)
      ran += 1
      self._record(span, attempts + 1, result)
      if result.status in ('failed', 'stopped'):
        break  # Later spans wait for this one (order).
    return ran

  def _record(self, span: int, attempt: int, result: RunResult) -> None:
    state = self.state
    fields = dict(detail=result.detail, exit_code=result.exit_code,
                  seconds=round(result.seconds, 1), run_id=result.run_id)
    if result.status == 'stopped':
      LOG.info('span %d: run stopped by a signal; it stays pending', span)
      state.set_span(span, status=None, attempts=attempt - 1, **fields)
      return
    if result.status == 'failed' and attempt >= self.options.max_attempts:
      LOG.error('span %d: gave up after %d failed attempts: %s', span,
                attempt, result.detail)
      self.gave_up.append(span)
      state.set_span(span, status='gave_up', **fields)
      return
    if result.status == 'failed':
      LOG.warning('span %d: result failed (attempt %d of %d): %s; retrying '
                  'on the next poll', span, attempt, self.options.max_attempts,
                  result.detail)
    else:
      LOG.info('span %d: result %s in %.1fs%s', span, result.status,
               result.seconds, f': {result.detail}' if result.detail else '')
    state.set_span(span, status=result.status, **fields)

  def run_forever(self, once: bool = False,
                  max_polls: Optional[int] = None) -> int:
    """Polls until stopped (or once / max_polls times). Returns an exit code."""
    polls = 0
    while not self.stop.is_set():
      self.poll()
      polls += 1
      if once or (max_polls is not None and polls >= max_polls):
        break
      self.stop.wait(self.options.interval_s)
    if self.stop.is_set():
      LOG.info('stopped by a signal; state saved in %s', self.state.path)
    return 1 if self.gave_up else 0


def _tail(text: str, lines: int = 3) -> str:
  kept = [l for l in text.strip().splitlines() if l.strip()][-lines:]
  return ' | '.join(kept)[-600:]


def local_runner(data_root: str, run_args: Sequence[str]) -> Runner:
  """Runs `leantfx run --data-root D --span N RUN_ARGS` in a subprocess."""

  def run(span: int, stop: threading.Event) -> RunResult:
    cmd = [sys.executable, '-m', 'leantfx.cli', 'run', '--data-root',
           data_root, '--span', str(span), *run_args]
    env = dict(os.environ, TF_USE_LEGACY_KERAS='1')
    started = time.monotonic()
    LOG.info('span %d: %s', span, ' '.join(cmd[2:]))
    with tempfile.TemporaryFile('w+') as out:
      child = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                               env=env, start_new_session=True)
      while child.poll() is None:
        if stop.wait(0.5):
          _stop_child(child)
          return RunResult('stopped', 'stopped by a signal',
                           child.returncode, time.monotonic() - started)
      out.seek(0)
      output = out.read()
    seconds = time.monotonic() - started
    code = child.returncode
    for line in output.splitlines():
      if line.startswith(('  pushed:', '  accuracy', '  blessed:')):
        LOG.info('span %d: %s', span, line.strip())
    if code == EXIT_PUSHED:
      pushed = re.search(r'pushed: (\S+)', output)
      return RunResult('pushed', pushed.group(1) if pushed else '', code,
                       seconds)
    if code == EXIT_NOT_BLESSED:
      return RunResult('not_blessed', 'the Evaluator did not bless the model; '
                       'serving keeps the previous version', code, seconds)
    if code == EXIT_BAD_INPUT:
      return RunResult('rejected', _tail(output), code, seconds)
    return RunResult('failed', f'exit code {code}: {_tail(output)}', code,
                     seconds)

  return run


def _stop_child(child: subprocess.Popen) -> None:
  """SIGTERM to the child's process group, SIGKILL after STOP_GRACE_S."""
  with contextlib.suppress(ProcessLookupError):
    os.killpg(child.pid, signal.SIGTERM)
  try:
    child.wait(timeout=STOP_GRACE_S)
  except subprocess.TimeoutExpired:
    with contextlib.suppress(ProcessLookupError):
      os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def kubeflow_runner(host: str, package: str, experiment: str,
                    data_root: str, train_steps: Optional[int]) -> Runner:
  """Submits one KFP run per span (range_config pins the span)."""
  from leantfx.kubeflow import submit  # pylint: disable=g-import-not-at-top

  def run(span: int, stop: threading.Event) -> RunResult:
    del stop  # A submission takes seconds.
    started = time.monotonic()
    params = submit.run_parameters(data_root=data_root, span=span,
                                   train_steps=train_steps)
    name = f'{os.path.basename(package).rsplit(".", 1)[0]}-span-{span}'
    try:
      run_id = submit.submit_run(host, package, experiment, name, params)
    except LeantfxError as e:
      return RunResult('failed', str(e), e.exit_code,
                       time.monotonic() - started)
    return RunResult('submitted', f'KFP run {run_id}', 0,
                     time.monotonic() - started, run_id=run_id)

  return run


def _install_signal_handlers(stop: threading.Event) -> None:

  def handler(signum, frame):
    del frame
    LOG.info('received %s; stopping', signal.Signals(signum).name)
    stop.set()

  signal.signal(signal.SIGTERM, handler)
  signal.signal(signal.SIGINT, handler)


def cmd_watch(args: argparse.Namespace) -> int:
  """Handler of ``leantfx watch``."""
  logging.basicConfig(
      level=logging.INFO, stream=sys.stdout,
      format='%(asctime)s leantfx watch %(levelname)s %(message)s')
  data_root = os.path.abspath(args.data_root)
  if not os.path.isdir(data_root):
    raise ConfigError(
        f'--data-root {args.data_root} is not a folder. Create it (span-<N>/ '
        'folders of CSV files are delivered into it) or pass the right one.')
  if args.target == 'local':
    output = os.path.abspath(args.output)
    run_args = ['--output', output]
    for flag in ('dataset', 'label', 'train_steps', 'epochs', 'span_window',
                 'min_accuracy', 'max_accuracy_drop'):
      value = getattr(args, flag)
      if value is not None:
        run_args += [f'--{flag.replace("_", "-")}', str(value)]
    if args.warm_start:
      run_args.append('--warm-start')
    run_args += list(args.run_arg)
    state_path = args.state or os.path.join(output, 'watch', 'state.json')
    runner = local_runner(data_root, run_args)
  else:
    if not (args.host and args.package):
      raise ConfigError('--target kubeflow needs --host URL and --package '
                        'FILE.yaml (from `leantfx compile`).')
    if not args.state:
      raise ConfigError('--target kubeflow needs --state FILE: where the '
                        'watcher records which spans it submitted.')
    state_path = args.state
    runner = kubeflow_runner(args.host, args.package, args.experiment,
                             args.cluster_data_root or data_root,
                             args.train_steps)
  options = WatchOptions(data_root=data_root, state_path=state_path,
                         complete=args.complete,
                         max_attempts=args.max_attempts,
                         interval_s=args.interval)
  watcher = Watcher(options, runner)
  _install_signal_handlers(watcher.stop)
  LOG.info('watching %s every %ss (target %s, complete = %s, state %s)',
           data_root, args.interval, args.target, args.complete,
           options.state_path)
  return watcher.run_forever(once=args.once, max_polls=args.max_polls)


def _positive_int(text: str) -> int:
  try:
    value = int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f'{text!r} is not a whole number')
  if value < 1:
    raise argparse.ArgumentTypeError(f'must be >= 1, got {value}')
  return value


def add_commands(subparsers) -> None:
  """Registers ``leantfx watch``."""
  watch = subparsers.add_parser(
      'watch', help='retrain once per new complete span (continuous)',
      description='Polls DATA_ROOT for new span-<N>/ folders and runs the '
      'pipeline once per complete span (local) or submits a KFP run '
      '(kubeflow), recording each outcome durably so no span is trained '
      'twice. Exit codes: 0 ok, 1 a span was given up, 2 bad option.')
  watch.add_argument('--data-root', required=True)
  watch.add_argument('--interval', type=float, default=60.0,
                     help='seconds between polls (default 60)')
  watch.add_argument('--target', choices=('local', 'kubeflow'),
                     default='local')
  watch.add_argument('--once', action='store_true',
                     help='one check, then exit (for cron)')
  watch.add_argument('--max-polls', type=_positive_int,
                     help='stop after this many polls')
  watch.add_argument('--complete', choices=('marker', 'stable'),
                     default='marker', help=f'a span is complete when it has '
                     f'a {MARKER} file (marker, default) or when its files are '
                     'unchanged across two polls (stable)')
  watch.add_argument('--max-attempts', type=_positive_int, default=3,
                     help='runs of a failing span before giving up')
  watch.add_argument('--state', help='state file (default: '
                     'OUTPUT/watch/state.json for --target local)')
  local = watch.add_argument_group('local target (leantfx run options)')
  local.add_argument('--output', default='leantfx-output')
  local.add_argument('--dataset')
  local.add_argument('--label')
  local.add_argument('--train-steps', type=_positive_int)
  local.add_argument('--epochs', type=_positive_int)
  local.add_argument('--span-window', type=_positive_int)
  local.add_argument('--warm-start', action='store_true')
  local.add_argument('--min-accuracy', type=float)
  local.add_argument('--max-accuracy-drop', type=float)
  local.add_argument('--run-arg', action='append', default=[], metavar='ARG',
                     help='more `leantfx run` arguments (repeatable)')
  kfp = watch.add_argument_group('kubeflow target')
  kfp.add_argument('--host', help='KFP API URL')
  kfp.add_argument('--package', help='compiled PipelineSpec .yaml')
  kfp.add_argument('--experiment', default='leantfx')
  kfp.add_argument('--cluster-data-root',
                   help='the data root as the cluster sees it (default: '
                   '--data-root)')
  watch.set_defaults(func=cmd_watch)
