"""Column roles through the command line: stated, carried, refused clearly.

`leantfx compile` builds the pipeline the way `run` and `watch` do (one
config builder, cli/build.py) and stops before anything runs, so it shows
the plan's role lines and what the compiled pipeline carries without a run.
"""
import csv
import os
import random

import pytest

from tests.helpers import run_cli
from tests.helpers import run_main

_WORDS = 'refund payment login crash slow page button invoice late'.split()


def _write_span(root, rows=240, mixed_dates=False):
  span = root / 'span-1'
  span.mkdir(parents=True)
  rng = random.Random(3)
  with open(span / 'orders.csv', 'w', newline='', encoding='utf-8') as f:
    writer = csv.writer(f)
    writer.writerow(['customer id', 'ordered', 'amount', 'gift', 'note',
                     'label'])
    for i in range(rows):
      date = f'2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}'
      if mixed_dates and i % 3 == 0:
        date = f'{rng.randint(13, 28)}/{rng.randint(1, 12)}/2024'
      writer.writerow([
          f'C{i:05d}', date,
          'n/a' if i % 9 == 0 else f'{rng.random() * 50:.2f}',
          rng.choice(['true', 'false']),
          ' '.join(rng.choice(_WORDS) for _ in range(rng.randint(3, 8))),
          rng.choice(['x', 'y'])])
  return str(root)


@pytest.mark.e2e
def test_compile_states_each_role_and_carries_it(tmp_path):
  data = _write_span(tmp_path / 'data')
  out = str(tmp_path / 'pipeline.yaml')
  result = run_cli([
      'compile', '--target', 'kubeflow', '--image', 'example/leantfx:1',
      '--sample-data', data, '--label', 'label', '--data-root',
      'gs://bucket/data', '--pipeline-root', 'gs://bucket/root',
      '--serving-dir', 'gs://bucket/serving', '--no-optimize', '--out', out])
  assert result.returncode == 0, result.stdout + result.stderr
  for line in ('customer id: identifier (240 distinct values in 240 rows',
               'ordered: date (dates in %Y-%m-%d)',
               "amount: numeric (numbers; 'n/a' (27 rows) read as missing)",
               "gift: boolean (two values ['false', 'true'])",
               'note: text (words:'):
    assert line in result.stdout, result.stdout
  with open(out, encoding='utf-8') as f:
    compiled = f.read()
  # The DatasetSpec every component gets (custom_config) holds the roles.
  assert 'identifier_columns' in compiled and 'customer_id_' in compiled
  assert '%Y-%m-%d' in compiled and 'missing_markers' in compiled


@pytest.mark.e2e
def test_mixed_dates_stop_the_run_before_anything_runs(tmp_path, capfd):
  data = _write_span(tmp_path / 'data', mixed_dates=True)
  output = tmp_path / 'out'
  result = run_main(['run', '--data-root', data, '--label', 'label',
                     '--output', str(output), '--no-optimize'], capfd)
  assert result.returncode == 2, result.stdout + result.stderr
  assert "'ordered'" in result.stderr and 'more than one format' in (
      result.stderr)
  assert '--date-format ordered=FORMAT' in result.stderr
  assert not os.path.exists(output / 'tfx')


@pytest.mark.e2e
@pytest.mark.parametrize('option, message', [
    (['--column-role', 'nope=text'], "'nope', not in the header"),
    (['--column-role', 'note=words'], "unknown role 'words'"),
    (['--column-role', 'note=numeric'], 'are not numbers'),
    (['--date-format', '%Y%m%d'], 'leantfx parses the formats'),
    (['--dataset', 'penguins', '--column-role', 'a=text'],
     'the bundled dataset'),
])
def test_role_options_are_refused_clearly(tmp_path, capfd, option, message):
  data = _write_span(tmp_path / 'data', rows=60)
  args = ['run', '--output', str(tmp_path / 'out'), '--no-optimize'] + option
  if '--dataset' not in option:
    args += ['--data-root', data, '--label', 'label']
  result = run_main(args, capfd)
  assert result.returncode == 2, result.stdout + result.stderr
  assert message in result.stderr, result.stderr
