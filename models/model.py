"""The Trainer step: builds, fits and exports the tf_keras model (run_fn).

The exported model serves three signatures:
  serving_default    raw feature columns (one [batch] tensor each, numbers as
                     float32, categories as strings; NaN or '' mean missing)
                     -> probabilities, class_ids, classes (a regression:
                     predictions, float32 [batch] in target units);
  predict_examples   serialized tf.Example -> probabilities (a regression:
                     predictions; used by TFMA);
  transform_features serialized tf.Example -> transformed features (TFMA);
and a regression a fourth:
  regression         serialized tf.Example 'inputs' -> 'outputs' [batch],
                     method tensorflow/serving/regress (TF Serving's
                     :regress).
Beside it, Format-Keras holds the bare Keras model for the optimizers.
On tabular data the signatures may wrap gradient-boosted trees instead of
the network, when they score better on the eval split (models/
model_family.py); Format-Keras still holds the network.
"""
import dataclasses
import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from absl import logging
import tensorflow as tf
import tensorflow_transform as tft
import tf_keras
from tfx import v1 as tfx
from tfx_bsl.public import tfxio
from tensorflow.core.protobuf import saved_model_pb2

from leantfx import config as config_lib
from leantfx import feature_names
from leantfx.models import architectures
from leantfx.models import data_policy
from leantfx.models import date_features
from leantfx.models import features
from leantfx.models import hyperparameters as hyperparameters_lib
from leantfx.models import model_family
from leantfx.models import model_layout
from leantfx import raw_serving
from leantfx.models import transformed_data
from leantfx.models import warm_start
from leantfx.models.training import budget as budget_lib
from leantfx.models.training import callbacks as callbacks_lib
from leantfx.models.training import plan as plan_lib
from leantfx.models.training import precision


REGRESSION_SIGNATURE = 'regression'
_REGRESS_METHOD = 'tensorflow/serving/regress'
# The target's mean and standard deviation come from at most this many train
# examples: they only set the output's scale, an estimate is enough.
_TARGET_SCALE_EXAMPLES = 100_000


def _target_scale(file_pattern: List[str],
                  data_accessor: tfx.components.DataAccessor,
                  tf_transform_output: tft.TFTransformOutput
                 ) -> Tuple[float, float]:
  """(mean, standard deviation) of the train split's regression target."""
  dataset = data_accessor.tf_dataset_factory(
      file_pattern,
      tfxio.TensorFlowDatasetOptions(
          batch_size=1024, label_key=features.LABEL_KEY, num_epochs=1,
          shuffle=False),
      tf_transform_output.transformed_metadata.schema)
  labels, seen = [], 0
  for _, label in dataset:
    values = np.asarray(label, dtype=np.float64).reshape(-1)
    labels.append(values)
    seen += values.size
    if seen >= _TARGET_SCALE_EXAMPLES:
      break
  values = np.concatenate(labels)
  std = float(values.std())
  # A constant target was refused before the run; guard the division anyway.
  return float(values.mean()), std if std > 0 else 1.0


def build_model(spec: config_lib.DatasetSpec,
                training: config_lib.TrainingConfig,
                vocabulary_sizes: Mapping[str, int],
                target_scale: Optional[Tuple[float, float]] = None
               ) -> tf_keras.Model:
  """Builds the compiled classifier (or regressor) for a dataset.

  Args:
    spec: the dataset; decides the inputs, the task and (architecture 'auto')
      'mlp' or 'cnn'.
    training: architecture, widths, dropout, l2, learning-rate schedule,
      recompute and accumulation_steps.
    vocabulary_sizes: vocabulary size (OOV bucket included) per categorical
      column.
    target_scale: regression only: the train target's (mean, std), built
      into the output layer.

  Returns:
    A compiled tf_keras model from a dict of transformed features to class
    probabilities; its last Dense layer is named 'logits'. It computes in the
    current global dtype policy (models/training/precision.py) and is built
    in the current strategy scope.
  """
  # The architecture (mlp, cnn, mobilenet_v2, efficientnet_b0; multipliers,
  # l2, recompute blocks), gradient accumulation and Adam with its warm-up
  # schedule: models/architectures.py and models/training/.
  return architectures.build_compiled(spec, training, vocabulary_sizes,
                                      target_scale)


