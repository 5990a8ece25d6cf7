"""Stopping a command and every process it started, however it is stopped.

A ``leantfx run`` starts processes of its own: the ModelOptimizer's export
worker (a spawned ``ProcessPoolExecutor`` worker), Beam's multi_processing
SDK workers, the multiprocessing resource tracker. When the run is stopped
(SIGTERM from a process manager or ``leantfx watch``, SIGINT from Ctrl-C)
they must stop with it: a worker left behind is re-parented to init and
keeps its memory.

The parent's side and the child's:

* ``stop_on_signals()``: inside it, SIGTERM and SIGINT stop every descendant
  of this process (SIGTERM, then SIGKILL after a grace) and raise
  ``StopRequested`` in the main thread, so the command's ``finally`` blocks
  run (a push's staging folder is removed) and the command can say what it
  stopped and exit with 128 + the signal number;
* ``become_subreaper()`` (Linux): a process whose own parent dies below this
  one is re-parented here, not to init, so it is still a descendant to stop;
* ``die_with_parent()``, called first in a worker process: the kernel
  (Linux ``PR_SET_PDEATHSIG``) kills the worker when its parent dies, and it
  exits at once if the parent is already gone. That covers a SIGKILL of the
  parent, which no signal handler sees.
"""
import contextlib
import ctypes
import os
import signal
import socket
import sys
import threading
import time
from typing import Callable, Iterator, List, Optional, Sequence

import psutil

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_current_stop = None  # The innermost stop_on_signals block's _Stop.
# How long a stopped process gets to exit before SIGKILL. The processes a run
# starts keep the default SIGTERM action (they die at once); the grace covers
# one that handles it (a serving worker stopping gracefully).
STOP_GRACE_S = 10.0
# From the stop signal to a forced exit: the command's cleanup (a push's
# staging folder, the run record) takes well under a second after its
# descendants are stopped (at most STOP_GRACE_S); this bounds a main thread
# stuck in a C call or a library thread that keeps the interpreter alive.
EXIT_DEADLINE_S = 25.0
# <linux/prctl.h>
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def stop_behind(error: Optional[BaseException]) -> Optional['StopRequested']:
  """The stop an exception was raised while handling, if any.

  Code a stop unwinds through may raise in its own cleanup, and its exception
  then replaces the stop: TensorFlow's tf_stack asserts "Concurrent access?"
  when a stop leaves a function it was tracing. A caller that skips a
  failed step (the optimizer's candidates) asks this first, so that the
  stop goes on instead of passing for a failure.
  """
  seen = set()
  while error is not None and id(error) not in seen:
    if isinstance(error, StopRequested):
      return error
    seen.add(id(error))
    error = error.__cause__ or error.__context__
  return None


def stop_in_progress() -> Optional['StopRequested']:
  """The stop a signal began in this process's stop_on_signals block, if
  any (begun as soon as the signal arrives, before its handler runs)."""
  stop = _current_stop
  return stop.request if stop is not None else None


def signal_name(signum: int) -> str:
  """'SIGTERM' for 15."""
  try:
    return signal.Signals(signum).name
  except ValueError:
    return f'signal {signum}'


class StopRequested(BaseException):
  """SIGTERM or SIGINT asked the command to stop; raised in the main thread.

  A BaseException, as KeyboardInterrupt is: a library's ``except Exception``
  must not take a stop for a failure and carry on.

  Attributes:
    signum: the signal.
    stopped: how many descendant processes were stopped.
    during: what was running (a runner sets the component's name).
  """

  def __init__(self, signum: int, stopped: int):
    super().__init__(f'stopped by {signal_name(signum)}')
    self.signum = signum
    self.stopped = stopped
    self.during: Optional[str] = None

  @property
  def exit_code(self) -> int:
    """128 + the signal number, as a shell reports a process it signalled."""
    return 128 + self.signum


def _prctl(option: int, value: int) -> bool:
  """prctl(2) on Linux; False elsewhere or when it fails."""
  if not sys.platform.startswith('linux'):
    return False
  try:
    return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
  except (OSError, AttributeError):
    return False


def die_with_parent(parent_pid: int, signum: int = signal.SIGKILL) -> bool:
  """Makes this process die with its parent; call it first in a worker.

  PR_SET_PDEATHSIG fires when the *thread* that started this process ends:
  start workers from a thread that lives as long as they are needed.

  Args:
    parent_pid: the pid of the process that started this one (passed in:
      if it died already, os.getppid() is someone else's).
    signum: what the kernel sends when the parent dies.

  Returns:
    True when the kernel will signal (Linux), False where it cannot; then
    only the parent's own stop reaches this process.
  """
  armed = _prctl(_PR_SET_PDEATHSIG, signum)
  if os.getppid() != parent_pid:
    # The parent died before the request was armed: nobody waits for us.
    os.write(2, f'leantfx: process {parent_pid}, which started worker '
             f'{os.getpid()}, is gone; the worker exits.\n'.encode())
    os._exit(1)  # pylint: disable=protected-access
  return armed


