"""The rows each step works on: the eval rows scored, the techniques' sample.
"""

import tensorflow as tf

from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.export import raw_features

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


def _batched(data: measure.LabeledData,
             batch_size: int) -> tf.data.Dataset:
  return tf.data.Dataset.from_tensor_slices(
      (dict(data.features), data.labels)).batch(batch_size)
