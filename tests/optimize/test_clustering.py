"""Tests for leantfx.components.optimize.techniques.clustering on the digits CNN fixture."""
import json

import numpy as np
import pytest
import tf_keras

from leantfx.components.optimize.techniques import clustering
from leantfx.errors import ConfigError
from tests.optimize import conftest

KERNEL_LAYERS = ['conv3x3', 'conv1x1', 'hidden', 'logits']
# Allowed accuracy drop on the 397 eval digits (1 digit = 0.0025). Measured on
# this fixture: 16 clusters cost <= 0.01 after one epoch.
ACCURACY_TOLERANCE = 0.03


@pytest.mark.unit
def test_kernels_keep_at_most_number_of_clusters_values(
    teacher, teacher_accuracy, digits, teacher_weights_unchanged):
  # The trained kernels start with (almost) all-distinct values; the smallest
  # kernel, conv3x3, has 144 weights.
  for name in KERNEL_LAYERS:
    assert np.unique(teacher.get_layer(name).kernel.numpy()).size > 100, name
  config = clustering.ClusteringConfig(
      number_of_clusters=16, epochs=1, learning_rate=1e-4)

  result = clustering.cluster(teacher, digits.train_ds(), config,
                              digits.eval_ds())

  assert result.technique == 'clustering'
  json.dumps(result.details)  # types.py: details are JSON-serialisable
  assert result.details['clustered_layers'] == KERNEL_LAYERS
  for name in KERNEL_LAYERS:
    # Measured here too, not only trusted from the details.
    kernel = result.model.get_layer(name).kernel.numpy()
    assert np.unique(kernel).size <= 16, name
    assert result.details['unique_values_per_kernel'][name] <= 16, name
  assert not any(
      isinstance(layer, tf_keras.layers.Wrapper)
      for layer in result.model.layers)
  assert result.details['params'] == 34186
  assert result.details['accuracy_after'] >= (
      teacher_accuracy - ACCURACY_TOLERANCE)


@pytest.mark.unit
def test_custom_layer_is_named_in_error_or_skipped(digits):
  model = conftest.build_model_with_custom_layer()

  with pytest.raises(ConfigError, match=r"'my_scale' \(ScaleLayer\)"):
    clustering.cluster(model, digits.train_ds(),
                       clustering.ClusteringConfig())

  result = clustering.cluster(
      model, digits.train_ds().take(5),
      clustering.ClusteringConfig(
          number_of_clusters=4, centroid_init='linear',
          skip_unsupported_layers=True))
  assert result.details['skipped_layers'] == [{
      'name': 'my_scale',
      'class': 'ScaleLayer'
  }]
  assert result.details['unique_values_per_kernel']['hidden'] <= 4
  assert result.details['unique_values_per_kernel']['logits'] <= 4


@pytest.mark.unit
@pytest.mark.parametrize('field, value', [
    ('number_of_clusters', 1),
    ('number_of_clusters', 16.0),
    ('centroid_init', 'kmeans'),
    ('epochs', 0),
    ('learning_rate', float('inf')),
])
def test_invalid_config_values_raise(field, value):
  with pytest.raises(ConfigError, match=f'ClusteringConfig.{field}'):
    clustering.ClusteringConfig(**{field: value})


@pytest.mark.unit
def test_config_round_trips_through_dict():
  config = clustering.ClusteringConfig(
      number_of_clusters=8, centroid_init='density_based', epochs=2,
      learning_rate=3e-5, skip_unsupported_layers=True)
  assert clustering.ClusteringConfig.from_dict(config.to_dict()) == config
  with pytest.raises(ConfigError, match='clusters'):
    clustering.ClusteringConfig.from_dict({'clusters': 8})
