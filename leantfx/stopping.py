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
import sys
import threading
from typing import Callable, Iterator, List, Optional, Sequence

import psutil

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# How long a stopped process gets to exit before SIGKILL. The processes a run
# starts keep the default SIGTERM action (they die at once); the grace covers
# one that handles it (a serving worker stopping gracefully).
STOP_GRACE_S = 10.0
# From the stop signal to a forced exit: the command's cleanup (a push's
# staging folder, the run record) takes well under a second; this only
# bounds a library thread that would keep the interpreter from exiting.
EXIT_DEADLINE_S = 60.0
# <linux/prctl.h>
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


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


def _force_exit_later(signum: int, deadline_s: float,
                      say: Callable[[str], None]) -> None:
  """Exits the process deadline_s from now if it has not exited by then."""

  def force():
    say(f'still running {deadline_s:g}s after {signal_name(signum)}; '
        'killing what is left and exiting')
    for process in descendants():
      with contextlib.suppress(psutil.NoSuchProcess):
        process.kill()
    os._exit(128 + signum)  # pylint: disable=protected-access

  timer = threading.Timer(deadline_s, force)
  timer.daemon = True
  timer.start()


@contextlib.contextmanager
def stop_on_signals(grace_s: float = STOP_GRACE_S,
                    exit_deadline_s: float = EXIT_DEADLINE_S,
                    say: Callable[[str], None] = lambda line: None
                    ) -> Iterator[None]:
  """Inside: SIGTERM/SIGINT stop every descendant, then raise StopRequested.

  The first signal stops the descendants (so nothing they run outlives the
  command, and no wait of the main thread on them can hang) and raises
  StopRequested where the main thread is; a repeated signal is ignored while
  that stop unwinds. If the process is still alive exit_deadline_s after the
  signal (a library thread holding the interpreter), it is killed with
  exit code 128 + signum. Outside the main thread (where Python cannot
  install handlers) this is a no-op.

  Args:
    grace_s: seconds the descendants get between SIGTERM and SIGKILL.
    exit_deadline_s: seconds from the signal to a forced exit.
    say: writes one line to the user (used only by the forced exit).

  Raises:
    StopRequested: inside the block, on SIGTERM or SIGINT.
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  stopping: List[int] = []

  def on_signal(signum, frame):
    del frame
    if stopping:
      return
    stopping.append(signum)
    _force_exit_later(signum, exit_deadline_s, say)
    raise StopRequested(signum, stop_processes(descendants(), grace_s))

  previous = {signum: signal.signal(signum, on_signal)
              for signum in STOP_SIGNALS}
  try:
    yield
  finally:
    for signum, handler in previous.items():
      signal.signal(signum, handler)