def become_subreaper(enable: bool = True) -> bool:
  """Orphaned descendants are re-parented to this process (Linux), not init.

  Args:
    enable: False gives the role up (a command run inside a longer-lived
      process, a test, gives it up when it ends).

  Returns:
    True when the kernel accepted it.
  """
  return _prctl(_PR_SET_CHILD_SUBREAPER, int(enable))


def descendants(pid: Optional[int] = None) -> List[psutil.Process]:
  """Every live process below pid (default: this process), deepest last."""
  try:
    return psutil.Process(pid).children(recursive=True)
  except psutil.NoSuchProcess:
    return []


# multiprocessing's resource tracker ignores SIGTERM and SIGINT by design: it
# exits by itself once every process that uses it is gone, unlinking the
# semaphores they leaked (a SIGKILL would leave them in /dev/shm).
_SELF_EXITING = ('from multiprocessing.resource_tracker import main',)


def _exits_by_itself(process: psutil.Process) -> bool:
  try:
    command = ' '.join(process.cmdline())
  except psutil.Error:
    return False
  return any(marker in command for marker in _SELF_EXITING)


def _reap(pid: int) -> None:
  """Collects the exit status of a child of ours (a zombie otherwise)."""
  with contextlib.suppress(ChildProcessError, OSError):
    os.waitpid(pid, os.WNOHANG)


def stop_processes(processes: Sequence[psutil.Process],
                   grace_s: float = STOP_GRACE_S) -> int:
  """SIGTERM to each process, SIGKILL to those alive after grace_s.

  Args:
    processes: the processes (e.g. ``descendants()``).
    grace_s: seconds they get to exit after SIGTERM.

  multiprocessing's resource tracker is left to exit by itself (it does as
  soon as the processes it serves are gone) and is not counted.

  Returns:
    How many of them were running (exited ones and zombies do not count).
  """
  signalled = []
  for process in processes:
    try:
      if process.status() == psutil.STATUS_ZOMBIE:
        _reap(process.pid)
        continue
      if _exits_by_itself(process):
        continue
      process.terminate()
      signalled.append(process)
    except psutil.NoSuchProcess:
      continue
  if not signalled:
    return 0
  _, alive = psutil.wait_procs(signalled, timeout=grace_s)
  for process in alive:
    with contextlib.suppress(psutil.NoSuchProcess):
      process.kill()
  psutil.wait_procs(alive, timeout=5.0)
  for process in signalled:
    _reap(process.pid)
  return len(signalled)


# What the command is doing now ('during Trainer'), for a stop that never
# reached the code that would have said so (see describing_activity).
_ACTIVITIES: List[Callable[[], Optional[str]]] = []


@contextlib.contextmanager
def describing_activity(describe: Callable[[], Optional[str]]) -> Iterator[None]:
  """Inside, current_activity() asks describe() what is running."""
  _ACTIVITIES.append(describe)
  try:
    yield
  finally:
    _ACTIVITIES.remove(describe)


def current_activity() -> Optional[str]:
  """What the innermost describing_activity block says, or None."""
  for describe in reversed(_ACTIVITIES):
    with contextlib.suppress(Exception):
      said = describe()
      if said:
        return said
  return None


class _Stop:
  """What one stop_on_signals block knows about the stop in progress."""

  def __init__(self, grace_s: float, exit_deadline_s: float,
               redeliver_s: float, say: Callable[[str], None],
               before_forced_exit: Optional[Callable[[StopRequested], None]]):
    self.grace_s = grace_s
    self.exit_deadline_s = exit_deadline_s
    self.redeliver_s = redeliver_s
    self.say = say
    self.before_forced_exit = before_forced_exit
    self.main_ident = threading.main_thread().ident
    self.lock = threading.Lock()
    self.request: Optional[StopRequested] = None
    self.handled = threading.Event()  # the handler stopped the descendants
    self.acknowledged = threading.Event()
    self.in_handler = False

  def begin(self, signum: int) -> StopRequested:
    """The stop's one StopRequested; the first call starts the deadline."""
    with self.lock:
      if self.request is not None:
        return self.request
      self.request = StopRequested(signum, 0)
    threading.Thread(target=self._deadline, name='leantfx-stop-deadline',
                     daemon=True).start()
    return self.request

  def _deadline(self) -> None:
    """Re-raises an unacknowledged stop; exits the process at the deadline.

    A StopRequested can be lost: raised inside a ``__del__``, a weakref or
    gc callback (where Python prints and drops exceptions) or caught by a
    library's bare ``except:``. Until the command acknowledges it, the
    signal is sent to the main thread again every redeliver_s; at
    exit_deadline_s the process writes what it can and exits regardless.
    """
    request = self.request
    deadline = time.monotonic() + self.exit_deadline_s
    while time.monotonic() < deadline:
      wait_s = min(self.redeliver_s, deadline - time.monotonic())
      if self.acknowledged.wait(max(wait_s, 0.0)):
        # The command is unwinding; only the deadline is left to keep.
        time.sleep(max(deadline - time.monotonic(), 0.0))
        break
      if self.handled.is_set() and time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
          signal.pthread_kill(self.main_ident, request.signum)
    self._force_exit(request)

  def _force_exit(self, request: StopRequested) -> None:
    for process in descendants():
      with contextlib.suppress(psutil.NoSuchProcess):
        process.kill()

    def last_words():
      with contextlib.suppress(Exception):
        self.say(f'still running {self.exit_deadline_s:g}s after '
                 f'{signal_name(request.signum)}; killed what was left; '
                 'exiting')
        if self.before_forced_exit is not None:
          self.before_forced_exit(request)

    # Bounded: a lock the stuck main thread holds (a stream's, a logging
    # handler's) must not keep the process alive.
    words = threading.Thread(target=last_words, daemon=True)
    words.start()
    words.join(FORCED_EXIT_WRITE_S)
    os._exit(request.exit_code)  # pylint: disable=protected-access

  def on_signal(self, signum, frame) -> None:
    """The Python-level handler (main thread)."""
    del frame
    if self.acknowledged.is_set() or self.in_handler:
      return
    request = self.begin(signum)
    if not self.handled.is_set():
      self.in_handler = True
      try:
        request.stopped = stop_processes(descendants(), self.grace_s)
      finally:
        self.in_handler = False
        self.handled.set()
    raise request


