"""leantfx.stopping with real processes: descendants stop, orphans do not stay.

Each test starts small real Python processes (no TensorFlow) and bounds every
wait, so it takes seconds.
"""
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from leantfx import stopping
from tests import helpers

pytestmark = pytest.mark.unit

# A process that was signalled is gone from the process table within
# milliseconds on an idle machine; the bound only covers a loaded one.
GONE_WITHIN_S = 15.0


def _wait_until(predicate, timeout_s):
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    if predicate():
      return True
    time.sleep(0.05)
  return predicate()


def _alive(pid):
  try:
    return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
  except psutil.NoSuchProcess:
    return False


def _read_pid(stream):
  """The next line of stream as a pid (the child prints it when ready)."""
  line = stream.readline()
  assert line.strip().isdigit(), line
  return int(line)


# A parent that starts a worker which calls die_with_parent first, prints
# the worker's pid, then sleeps until killed.
_PARENT_CODE = textwrap.dedent('''
    import os, subprocess, sys, time
    worker = subprocess.Popen([sys.executable, '-c', """
    import os, sys, time
    from leantfx import stopping
    stopping.die_with_parent(int(sys.argv[1]))
    print(os.getpid(), flush=True)
    time.sleep(600)
    """, str(os.getpid())], stdout=subprocess.PIPE, text=True)
    print(worker.stdout.readline().strip(), flush=True)
    time.sleep(600)
''')


def test_a_worker_dies_with_its_parent_even_on_sigkill():
  parent = subprocess.Popen([sys.executable, '-c', _PARENT_CODE],
                            stdout=subprocess.PIPE, text=True)
  try:
    worker = _read_pid(parent.stdout)
    assert _alive(worker)
    parent.kill()  # No handler runs: only the kernel can end the worker.
    parent.wait(timeout=GONE_WITHIN_S)
    assert _wait_until(lambda: not _alive(worker), GONE_WITHIN_S), (
        f'worker {worker} outlived its SIGKILLed parent')
  finally:
    parent.kill()


def test_a_worker_whose_parent_is_already_gone_exits_at_once():
  # A pid that is not this worker's parent stands for a parent that died
  # between the worker's start and its die_with_parent call.
  result = subprocess.run(
      [sys.executable, '-c', 'from leantfx import stopping\n'
       'stopping.die_with_parent(1)\nprint("still here")'],
      capture_output=True, text=True, timeout=60, check=False)
  assert result.returncode == 1
  assert 'still here' not in result.stdout
  assert 'process 1, which started worker' in result.stderr


def test_stop_processes_stops_the_whole_tree_and_counts_it():
  # A child with a grandchild; the grandchild ignores SIGTERM, so it takes
  # the SIGKILL after the grace.
  code = textwrap.dedent('''
      import signal, subprocess, sys, time
      grandchild = subprocess.Popen([sys.executable, '-c',
          'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);'
          ' print("ready", flush=True); time.sleep(600)'],
          stdout=subprocess.PIPE, text=True)
      grandchild.stdout.readline()
      print(grandchild.pid, flush=True)
      time.sleep(600)
  ''')
  child = subprocess.Popen([sys.executable, '-c', code],
                           stdout=subprocess.PIPE, text=True)
  try:
    grandchild = _read_pid(child.stdout)
    tree = stopping.descendants()
    pids = {p.pid for p in tree}
    assert {child.pid, grandchild} <= pids
    started = time.monotonic()
    stopped = stopping.stop_processes(
        [p for p in tree if p.pid in (child.pid, grandchild)], grace_s=1.0)
    assert stopped == 2
    assert time.monotonic() - started < GONE_WITHIN_S
    assert not _alive(child.pid) and not _alive(grandchild)
  finally:
    child.kill()


