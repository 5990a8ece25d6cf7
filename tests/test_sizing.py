"""leantfx/sizing.py: the Beam mode and task sizes that follow a span's size."""
import argparse

import pytest

from leantfx import sizing
from leantfx.cli import build
from leantfx.cli import options

pytestmark = pytest.mark.unit

MIN = sizing.MULTI_PROCESSING_MIN_ROWS


@pytest.mark.parametrize('rows,cores,workers,expected', [
    (None, 8, None, ('in_memory', 1)),
    (MIN - 1, 8, None, ('in_memory', 1)),
    (MIN, 8, None, ('multi_processing', 8)),
    (MIN, 2, None, ('multi_processing', 2)),
    (10 * MIN, 1, None, ('in_memory', 1)),
    (10 * MIN, 8, 3, ('multi_processing', 3)),
    (MIN - 1, 8, 3, ('in_memory', 1)),
])
def test_auto_is_in_memory_below_the_bound_and_every_core_above(
    rows, cores, workers, expected):
  choice = sizing.beam_mode(rows, cores, workers)
  assert (choice.mode, choice.workers) == expected
  line = choice.line()
  assert line.startswith(f'beam: {expected[0]}')
  if rows is not None:
    # The reason names the row count it was chosen on.
    assert f'{rows:,}' in line


def test_task_sizes_grow_with_rows_up_to_the_cap_and_memory_follows_cores():
  small = sizing.task_resources(1_000)
  assert small['Transform'] == (1.0, sizing.BASE_MEMORY_GB)
  assert small['Trainer'] == (2.0, 4.0)
  previous = 0.0
  for rows in (MIN, 750_000, 1_000_000, 2_000_000, 10**9):
    sizes = sizing.task_resources(rows)
    cores, memory = sizes['StatisticsGen']
    assert cores >= max(2.0, previous)
    assert cores <= sizing.MAX_TASK_CORES
    assert memory == sizing.BASE_MEMORY_GB + sizing.WORKER_MEMORY_GB * cores
    assert sizes['Trainer'][0] >= cores
    previous = cores
  assert sizing.task_resources(1_000_000)['Transform'][0] == 4.0
  assert sizing.task_resources(10**9)['Transform'][0] == sizing.MAX_TASK_CORES
  with pytest.raises(ValueError):
    sizing.task_resources(0)


def _args(*argv):
  parser = argparse.ArgumentParser()
  options.add_pipeline_options(parser, 'run')
  return parser.parse_args(list(argv))


def _mode(beam_args):
  flags = dict(a.split('=', 1) for a in beam_args)
  return flags['--direct_running_mode'], int(flags['--direct_num_workers'])


def test_the_builder_turns_auto_into_the_direct_runner_flags():
  args = _args()
  assert args.beam_mode == sizing.AUTO
  cores = sizing.machine_cores()
  assert _mode(build.beam_args(args, None)) == ('in_memory', 1)
  assert _mode(build.beam_args(args, MIN - 1)) == ('in_memory', 1)
  expected = ('multi_processing', cores) if cores > 1 else ('in_memory', 1)
  assert _mode(build.beam_args(args, MIN)) == expected
  # A mode the user chose is kept whatever the size.
  assert _mode(build.beam_args(_args('--beam-mode', 'in_memory'),
                               10 * MIN)) == ('in_memory', 1)
  assert _mode(build.beam_args(
      _args('--beam-mode', 'multi_processing', '--beam-workers', '3'),
      10)) == ('multi_processing', 3)
  # Another runner: auto sets no DirectRunner flag.
  portable = build.beam_args(
      _args('--beam-runner', 'portable', '--job-endpoint', 'embed'), 10 * MIN)
  assert not any(a.startswith('--direct_') for a in portable)
  assert build.beam_choice(
      _args('--beam-runner', 'portable', '--job-endpoint', 'embed'),
      10 * MIN) is None
