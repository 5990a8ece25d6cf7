"""Helpers shared by the optimization techniques (private to this package).

Three small groups, each used by at least two technique modules:
  * config plumbing: validation messages that name the config field and say
    what to do, and the ``to_dict``/``from_dict`` round trip;
  * model plumbing: copying a model so the caller's model is never mutated,
    wrapping only the layers a tfmot API supports, parameter counting;
  * training and measurement: compile, one fit loop, accuracy, kernel sparsity
    and unique-value counts.

Every model here is a ``tf_keras`` (Keras 2) model: tfmot does not support
Keras 3.
"""
import dataclasses
import math
from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional,
                    Sequence, Tuple, Type, TypeVar)

import numpy as np
import tensorflow as tf
import tf_keras

from leantfx.errors import ConfigError

ConfigT = TypeVar('ConfigT')

# Names of the variables holding a layer's "kernel" in the sense tfmot prunes and
# clusters them (tfmot's prune/cluster registries list these for built-in
# layers); biases and normalization statistics are never counted as kernels.
_KERNEL_ATTRIBUTES = ('kernel', 'depthwise_kernel', 'pointwise_kernel',
                      'embeddings')


# ----------------------------------------------------------------- config ---


def config_error(config: Any, field: str, value: Any,
                 expectation: str) -> ConfigError:
  """Builds the ConfigError for one invalid config field.

  Args:
    config: the config object (or its class) that holds the field.
    field: the field's name.
    value: the rejected value.
    expectation: what a valid value looks like, and what to do.

  Returns:
    A ConfigError naming the config class, the field and the value.
  """
  name = config.__name__ if isinstance(config, type) else type(config).__name__
  return ConfigError(
      f'{name}.{field} = {value!r} is invalid: {expectation}. Fix this value '
      f'in the optimization config that builds {name}.')


def check_int(config: Any, field: str, minimum: int) -> None:
  """Raises ConfigError unless ``config.field`` is an int >= minimum."""
  value = getattr(config, field)
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise config_error(config, field, value,
                       f'it must be an integer >= {minimum}')
  if value < minimum:
    raise config_error(config, field, value,
                       f'it must be an integer >= {minimum}')


def check_float(config: Any,
                field: str,
                low: float,
                high: float,
                low_inclusive: bool = True,
                high_inclusive: bool = True) -> None:
  """Raises ConfigError unless ``config.field`` is a finite number in range."""
  value = getattr(config, field)
  interval = (('[' if low_inclusive else '(') + f'{low}, {high}' +
              (']' if high_inclusive else ')'))
  if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
    raise config_error(config, field, value,
                       f'it must be a number in {interval}')
  if not math.isfinite(value):
    raise config_error(config, field, value,
                       f'it must be a finite number in {interval}')
  too_low = value < low if low_inclusive else value <= low
  too_high = value > high if high_inclusive else value >= high
  if too_low or too_high:
    raise config_error(config, field, value, f'it must lie in {interval}')


def check_bool(config: Any, field: str) -> None:
  """Raises ConfigError unless ``config.field`` is a bool."""
  value = getattr(config, field)
  if not isinstance(value, bool):
    raise config_error(config, field, value, 'it must be true or false')


def check_learning_rate(config: Any, field: str = 'learning_rate') -> None:
  """Raises ConfigError unless the learning rate is in (0, 1]."""
  check_float(config, field, 0.0, 1.0, low_inclusive=False)


def config_to_dict(config: Any) -> Dict[str, Any]:
  """Returns a JSON-serialisable dict of a config dataclass's fields."""
  return dataclasses.asdict(config)


def config_from_dict(cls: Type[ConfigT], data: Mapping[str, Any]) -> ConfigT:
  """Builds a config dataclass from a dict, rejecting unknown keys.

  Args:
    cls: the config dataclass.
    data: field values; missing fields take their defaults.

  Returns:
    An instance of ``cls`` (validated by its ``__post_init__``).

  Raises:
    ConfigError: ``data`` is not a mapping or has keys ``cls`` does not know.
  """
  if not isinstance(data, Mapping):
    raise ConfigError(
        f'{cls.__name__}.from_dict expects a mapping of field names to values, '
        f'got {type(data).__name__}. Pass a dict such as '
        f'{cls.__name__}().to_dict().')
  known = [f.name for f in dataclasses.fields(cls)]
  unknown = sorted(set(data) - set(known))
  if unknown:
    raise ConfigError(
        f'{cls.__name__} has no field(s) {unknown}. Known fields: {known}. '
        'Remove or rename them in the optimization config.')
  return cls(**dict(data))


