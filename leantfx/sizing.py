"""What a span's size means for the machine that runs it: Beam mode, task sizes.

One home for the choices that follow the data's size:

* ``beam_mode(rows, cores)``: ``--beam-mode auto`` (the default). Beam's
  DirectRunner in_memory runs every data stage on one core; multi_processing
  starts one worker process per core, each importing TensorFlow and TFX,
  which costs more than it saves on a small span. Below
  MULTI_PROCESSING_MIN_ROWS rows a run stays in_memory; above it, one worker
  per core.
* ``task_resources(rows)``: ``leantfx compile --span-rows N``: the CPU and
  memory of each compiled task. A task given 2 or more cores runs the
  DirectRunner multi_processing with one worker per core
  (kubeflow/compiler.py ``beam_args_for_cpu``), so its memory is a base plus
  one Beam worker's per core; no stage holds a whole span in memory, so the
  memory does not grow with rows beyond that.

The constants are measured on this project's 2-core machine (see each);
``make bench BENCH_ARGS=scale`` re-measures the figures they come from.
"""
import dataclasses
import math
import os
from typing import Dict, Optional, Tuple

# Below this many rows a run stays in_memory: each multi_processing worker
# process imports TensorFlow and TFX before it reads a row, once per Beam
# stage. The CSV ExampleGen alone on this 2-core machine, idle, `make bench
# BENCH_ARGS=scale` (2026-12-06): 500,000 rows in 5 files took 55.0 s
# in_memory and 49.0 s with 2 workers; 300,000 rows in 1 file 33.9 s and
# 37.4 s. Two workers pay off from about half a million rows.
MULTI_PROCESSING_MIN_ROWS = 500_000
# --beam-mode auto (the default): beam_mode() chooses.
AUTO = 'auto'

# Compiled tasks (task_resources). A default `leantfx run --no-optimize` of
# a generated 100,000-row span (20 numeric, 2 categorical columns) with
# --beam-mode multi_processing --beam-workers 2 (2026-12-06): the run's own
# process peaked at 1.57 GB RSS, each Beam worker process at 1.35 GB.
BASE_MEMORY_GB = 2.0
WORKER_MEMORY_GB = 1.5
# One more core per this many rows, up to MAX_TASK_CORES: a 1M-row span's
# data tasks get 4 cores.
ROWS_PER_CORE = 250_000
MAX_TASK_CORES = 8

# The compiled components whose work is a Beam pipeline over every row.
BEAM_COMPONENTS = ('CsvExampleGen', 'ImageExampleGen', 'StatisticsGen',
                   'ExampleValidator', 'ValidationGate', 'Augment',
                   'Transform', 'Evaluator')
# Components that train (TensorFlow uses every core of the task).
TRAINING_COMPONENTS = ('Trainer', 'ModelOptimizer')


def machine_cores() -> int:
  """The cores this process may run on (its CPU affinity, else the count)."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # Not Linux.
    return os.cpu_count() or 1


@dataclasses.dataclass(frozen=True)
class BeamChoice:
  """The DirectRunner mode chosen for a run, and why (printed by the run)."""
  mode: str
  workers: int
  reason: str

  def line(self) -> str:
    workers = (f' with {self.workers} worker processes'
               if self.mode == 'multi_processing' else '')
    return f'beam: {self.mode}{workers} ({self.reason})'


def beam_mode(rows: Optional[int], cores: int,
              workers: Optional[int] = None) -> BeamChoice:
  """``--beam-mode auto``: in_memory for a small span, else every core.

  Args:
    rows: the rows the run reads (None: not known before it runs).
    cores: the cores this machine gives the run.
    workers: --beam-workers when the user set it (multi_processing then uses
      that many).

  Returns:
    The mode, the worker count and the reason.
  """
  if rows is None:
    return BeamChoice('in_memory', 1, 'span size not known before the run')
  if rows < MULTI_PROCESSING_MIN_ROWS:
    return BeamChoice(
        'in_memory', 1, f'{rows:,} rows < {MULTI_PROCESSING_MIN_ROWS:,}: '
        'worker processes would start slower than one core reads them')
  count = workers or cores
  if count < 2:
    return BeamChoice('in_memory', 1, f'{rows:,} rows, but one core')
  return BeamChoice(
      'multi_processing', count,
      f'{rows:,} rows >= {MULTI_PROCESSING_MIN_ROWS:,}, '
      + (f'--beam-workers {workers}' if workers else f'{cores} cores'))


def task_cores(rows: int) -> int:
  """Cores of a data task for a span of ``rows`` rows (1 below the bound)."""
  if rows < MULTI_PROCESSING_MIN_ROWS:
    return 1
  return int(min(MAX_TASK_CORES, max(2, math.ceil(rows / ROWS_PER_CORE))))


def task_resources(rows: int) -> Dict[str, Tuple[float, float]]:
  """(cores, memory GB) of each compiled component's task for ``rows``.

  Data tasks: task_cores(rows) cores, BASE_MEMORY_GB plus WORKER_MEMORY_GB
  per core when they run multi_processing. Training tasks: at least 2 cores
  and 4 GB (today's defaults), the data tasks' cores above that.

  Raises:
    ValueError: for rows < 1.
  """
  if rows < 1:
    raise ValueError(f'rows must be >= 1, got {rows}.')
  cores = task_cores(rows)
  data_memory = BASE_MEMORY_GB + (WORKER_MEMORY_GB * cores if cores > 1
                                  else 0.0)
  sizes = {name: (float(cores), data_memory) for name in BEAM_COMPONENTS}
  train_cores = max(2, cores)
  sizes.update({name: (float(train_cores), max(4.0, data_memory))
                for name in TRAINING_COMPONENTS})
  return sizes
