"""Hyperparameter search for the TFX Tuner component (tuner_fn).

The search space: the width of the first hidden layer ('units', later layers
halve it), the number of hidden layers ('depth'), Adam's learning rate and
the dropout rate. KerasTuner's RandomSearch, Hyperband or
BayesianOptimization explores it (TrainingConfig.tuner_algorithm) within a
trial budget; the Tuner writes the best values, and the Trainer's run_fn
trains with them (models/hyperparameters.py holds the names and turns
values into a TrainingConfig, for a trial and for run_fn alike).

keras-tuner 1.4 and tf_keras: keras-tuner binds to the `keras` package,
which is Keras 3 whenever it is installed (TensorFlow 2.16 installs it), so
its Tuner rejects a tf_keras model ("Expected the model-building function
... to return a valid Keras Model instance"), hands tf_keras's fit Keras 3
callbacks, and does not recognise tf_keras's History. The tuner classes here
keep keras-tuner's oracles and search loop and replace exactly the model-
facing parts: the model check, the per-trial callbacks (tf_keras callbacks
that save the best epoch's weights), the trial result (a metrics dict of the
best epoch) and weight loading (TensorFlow checkpoints).
"""
import copy
import dataclasses
import gc
import os
from typing import Any, Dict, List, Mapping

from absl import logging
import keras_tuner
import tensorflow_transform as tft
import tf_keras
from tfx import v1 as tfx

from leantfx import config as config_lib
from leantfx.errors import ConfigError
from leantfx.models import architectures
from leantfx.models import hyperparameters as hyperparameters_lib
from leantfx.models import transformed_data

OBJECTIVE = 'val_accuracy'


def declare(hp: keras_tuner.HyperParameters) -> Dict[str, Any]:
  """Declares the search space on hp; returns this trial's values."""
  space = hyperparameters_lib
  return {
      space.UNITS: hp.Int(space.UNITS, 16, 128, step=16),
      space.DEPTH: hp.Int(space.DEPTH, 1, 3),
      space.LEARNING_RATE: hp.Float(space.LEARNING_RATE, 1e-4, 1e-2,
                                    sampling='log'),
      space.DROPOUT: hp.Float(space.DROPOUT, 0.0, 0.5, step=0.1),
  }


class _BestEpochWeights(tf_keras.callbacks.Callback):
  """Saves the weights at the best epoch so far (keras-tuner's SaveBestEpoch)."""

  def __init__(self, objective: keras_tuner.Objective, filepath: str):
    super().__init__()
    self.objective = objective
    self.filepath = filepath
    self.best_value = (float('-inf')
                       if objective.direction == 'max' else float('inf'))

  def on_epoch_end(self, epoch, logs=None):
    if not self.objective.has_value(logs):
      self.model.save_weights(self.filepath)
      return
    value = self.objective.get_value(logs)
    if self.objective.better_than(value, self.best_value):
      self.best_value = value
      self.model.save_weights(self.filepath)


class _TunerHooks(tf_keras.callbacks.Callback):
  """keras-tuner's TunerCallback, as a tf_keras callback."""

  def __init__(self, tuner, trial):
    super().__init__()
    self.tuner = tuner
    self.trial = trial

  def on_epoch_begin(self, epoch, logs=None):
    self.tuner.on_epoch_begin(self.trial, self.model, epoch, logs=logs)

  def on_epoch_end(self, epoch, logs=None):
    self.tuner.on_epoch_end(self.trial, self.model, epoch, logs=logs)


def best_epoch_metrics(history: Any,
                       objective: keras_tuner.Objective) -> Dict[str, float]:
  """The metrics of the epoch where the objective was best."""
  per_epoch: List[Dict[str, float]] = []
  for name, values in history.history.items():
    for epoch, value in enumerate(values):
      if len(per_epoch) <= epoch:
        per_epoch.append({})
      per_epoch[epoch][name] = float(value)
  if not per_epoch:
    raise keras_tuner.errors.FatalValueError(
        'A trial finished without any epoch metrics.')
  best = per_epoch[0]
  for metrics in per_epoch[1:]:
    if objective.better_than(objective.get_value(metrics),
                             objective.get_value(best)):
      best = metrics
  return best


