"""`leantfx watch` stopped by SIGTERM while a span's run is in progress.

The real watcher starts the real `leantfx run` of a penguins span; SIGTERM to
the watcher stops that run and everything below it: the watcher exits 143
with one line naming the span and quoting the run's own stop line, no
process of its tree is alive 15 s later, nothing was pushed and the span
stays pending (the next start runs it).
"""
import glob
import json
import os
import re
import signal
import subprocess
import time

import psutil
import pytest

from leantfx import datasets
from tests import helpers

pytestmark = pytest.mark.e2e

TREE_GONE_WITHIN_S = 15


def test_sigterm_stops_the_run_in_progress_and_leaves_its_span_pending(
    tmp_path):
  data_root, output = str(tmp_path / 'data'), str(tmp_path / 'out')
  datasets.prepare('penguins', data_root, 1)
  open(os.path.join(data_root, 'span-1', '_SUCCESS'), 'w').close()
  watch = subprocess.Popen(
      [helpers.LEANTFX, 'watch', '--data-root', data_root, '--output', output,
       '--dataset', 'penguins', '--train-steps', '20', '--no-optimize',
       '--interval', '300'],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))
  try:
    # The run's log appears once its stop handling is in place (cmd_run);
    # then its pipeline works for a while (bounded for a loaded machine).
    deadline = time.monotonic() + 600
    while (not glob.glob(os.path.join(output, 'logs', 'run-*.log')) and
           time.monotonic() < deadline):
      assert watch.poll() is None, watch.stderr.read()
      time.sleep(0.5)
    time.sleep(5)
    tree = psutil.Process(watch.pid).children(recursive=True)
    assert tree, 'the watcher runs no `leantfx run`'
    watch.send_signal(signal.SIGTERM)
    out, err = watch.communicate(timeout=helpers.EXIT_TIMEOUT_S)
  finally:
    if watch.poll() is None:
      watch.kill()
  assert watch.returncode == 143, out[-2000:] + err[-2000:]
  match = re.search(
      r'^leantfx watch: stopped by SIGTERM during the run of span 1: '
      r'(\d+) process(es)? stopped \(leantfx run: stopped by SIGTERM '
      r'(during|after|before) [^;]+; stopped \d+ child process(es)?; '
      r'nothing was pushed\); the span stays pending \(it runs again on the '
      r'next start\)$', err, re.M)
  assert match, err[-3000:]
  assert int(match.group(1)) >= 1
  _, alive = psutil.wait_procs(tree, timeout=TREE_GONE_WITHIN_S)
  assert not alive, [p.pid for p in alive]
  assert not os.path.isdir(os.path.join(output, 'serving', 'penguins')) or (
      not [d for d in os.listdir(os.path.join(output, 'serving', 'penguins'))
           if d.isdigit()])
  with open(os.path.join(output, 'watch', 'state.json'),
            encoding='utf-8') as f:
    entry = json.load(f)['spans']['1']
  assert entry['status'] is None and entry['attempts'] == 0