# A command inside stop_on_signals: it starts a child, says it is ready and
# waits; on the signal it reports what StopRequested carried.
_COMMAND_CODE = textwrap.dedent('''
    import subprocess, sys, time
    from leantfx import stopping
    with stopping.stop_on_signals(grace_s=2.0):
      try:
        child = subprocess.Popen([sys.executable, '-c',
                                  'import time; time.sleep(600)'])
        print(child.pid, flush=True)
        time.sleep(600)
      except stopping.StopRequested as stop:
        print(f'stopped {stop.stopped} by {stopping.signal_name(stop.signum)}',
              flush=True)
        sys.exit(stop.exit_code)
''')


@pytest.mark.parametrize('signum', [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_stops_the_children_and_exits_128_plus_signum(signum):
  command = subprocess.Popen([sys.executable, '-c', _COMMAND_CODE],
                             stdout=subprocess.PIPE, text=True)
  try:
    child = _read_pid(command.stdout)
    command.send_signal(signum)
    out, _ = command.communicate(timeout=GONE_WITHIN_S)
  finally:
    command.kill()
  assert command.returncode == 128 + signum
  assert f'stopped 1 by {signal.Signals(signum).name}' in out
  assert not _alive(child)


def test_stop_on_signals_restores_the_previous_handlers():
  before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
  with stopping.stop_on_signals():
    assert signal.getsignal(signal.SIGTERM) not in before
  assert (signal.getsignal(signal.SIGTERM),
          signal.getsignal(signal.SIGINT)) == before


def test_the_exit_code_is_128_plus_the_signal():
  assert stopping.StopRequested(signal.SIGTERM, 0).exit_code == 143
  assert stopping.StopRequested(signal.SIGINT, 0).exit_code == 130


# A command that becomes a subreaper, starts a child that starts a grandchild
# and exits at once, then prints the orphaned grandchild's parent and stops
# its descendants.
_SUBREAPER_CODE = textwrap.dedent('''
    import os, subprocess, sys, time
    import psutil
    from leantfx import stopping
    assert stopping.become_subreaper()
    child = subprocess.Popen([sys.executable, '-c',
        'import subprocess, sys; p = subprocess.Popen([sys.executable, "-c", '
        '"import time; time.sleep(600)"]); print(p.pid, flush=True)'],
        stdout=subprocess.PIPE, text=True)
    grandchild = int(child.stdout.readline())
    child.wait()
    time.sleep(0.5)
    print(psutil.Process(grandchild).ppid() == os.getpid(),
          stopping.stop_processes(stopping.descendants(), grace_s=2.0),
          flush=True)
''')


def test_an_orphaned_grandchild_is_re_parented_to_a_subreaper_and_stopped():
  result = subprocess.run([sys.executable, '-c', _SUBREAPER_CODE],
                          capture_output=True, text=True, timeout=60,
                          check=False)
  assert result.returncode == 0, result.stderr
  assert result.stdout.split() == ['True', '1'], result.stdout


# A command whose first StopRequested is swallowed, as a library's bare
# `except:` or a __del__ would: the stop is raised again until the command
# acknowledges it.
_SWALLOWED_CODE = textwrap.dedent('''
    import sys, time
    from leantfx import stopping
    with stopping.stop_on_signals(grace_s=1.0, redeliver_s=0.5) as guard:
      raised = 0
      while True:
        try:
          if not raised:
            # Inside the try: the stop may come as soon as this is read.
            print('ready', flush=True)
          time.sleep(600)
        except stopping.StopRequested as stop:
          raised += 1
          if raised == 1:
            continue  # swallowed
          guard.acknowledge()
          print(f'raised {raised} times', flush=True)
          sys.exit(stop.exit_code)
''')


def test_a_swallowed_stop_is_raised_again_until_the_command_takes_it():
  command = subprocess.Popen([sys.executable, '-c', _SWALLOWED_CODE],
                             stdout=subprocess.PIPE, text=True)
  try:
    assert command.stdout.readline().strip() == 'ready'
    command.send_signal(signal.SIGTERM)
    out, _ = helpers.communicate_rest(command, GONE_WITHIN_S)
  finally:
    command.kill()
  assert command.returncode == 143
  assert 'raised 2 times' in out


# A command whose main thread is in a C call that no signal interrupts (the
# signal is blocked in that thread, so another thread takes it and Python's
# handler never runs) and that swallows every stop afterwards: the deadline
# still starts at the signal, and the process exits with 128 + signum after
# before_forced_exit has run.
_STUCK_CODE = textwrap.dedent('''
    import ctypes, signal, sys, threading, time
    from leantfx import stopping

    def last_words(stop):
      print(f'forced exit: {stopping.signal_name(stop.signum)} '
            f'{stopping.current_activity()}', flush=True)

    with stopping.stop_on_signals(exit_deadline_s=3.0, redeliver_s=0.5,
                                  before_forced_exit=last_words):
      with stopping.describing_activity(lambda: 'during a C call'):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        # 'ready' comes from a thread once the main thread is in the C call:
        # Python runs its handlers in the main thread whenever that thread
        # runs Python code, whichever thread took the signal.
        threading.Thread(target=lambda: (time.sleep(2.0),
                                         print('ready', flush=True))).start()
        ctypes.CDLL(None).sleep(600)
''')


def test_a_main_thread_stuck_in_c_is_forced_out_at_the_deadline():
  command = subprocess.Popen([sys.executable, '-c', _STUCK_CODE],
                             stdout=subprocess.PIPE, text=True)
  try:
    assert command.stdout.readline().strip() == 'ready'
    started = time.monotonic()
    command.send_signal(signal.SIGTERM)
    out, _ = helpers.communicate_rest(command, GONE_WITHIN_S + 3.0)
    took = time.monotonic() - started
  finally:
    command.kill()
  assert command.returncode == 143
  assert 'forced exit: SIGTERM during a C call' in out
  assert took >= 3.0  # not before the deadline


@pytest.mark.unit
def test_a_stop_behind_a_cleanup_error_is_found():
  # TensorFlow's tf_stack asserts "Concurrent access?" when a stop leaves a
  # function it was tracing: the assertion replaces the stop, which stays its
  # context. A plain failure has no stop behind it.
  stop = stopping.StopRequested(signal.SIGTERM, 0)
  try:
    try:
      raise stop
    except stopping.StopRequested:
      raise AssertionError('Concurrent access?')  # pylint: disable=raise-missing-from
  except AssertionError as error:
    assert stopping.stop_behind(error) is stop
  try:
    raise ValueError('a real failure') from KeyError('x')
  except ValueError as error:
    assert stopping.stop_behind(error) is None
  assert stopping.stop_behind(None) is None


# In a child: a stop's deadline thread ends the process that took the signal.
_IN_PROGRESS_CODE = textwrap.dedent('''
    import signal, sys, time
    from leantfx import stopping
    seen = [stopping.stop_in_progress()]
    try:
      with stopping.stop_on_signals(grace_s=0.1, exit_deadline_s=30) as guard:
        seen.append(stopping.stop_in_progress())
        try:
          signal.raise_signal(signal.SIGTERM)
          time.sleep(5)
        finally:
          seen.append(stopping.stop_in_progress())
          guard.acknowledge()
    except stopping.StopRequested as stop:
      seen.append(stopping.stop_in_progress())
      print([type(s).__name__ for s in seen], seen[2] is stop, flush=True)
      sys.exit(stop.exit_code)
''')


@pytest.mark.unit
def test_a_stop_is_in_progress_from_its_signal_to_the_end_of_its_block():
  result = subprocess.run([sys.executable, '-c', _IN_PROGRESS_CODE],
                          capture_output=True, text=True,
                          timeout=GONE_WITHIN_S)
  assert result.returncode == 143, result.stderr[-2000:]
  assert result.stdout.split('\n')[0] == (
      "['NoneType', 'NoneType', 'StopRequested', 'NoneType'] True")