class TfKerasTunerMixin:
  """Makes a keras-tuner Tuner train tf_keras models (see module docstring)."""

  def _try_build(self, hp):
    tf_keras.backend.clear_session()
    gc.collect()
    model = self._build_hypermodel(hp)
    if not isinstance(model, tf_keras.Model):
      raise keras_tuner.errors.FatalTypeError(
          'The hypermodel must return a tf_keras Model, got '
          f'{type(model).__module__}.{type(model).__name__}.')
    if self.max_model_size and model.count_params() > self.max_model_size:
      raise keras_tuner.errors.FailedTrialError(
          f'Oversized model: {model.count_params()} parameters. Skip model.')
    return model

  def _get_checkpoint_fname(self, trial_id):
    # A TensorFlow checkpoint prefix (tf_keras save_weights' native format).
    return os.path.join(self.get_trial_dir(trial_id), 'checkpoint')

  def run_trial(self, trial, *args, **kwargs):
    best_weights = _BestEpochWeights(
        self.oracle.objective, self._get_checkpoint_fname(trial.trial_id))
    original_callbacks = kwargs.pop('callbacks', [])
    results = []
    for _ in range(self.executions_per_trial):
      copied = copy.copy(kwargs)
      copied['callbacks'] = self._deepcopy_callbacks(original_callbacks) + [
          _TunerHooks(self, trial), best_weights
      ]
      model = self._try_build(trial.hyperparameters)
      history = self.hypermodel.fit(trial.hyperparameters, model, *args,
                                    **copied)
      results.append(best_epoch_metrics(history, self.oracle.objective))
    return results

  def load_model(self, trial):
    model = self._try_build(trial.hyperparameters)
    model.load_weights(self._get_checkpoint_fname(trial.trial_id))
    return model


class RandomSearch(TfKerasTunerMixin, keras_tuner.RandomSearch):
  """RandomSearch over tf_keras models."""


class BayesianOptimization(TfKerasTunerMixin,
                           keras_tuner.BayesianOptimization):
  """BayesianOptimization over tf_keras models."""


class Hyperband(TfKerasTunerMixin, keras_tuner.Hyperband):
  """Hyperband over tf_keras models (continued trials reload TF checkpoints)."""

  def _build_hypermodel(self, hp):
    model = self.hypermodel.build(hp)
    if 'tuner/trial_id' in hp.values:
      model.load_weights(self._get_checkpoint_fname(hp.values['tuner/trial_id']))
    return model


class LeantfxHyperModel(keras_tuner.HyperModel):
  """Builds the Trainer's model (models.model.build_model) from a trial."""

  def __init__(self, spec: config_lib.DatasetSpec,
               training: config_lib.TrainingConfig,
               vocabulary_sizes: Mapping[str, int]):
    super().__init__(name='leantfx')
    self._spec = spec
    self._training = training
    self._vocabulary_sizes = dict(vocabulary_sizes)

  def build(self, hp):
    training = hyperparameters_lib.apply_hyperparameters(self._training,
                                                         declare(hp))
    return architectures.build_compiled(self._spec, training,
                                        self._vocabulary_sizes)

  def build_untuned(self):
    """The network the Trainer trains without a search (--tune auto's probe)."""
    return architectures.build_compiled(self._spec, self._training,
                                        self._vocabulary_sizes)


def probe_untuned(result: tfx.components.TunerFnResult) -> float:
  """The untuned network's best validation accuracy under a trial's budget.

  Trains hypermodel.build_untuned() with the fit arguments every trial gets
  (steps, epochs, the eval split as validation data) and reads the objective
  at its best epoch, as a trial's score is read.
  """
  tuner = result.tuner
  tf_keras.backend.clear_session()
  gc.collect()
  model = tuner.hypermodel.build_untuned()
  history = model.fit(**dict(result.fit_kwargs, callbacks=[]))
  best = best_epoch_metrics(history, tuner.oracle.objective)
  return float(tuner.oracle.objective.get_value(best))


