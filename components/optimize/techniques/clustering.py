"""Weight clustering: every kernel keeps only ``number_of_clusters`` values.

Wraps the clusterable layers with ``tfmot.clustering.keras.cluster_weights``,
fine-tunes the shared centroids, then ``strip_clustering`` writes each weight
as its centroid. A kernel with 16 distinct values compresses to 4-bit indices
plus a 16-entry table; gzip/TFLite size is where the saving shows.
"""
import dataclasses
from typing import Any, Dict, Mapping, Optional

import tensorflow as tf
import tensorflow_model_optimization as tfmot
import tf_keras

from leantfx.components.optimize.techniques import _keras_utils
from leantfx.components.optimize.types import OptimizationResult

TECHNIQUE = 'clustering'
_CENTROID_INITS = {
    'kmeans_plus_plus':
        tfmot.clustering.keras.CentroidInitialization.KMEANS_PLUS_PLUS,
    'linear':
        tfmot.clustering.keras.CentroidInitialization.LINEAR,
    'density_based':
        tfmot.clustering.keras.CentroidInitialization.DENSITY_BASED,
    'random':
        tfmot.clustering.keras.CentroidInitialization.RANDOM,
}


@dataclasses.dataclass(frozen=True)
class ClusteringConfig:
  """How to cluster weights.

  Attributes:
    number_of_clusters: distinct values per kernel, >= 2 (tfmot's minimum).
      16 is the tfmot clustering guide's example and fits 4-bit indices.
    centroid_init: 'kmeans_plus_plus', 'linear', 'density_based' or 'random'.
    epochs: fine-tuning passes over the training data (the guide uses 1).
    learning_rate: Adam learning rate; the tfmot guide uses 1e-5 because
      large steps move the few shared centroids far.
    skip_unsupported_layers: leave layers tfmot cannot cluster unwrapped (and
      list them in the details) instead of raising ConfigError.
    max_steps: at most this many fine-tuning steps (shorter epochs when
      the passes would take more); None: the epochs decide. The
      ModelOptimizer sets it from the Trainer's steps
      (config.tie_to_trainer).
  """
  number_of_clusters: int = 16
  centroid_init: str = 'kmeans_plus_plus'
  epochs: int = 1
  learning_rate: float = 1e-5
  skip_unsupported_layers: bool = False
  max_steps: Optional[int] = None

  def __post_init__(self):
    _keras_utils.check_int(self, 'number_of_clusters', 2)
    if self.centroid_init not in _CENTROID_INITS:
      raise _keras_utils.config_error(
          self, 'centroid_init', self.centroid_init,
          f'it must be one of {sorted(_CENTROID_INITS)}')
    _keras_utils.check_int(self, 'epochs', 1)
    _keras_utils.check_learning_rate(self)
    _keras_utils.check_bool(self, 'skip_unsupported_layers')
    _keras_utils.check_max_steps(self)

  def to_dict(self) -> Dict[str, Any]:
    """Returns the fields as a JSON-serialisable dict."""
    return _keras_utils.config_to_dict(self)

  @classmethod
  def from_dict(cls, data: Mapping[str, Any]) -> 'ClusteringConfig':
    """Builds a config from ``to_dict`` output (unknown keys are an error)."""
    return _keras_utils.config_from_dict(cls, data)


def _cluster_args(config: ClusteringConfig) -> Dict[str, Any]:
  return {
      # tfmot rejects numpy integers here.
      'number_of_clusters': int(config.number_of_clusters),
      'cluster_centroids_init': _CENTROID_INITS[config.centroid_init],
  }


def _is_clusterable(layer: tf_keras.layers.Layer,
                    number_of_clusters: int = 2) -> bool:
  """Whether tfmot's clustering wrapper accepts ``layer`` for N clusters.

  A kernel with fewer weights than clusters (e.g. the 3x3 embedding of a
  three-valued category) cannot be clustered: k-means++ initialisation needs
  at least as many points as centroids.
  """
  for weight in layer.weights:
    if len(weight.shape) >= 2 and weight.shape.num_elements() is not None and (
        weight.shape.num_elements() < number_of_clusters):
      return False
  try:
    tfmot.clustering.keras.cluster_weights(
        layer, number_of_clusters=2,
        cluster_centroids_init=_CENTROID_INITS['linear'])
  except ValueError:
    return False
  return True


def cluster(model: tf_keras.Model,
            train_ds: tf.data.Dataset,
            config: ClusteringConfig,
            eval_ds: Optional[tf.data.Dataset] = None) -> OptimizationResult:
  """Clusters each kernel's weights into shared centroids, then fine-tunes.

  The caller's model is not modified.

  Args:
    model: a trained functional/Sequential tf_keras classifier that outputs
      probabilities (see types.py).
    train_ds: finite dataset of (features, int64 labels) batches; one pass is
      one epoch.
    config: the clustering settings.
    eval_ds: optional held-out batches to measure accuracy before and after.

  Returns:
    OptimizationResult with technique 'clustering', the stripped model, and
    details: config, clustered and skipped layers, unique values per kernel
    (measured on the stripped model), parameter count, accuracy before/after
    and the training history.

  Raises:
    ConfigError: a layer cannot be clustered and ``skip_unsupported_layers``
      is False; the model is not a functional/Sequential tf_keras model.
  """
  working = _keras_utils.copy_model(model)
  skipped = _keras_utils.unsupported_layers(
      working,
      lambda layer: _is_clusterable(layer, int(config.number_of_clusters)))
  _keras_utils.raise_for_unsupported(
      TECHNIQUE, config, skipped,
      'tfmot.clustering.keras.cluster_weights does not support them, or a '
      f'kernel has fewer than {config.number_of_clusters} weights')
  skipped_names = {s['name'] for s in skipped}

  cluster_args = _cluster_args(config)
  wrapped = _keras_utils.wrap_supported_layers(
      working, lambda layer: layer.name not in skipped_names,
      lambda layer: tfmot.clustering.keras.cluster_weights(
          layer, **cluster_args))
  _keras_utils.compile_classifier(wrapped, config.learning_rate)
  history = _keras_utils.fit(wrapped, train_ds, config.epochs,
                             max_steps=config.max_steps)
  stripped = tfmot.clustering.keras.strip_clustering(wrapped)

  unique_values = _keras_utils.kernel_unique_values(stripped)
  clustered_layers = [
      name for name in unique_values if name not in skipped_names
  ]
  details = {
      'config': config.to_dict(),
      'clustered_layers': clustered_layers,
      'skipped_layers': skipped,
      'unique_values_per_kernel': {
          name: unique_values[name] for name in clustered_layers
      },
      'params': _keras_utils.count_params(stripped),
      'accuracy_before': _keras_utils.accuracy(model, eval_ds),
      'accuracy_after': _keras_utils.accuracy(stripped, eval_ds),
      'training_steps': _keras_utils.planned_steps(
          train_ds, config.epochs, config.max_steps),
      'history': history,
  }
  return OptimizationResult(technique=TECHNIQUE, model=stripped,
                            details=details)
