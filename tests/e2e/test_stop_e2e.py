"""A `leantfx run` stopped by SIGTERM or SIGINT: real runs, real signals.

SIGTERM arrives while the ModelOptimizer runs with its export worker
process; SIGINT while Transform runs on Beam's multi_processing workers.
Each time: the exit code is 128 + the signal, one line on stderr says where
the run stopped, how many processes it stopped and what was pushed, no
process of the run's tree is alive 15 s later, the run record says
'stopped', and no push was left half-written.
"""
import json
import os
import re
import signal
import subprocess
import time

import psutil
import pytest

from tests import helpers

pytestmark = pytest.mark.e2e

# The run's processes are stopped before it exits; 15 s covers a loaded
# machine's scheduling (the brief's bound for "nothing outlives the run").
TREE_GONE_WITHIN_S = 15
# From the signal to the run's exit: the stop itself takes a second or two;
# TensorFlow's interpreter finalization can take tens of seconds on a loaded
# machine (helpers.EXIT_TIMEOUT_S explains the bound).
EXIT_WITHIN_S = helpers.EXIT_TIMEOUT_S
STAGING_PREFIX = '.push-'  # leantfx/versioned_push.py's staging folders


def _start_run(output, record, extra):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.Popen(
      [helpers.LEANTFX, 'run', '--dataset', 'penguins', '--output', output,
       '--run-record', record, '--train-steps', '20', '--min-accuracy', '0',
       '--baseline-margin', 'off',
       *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env=env)


def _wait_for_component(run, node, lines):
  """Reads the run's progress lines until node is running."""
  deadline = time.monotonic() + helpers.RUN_TIMEOUT_S
  while time.monotonic() < deadline:
    line = run.stdout.readline()
    if not line:
      pytest.fail(f'the run ended before {node} ran:\n' + ''.join(lines) +
                  run.stderr.read()[-3000:])
    lines.append(line)
    if re.search(rf'\] {node} +running', line):
      return
  pytest.fail(f'{node} did not start within {helpers.RUN_TIMEOUT_S}s')


def _wait_for_child(run, matches, timeout_s=600):
  """The run's descendants once one of them matches (cmdline predicate)."""
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    tree = psutil.Process(run.pid).children(recursive=True)
    for process in tree:
      try:
        if matches(' '.join(process.cmdline())):
          return tree
      except psutil.Error:
        continue
    time.sleep(0.2)
  pytest.fail(f'no matching child process within {timeout_s}s')


def _stop_and_check(run, signum, tree):
  """Signals the run; returns (stderr, still-alive pids 15 s after exit)."""
  run.send_signal(signum)
  try:
    _, err = run.communicate(timeout=EXIT_WITHIN_S)
  finally:
    if run.poll() is None:
      run.kill()
  gone, alive = psutil.wait_procs(tree, timeout=TREE_GONE_WITHIN_S)
  del gone
  return err, [p.pid for p in alive]


def _staging_folders(output):
  return [os.path.join(root, d) for root, dirs, _ in os.walk(output)
          for d in dirs if d.startswith(STAGING_PREFIX)]


def _versions(folder):
  if not os.path.isdir(folder):
    return []
  return sorted(d for d in os.listdir(folder) if d.isdigit())


def test_sigterm_during_the_optimizer_stops_its_worker_and_exits_143(
    tmp_path):
  output, record = str(tmp_path / 'out'), str(tmp_path / 'record.json')
  # --techniques none: the baseline alone, still with the export worker
  # process (OpenVINO/ONNX, when installed; the stop is the point here).
  run = _start_run(output, record,
                   ['--techniques', 'none', '--skip-disk-check'])
  lines = []
  try:
    _wait_for_component(run, 'ModelOptimizer', lines)
    # The optimizer's export worker: a spawned multiprocessing process.
    tree = _wait_for_child(run, lambda cmd: 'spawn_main' in cmd)
  except BaseException:
    run.kill()
    raise
  err, alive = _stop_and_check(run, signal.SIGTERM, tree)
  assert run.returncode == 143, err[-3000:]
  stop_lines = [l for l in err.splitlines()
                if l.startswith('leantfx run: stopped by SIGTERM')]
  assert len(stop_lines) == 1, err[-3000:]
  # The ModelOptimizer runs before the Pusher (both need the blessing):
  # nothing was pushed.
  match = re.fullmatch(
      r'leantfx run: stopped by SIGTERM during ModelOptimizer; stopped '
      r'(\d+) child process(es)?; nothing was pushed', stop_lines[0])
  assert match, stop_lines[0]
  assert int(match.group(1)) >= 1  # The export worker at least.
  assert 'Traceback' not in err
  assert not alive, f'processes of the stopped run still alive: {alive}'
  # Nothing pushed, and no push left half-written.
  for folder in ('serving', 'tflite', 'openvino', 'onnx'):
    assert _versions(os.path.join(output, folder, 'penguins')) == []
  assert _staging_folders(output) == []
  with open(record, encoding='utf-8') as f:
    facts = json.load(f)
  assert facts['status'] == 'stopped' and facts['exit_code'] == 143
  assert facts['signal'] == 'SIGTERM'
  assert facts['stopped_during'] == 'during ModelOptimizer'
  assert facts['error'] == stop_lines[0]
  # The plan printed the estimate and that the free space was not checked.
  assert any(re.fullmatch(r'  disk: about \S+ \S+ of artifacts for \S+ \S+ '
                          r'of input; the free space is not checked '
                          r'\(--skip-disk-check\)\n', l) for l in lines), lines


def test_sigint_during_transform_stops_the_beam_workers_and_exits_130(
    tmp_path):
  output, record = str(tmp_path / 'out'), str(tmp_path / 'record.json')
  run = _start_run(output, record,
                   ['--no-optimize', '--beam-mode', 'multi_processing',
                    '--beam-workers', '2'])
  lines = []
  try:
    _wait_for_component(run, 'Transform', lines)
    # Beam's multi_processing SDK workers, started by the DirectRunner.
    tree = _wait_for_child(run, lambda cmd: 'sdk_worker' in cmd)
  except BaseException:
    run.kill()
    raise
  err, alive = _stop_and_check(run, signal.SIGINT, tree)
  assert run.returncode == 130, err[-3000:]
  assert re.search(r'^leantfx run: stopped by SIGINT during Transform; '
                   r'stopped \d+ child process(es)?; nothing was pushed$',
                   err, re.M), err[-3000:]
  assert 'Traceback' not in err
  assert not alive, f'processes of the stopped run still alive: {alive}'
  assert _versions(os.path.join(output, 'serving', 'penguins')) == []
  assert _staging_folders(output) == []
  with open(record, encoding='utf-8') as f:
    facts = json.load(f)
  assert facts['status'] == 'stopped' and facts['exit_code'] == 130
  # The plan printed the estimate and the real filesystem's free space (the
  # estimate, about 6 MB, fits: the run went on).
  assert any(re.fullmatch(r'  disk: about \S+ MB of artifacts for \S+ kB '
                          rf'of input; \S+ \S+ free in {re.escape(output)}\n',
                          l) for l in lines), lines