# ------------------------------------------------------------------ model ---


def copy_model(model: tf_keras.Model) -> tf_keras.Model:
  """Returns an independent copy (same architecture, copied weights).

  tfmot's wrappers reuse the layer objects they wrap, so training a wrapped
  model would otherwise change the caller's model in place.

  Args:
    model: a functional or Sequential tf_keras model.

  Returns:
    A new model with the same layer names and equal weights.

  Raises:
    ConfigError: the model is subclassed (it cannot be cloned).
  """
  ensure_graph_model(model, 'copying the model')
  clone = tf_keras.models.clone_model(model)
  clone.set_weights(model.get_weights())
  return clone


def ensure_graph_model(model: Any, purpose: str) -> None:
  """Raises ConfigError unless ``model`` is a functional/Sequential tf_keras model."""
  if not isinstance(model, tf_keras.Model):
    raise ConfigError(
        f'{purpose} needs a tf_keras.Model, got {type(model).__module__}.'
        f'{type(model).__name__}. Build and load models with tf_keras '
        '(Keras 2; TF_USE_LEGACY_KERAS=1), not Keras 3.')
  is_graph = isinstance(model, tf_keras.Sequential) or getattr(
      model, '_is_graph_network', False)
  if not is_graph:
    raise ConfigError(
        f'{purpose} needs a functional or Sequential model; model '
        f'{model.name!r} is a subclassed {type(model).__name__}. Rebuild it '
        'with the functional API.')


def layers_to_wrap(model: tf_keras.Model) -> List[tf_keras.layers.Layer]:
  """The layers a clone_function sees: every layer except the InputLayers."""
  return [
      layer for layer in model.layers
      if not isinstance(layer, tf_keras.layers.InputLayer)
  ]


def unsupported_layers(
    model: tf_keras.Model,
    is_supported: Callable[[tf_keras.layers.Layer], bool]) -> List[Dict[str, str]]:
  """Lists the layers ``is_supported`` rejects, as {'name', 'class'} dicts."""
  return [{
      'name': layer.name,
      'class': type(layer).__name__
  } for layer in layers_to_wrap(model) if not is_supported(layer)]


def raise_for_unsupported(technique: str, config: Any,
                          unsupported: Sequence[Dict[str, str]],
                          reason: str) -> None:
  """Raises ConfigError naming each unsupported layer, unless told to skip.

  Args:
    technique: e.g. 'pruning'.
    config: the technique's config, with a ``skip_unsupported_layers`` field;
      when it is True nothing is raised (the caller lists the layers).
    unsupported: output of ``unsupported_layers``.
    reason: why these layers cannot be handled.
  """
  if not unsupported or config.skip_unsupported_layers:
    return
  listed = ', '.join(f"'{u['name']}' ({u['class']})" for u in unsupported)
  raise ConfigError(
      f'{technique} cannot handle layer(s) {listed}: {reason}. Either set '
      f'{type(config).__name__}.skip_unsupported_layers = True to leave them '
      'as they are (they are listed in the result details), or replace them '
      'with supported built-in tf_keras layers.')


def wrap_supported_layers(
    model: tf_keras.Model, is_supported: Callable[[tf_keras.layers.Layer],
                                                  bool],
    wrap: Callable[[tf_keras.layers.Layer], tf_keras.layers.Layer]
) -> tf_keras.Model:
  """Clones ``model`` wrapping the supported layers and keeping the others.

  The layer objects themselves are reused (tfmot's own model-level APIs do
  the same), so pass a ``copy_model`` copy, not the caller's model.

  Args:
    model: a functional or Sequential model.
    is_supported: which layers to wrap.
    wrap: turns a layer into its tfmot wrapper.

  Returns:
    The wrapped model.
  """

  def clone_function(layer):
    return wrap(layer) if is_supported(layer) else layer

  return tf_keras.models.clone_model(model, clone_function=clone_function)