def _signatures(model: tf_keras.Model,
                tf_transform_output: tft.TFTransformOutput,
                spec: config_lib.DatasetSpec) -> Dict[str, Any]:
  """Builds the three serving signatures described in the module docstring."""
  model.tft_layer = tf_transform_output.transform_features_layer()
  raw_spec = tf_transform_output.raw_feature_spec()
  serving_spec = raw_serving.serving_feature_spec(raw_spec, spec.label,
                                                  spec.identifier_columns)

  def predict(raw_features):
    transformed = model.tft_layer(raw_features)
    transformed.pop(features.LABEL_KEY, None)
    return model(transformed)

  if spec.is_regression:
    return _regression_signatures(model, predict, raw_spec, serving_spec)

  @tf.function(input_signature=[raw_serving.raw_input_specs(serving_spec)])
  def serve_raw(raw):
    return raw_serving.classification_outputs(
        predict(raw_serving.raw_to_parsed(raw, serving_spec)), spec.classes)

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


def _regression_signatures(model: tf_keras.Model, predict, raw_spec,
                           serving_spec) -> Dict[str, Any]:
  """A regression's signatures: predictions in target units, [batch]."""

  def predictions(raw_features):
    return tf.reshape(predict(raw_features), [-1])

  @tf.function(input_signature=[raw_serving.raw_input_specs(serving_spec)])
  def serve_raw(raw):
    return {'predictions': predictions(
        raw_serving.raw_to_parsed(raw, serving_spec))}

  @tf.function(input_signature=[
      tf.TensorSpec(shape=[None], dtype=tf.string, name='examples')
  ])
  def predict_examples(serialized):
    return {'predictions': predictions(
        tf.io.parse_example(serialized, serving_spec))}

  @tf.function(input_signature=[
      tf.TensorSpec(shape=[None], dtype=tf.string, name='inputs')
  ])
  def regress(serialized):
    return {'outputs': predictions(
        tf.io.parse_example(serialized, serving_spec))}

  @tf.function(input_signature=[
      tf.TensorSpec(shape=[None], dtype=tf.string, name='examples')
  ])
  def transform_features(serialized):
    return model.tft_layer(tf.io.parse_example(serialized, raw_spec))

  return {
      'serving_default': serve_raw,
      'predict_examples': predict_examples,
      REGRESSION_SIGNATURE: regress,
      'transform_features': transform_features,
  }


def _mark_regress_method(saved_model_dir: str) -> None:
  """Gives the regression signature TF Serving's regress method name.

  tf.saved_model.save writes every signature as a predict signature; TF
  Serving's :regress (and leantfx serve's) accepts only a SignatureDef whose
  method_name is tensorflow/serving/regress. The name is metadata: loading
  and running the function are unchanged.
  """
  path = os.path.join(saved_model_dir, 'saved_model.pb')
  saved_model = saved_model_pb2.SavedModel()
  with tf.io.gfile.GFile(path, 'rb') as f:
    saved_model.ParseFromString(f.read())
  for meta_graph in saved_model.meta_graphs:
    if REGRESSION_SIGNATURE in meta_graph.signature_def:
      meta_graph.signature_def[REGRESSION_SIGNATURE].method_name = (
          _REGRESS_METHOD)
  with tf.io.gfile.GFile(path, 'wb') as f:
    f.write(saved_model.SerializeToString())


def _date_parsing(spec: config_lib.DatasetSpec,
                  tf_transform_output: tft.TFTransformOutput
                 ) -> Dict[str, Any]:
  """{date column: what the Transform could parse}, unparseable ones logged.

  An unparseable value trains as missing (models/date_features.py); the
  warning names the most frequent ones and the column's stated format.
  """
  reports = {}
  for column in spec.date_features:
    report = date_features.parse_report(tf_transform_output, column)
    reports[column] = dict(report, format=spec.date_format[column])
    if report['unparseable']:
      logging.warning(
          'Date column %r: %d of %d train values do not follow its format '
          '%r and are treated as missing, e.g. %s. State the right format '
          'with --date-format.', spec.original_name(column),
          report['unparseable'],
          report['parsed'] + report['empty'] + report['unparseable'],
          spec.date_format[column],
          ', '.join(repr(v) for v in report['unparseable_examples']))
  return reports


