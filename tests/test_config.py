"""Config objects validate their values and round-trip through custom_config."""
import pytest

from leantfx import config as config_lib
from leantfx import datasets
from leantfx.errors import ConfigError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize('name', sorted(datasets.BUNDLED))
def test_dataset_spec_round_trip(name):
  spec = datasets.BUNDLED[name]
  assert config_lib.dataset_from_dict(config_lib.to_json_dict(spec)) == spec


def test_training_round_trip():
  training = config_lib.TrainingConfig(train_steps=7, epochs=7,
                                       hidden_units=(3,))
  assert config_lib.training_from_dict(
      config_lib.to_json_dict(training)) == training


@pytest.mark.parametrize('kwargs,message', [
    (dict(classes=('a',)), 'at least 2'),
    (dict(classes=('a', 'a')), 'twice'),
    (dict(model='rnn'), 'Unknown model kind'),
    (dict(name='../x'), 'not usable as a model name'),
    (dict(numeric_features=('y',)), 'also listed as a feature'),
    (dict(model='cnn', image_features=('p1', 'p2'), image_shape=(2, 2, 1)),
     'does not match'),
])
def test_dataset_spec_rejects(kwargs, message):
  values = dict(name='d', label='y', classes=('a', 'b'),
                numeric_features=('x',))
  values.update(kwargs)
  with pytest.raises(ConfigError, match=message):
    config_lib.DatasetSpec(**values)


@pytest.mark.parametrize('kwargs,message', [
    (dict(train_steps=0), 'train_steps'),
    (dict(train_steps=5, epochs=6), 'epochs'),
    (dict(dropout=1.0), 'dropout'),
    (dict(learning_rate=-1.0), 'learning_rate'),
])
def test_training_config_rejects(kwargs, message):
  with pytest.raises(ConfigError, match=message):
    config_lib.TrainingConfig(**kwargs)


def test_evaluation_config_rejects():
  with pytest.raises(ConfigError, match='min_accuracy'):
    config_lib.EvaluationConfig(min_accuracy=1.2)
