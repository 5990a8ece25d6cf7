"""The Trainer step: builds, fits and exports the tf_keras model (run_fn).

The exported model serves three signatures:
  serving_default    raw feature columns (one [batch] tensor each, numbers as
                     float32, categories as strings; NaN or '' mean missing)
                     -> probabilities, class_ids, classes;
  predict_examples   serialized tf.Example -> probabilities (used by TFMA);
  transform_features serialized tf.Example -> transformed features (TFMA).
Beside it, Format-Keras holds the bare Keras model for the optimizers.
"""
import os
from typing import Any, Dict, List, Mapping

from absl import logging
import tensorflow as tf
import tensorflow_transform as tft
import tf_keras
from tfx import v1 as tfx
from tfx_bsl.public import tfxio

from leantfx import config as config_lib
from leantfx.components.optimize import types as optimize_types
from leantfx.models import data_policy
from leantfx.models import features
from leantfx.models import warm_start


def _input_fn(file_pattern: List[str],
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


def build_model(spec: config_lib.DatasetSpec,
                training: config_lib.TrainingConfig,
                vocabulary_sizes: Mapping[str, int]) -> tf_keras.Model:
  """Builds the compiled classifier for a dataset.

  Args:
    spec: the dataset; decides the inputs and 'mlp' or 'cnn'.
    training: widths, dropout and learning rate.
    vocabulary_sizes: vocabulary size (OOV bucket included) per categorical
      column.

  Returns:
    A compiled tf_keras model from a dict of transformed features to class
    probabilities; its last Dense layer is named 'logits'.
  """
  inputs: Dict[str, tf_keras.Input] = {}
  parts = []
  for column in spec.numeric_features:
    name = features.transformed_name(column)
    inputs[name] = tf_keras.Input(shape=(1,), name=name, dtype=tf.float32)
    parts.append(inputs[name])
  for column in spec.categorical_features:
    name = features.transformed_name(column)
    inputs[name] = tf_keras.Input(shape=(1,), name=name, dtype=tf.int64)
    parts.append(
        tf_keras.layers.CategoryEncoding(
            num_tokens=vocabulary_sizes[column],
            output_mode='one_hot',
            name=f'{column}_one_hot')(inputs[name]))
  if spec.image_features or spec.image_key:
    # Pixel columns, or an encoded image decoded to image_shape (issue 3).
    size = len(spec.image_features) or int(
        spec.image_shape[0] * spec.image_shape[1] * spec.image_shape[2])
    inputs[features.IMAGE_KEY] = tf_keras.Input(
        shape=(size,), name=features.IMAGE_KEY, dtype=tf.float32)
    x = tf_keras.layers.Reshape(spec.image_shape)(inputs[features.IMAGE_KEY])
    if spec.model == 'cnn':
      for filters in training.conv_filters:
        x = tf_keras.layers.Conv2D(
            filters, 3, padding='same', activation='relu')(x)
        if x.shape[1] >= 4 and x.shape[2] >= 4:
          x = tf_keras.layers.MaxPooling2D(2)(x)
    parts.append(tf_keras.layers.Flatten()(x))
  x = parts[0] if len(parts) == 1 else tf_keras.layers.Concatenate()(parts)
  for units in training.hidden_units:
    x = tf_keras.layers.Dense(units, activation='relu')(x)
  if training.dropout > 0:
    x = tf_keras.layers.Dropout(training.dropout)(x)
  logits = tf_keras.layers.Dense(
      len(spec.classes), name=optimize_types.LOGITS_LAYER)(x)
  # The output stays float32 whatever the compute policy.
  probabilities = tf_keras.layers.Activation(
      'softmax', dtype='float32',
      name=optimize_types.PROBABILITIES_LAYER)(logits)
  model = tf_keras.Model(inputs=inputs, outputs=probabilities)
  model.compile(
      optimizer=tf_keras.optimizers.Adam(training.learning_rate),
      loss=tf_keras.losses.SparseCategoricalCrossentropy(),
      metrics=[tf_keras.metrics.SparseCategoricalAccuracy(name='accuracy')])
  return model


def _raw_input_specs(raw_feature_spec: Mapping[str, Any]) -> Dict[str, Any]:
  """One [batch] TensorSpec per raw feature: strings or float32 numbers."""
  specs = {}
  for name, feature in raw_feature_spec.items():
    dtype = tf.string if feature.dtype == tf.string else tf.float32
    specs[name] = tf.TensorSpec(shape=[None], dtype=dtype, name=name)
  return specs


def _raw_to_parsed(raw: Mapping[str, tf.Tensor],
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


def _signatures(model: tf_keras.Model,
                tf_transform_output: tft.TFTransformOutput,
                spec: config_lib.DatasetSpec) -> Dict[str, Any]:
  """Builds the three serving signatures described in the module docstring."""
  model.tft_layer = tf_transform_output.transform_features_layer()
  raw_spec = tf_transform_output.raw_feature_spec()
  serving_spec = {k: v for k, v in raw_spec.items() if k != spec.label}
  class_names = tf.constant(list(spec.classes))

  def predict(raw_features):
    transformed = model.tft_layer(raw_features)
    transformed.pop(features.LABEL_KEY, None)
    return model(transformed)

  @tf.function(input_signature=[_raw_input_specs(serving_spec)])
  def serve_raw(raw):
    probabilities = predict(_raw_to_parsed(raw, serving_spec))
    class_ids = tf.argmax(probabilities, axis=1)
    return {
        'probabilities': probabilities,
        'class_ids': class_ids,
        'classes': tf.gather(class_names, class_ids),
    }

  @tf.function(input_signature=[
      tf.TensorSpec(shape=[None], dtype=tf.string, name='examples')
  ])
  def predict_examples(serialized):
    parsed = tf.io.parse_example(serialized, serving_spec)
    return {'probabilities': predict(parsed)}

  @tf.function(input_signature=[
      tf.TensorSpec(shape=[None], dtype=tf.string, name='examples')
  ])
  def transform_features(serialized):
    return model.tft_layer(tf.io.parse_example(serialized, raw_spec))

  return {
      'serving_default': serve_raw,
      'predict_examples': predict_examples,
      'transform_features': transform_features,
  }


# TFX Trainer will call this function.
def run_fn(fn_args: tfx.components.FnArgs) -> None:
  """Trains the model and exports it with its serving signatures.

  Args:
    fn_args: TFX Trainer arguments; custom_config holds 'dataset' and
      'training' (config dataclasses as dicts).
  """
  spec = config_lib.dataset_from_dict(fn_args.custom_config['dataset'])
  training = config_lib.training_from_dict(fn_args.custom_config['training'])
  tf_keras.utils.set_random_seed(training.seed)
  tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
  vocabulary_sizes = {
      c: tf_transform_output.vocabulary_size_by_name(c) + 1
      for c in spec.categorical_features
  }
  strategy = tf.distribute.get_strategy()
  global_batch = training.batch_size * strategy.num_replicas_in_sync
  train_ds = _input_fn(fn_args.train_files, fn_args.data_accessor,
                       tf_transform_output, global_batch, training.seed)
  eval_ds = _input_fn(fn_args.eval_files, fn_args.data_accessor,
                      tf_transform_output, global_batch, training.seed)
  with strategy.scope():
    model = build_model(spec, training, vocabulary_sizes)
    # Continuous retraining (issue 7): start from the latest blessed model.
    warm_start.load_base_weights(model, fn_args.base_model,
                                 fn_args.serving_model_dir)
  model.summary(print_fn=logging.info)

  # Class imbalance (issue 3): inverse-frequency class weights, or None.
  class_weight = data_policy.class_weights(fn_args.custom_config,
                                           tf_transform_output,
                                           len(spec.classes))
  logging.info('class weights: %s', class_weight)

  steps_per_epoch = max(1, fn_args.train_steps // training.epochs)
  model.fit(
      train_ds,
      epochs=training.epochs,
      steps_per_epoch=steps_per_epoch,
      validation_data=eval_ds,
      validation_steps=fn_args.eval_steps,
      callbacks=[
          tf_keras.callbacks.TensorBoard(
              log_dir=fn_args.model_run_dir, update_freq='epoch')
      ],
      class_weight=class_weight,
      verbose=2)

  keras_dir = os.path.join(
      os.path.dirname(fn_args.serving_model_dir),
      optimize_types.KERAS_MODEL_DIR)
  model.save(keras_dir, save_format='tf')
  signatures = _signatures(model, tf_transform_output, spec)
  model.save(fn_args.serving_model_dir, save_format='tf',
             signatures=signatures)
