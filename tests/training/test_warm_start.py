"""models/warm_start.py: weights copied when shapes match, a record always."""
import os

import numpy as np
import pytest
import tf_keras

from leantfx.models import warm_start

pytestmark = pytest.mark.unit


def _model(units):
  inputs = tf_keras.Input((3,), name='x')
  outputs = tf_keras.layers.Dense(2)(tf_keras.layers.Dense(units)(inputs))
  return tf_keras.Model(inputs, outputs)


def _blessed_model_artifact(root, units):
  """A Model artifact folder like the Trainer's: Format-Keras, Format-Serving."""
  model = _model(units)
  model.save(os.path.join(root, 'Format-Keras'), save_format='tf')
  return model, os.path.join(root, 'Format-Serving')


def test_matching_shapes_copy_the_weights(tmp_path):
  base, base_serving = _blessed_model_artifact(str(tmp_path / 'base'), 4)
  new = _model(4)
  record = warm_start.load_base_weights(
      new, base_serving, str(tmp_path / 'new' / 'Format-Serving'))
  assert record['loaded'] is True
  for a, b in zip(new.get_weights(), base.get_weights()):
    np.testing.assert_array_equal(a, b)
  assert warm_start.read_record(str(tmp_path / 'new')) == record


def test_other_shapes_train_cold_and_say_why(tmp_path):
  _, base_serving = _blessed_model_artifact(str(tmp_path / 'base'), 4)
  record = warm_start.load_base_weights(
      _model(5), base_serving, str(tmp_path / 'new' / 'Format-Serving'))
  assert record['loaded'] is False
  assert 'weight shapes differ' in record['reason']


def test_record_is_written_on_an_object_store(tmp_path, monkeypatch):
  """On Kubeflow the model artifact is on gs://; ram:// stands in for it.

  os-level calls would not fail on such a path: they would write a local
  folder named 'ram:' instead, which is checked for.
  """
  from tfx.dsl.io import fileio  # pylint: disable=g-import-not-at-top
  monkeypatch.chdir(tmp_path)
  new_artifact = f'ram://{tmp_path.name}/Trainer/model/7'
  record = warm_start.load_base_weights(
      _model(4), None, f'{new_artifact}/Format-Serving')
  assert record['loaded'] is False and 'no base model' in record['reason']
  assert fileio.exists(f'{new_artifact}/{warm_start.RECORD_FILE}')
  assert not os.path.exists(tmp_path / 'ram:')
  assert warm_start.read_record(new_artifact) == record