def custom_objects(model: tf_keras.Model) -> Dict[str, type]:
  """Maps every layer class name in ``model`` (nested too) to its class.

  tfmot and ``Model.from_config`` rebuild models from their configs; custom
  layer classes that were never registered must be handed over this way.
  """
  found = {}
  for layer in model.submodules:
    if isinstance(layer, tf_keras.layers.Layer):
      found[type(layer).__name__] = type(layer)
  return found


def count_params(model: tf_keras.Model) -> int:
  """Number of scalars in all weights (trainable and not) of ``model``."""
  return int(sum(int(np.prod(w.shape)) for w in model.weights))


def unwrap(layer: tf_keras.layers.Layer) -> tf_keras.layers.Layer:
  """Returns the innermost layer of (possibly nested) tf_keras Wrappers."""
  while isinstance(layer, tf_keras.layers.Wrapper):
    layer = layer.layer
  return layer


def layer_kernels(layer: tf_keras.layers.Layer) -> List[np.ndarray]:
  """The kernel arrays of a layer (seen through tfmot wrappers).

  Looks the kernels up by variable name among the weights of the outermost
  layer: a quantization wrapper replaces the inner layer's ``kernel``
  attribute with a fake-quantized tensor, and only the wrapper still tracks
  the kernel variable.
  """
  kernels = []
  for weight in layer.weights:
    short_name = weight.name.split('/')[-1].split(':')[0]
    if short_name in _KERNEL_ATTRIBUTES:
      kernels.append(weight.numpy())
  return kernels


def kernel_sparsity(model: tf_keras.Model,
                    layer_names: Optional[Iterable[str]] = None
                   ) -> Dict[str, Any]:
  """Measures the fraction of exact zeros in each kernel.

  Args:
    model: a tf_keras model (plain, stripped or tfmot-wrapped).
    layer_names: only these layers; by default every layer with a kernel.

  Returns:
    {'per_layer': {name: fraction}, 'overall': zeros / elements over those
    layers, 'zeros': int, 'elements': int}.
  """
  wanted = set(layer_names) if layer_names is not None else None
  per_layer, zeros, elements = {}, 0, 0
  for layer in model.layers:
    name = unwrap(layer).name
    if wanted is not None and name not in wanted and layer.name not in wanted:
      continue
    kernels = layer_kernels(layer)
    if not kernels:
      continue
    layer_zeros = sum(int(np.sum(k == 0)) for k in kernels)
    layer_elements = sum(int(k.size) for k in kernels)
    per_layer[name] = layer_zeros / layer_elements
    zeros += layer_zeros
    elements += layer_elements
  return {
      'per_layer': per_layer,
      'overall': zeros / elements if elements else 0.0,
      'zeros': zeros,
      'elements': elements,
  }


def kernel_unique_values(model: tf_keras.Model) -> Dict[str, int]:
  """Number of distinct values in each kernel, keyed by layer name."""
  counts = {}
  for layer in model.layers:
    kernels = layer_kernels(layer)
    if kernels:
      counts[unwrap(layer).name] = max(int(np.unique(k).size) for k in kernels)
  return counts


# --------------------------------------------------------------- training ---


def compile_classifier(model: tf_keras.Model, learning_rate: float) -> None:
  """Compiles a probabilities-output classifier: Adam, sparse CE, accuracy."""
  model.compile(
      optimizer=tf_keras.optimizers.Adam(learning_rate=learning_rate),
      loss=tf_keras.losses.SparseCategoricalCrossentropy(),
      metrics=[tf_keras.metrics.SparseCategoricalAccuracy(name='accuracy')])


def steps_per_epoch(dataset: tf.data.Dataset) -> int:
  """Number of batches in one pass over a finite dataset.

  Raises:
    ConfigError: the dataset is infinite (e.g. ``.repeat()`` without a count)
      or empty.
  """
  cardinality = int(dataset.cardinality())
  if cardinality == int(tf.data.INFINITE_CARDINALITY):
    raise ConfigError(
        'The training dataset is infinite; the optimization techniques treat '
        'one pass as one epoch. Pass a finite dataset (drop .repeat()).')
  if cardinality == int(tf.data.UNKNOWN_CARDINALITY):
    # e.g. after .filter(): one counting pass is cheap next to training.
    cardinality = int(dataset.reduce(np.int64(0), lambda n, _: n + 1))
  if cardinality <= 0:
    raise ConfigError('The training dataset is empty; pass at least one batch.')
  return cardinality