def make_tuner(algorithm: str, hypermodel: keras_tuner.HyperModel,
               trials: int, epochs: int, directory: str, seed: int,
               project_name: str = 'leantfx') -> keras_tuner.Tuner:
  """A tuner of the configured algorithm with a trial budget.

  Args:
    algorithm: one of config.TUNER_ALGORITHMS.
    hypermodel: builds the model per trial.
    trials: the trial budget (max_trials; Hyperband stops there too).
    epochs: epochs per trial (Hyperband's max_epochs).
    directory: where trials keep their state.
    seed: the oracle's seed.
    project_name: sub-folder of directory.

  Returns:
    The tuner, overwriting any earlier search in that folder.
  """
  if trials < 1:
    raise ConfigError(
        f'The tuner budget is {trials} trials; it must be at least 1.')
  common = dict(hypermodel=hypermodel, objective=OBJECTIVE,
                directory=directory, project_name=project_name, seed=seed,
                overwrite=True)
  if algorithm == 'random':
    return RandomSearch(max_trials=trials, **common)
  if algorithm == 'bayesian':
    return BayesianOptimization(max_trials=trials, **common)
  if algorithm == 'hyperband':
    tuner = Hyperband(max_epochs=max(2, epochs), factor=3, **common)
    # Hyperband has no trial budget of its own; the oracle's stops it.
    tuner.oracle.max_trials = trials
    return tuner
  raise ConfigError(
      f'Unknown tuner algorithm {algorithm!r}; use one of '
      f'{config_lib.TUNER_ALGORITHMS}.')


# TFX Tuner will call this function.
def tuner_fn(fn_args: tfx.components.FnArgs) -> tfx.components.TunerFnResult:
  """Builds the tuner and its fit arguments for the TFX Tuner component.

  Args:
    fn_args: TFX Tuner arguments; custom_config holds 'dataset' and
      'training' (config dataclasses as dicts); train_steps are the steps of
      each trial.

  Returns:
    The tuner and the arguments its search() passes to fit.
  """
  spec = config_lib.dataset_from_dict(fn_args.custom_config['dataset'])
  training = config_lib.training_from_dict(fn_args.custom_config['training'])
  tf_keras.utils.set_random_seed(training.seed)
  transform_output = tft.TFTransformOutput(fn_args.transform_graph_path)
  vocabulary_sizes = {
      c: transform_output.vocabulary_size_by_name(c) + 1
      for c in spec.categorical_features
  }
  # Trials train in float32 on one device: tuning compares hyperparameters,
  # and a probe or a cluster per trial would only add noise and cost.
  # The Trainer's steps are decided from the rows only in run_fn: a
  # trial's learning-rate schedule spans the floor of that rule.
  trial_training = dataclasses.replace(
      training, precision='float32', strategy='auto', accumulation_steps=1,
      recompute=False, global_batch_size=None,
      train_steps=(training.train_steps if training.train_passes is None
                   else training.min_train_steps),
      train_passes=None, min_train_steps=1)
  hypermodel = LeantfxHyperModel(spec, trial_training, vocabulary_sizes)
  tuner = make_tuner(training.tuner_algorithm, hypermodel,
                     training.tuner_trials, training.tuner_epochs,
                     fn_args.working_dir, training.seed)
  train_ds = transformed_data.dataset(
      fn_args.train_files, fn_args.data_accessor, transform_output,
      training.batch_size, training.seed)
  eval_ds = transformed_data.dataset(
      fn_args.eval_files, fn_args.data_accessor, transform_output,
      training.batch_size, training.seed)
  steps_per_epoch = max(1, fn_args.train_steps // training.tuner_epochs)
  logging.info('Tuning: %s, %d trial(s) of %d step(s) (%d epoch(s)).',
               training.tuner_algorithm, training.tuner_trials,
               fn_args.train_steps, training.tuner_epochs)
  return tfx.components.TunerFnResult(
      tuner=tuner,
      fit_kwargs={
          'x': train_ds,
          'validation_data': eval_ds,
          'steps_per_epoch': steps_per_epoch,
          'validation_steps': fn_args.eval_steps,
          'epochs': training.tuner_epochs,
          'verbose': 2,
      })
