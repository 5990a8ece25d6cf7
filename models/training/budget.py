"""The Trainer's step budget: passes over the train split, with a floor and a cap.

The compiled pipeline cannot see the data (on Kubeflow the spec is written
before any span exists), so run_fn decides the steps at run time: it counts
the rows of the transformed train split and turns the configured passes into
steps of the global batch, at least ``min_train_steps`` (a small split keeps
the step count it has always had) and at most ``train_steps`` (the cap the
user sees and sets; TrainArgs num_steps). Without ``train_passes`` the
Trainer takes exactly ``train_steps``.
"""
import dataclasses
import math
from typing import Any, Dict, Optional, Sequence

import tensorflow as tf

from leantfx import config as config_lib


def steps_for_passes(rows: int, examples_per_step: int, passes: float,
                     min_steps: int, max_steps: int) -> int:
  """Steps for ``passes`` over ``rows``, clamped to [min_steps, max_steps].

  Args:
    rows: rows in the train split (>= 0).
    examples_per_step: examples one optimizer step consumes (the global
      batch times the accumulation steps).
    passes: passes over the rows (> 0).
    min_steps: the floor.
    max_steps: the cap (>= min_steps).

  Returns:
    ceil(passes * rows / examples_per_step), clamped.
  """
  wanted = math.ceil(passes * rows / examples_per_step)
  return int(min(max_steps, max(min_steps, wanted)))


def rows_needed(examples_per_step: int, passes: float, max_steps: int) -> int:
  """Rows beyond which the cap decides: counting further changes nothing."""
  return math.ceil(max_steps * examples_per_step / passes) + 1


def count_records(file_patterns: Sequence[str],
                  limit: Optional[int] = None) -> int:
  """Records in gzipped TFRecord files, counted up to ``limit``.

  Reads the records without parsing them; stops at ``limit`` (so a split
  far beyond the cap costs no more than the cap's rows).
  """
  files = sorted(f for pattern in file_patterns
                 for f in tf.io.gfile.glob(pattern))
  if not files:
    return 0
  dataset = tf.data.TFRecordDataset(files, compression_type='GZIP')
  if limit is not None:
    dataset = dataset.take(limit)
  return int(dataset.batch(4096).reduce(
      tf.constant(0, tf.int64),
      lambda n, batch: n + tf.shape(batch, out_type=tf.int64)[0]))


def resolve(training: config_lib.TrainingConfig, cap: int,
            train_files: Sequence[str], examples_per_step: int
           ) -> 'Budget':
  """The steps this run trains for, and why.

  Args:
    training: train_passes, min_train_steps, epochs.
    cap: the TrainArgs num_steps run_fn received (fn_args.train_steps): the
      exact steps without train_passes, else the cap.
    train_files: the transformed train split's file patterns.
    examples_per_step: global batch x accumulation steps.

  Returns:
    A Budget; with train_passes, rows is the split's row count (counted up
    to the cap's rows).
  """
  if training.train_passes is None:
    return Budget(steps=cap, rule='exact', examples_per_step=examples_per_step)
  floor = min(training.min_train_steps, cap)
  limit = rows_needed(examples_per_step, training.train_passes, cap)
  rows = count_records(train_files, limit)
  steps = steps_for_passes(rows, examples_per_step, training.train_passes,
                           floor, cap)
  return Budget(steps=steps, rule='passes',
                examples_per_step=examples_per_step, train_rows=rows,
                rows_capped=rows >= limit, passes=training.train_passes,
                min_steps=floor, max_steps=cap)


@dataclasses.dataclass(frozen=True)
class Budget:
  """What the Trainer trains for.

  Attributes:
    steps: optimizer steps planned.
    rule: 'exact' (train_steps as given) or 'passes'.
    examples_per_step: examples per optimizer step.
    train_rows: rows in the train split (None with 'exact': not counted).
    rows_capped: the count stopped at the cap's rows (the split holds more).
    passes, min_steps, max_steps: the 'passes' rule's settings.
  """
  steps: int
  rule: str
  examples_per_step: int
  train_rows: Optional[int] = None
  rows_capped: bool = False
  passes: Optional[float] = None
  min_steps: Optional[int] = None
  max_steps: Optional[int] = None

  def applied_to(self, training: config_lib.TrainingConfig
                ) -> config_lib.TrainingConfig:
    """The TrainingConfig with these steps (the LR schedule spans them)."""
    return dataclasses.replace(
        training, train_steps=self.steps, train_passes=None,
        min_train_steps=1, epochs=min(training.epochs, self.steps))

  def record(self, steps_run: int) -> Dict[str, Any]:
    """The run record's 'budget' entry (steps run may be fewer: early stop)."""
    examples = steps_run * self.examples_per_step
    result: Dict[str, Any] = {
        'rule': self.rule, 'steps_planned': self.steps,
        'steps': steps_run, 'examples_per_step': self.examples_per_step,
        'examples': examples}
    if self.train_rows is not None:
      result.update(train_rows=self.train_rows,
                    train_rows_at_least=self.rows_capped,
                    passes_planned=self.passes, min_steps=self.min_steps,
                    max_steps=self.max_steps)
      if self.train_rows and not self.rows_capped:
        result['passes'] = round(examples / self.train_rows, 3)
    return result
