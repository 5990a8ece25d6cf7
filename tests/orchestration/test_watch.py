"""The watcher's decisions and exactly-once state, with a recording runner.

The pipeline itself runs in test_watch_e2e.py; here the runner records which
spans it was asked to run, so each decision (complete or not, empty,
backwards, failed and retried, two watchers, a restart) is checked in
milliseconds against the real state file and fcntl lock.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from leantfx.errors import ConfigError
from leantfx.cli import watch as watch_command
from leantfx.pipeline import watch
from tests import helpers

pytestmark = pytest.mark.unit


class Recorder:
  """A runner that records spans and returns preset results."""

  def __init__(self, results=None):
    self.calls = []
    self.results = results or {}

  def __call__(self, span, stop):
    self.calls.append(span)
    outcome = self.results.get(span, 'pushed')
    if callable(outcome):
      outcome = outcome(span, stop)
    return watch.RunResult(outcome, f'{outcome} span {span}', 0)


def _span(root, span, marker=True, rows='a,b\n1,2\n', name='d.csv'):
  folder = os.path.join(root, f'span-{span}')
  os.makedirs(folder, exist_ok=True)
  if rows is not None:
    with open(os.path.join(folder, name), 'w') as f:
      f.write(rows)
  if marker:
    open(os.path.join(folder, watch.MARKER), 'w').close()


def _watcher(tmp_path, runner, **options):
  root = str(tmp_path / 'data')
  os.makedirs(root, exist_ok=True)
  opts = watch.WatchOptions(data_root=root,
                            state_path=str(tmp_path / 'state.json'),
                            **options)
  return watch.Watcher(opts, runner), root


@pytest.fixture(autouse=True)
def _watch_log(caplog):
  """The watcher's INFO lines are captured whatever the root logger's level.

  A test that ran before in the same worker may have left the root logger
  above WARNING (openvino.convert_model did, when it raised).
  """
  caplog.set_level('INFO', logger='leantfx.watch')


def _statuses(w):
  with open(w.state.path) as f:
    return {int(k): v.get('status')
            for k, v in json.load(f)['spans'].items()}


def test_each_complete_span_runs_once_in_order(tmp_path):
  runner = Recorder()
  w, root = _watcher(tmp_path, runner)
  _span(root, 2)
  _span(root, 1)
  assert w.poll() == 2
  assert runner.calls == [1, 2]
  assert w.poll() == 0  # A repeated trigger runs nothing.
  _span(root, 3)
  w.poll()
  assert runner.calls == [1, 2, 3]
  assert _statuses(w) == {1: 'pushed', 2: 'pushed', 3: 'pushed'}


def test_restarted_watcher_does_not_rerun(tmp_path):
  runner = Recorder()
  w, root = _watcher(tmp_path, runner)
  _span(root, 1)
  w.poll()
  restarted, _ = _watcher(tmp_path, runner)
  assert restarted.poll() == 0
  assert runner.calls == [1]


def test_half_written_span_waits_for_its_marker(tmp_path, caplog):
  runner = Recorder()
  w, root = _watcher(tmp_path, runner)
  _span(root, 1, marker=False)
  _span(root, 2)
  w.poll()
  w.poll()
  assert runner.calls == []
  assert 'span 1: not complete yet: no _SUCCESS marker' in caplog.text
  assert 'span 2: waiting for span 1 to complete' in caplog.text
  assert caplog.text.count('no _SUCCESS marker') == 1  # Said once.
  _span(root, 1)
  w.poll()
  assert runner.calls == [1, 2]


def test_stable_mode_needs_two_equal_listings_across_restarts(tmp_path):
  runner = Recorder()
  w, root = _watcher(tmp_path, runner, complete='stable')
  _span(root, 1, marker=False)
  w.poll()
  assert runner.calls == []  # First sight.
  _span(root, 1, marker=False, rows='a,b\n1,2\n3,4\n')  # Still growing.
  w, _ = _watcher(tmp_path, runner, complete='stable')  # Like --once.
  w.poll()
  assert runner.calls == []
  w, _ = _watcher(tmp_path, runner, complete='stable')
  w.poll()
  assert runner.calls == [1]


def test_span_without_data_is_rejected_not_run(tmp_path, caplog):
  runner = Recorder()
  w, root = _watcher(tmp_path, runner)
  _span(root, 1, rows=None)
  w.poll()
  assert runner.calls == []
  assert _statuses(w) == {1: 'rejected'}
  assert 'holds no data file' in caplog.text


def test_spans_of_every_data_format_are_seen_with_their_files(tmp_path):
  """TFRecord files and image class folders are data, like CSV files."""
  runner = Recorder()
  w, root = _watcher(tmp_path, runner)
  _span(root, 1, rows='tf.Example records', name='part-0.tfrecord.gz')
  images = os.path.join(root, 'span-2', '7')
  os.makedirs(images)
  with open(os.path.join(images, 'a.png'), 'wb') as f:
    f.write(b'png bytes')
  open(os.path.join(root, 'span-2', watch.MARKER), 'w').close()
  folders = watch.list_spans(root)
  assert [f.data_files for f in folders] == [
      {'part-0.tfrecord.gz': 18}, {'7/a.png': 9}]
  w.poll()
  assert runner.calls == [1, 2]


def test_a_symlink_loop_in_a_span_is_listed_not_followed(tmp_path):
  # span-1/loop -> span-1 and span-1/7/up -> span-1: entered once each way,
  # listed as an entry where it would come back, so the run started on the
  # span refuses it (tests/orchestration/test_watch_failures_e2e.py).
  runner = Recorder()
  w, root = _watcher(tmp_path, runner)
  _span(root, 1)
  span = os.path.join(root, 'span-1')
  os.symlink('.', os.path.join(span, 'loop'))
  os.makedirs(os.path.join(span, '7'))
  os.symlink('..', os.path.join(span, '7', 'up'))
  (folder,) = watch.list_spans(root)
  assert folder.data_files == {'7/up/': 0, 'd.csv': 8, 'loop/': 0}
  w.poll()
  assert runner.calls == [1]


def test_span_number_going_backwards_is_skipped(tmp_path, caplog):
  runner = Recorder()
  w, root = _watcher(tmp_path, runner)
  _span(root, 5)
  w.poll()
  _span(root, 3)
  w.poll()
  assert runner.calls == [5]
  assert _statuses(w)[3] == 'skipped_backwards'
  assert 'Deliver new data as span-6' in caplog.text


def test_failed_run_is_retried_a_bounded_number_of_times(tmp_path, caplog):
  runner = Recorder({1: 'failed'})
  w, root = _watcher(tmp_path, runner, max_attempts=3)
  _span(root, 1)
  _span(root, 2)
  for _ in range(5):
    w.poll()
  # Three attempts at span 1 (span 2 waits behind it), then it is given up
  # and span 2 runs; later polls run nothing.
  assert runner.calls == [1, 1, 1, 2]
  assert _statuses(w) == {1: 'gave_up', 2: 'pushed'}
  assert 'span 1: gave up after 3 failed attempts' in caplog.text
  assert w.run_forever(once=True) == 1  # Reported to cron.


def test_interrupted_run_is_retried_after_a_crash(tmp_path):
  runner = Recorder()
  w, root = _watcher(tmp_path, runner)
  _span(root, 1)
  with w.state.locked():
    w.state.set_span(1, status='running', attempts=1)  # Then "crashed".
  w.poll()
  assert runner.calls == [1]
  with open(w.state.path) as f:
    assert json.load(f)['spans']['1']['attempts'] == 2


def test_two_watchers_never_run_the_same_span(tmp_path):
  started, release = threading.Event(), threading.Event()

  def slow(span, stop):
    del span, stop
    started.set()
    release.wait(10)
    return 'pushed'

  first_runner, second_runner = Recorder({1: slow}), Recorder()
  first, root = _watcher(tmp_path, first_runner)
  second, _ = _watcher(tmp_path, second_runner)
  _span(root, 1)
  thread = threading.Thread(target=first.poll)
  thread.start()
  assert started.wait(10)
  assert second.poll() == 0  # The lock is taken: this poll is skipped.
  release.set()
  thread.join(10)
  assert second.poll() == 0  # And afterwards the span is done.
  assert first_runner.calls == [1] and second_runner.calls == []


def test_bad_options_and_corrupt_state(tmp_path):
  with pytest.raises(ConfigError, match='--complete'):
    watch.WatchOptions(data_root='.', state_path='s', complete='size')
  with pytest.raises(ConfigError, match='--max-attempts'):
    watch.WatchOptions(data_root='.', state_path='s', max_attempts=0)
  w, root = _watcher(tmp_path, Recorder())
  with open(w.state.path, 'w') as f:
    f.write('{not json')
  _span(root, 1)
  with pytest.raises(ConfigError, match='unreadable'):
    w.poll()


def test_sigterm_exits_cleanly(tmp_path):
  """The real CLI waiting between polls: SIGTERM ends it at once, exit 143
  (128 + SIGTERM, as a shell reports a process it stopped), saying so."""
  data = tmp_path / 'data'
  data.mkdir()
  proc = subprocess.Popen(
      [sys.executable, '-m', 'leantfx.cli', 'watch', '--data-root',
       str(data), '--state', str(tmp_path / 'state.json'), '--interval',
       '300', '--output', str(tmp_path / 'out')],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  try:
    lines = []
    # Bounded: the CLI starts in seconds on an idle machine, but took over a
    # minute at load average 11 on 2 cores (TensorFlow's import).
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
      line = proc.stdout.readline()
      lines.append(line)
      if 'watching' in line:
        break
    assert 'watching' in lines[-1], lines
    proc.send_signal(signal.SIGTERM)
    # At once: the watcher logs the stop within seconds of the signal (0.2 s
    # idle, beside 10 CPU hogs too); the interpreter's exit after it is
    # TensorFlow's finalization, bounded separately.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and 'stopped by a signal' not in line:
      line = proc.stdout.readline()
      lines.append(line)
      if not line:
        break
    assert 'stopped by a signal' in line, lines
    out, _ = helpers.communicate_rest(proc, helpers.EXIT_TIMEOUT_S)
  finally:
    if proc.poll() is None:
      proc.kill()
  out = ''.join(lines) + out
  assert proc.returncode == 143, out
  assert 'received SIGTERM; stopping' in out
  assert ('leantfx watch: stopped by SIGTERM; no run was in progress\n'
          in out), out


def test_stop_during_a_run_leaves_the_span_pending(tmp_path):
  def until_stopped(span, stop):
    del span
    assert stop.wait(10)
    return 'stopped'

  runner = Recorder({1: until_stopped})
  w, root = _watcher(tmp_path, runner)
  _span(root, 1)
  timer = threading.Timer(0.2, w.stop.set)
  timer.start()
  w.poll()
  timer.join()
  with open(w.state.path) as f:
    entry = json.load(f)['spans']['1']
  assert entry['status'] is None and entry['attempts'] == 0
  fresh, _ = _watcher(tmp_path, Recorder())
  fresh.poll()
  assert _statuses(fresh) == {1: 'pushed'}


def test_stopping_a_child_ends_its_process_group():
  child = subprocess.Popen(
      ['/bin/sh', '-c', 'sleep 60 & sleep 60; wait'],
      start_new_session=True)
  # Both sleeps started (bounded: a fork takes milliseconds).
  deadline = time.monotonic() + 10
  while (len(psutil.Process(child.pid).children()) < 2 and
         time.monotonic() < deadline):
    time.sleep(0.05)
  started = time.monotonic()
  # The shell and both sleeps.
  assert watch_command._stop_child(child) == 3  # pylint: disable=protected-access
  assert child.returncode is not None
  assert time.monotonic() - started < watch_command.STOP_GRACE_S
  # No process of the group is left (the orphaned sleep may need a moment
  # to be reaped by init; bounded wait).
  deadline = time.monotonic() + 10
  while time.monotonic() < deadline:
    try:
      os.killpg(child.pid, 0)
    except ProcessLookupError:
      break
    time.sleep(0.1)
  else:
    pytest.fail('a process of the stopped group is still alive')
