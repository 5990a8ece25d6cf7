"""A local watcher pins the column roles of its first pushed run.

pipeline/watch_roles.py's file and arguments, and cli/watch.local_runner's
use of them: the child ``leantfx run`` is replaced by a stand-in process
that writes the run record the real one writes (the run itself, and its
check of a --column-role against the values, are tested in
tests/test_column_roles_cli.py).
"""
import json
import os
import subprocess
import sys
import threading

import pytest

from leantfx.cli import summary
from leantfx.cli import watch as watch_cli
from leantfx.errors import ConfigError
from leantfx.pipeline import watch_roles

COLUMNS = [
    {'column': 'note', 'role': 'text', 'reason': 'free text: 31 words'},
    {'column': 'ordered', 'role': 'date', 'reason': 'ISO dates',
     'date_format': '%Y-%m-%d'},
    {'column': 'customer id', 'role': 'identifier', 'reason': 'unique'},
    {'column': 'size', 'role': 'numeric', 'reason': 'numbers',
     'date_format': None},
]


def _pushed(columns=COLUMNS, status='pushed'):
  return {'status': status, 'run_id': 'r1', 'columns': columns}


def test_only_a_pushed_run_pins_and_only_once(tmp_path):
  path = str(tmp_path / watch_roles.FILE_NAME)
  assert not watch_roles.pin(path, _pushed(status='not_blessed'), 1)
  assert not watch_roles.pin(path, _pushed(columns=[]), 1)
  assert watch_roles.read(path) is None
  assert watch_roles.pin(path, _pushed(), 2)
  other = [dict(c, role='categorical') for c in COLUMNS]
  assert not watch_roles.pin(path, _pushed(columns=other), 3)
  pinned = watch_roles.read(path)
  assert [c['role'] for c in pinned] == ['text', 'date', 'identifier',
                                         'numeric']
  with open(path, encoding='utf-8') as f:
    assert json.load(f)['span'] == 2


def test_run_args_give_every_pinned_role_but_the_users_own():
  argv = watch_roles.run_args(COLUMNS, ['note=categorical'], [])
  assert argv == ['--column-role=ordered=date',
                  '--date-format=ordered=%Y-%m-%d',
                  '--column-role=customer id=identifier',
                  '--column-role=size=numeric']
  # A bare --date-format is the user's format for every date column.
  assert '--date-format=ordered=%Y-%m-%d' not in watch_roles.run_args(
      COLUMNS, [], ['%d/%m/%Y'])
  assert watch_roles.run_args(None, [], []) == []


def test_a_damaged_file_is_refused_with_what_to_do(tmp_path):
  path = tmp_path / watch_roles.FILE_NAME
  path.write_text('{"columns": [{"role": 3}]}')
  with pytest.raises(ConfigError, match='Delete it'):
    watch_roles.read(str(path))


_STAND_IN = r'''
import json, sys
argv = sys.argv[1:]
record = argv[argv.index('--run-record') + 1]
with open(sys.argv[0] + '.argv', 'a') as f:
  f.write(json.dumps(argv) + '\n')
json.dump({'version': %d, 'status': 'pushed', 'pushed_path': '/x',
           'columns': json.loads(%r)},
          open(record, 'w'))
'''


def test_the_runner_passes_the_first_pushed_roles_to_later_runs(
    tmp_path, monkeypatch):
  script = tmp_path / 'stand_in.py'
  script.write_text(_STAND_IN % (summary.RECORD_VERSION,
                                 json.dumps(COLUMNS)))
  real_popen = subprocess.Popen

  def popen(cmd, **kwargs):
    assert cmd[1:4] == ['-m', 'leantfx.cli', 'run'], cmd
    return real_popen([sys.executable, str(script)] + cmd[4:], **kwargs)

  monkeypatch.setattr(watch_cli.subprocess, 'Popen', popen)
  state = str(tmp_path / 'watch' / 'state.json')
  pinned = watch_cli.PinnedRoles(watch_roles.path_beside(state),
                                 ('size=categorical',), ())
  run = watch_cli.local_runner(str(tmp_path / 'data'), ['--output', 'o'],
                               str(tmp_path / 'watch' / 'runs'), pinned)
  for span in (1, 2):
    assert run(span, threading.Event()).status == 'pushed'
  with open(f'{script}.argv', encoding='utf-8') as f:
    first, second = [json.loads(line) for line in f]
  assert not any(a.startswith('--column-role') for a in first)
  assert [a for a in second if a.startswith('--')][-4:] == [
      '--column-role=note=text', '--column-role=ordered=date',
      '--date-format=ordered=%Y-%m-%d',
      '--column-role=customer id=identifier']
  assert os.path.exists(pinned.path)
