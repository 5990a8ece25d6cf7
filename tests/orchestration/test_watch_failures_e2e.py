"""The watcher with real `leantfx run` subprocesses that fail.

A run that fails mid-way (a component raises) is retried on the next poll,
a bounded number of times, then reported; a span with bad data is rejected
at once (exit 2 of `leantfx run`) and never retried.
"""
import json
import os

import pytest

from leantfx import datasets
from tests.helpers import run_cli

pytestmark = pytest.mark.e2e


def _watch(data, output, *extra):
  return run_cli(['watch', '--data-root', data, '--output', output,
                  '--dataset', 'penguins', '--train-steps', '5', '--once',
                  '--max-attempts', '2', *extra])


def _spans(output):
  with open(os.path.join(output, 'watch', 'state.json')) as f:
    return json.load(f)['spans']


def test_component_failure_is_retried_then_given_up(tmp_path):
  data, output = str(tmp_path / 'data'), str(tmp_path / 'out')
  datasets.prepare('penguins', data, 1)
  open(os.path.join(data, 'span-1', '_SUCCESS'), 'w').close()
  # Every Beam-based component fails: the Beam runner does not exist. The
  # run gets past the input checks and fails inside the pipeline (exit 3).
  broken = ['--beam-arg=--runner=NoSuchRunner']
  first = _watch(data, output, *broken)
  assert first.returncode == 0, first.stdout + first.stderr
  assert 'result failed (attempt 1 of 2): exit code 3' in first.stdout
  assert 'retrying on the next poll' in first.stdout
  second = _watch(data, output, *broken)
  assert second.returncode == 1, second.stdout + second.stderr
  assert 'span 1: gave up after 2 failed attempts' in second.stdout
  third = _watch(data, output, *broken)
  assert third.returncode == 0 and 'run started' not in third.stdout
  assert _spans(output)['1']['status'] == 'gave_up'
  assert not os.path.exists(os.path.join(output, 'serving'))


def test_bad_span_data_is_rejected_without_retry(tmp_path):
  data, output = str(tmp_path / 'data'), str(tmp_path / 'out')
  span = tmp_path / 'data' / 'span-1'
  span.mkdir(parents=True)
  (span / 'p.csv').write_text(
      'species,island,bill_length_mm,bill_depth_mm,flipper_length_mm,'
      'body_mass_g,sex\nAdelie,Torgersen,abc,18.7,181,3750,male\n')
  (span / '_SUCCESS').write_text('')
  first = _watch(data, output)
  assert first.returncode == 0, first.stdout + first.stderr
  assert "span 1: result rejected" in first.stdout
  assert 'abc' in first.stdout  # The run's own one-paragraph reason.
  again = _watch(data, output)
  assert 'run started' not in again.stdout
  assert _spans(output)['1']['status'] == 'rejected'


def test_a_span_with_a_symlink_loop_is_refused_as_run_refuses_it(tmp_path):
  data, output = str(tmp_path / 'data'), str(tmp_path / 'out')
  datasets.prepare('penguins', data, 1)
  span = os.path.join(data, 'span-1')
  os.symlink('.', os.path.join(span, 'loop'))  # span-1/loop/loop/... forever
  open(os.path.join(span, '_SUCCESS'), 'w').close()
  first = _watch(data, output)
  assert first.returncode == 0, first.stdout + first.stderr
  assert 'internal error' not in first.stdout + first.stderr
  assert 'span 1: result rejected' in first.stdout, first.stdout
  # The run's own reason, as `leantfx run` on that span gives it (its data
  # format cannot be told from a CSV file beside a folder).
  assert f'Cannot tell the data format of {span}' in first.stdout
  assert _spans(output)['1']['status'] == 'rejected'
