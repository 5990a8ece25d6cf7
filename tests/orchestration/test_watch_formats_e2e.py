"""`leantfx watch` retrains on TFRecord and image spans, deciding from run records.

The watcher accepts every data format `leantfx run` accepts; each run writes
a run record (JSON) and the watcher's decision is read from it, never from
the console text of the run.
"""
import glob
import json
import os

import pytest

from leantfx import datasets
from tests.helpers import run_cli

pytestmark = pytest.mark.e2e


def _watch_once(data, output, *options):
  result = run_cli(['watch', '--data-root', data, '--output', output,
                    '--once', '--train-steps', '60', '--min-accuracy', '0',
                    '--baseline-margin', 'off',
                    *options])
  assert result.returncode == 0, result.stdout + result.stderr
  return result.stdout


def _record(output):
  (path,) = glob.glob(os.path.join(output, 'watch', 'runs', 'span-1-*.json'))
  with open(path, encoding='utf-8') as f:
    return json.load(f)


def _state(output):
  with open(os.path.join(output, 'watch', 'state.json'),
            encoding='utf-8') as f:
    return json.load(f)['spans']


@pytest.mark.parametrize('fmt, dataset, options', [
    ('tfrecord', 'penguins', ['--dataset', 'penguins']),
    # The user's own image folders (span-1/<class>/*.png), not --dataset.
    ('images', 'digits', ['--image-shape', '8x8x1', '--no-augment']),
])
def test_watch_retrains_on_a_span_of_each_format(tmp_path, fmt, dataset,
                                                options):
  data, output = str(tmp_path / 'data'), str(tmp_path / 'out')
  datasets.prepare(dataset, data, 1, fmt)
  open(os.path.join(data, 'span-1', '_SUCCESS'), 'w').close()
  log = _watch_once(data, output, *options)
  assert 'span 1: result pushed' in log, log
  record = _record(output)
  assert record['status'] == 'pushed' and record['exit_code'] == 0
  assert record['data_format'] == fmt and record['span'] == 1
  assert os.path.isdir(record['pushed_path'])
  assert record['executions']['Pusher']['state'] == 'complete'
  assert _state(output)['1']['detail'] == record['pushed_path']
  again = _watch_once(data, output, *options)
  assert 'run started' not in again
