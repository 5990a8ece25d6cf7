"""The Transform step: the one preprocessing_fn TFX calls.

What it does is driven by the DatasetSpec that arrives in ``custom_config``:
numeric columns get mean imputation and z-scores (one block for all of
them, statistics per column), categorical columns get a
vocabulary (missing values and unseen values share one OOV bucket), free
text columns TF-IDF-weighted terms (models/text_features.py), date columns
calendar features (models/date_features.py), pixel
columns are stacked into one image vector scaled to [0, 1], and the label is
mapped to its class id in the spec's class order, or, for a regression, kept
as the float32 number it is (no vocabulary; its scaling lives in the model,
models/architectures.py).
"""
from typing import Any, Dict

import tensorflow as tf
import tensorflow_transform as tft

from leantfx import config as config_lib
from leantfx.models import data_policy
from leantfx.models import date_features
from leantfx.models import features
from leantfx.models import text_features

_MISSING_CATEGORY = ''


def _to_dense_column(x: Any, default_value) -> tf.Tensor:
  """Returns a [batch, 1] dense tensor; absent values become default_value."""
  if isinstance(x, tf.SparseTensor):
    return tft.sparse_tensor_to_dense_with_shape(x, [None, 1], default_value)
  if isinstance(x, tf.RaggedTensor):
    return x.to_tensor(default_value=default_value, shape=[None, 1])
  if x.shape.rank == 2 and x.shape[1] == 1:
    return x  # Already [batch, 1] (a FixedLenFeature of shape [1]).
  return tf.reshape(x, [-1, 1])


def _as_float32(x: Any) -> Any:
  """x with float32 values (dense, sparse or ragged as it came)."""
  if x.dtype == tf.float32:
    return x
  if isinstance(x, tf.SparseTensor):
    return tf.SparseTensor(x.indices, tf.cast(x.values, tf.float32),
                           x.dense_shape)
  if isinstance(x, tf.RaggedTensor):
    return x.with_values(tf.cast(x.values, tf.float32))
  return tf.cast(x, tf.float32)


def _numeric_block(columns, domains) -> tf.Tensor:
  """The numeric columns as one float32 [batch, k] tensor, z-scored.

  Values outside a column's domain count as missing (the noisy-row
  policy); a missing value takes its column's mean over the present
  in-domain values; then every column is scaled to its own z-score. The
  columns are concatenated first and each step is one op over the block,
  with per-column statistics (elementwise analyzers), so the serving graph
  does not grow by an imputation and a scaling per column.

  The z-score's statistics are those of the imputed column, computed from
  the present values in the same pass as their mean (one analysis pass
  over the data, not two): imputing the mean keeps the mean, and the
  imputed values add nothing to the sum of squared deviations, so the
  variance is the present values' variance times the fraction present.
  """
  dense = [_to_dense_column(_as_float32(c), float('nan')) for c in columns]
  block = data_policy.numeric_in_domain(tf.concat(dense, axis=1), domains)
  missing = tf.math.is_nan(block)
  present = tf.where(tf.logical_not(missing))
  observed = tf.SparseTensor(present, tf.gather_nd(block, present),
                             tf.shape(block, out_type=tf.int64))
  mean = tf.reshape(tft.mean(observed, reduce_instance_dims=False), [1, -1])
  variance = tft.var(observed, reduce_instance_dims=False) * tft.mean(
      tf.cast(tf.logical_not(missing), tf.float32),
      reduce_instance_dims=False)
  deviation = tf.where(missing, tf.zeros_like(block), block - mean)
  std = tf.reshape(tf.sqrt(variance), [1, -1])
  # A constant column (no spread) is only centred, as tft.scale_to_z_score.
  return tf.where(tf.not_equal(std, 0), tf.math.divide_no_nan(deviation, std),
                  deviation)