class StopGuard:
  """Handed out by stop_on_signals: the command acknowledges its stop."""

  def __init__(self, stop: Optional[_Stop]):
    self._stop = stop

  def acknowledge(self) -> None:
    """The command caught its StopRequested and is cleaning up: no more
    re-raising (the exit deadline still holds)."""
    if self._stop is not None:
      self._stop.acknowledged.set()


# How long a forced exit waits for its last words (the run record).
FORCED_EXIT_WRITE_S = 5.0
# A stop that was raised but not yet caught by its command is raised again
# this often (see _Stop._deadline).
REDELIVER_S = 3.0


@contextlib.contextmanager
def stop_on_signals(
    grace_s: float = STOP_GRACE_S,
    exit_deadline_s: float = EXIT_DEADLINE_S,
    say: Callable[[str], None] = lambda line: None,
    before_forced_exit: Optional[Callable[[StopRequested], None]] = None,
    redeliver_s: float = REDELIVER_S) -> Iterator[StopGuard]:
  """Inside: SIGTERM/SIGINT stop every descendant, then raise StopRequested.

  The first signal stops the descendants (so nothing they run outlives the
  command, and no wait of the main thread on them can hang) and raises
  StopRequested where the main thread is. Until the command calls the
  guard's ``acknowledge()`` (in its ``except StopRequested``), the same
  StopRequested is raised again every redeliver_s, in case a library
  swallowed it. The deadline starts when the signal arrives, even if the
  main thread is inside a long C call and runs no Python handler yet (the
  C-level handler writes to a wakeup socket that a thread here reads): if
  the process is still alive exit_deadline_s later, its descendants are
  killed, before_forced_exit(request) runs (e.g. to write a run record) and
  the process exits with 128 + signum. Outside the main thread (where
  Python cannot install handlers) this is a no-op.

  Args:
    grace_s: seconds the descendants get between SIGTERM and SIGKILL.
    exit_deadline_s: seconds from the signal to a forced exit.
    say: writes one line to the user (used only by the forced exit).
    before_forced_exit: called with the StopRequested just before a forced
      exit.
    redeliver_s: seconds between re-raises of an unacknowledged stop.

  Yields:
    A StopGuard.

  Raises:
    StopRequested: inside the block, on SIGTERM or SIGINT.
  """
  if threading.current_thread() is not threading.main_thread():
    yield StopGuard(None)
    return
  global _current_stop
  stop = _Stop(grace_s, exit_deadline_s, redeliver_s, say, before_forced_exit)
  outer_stop, _current_stop = _current_stop, stop
  previous = {signum: signal.signal(signum, stop.on_signal)
              for signum in STOP_SIGNALS}
  reader, writer = socket.socketpair()
  writer.setblocking(False)
  reader.setblocking(True)
  try:
    previous_fd = signal.set_wakeup_fd(writer.fileno(),
                                       warn_on_full_buffer=False)
  except ValueError:
    previous_fd = None

  def wake() -> None:
    """Starts the deadline as soon as a stop signal arrives."""
    while True:
      try:
        data = reader.recv(64)
      except OSError:
        return
      if not data:
        return
      for signum in data:
        if signum in STOP_SIGNALS:
          stop.begin(signum)

  waker = threading.Thread(target=wake, name='leantfx-stop-wakeup',
                           daemon=True)
  waker.start()
  try:
    yield StopGuard(stop)
  finally:
    _current_stop = outer_stop
    if previous_fd is not None:
      signal.set_wakeup_fd(previous_fd)
    for signum, handler in previous.items():
      signal.signal(signum, handler)
    with contextlib.suppress(OSError):
      writer.close()
    with contextlib.suppress(OSError):
      reader.shutdown(socket.SHUT_RDWR)
    reader.close()