# TFX Trainer will call this function.
def run_fn(fn_args: tfx.components.FnArgs) -> None:
  """Trains the model and exports it with its serving signatures.

  Args:
    fn_args: TFX Trainer arguments; custom_config holds 'dataset' and
      'training' (config dataclasses as dicts).
  """
  spec = config_lib.dataset_from_dict(fn_args.custom_config['dataset'])
  training = config_lib.training_from_dict(fn_args.custom_config['training'])
  # The Tuner's best values, when a Tuner ran.
  hyperparameters = getattr(fn_args, 'hyperparameters', None)
  training = hyperparameters_lib.apply_hyperparameters(training,
                                                       hyperparameters)
  tf_keras.utils.set_random_seed(training.seed)
  tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
  vocabulary_sizes = {
      c: tf_transform_output.vocabulary_size_by_name(c) + 1
      for c in spec.categorical_features + spec.text_features
  }
  date_parsing = _date_parsing(spec, tf_transform_output)
  target_scale = None
  if spec.is_regression:
    target_scale = _target_scale(fn_args.train_files, fn_args.data_accessor,
                                 tf_transform_output)
    logging.info('regression target mean %.6g, std %.6g', *target_scale)
  # Strategy, batches scaled by the replicas, precision: models/training/.
  plan = plan_lib.prepare(training)
  strategy = plan.strategy
  # The steps: exactly fn_args.train_steps, or passes over the train split's
  # rows (counted here: the compiled pipeline never saw the data), clamped
  # to [min_train_steps, fn_args.train_steps].
  budget = budget_lib.resolve(training, fn_args.train_steps,
                              fn_args.train_files,
                              plan.batches.dataset_batch)
  training = budget.applied_to(training)
  logging.info('train budget: %s', budget)
  train_ds = plan.input(
      transformed_data.dataset(fn_args.train_files, fn_args.data_accessor,
                               tf_transform_output,
                               plan.batches.dataset_batch, training.seed))
  eval_ds = plan.input(
      transformed_data.dataset(fn_args.eval_files, fn_args.data_accessor,
                               tf_transform_output,
                               plan.batches.global_micro_batch,
                               training.seed))
  decision = plan_lib.decide_precision(
      plan, training,
      lambda: build_model(spec, training, vocabulary_sizes, target_scale),
      train_ds)
  with precision.policy_scope(decision.policy), strategy.scope():
    model = build_model(spec, training, vocabulary_sizes, target_scale)
    # Continuous retraining (--warm-start): start from the latest blessed
    # model's weights where the shapes match.
    warm_start.load_base_weights(model, fn_args.base_model,
                                 fn_args.serving_model_dir)
  model.summary(print_fn=logging.info)

  # Class imbalance (--class-weights auto): inverse-frequency class
  # weights, or None.
  class_weight = None if spec.is_regression else data_policy.class_weights(
      fn_args.custom_config, tf_transform_output, len(spec.classes))
  logging.info('class weights: %s', class_weight)

  steps_per_epoch = max(1, training.train_steps // training.epochs)
  # TensorBoard in the model-run artifact, BackupAndRestore in a working dir
  # beside it, early stopping when configured.
  callbacks = callbacks_lib.build(training, fn_args.model_run_dir,
                                  plan_lib.backup_dir(fn_args))
  model.fit(
      train_ds,
      epochs=training.epochs,
      steps_per_epoch=steps_per_epoch,
      validation_data=eval_ds,
      validation_steps=fn_args.eval_steps,
      callbacks=callbacks,
      class_weight=class_weight,
      verbose=2)

  record = plan.record()
  record.update(callbacks_lib.summary(callbacks, training.epochs))
  # Early stopping can end sooner; a resumed run's epochs count from 0.
  epochs_done = max(record.get('epochs_run') or [training.epochs - 1]) + 1
  record['budget'] = budget.record(steps_per_epoch * epochs_done)
  record.update(tensorboard_logs=fn_args.model_run_dir,
                hyperparameters=hyperparameters,
                training=config_lib.to_json_dict(training))
  if date_parsing:
    record['date_parsing'] = date_parsing
  if not plan.is_chief:
    logging.info('Non-chief worker: the chief exports the model.')
    return
  # On tabular data, gradient-boosted trees beside the network; the better
  # on the eval split is exported (models/model_family.py).
  family = model_family.choose(training, spec, model, fn_args,
                               tf_transform_output)
  record['model_family'] = family.record
  callbacks_lib.write_record(fn_args.model_run_dir, record)
  # The export is a plain float32 model whatever trained (mixed policy,
  # recompute blocks, accumulation): Format-Keras converts to TFLite as is.
  model = plan_lib.float32_twin(
      model, lambda: build_model(
          spec,
          dataclasses.replace(training, recompute=False, accumulation_steps=1),
          vocabulary_sizes, target_scale))

  keras_dir = os.path.join(
      os.path.dirname(fn_args.serving_model_dir),
      model_layout.KERAS_MODEL_DIR)
  model.save(keras_dir, save_format='tf')
  exported = family.serving_model(model)
  signatures = _signatures(exported, tf_transform_output, spec)
  model_family.save_serving(exported, fn_args.serving_model_dir, signatures)
  family.cleanup()
  if spec.is_regression:
    _mark_regress_method(fn_args.serving_model_dir)
  # serving_default takes the feature keys; the server takes the names as
  # written in the data through this file.
  feature_names.write_for_saved_model(
      fn_args.serving_model_dir, serving_inputs(spec))


def serving_inputs(spec: config_lib.DatasetSpec) -> Dict[str, str]:
  """{name as written: feature key} of serving_default's raw inputs."""
  return {spec.original_name(k): k for k in spec.feature_columns}
