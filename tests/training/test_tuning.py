"""The tuner: keras-tuner 1.4 searching over tf_keras models."""
import keras_tuner
import pytest
import tensorflow as tf
import tf_keras

from leantfx.errors import ConfigError
from leantfx.models import hyperparameters
from leantfx.models import tuning
from tests.training import helpers

pytestmark = pytest.mark.unit

TRIALS = 2


def _data():
  x, y = helpers.tabular_arrays(192)
  train = tf.data.Dataset.from_tensor_slices(
      ({k: v[:128] for k, v in x.items()}, y[:128])).repeat().batch(32)
  valid = tf.data.Dataset.from_tensor_slices(
      ({k: v[128:] for k, v in x.items()}, y[128:])).batch(64)
  return train, valid


def _hypermodel():
  return tuning.LeantfxHyperModel(helpers.TABULAR, helpers.training(), {})


def test_stock_keras_tuner_rejects_tf_keras_models(tmp_path):
  """Why the tuner classes exist: keras-tuner 1.4 checks for Keras 3 models.

  If a keras-tuner release accepts tf_keras models, this fails, and the
  workaround in models/tuning.py can be retired.
  """
  tuner = keras_tuner.RandomSearch(
      _hypermodel(), objective='val_accuracy', max_trials=1,
      directory=str(tmp_path), project_name='stock')
  train, valid = _data()
  with pytest.raises(keras_tuner.errors.FatalTypeError,
                     match='valid Keras Model'):
    tuner.search(train, validation_data=valid, steps_per_epoch=2, epochs=1,
                 verbose=0)


@pytest.mark.parametrize('algorithm', ['random', 'hyperband', 'bayesian'])
def test_tuner_searches_tf_keras_models_within_the_budget(tmp_path,
                                                          algorithm):
  tuner = tuning.make_tuner(algorithm, _hypermodel(), trials=TRIALS,
                            epochs=2, directory=str(tmp_path), seed=1)
  train, valid = _data()
  tuner.search(train, validation_data=valid, steps_per_epoch=3, epochs=2,
               verbose=0)
  trials = tuner.oracle.get_best_trials(num_trials=10)
  assert len(trials) == TRIALS
  assert all(t.status == 'COMPLETED' for t in trials)
  best = tuner.get_best_hyperparameters()[0].values
  assert 16 <= best[hyperparameters.UNITS] <= 128
  assert 1 <= best[hyperparameters.DEPTH] <= 3
  assert 1e-4 <= best[hyperparameters.LEARNING_RATE] <= 1e-2
  assert 0.0 <= best[hyperparameters.DROPOUT] <= 0.5
  # The best trial's model reloads as a tf_keras model with its best epoch's
  # weights: its validation accuracy is the trial's score.
  model = tuner.get_best_models(1)[0]
  assert isinstance(model, tf_keras.Model)
  accuracy = model.evaluate(valid, verbose=0)[1]
  assert accuracy == pytest.approx(trials[0].score, abs=1e-6)


def test_best_hyperparameters_reach_the_training_config():
  hp = keras_tuner.HyperParameters()
  values = tuning.declare(hp)
  assert set(values) == {hyperparameters.UNITS, hyperparameters.DEPTH,
                         hyperparameters.LEARNING_RATE,
                         hyperparameters.DROPOUT}
  config = {'space': [], 'values': {'units': 96, 'depth': 3,
                                    'learning_rate': 0.002, 'dropout': 0.3}}
  training = hyperparameters.apply_hyperparameters(helpers.training(), config)
  assert training.hidden_units == (96, 48, 24)
  assert training.learning_rate == 0.002 and training.dropout == 0.3
  assert hyperparameters.apply_hyperparameters(helpers.training(), None) == (
      helpers.training())
  # Never below MIN_UNITS.
  assert hyperparameters.hidden_units(16, 3) == (16, 8, 8)


def test_a_zero_trial_budget_is_refused(tmp_path):
  with pytest.raises(ConfigError, match='at least 1'):
    tuning.make_tuner('random', _hypermodel(), trials=0, epochs=1,
                      directory=str(tmp_path), seed=1)
  with pytest.raises(ConfigError, match='tuner budget is 0'):
    helpers.training(tune=True, tuner_trials=0)
