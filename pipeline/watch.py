"""The span watcher: retrain once per new complete span, exactly once.

``leantfx watch`` (cli/watch.py) gives the Watcher a runner: a local
``leantfx run`` or a Kubeflow submission. Each poll lists
``DATA_ROOT/span-<N>/`` folders (leantfx/spans.py) and decides per span:

  * complete?  ``complete='marker'`` (default) needs a ``_SUCCESS`` file in
    the folder, written by the producer after its last data file;
    ``'stable'`` needs the folder's file names and sizes (class sub-folders
    included) to be the same on two consecutive polls (the previous listing
    is kept in the state file, so this works with ``--once`` from cron too);
  * has data?  a complete span without any data file is rejected (whether
    the files are usable CSV, TFRecord or images is the run's check);
  * in order?  a span numbered at or below the newest one already handled
    is skipped (a run always trains on the newest data; deliver new data as
    a higher span number); a complete span waits while a lower one is still
    incomplete, so spans run in the order they are numbered.

Exactly once holds because every decision is made and recorded while
holding an exclusive ``fcntl`` lock on ``STATE.lock``, and the state file
(JSON, replaced atomically) records each span's outcome: a restarted
watcher, a second watcher (it finds the lock taken and skips that poll) and
a repeated trigger all see the span as handled. The lock is released by the
OS if the watcher dies; the span it was running is then found ``running``
and retried, which trains nothing twice that was pushed: TFX's cache answers
the repeated components with the earlier outputs.

A runner's result decides: pushed, not_blessed (done: serving keeps the old
model), rejected (bad input, not retried), failed: retried on the next
polls, at most ``max_attempts`` times, then reported as given up; stopped (a
signal): the span goes back to pending without counting an attempt.
"""
import contextlib
import dataclasses
import errno
import fcntl
import json
import logging
import os
import tempfile
import threading
import time
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, Optional, Tuple

from leantfx import spans
from leantfx.errors import ConfigError

LOG = logging.getLogger('leantfx.watch')
MARKER = spans.COMPLETE_MARKER
STATE_VERSION = 1
# Outcomes after which a span is never run again.
FINAL = ('pushed', 'not_blessed', 'rejected', 'gave_up', 'submitted',
         'skipped_backwards')


@dataclasses.dataclass(frozen=True)
class SpanFolder:
  """One span-<N>/ folder as a poll saw it."""
  span: int
  path: str
  has_marker: bool
  data_files: Dict[str, int]  # data file (relative name) -> size in bytes

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


def _data_files(path: str, prefix: str = '',
                ancestors: FrozenSet[Tuple[int, int]] = frozenset()
               ) -> Dict[str, int]:
  """Data file (relative name) -> size, class sub-folders included.

  Folders are followed through symlinks, as a run reads them, but a folder
  that is one of its own ancestors (a symlink loop) is listed as an entry
  ('<name>/', size 0) and not entered: the run started on the span then
  refuses it with its own message, as it refuses any entry that is not
  data, instead of this listing recursing until the OS gives up (ELOOP).
  """
  info = os.stat(path)
  ancestors = ancestors | {(info.st_dev, info.st_ino)}
  files = {}
  for entry in os.scandir(path):
    if not spans.is_data_entry(entry.name):
      continue
    name = prefix + entry.name
    if entry.is_dir():
      target = entry.stat()
      if (target.st_dev, target.st_ino) in ancestors:
        files[name + '/'] = 0
      else:
        files.update(_data_files(entry.path, name + '/', ancestors))
    elif entry.is_file():
      files[name] = entry.stat().st_size
  return files


def list_spans(data_root: str) -> List[SpanFolder]:
  """Lists span-<N>/ folders with their marker and data files, by span."""
  if not os.path.isdir(data_root):
    raise ConfigError(
        f'Cannot list the watched data root {data_root}: it is not a folder. '
        'Pass the folder that receives span-<N>/ folders with --data-root.')
  found = []
  for span, path in spans.list_span_dirs(data_root):
    marker = os.path.isfile(os.path.join(path, spans.COMPLETE_MARKER))
    found.append(SpanFolder(span, path, marker, _data_files(path)))
  return found


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
    # The run a stop interrupted: (span, its result), for the closing line.
    self.stopped_run: Optional[Tuple[int, RunResult]] = None

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
        LOG.error('span %d: rejected: %s is complete but holds no data file; '
                  'nothing to train on', span, folder.path)
        state.set_span(span, status='rejected', detail='no data files')
        continue
      attempts = entry.get('attempts', 0)
      LOG.info('span %d: seen complete (%d data file(s), %d bytes); run '
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
      self.stopped_run = (span, result)
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