def check_max_steps(config: Any) -> None:
  """``config.max_steps`` is None (the epochs decide) or an int >= 1."""
  if config.max_steps is not None:
    check_int(config, 'max_steps', 1)


def epoch_plan(train_ds: tf.data.Dataset, epochs: int,
               max_steps: Optional[int] = None) -> Tuple[int, int]:
  """(epochs, steps per epoch) of ``epochs`` passes, within ``max_steps``.

  Without a cap, or when the passes fit in it, every epoch is one pass over
  ``train_ds``. Otherwise the epochs are shortened (and, below one step
  each, fewer) so that epochs x steps per epoch <= max_steps: a large split
  trains the technique for at most max_steps batches, drawn in order from
  the repeated dataset.
  """
  if epochs == 0:
    return 0, 0
  per_pass = steps_per_epoch(train_ds)
  if max_steps is None or epochs * per_pass <= max_steps:
    return epochs, per_pass
  epochs = min(epochs, max_steps)
  return epochs, max_steps // epochs


def planned_steps(train_ds: tf.data.Dataset, epochs: int,
                  max_steps: Optional[int] = None) -> int:
  """The batches ``fit`` trains on: epochs x steps per epoch (epoch_plan)."""
  planned_epochs, per_epoch = epoch_plan(train_ds, epochs, max_steps)
  return planned_epochs * per_epoch


def fit(model: tf_keras.Model,
        train_ds: tf.data.Dataset,
        epochs: int,
        callbacks: Sequence[tf_keras.callbacks.Callback] = (),
        max_steps: Optional[int] = None
       ) -> Dict[str, List[float]]:
  """Trains a compiled model for ``epochs`` passes over ``train_ds``.

  At most ``max_steps`` batches in all (epoch_plan: shorter epochs).
  No per-epoch validation: the techniques score the final model with
  ``accuracy`` instead, which spares tracing an evaluation graph per run.

  Returns:
    The Keras history as plain floats (JSON-serialisable); empty when
    ``epochs`` is 0.
  """
  if epochs == 0:
    return {}
  planned_epochs, per_epoch = epoch_plan(train_ds, epochs, max_steps)
  if (planned_epochs, per_epoch) == (epochs, steps_per_epoch(train_ds)):
    history = model.fit(
        train_ds, epochs=epochs, callbacks=list(callbacks), verbose=0)
  else:
    history = model.fit(
        train_ds.repeat(), epochs=planned_epochs, steps_per_epoch=per_epoch,
        callbacks=list(callbacks), verbose=0)
  return {
      key: [float(v) for v in values]
      for key, values in history.history.items()
  }


def accuracy(model: tf_keras.Model,
             dataset: Optional[tf.data.Dataset]) -> Optional[float]:
  """Top-1 accuracy of a probabilities (or logits) model; None without data.

  Does not depend on how (or whether) the model was compiled, so the same
  function scores the original, wrapped and stripped models.
  """
  if dataset is None:
    return None
  correct, total = 0, 0
  for features, labels in dataset:
    predictions = model(features, training=False)
    predicted = tf.argmax(predictions, axis=-1, output_type=tf.int64)
    labels = tf.cast(tf.reshape(labels, [-1]), tf.int64)
    correct += int(tf.reduce_sum(tf.cast(predicted == labels, tf.int64)))
    total += int(tf.size(labels))
  return correct / total if total else None


def first_examples(dataset: tf.data.Dataset,
                   max_examples: int) -> Tuple[Any, np.ndarray]:
  """Concatenates the first batches of ``dataset`` up to ``max_examples``.

  Returns:
    (features, labels) as numpy (features keep their dict structure).
  """
  feature_batches, label_batches, seen = [], [], 0
  for features, labels in dataset:
    feature_batches.append(tf.nest.map_structure(np.asarray, features))
    label_batches.append(np.asarray(labels))
    seen += len(label_batches[-1])
    if seen >= max_examples:
      break
  features = tf.nest.map_structure(
      lambda *parts: np.concatenate(parts)[:max_examples], *feature_batches)
  return features, np.concatenate(label_batches)[:max_examples]

