"""The raw-feature serving contract: what ``serving_default`` takes and gives.

One home for it, so the Trainer's SavedModel (models/model.py) and every
optimized variant that is exported to take raw features
(components/optimize/export/raw_features.py) accept the same requests and answer
the same way:

  inputs   one [batch] tensor per raw feature column except the label:
           numbers as float32 (NaN means missing), categories as strings
           ('' means missing);
  outputs  probabilities float32 [batch, classes], class_ids int64 [batch],
           classes string [batch] (the DatasetSpec's class names).
"""
from typing import Any, Dict, Mapping, Sequence

import numpy as np
import tensorflow as tf



def serving_feature_spec(raw_feature_spec: Mapping[str, Any], label: str,
                         exclude: Sequence[str] = ()) -> Dict[str, Any]:
  """The raw feature spec without the label: what a request carries.

  ``exclude``: other columns a request need not carry, the identifiers
  (DatasetSpec.identifier_columns: in the examples, never a feature).
  """
  left_out = {label, *exclude}
  return {k: v for k, v in raw_feature_spec.items() if k not in left_out}


def raw_input_specs(raw_feature_spec: Mapping[str, Any]) -> Dict[str, Any]:
  """One [batch] TensorSpec per raw feature: strings or float32 numbers."""
  specs = {}
  for name, feature in raw_feature_spec.items():
    dtype = tf.string if feature.dtype == tf.string else tf.float32
    specs[name] = tf.TensorSpec(shape=[None], dtype=dtype, name=name)
  return specs


def raw_to_parsed(raw: Mapping[str, tf.Tensor],
                  raw_feature_spec: Mapping[str, Any]) -> Dict[str, Any]:
  """Shapes [batch] raw tensors as tf.io.parse_example would have."""
  parsed = {}
  for name, value in raw.items():
    feature = raw_feature_spec[name]
    if isinstance(feature, tf.io.FixedLenFeature):
      parsed[name] = tf.reshape(
          tf.cast(value, feature.dtype), [-1] + list(feature.shape))
      continue
    if value.dtype == tf.string:
      present = tf.not_equal(value, '')
    else:
      present = tf.logical_not(tf.math.is_nan(value))
    rows = tf.where(present)
    parsed[name] = tf.SparseTensor(
        indices=tf.concat([rows, tf.zeros_like(rows)], axis=1),
        values=tf.cast(tf.gather_nd(value, rows), feature.dtype),
        dense_shape=tf.stack([tf.shape(value, out_type=tf.int64)[0], 1]))
  return parsed


def vocabulary_table(vocabulary: Sequence[bytes]) -> tf.lookup.StaticHashTable:
  """A constant lookup table giving ids as preprocessing_fn assigns them.

  preprocessing_fn applies ``tft.compute_and_apply_vocabulary(...,
  num_oov_buckets=1, vocab_filename=<column>)`` after turning a missing value
  into '': a value's id is its line in the vocabulary file, and every other
  value (unseen, out of domain, missing) takes the one OOV id,
  ``len(vocabulary)``. This table holds the same mapping as constants, which
  TFLite runs as a builtin hash table (tf.Transform's own graph hashes into
  the OOV bucket and densifies sparse strings, which TFLite has no builtin
  kernels for). Create it outside a tf.function and keep it on a tracked
  object so a SavedModel carries it.

  Args:
    vocabulary: the vocabulary file's entries, in file order.

  Returns:
    A StaticHashTable string -> int64 with the OOV id as its default.
  """
  return tf.lookup.StaticHashTable(
      tf.lookup.KeyValueTensorInitializer(
          tf.constant(list(vocabulary), dtype=tf.string),
          tf.range(len(vocabulary), dtype=tf.int64)),
      default_value=tf.constant(len(vocabulary), dtype=tf.int64))


def vocabulary_ids(values: tf.Tensor,
                   table: tf.lookup.StaticHashTable) -> tf.Tensor:
  """int64 ids of [batch] strings, [batch, 1] like the Transform's output."""
  return tf.reshape(table.lookup(values), [-1, 1])


def classification_outputs(probabilities: tf.Tensor,
                           classes: Sequence[str]) -> Dict[str, tf.Tensor]:
  """probabilities, class_ids (argmax) and classes (their names)."""
  class_ids = tf.argmax(probabilities, axis=1)
  return {
      'probabilities': probabilities,
      'class_ids': class_ids,
      'classes': tf.gather(tf.constant(list(classes)), class_ids),
  }
