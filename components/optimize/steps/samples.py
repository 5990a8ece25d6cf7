"""The rows each step works on: the eval rows scored, the techniques' sample.

The gate and the policy see the selection split only; every variant is
re-measured on the report split for the report. The techniques (low-rank's
rank search, their before/after figures) see a fixed sample of train rows.
"""
from typing import Any, Dict, NamedTuple, Optional

import numpy as np
import tensorflow as tf

from leantfx.components.optimize import config as config_lib
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.evaluation import selection
from leantfx.components.optimize.export import raw_features
from leantfx.components.optimize.steps import slice_rows

# Train examples the techniques measure on (low-rank's rank search, their
# before/after figures): a fixed sample, so that no decision a technique
# makes is scored on the selection split the gate then judges it on.
TECHNIQUE_EXAMPLES = 1024
# The variants are scored (gate, report, raw-feature parity) on at most this
# many eval rows, the first of the split (the Transform writes the rows in
# the order it read them, so the raw and the transformed samples are the
# same rows on the DirectRunner); a larger eval split is sampled, and the
# report says so. The raw train rows int8 calibration draws from are read up
# to the same bound.
SCORING_MAX_EXAMPLES = 20_000


class Rows(NamedTuple):
  """The rows of one run, in memory.

  Attributes:
    all_eval: the eval rows scored (at most SCORING_MAX_EXAMPLES).
    selection: the part of them the gate and the policy see.
    report: the rest, on which the report re-measures every variant.
    technique_ds: batches of the techniques' train sample.
    selection_slices: {slicing spec: each selection row's slice} for the
      per-slice gate ({}: no slices).
  """
  all_eval: measure.LabeledData
  selection: measure.LabeledData
  report: measure.LabeledData
  technique_ds: tf.data.Dataset
  selection_slices: Dict[str, np.ndarray] = {}


def rows(train_ds: tf.data.Dataset, eval_ds: tf.data.Dataset,
         config: config_lib.OptimizationConfig,
         raw: Optional[raw_features.RawInputs],
         budgets: Dict[str, Any],
         sliced: Optional[slice_rows.SlicedEval] = None) -> Rows:
  """Reads the eval rows scored and the techniques' sample, once.

  Records what was read in ``budgets['samples']`` (the report shows it).

  Args:
    train_ds: train batches.
    eval_ds: transformed eval batches.
    config: the optimization config.
    raw: the raw rows, when the picks are folded.
    budgets: what the report shows of the samples.
    sliced: with slices, the eval rows with their slices
      (slice_rows.read_sliced_eval, at most SCORING_MAX_EXAMPLES): they
      are scored instead of eval_ds's, which are the same rows transformed
      by the Transform.
  """
  eval_batches = -(-SCORING_MAX_EXAMPLES // config.batch_size)
  if sliced is None:
    collected = measure.LabeledData.from_dataset(eval_ds.take(eval_batches))
    sampled = int(eval_ds.cardinality()) > eval_batches
  else:
    collected = sliced.data
    sampled = (len(collected) >= SCORING_MAX_EXAMPLES and
               int(eval_ds.cardinality()) * config.batch_size >
               SCORING_MAX_EXAMPLES)
  all_eval = first_rows(collected, SCORING_MAX_EXAMPLES)
  budgets['samples'] = {
      'eval_rows_scored': len(all_eval),
      'eval_sampled': len(collected) > len(all_eval) or sampled,
      'scoring_max_examples': SCORING_MAX_EXAMPLES,
      'calibration_samples': config.calibration_samples,
      'technique_examples': TECHNIQUE_EXAMPLES,
      'raw_eval_rows': len(raw.eval) if raw is not None else None,
  }
  selection_data, report_data = selection.split_eval(
      all_eval, config.selection_fraction)
  selection_slices = {}
  if sliced is not None:
    selection_slices, _ = selection.split_slices(
        {k: v[:len(all_eval)] for k, v in sliced.slices.items()},
        config.selection_fraction)
  # A search scored on the selection split keeps what happens to pass on
  # those examples, and the gate would then certify it on the same ones: a
  # low-rank search with a 0.005 budget on 174 examples keeps the lowest
  # ranks that lose no example there. The techniques see train rows.
  technique_ds = batched(technique_sample(train_ds, config.batch_size),
                         config.batch_size)
  return Rows(all_eval, selection_data, report_data, technique_ds,
              selection_slices)


def technique_sample(train_ds: tf.data.Dataset,
                     batch_size: int) -> measure.LabeledData:
  """A fixed sample of TECHNIQUE_EXAMPLES train rows (all, when fewer).

  Taken once from the shuffled train batches, so every trial of a search
  is scored on the same rows.
  """
  batches = -(-TECHNIQUE_EXAMPLES // batch_size)
  data = measure.LabeledData.from_dataset(train_ds.take(batches))
  return raw_features.sample_rows(data, TECHNIQUE_EXAMPLES)


def first_rows(data: measure.LabeledData,
               count: int) -> measure.LabeledData:
  """The first ``count`` rows of ``data`` (all, when fewer)."""
  if count >= len(data):
    return data
  return measure.LabeledData({c: v[:count] for c, v in data.features.items()},
                             data.labels[:count])


def batched(data: measure.LabeledData,
            batch_size: int) -> tf.data.Dataset:
  return tf.data.Dataset.from_tensor_slices(
      (dict(data.features), data.labels)).batch(batch_size)
