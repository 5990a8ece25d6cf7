"""The Transform's output as training batches, for the Trainer and the Tuner.

run_fn (models/model.py) trains on these batches and tuner_fn
(models/tuning.py) hands them to every trial, so both read the transformed
examples the same way.
"""
from typing import List

import tensorflow as tf
import tensorflow_transform as tft
from tfx import v1 as tfx
from tfx_bsl.public import tfxio

from leantfx.models import features


def dataset(file_pattern: List[str],
            data_accessor: tfx.components.DataAccessor,
            tf_transform_output: tft.TFTransformOutput, batch_size: int,
            seed: int) -> tf.data.Dataset:
  """Returns an endless, shuffled dataset of (features, label id) batches."""
  return data_accessor.tf_dataset_factory(
      file_pattern,
      tfxio.TensorFlowDatasetOptions(
          batch_size=batch_size,
          label_key=features.LABEL_KEY,
          shuffle_seed=seed),
      tf_transform_output.transformed_metadata.schema)