def _regression_target(x: Any) -> tf.Tensor:
  """The label as a float32 number; [batch]. The data checks refused gaps."""
  dense = _to_dense_column(x, float('nan'))
  return tf.reshape(tf.cast(dense, tf.float32), [-1])


def _label_ids(x: Any, classes) -> tf.Tensor:
  """Maps label values to class ids in the configured order; [batch] int64."""
  dense = _to_dense_column(x, '' if x.dtype == tf.string else -1)
  if dense.dtype != tf.string:
    dense = tf.strings.as_string(dense)
  table = tf.lookup.StaticHashTable(
      tf.lookup.KeyValueTensorInitializer(
          tf.constant(list(classes)),
          tf.range(len(classes), dtype=tf.int64)),
      default_value=-1)
  return tf.reshape(table.lookup(dense), [-1])


def _pixels(columns, domains) -> tf.Tensor:
  """The pixel columns as one float32 [batch, n] tensor, clipped.

  Concatenated first, then cast and clipped once (columns of one dtype, as
  a schema's pixels are), so the graph does not grow by a cast and a clip
  per column.
  """
  dense = [_to_dense_column(c, 0) for c in columns]
  if len({d.dtype for d in dense}) > 1:
    dense = [tf.cast(d, tf.float32) for d in dense]
  return data_policy.clip_to_domain(
      tf.cast(tf.concat(dense, axis=1), tf.float32), domains)


# TFX Transform will call this function.
def preprocessing_fn(inputs: Dict[str, Any],
                     custom_config: Dict[str, Any]) -> Dict[str, Any]:
  """Turns raw features into model features.

  Args:
    inputs: raw features keyed by column name.
    custom_config: {'dataset': DatasetSpec as a dict, 'domains': schema
      value domains per column (values outside them are imputed: the
      noisy-row policy, models/data_policy.py)}.

  Returns:
    Transformed features: '<column>_xf' per numeric, categorical and date
    column, '<column>_xf' and '<column>_weights_xf' per text column,
    'image_xf' for image datasets, and 'label_xf' (class id, or the float32
    target of a regression).
  """
  spec = config_lib.dataset_from_dict(custom_config['dataset'])
  domains = custom_config.get('domains', {})
  outputs = {}
  if spec.numeric_features:
    block = _numeric_block([inputs[c] for c in spec.numeric_features],
                           [domains.get(c) for c in spec.numeric_features])
    # One split hands each column its [batch, 1] slice of the block.
    for column, scaled in zip(spec.numeric_features,
                              tf.split(block, len(spec.numeric_features),
                                       axis=1)):
      outputs[features.transformed_name(column)] = scaled
  for column in spec.categorical_features:
    values = _to_dense_column(inputs[column], _MISSING_CATEGORY)
    if values.dtype != tf.string:
      values = tf.strings.as_string(values)
    values = data_policy.categorical_in_domain(values, domains.get(column),
                                               _MISSING_CATEGORY)
    outputs[features.transformed_name(column)] = (
        tft.compute_and_apply_vocabulary(
            values, num_oov_buckets=1, vocab_filename=column))
  # Free text: TF-IDF ids and weights; dates: calendar blocks.
  outputs.update(text_features.text_outputs(inputs, spec.text_features,
                                            _to_dense_column))
  outputs.update(date_features.date_outputs(inputs, spec, _to_dense_column))
  if spec.image_features:
    outputs[features.IMAGE_KEY] = _pixels(
        [inputs[c] for c in spec.image_features],
        [domains.get(c) for c in spec.image_features]) / float(
            spec.image_max_value)
  if spec.image_key:
    outputs[features.IMAGE_KEY] = data_policy.decode_images(
        inputs[spec.image_key], spec.image_shape)
  if spec.is_regression:
    outputs[features.LABEL_KEY] = _regression_target(inputs[spec.label])
    return outputs
  outputs[features.LABEL_KEY] = _label_ids(inputs[spec.label], spec.classes)
  data_policy.record_label_counts(outputs[features.LABEL_KEY])
  return outputs
