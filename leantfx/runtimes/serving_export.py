"""The serving SavedModel every runtime's export reads, and int8 calibration.

A candidate is saved once as a SavedModel whose ``serving_default``
signature takes the model's inputs by name (``save_serving_model``); the
TFLite converter (components/optimize/export/tflite.py) and each server
runtime's ``Exporter`` (openvino.py, onnx.py here) convert that one graph.
Their int8 modes calibrate on batch-1 train examples drawn the same way
(``calibration_samples``, checked by ``require_calibration_samples``).

TensorFlow is imported inside the functions, not with the module: the
runtime modules import this one, and ``leantfx serve`` and the CLI import
them without loading TensorFlow.
"""
from typing import Dict, Iterator, List, Mapping, Union

import numpy as np

from leantfx.errors import ConfigError

SERVING_SIGNATURE = 'serving_default'
# The TFLite guide's examples calibrate on ~100 samples; more rarely changes
# the ranges of a small model and makes conversion slower.
DEFAULT_CALIBRATION_SAMPLES = 100

# Features as numpy arrays keyed by input name, or a tf.data.Dataset of
# (features, label) or of features, batched or not.
RepresentativeData = Union[Mapping[str, np.ndarray], 'tf.data.Dataset']


def serving_input_specs(model) -> Dict[str, 'tf.TensorSpec']:
  """Returns the model's inputs as TensorSpecs keyed by input name.

  Dict-input models keep their dict keys; a single-input model uses the name
  of its Input layer.

  Args:
    model: a built tf_keras model.

  Returns:
    {input name: TensorSpec with a free batch dimension}.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  inputs = model.input
  if isinstance(inputs, Mapping):
    named = dict(inputs)
  elif isinstance(inputs, (list, tuple)):
    named = dict(zip(model.input_names, inputs))
  else:
    named = {model.input_names[0]: inputs}
  return {
      name: tf.TensorSpec([None] + list(t.shape[1:]), t.dtype, name=name)
      for name, t in named.items()
  }


def save_serving_model(model, export_dir: str) -> str:
  """Saves a tf_keras model as a SavedModel with a named serving signature.

  Args:
    model: a built tf_keras model (dict inputs allowed).
    export_dir: the SavedModel directory to write.

  Returns:
    export_dir.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  specs = serving_input_specs(model)
  inputs = model.input
  output_names = list(model.output_names)

  @tf.function(input_signature=[specs])
  def serve(features):
    if isinstance(inputs, Mapping):
      outputs = model(features, training=False)
    elif isinstance(inputs, (list, tuple)):
      outputs = model([features[n] for n in specs], training=False)
    else:
      outputs = model(next(iter(features.values())), training=False)
    if isinstance(outputs, Mapping):
      return dict(outputs)
    if isinstance(outputs, (list, tuple)):
      return dict(zip(output_names, outputs))
    return {output_names[0]: outputs}

  # Saving the Keras model object itself would make TF trace every layer's
  # call for Keras' own revival (~100 s for MobileNetV2 on one thread); the
  # converter needs only the signature and the variables it reads.
  holder = tf.Module()
  holder.model_variables = list(model.variables)
  holder.serve = serve
  tf.saved_model.save(
      holder, export_dir,
      signatures={SERVING_SIGNATURE: serve.get_concrete_function()})
  return export_dir


def calibration_samples(data: RepresentativeData,
                        specs: Mapping[str, 'tf.TensorSpec'],
                        num_samples: int = DEFAULT_CALIBRATION_SAMPLES
                       ) -> List[Dict[str, np.ndarray]]:
  """Returns up to num_samples batch-1 feature dicts for calibration.

  Args:
    data: features keyed by input name as arrays with a leading example
      dimension, or a tf.data.Dataset of (features, label) or features.
    specs: the serving signature's inputs (names and dtypes).
    num_samples: how many examples to take.

  Returns:
    A list of {input name: array of shape [1, ...]} in the inputs' dtypes.

  Raises:
    ConfigError: if the data lack one of the model's inputs.
  """
  samples = []
  for features in _iter_feature_batches(data):
    missing = sorted(set(specs) - set(features))
    if missing:
      raise ConfigError(
          f'Representative data lack the model input(s) {missing}; they have '
          f'{sorted(features)}. Pass the transformed train split.')
    batch = {}
    for n, spec in specs.items():
      value = np.asarray(features[n])
      # An unbatched dataset yields single examples: give them a batch axis.
      batch[n] = value[None] if value.ndim == len(spec.shape) - 1 else value
    rows = len(next(iter(batch.values())))
    for i in range(rows):
      samples.append({
          n: batch[n][i:i + 1].astype(specs[n].dtype.as_numpy_dtype)
          for n in specs
      })
      if len(samples) >= num_samples:
        return samples
  return samples


def require_calibration_samples(samples: List[Dict[str, np.ndarray]],
                                runtime: str, mode: str) -> None:
  """Refuses an empty calibration set, naming what to do.

  Every runtime's int8 export (TFLite's converter, OpenVINO's NNCF, ONNX
  Runtime's static quantization) calibrates on :func:`calibration_samples`'
  output.

  Raises:
    ConfigError: `samples` is empty.
  """
  if not samples:
    raise ConfigError(
        f'The {runtime} {mode} calibration set is empty: the train split '
        'gave no examples. int8 needs train examples to calibrate activation '
        'ranges; check the train split (the Transform output) or leave int8 '
        'out.')


def int8_calibration_samples(model, representative_data,
                             num_samples: int, runtime: str
                            ) -> List[Dict[str, np.ndarray]]:
  """A server runtime's int8 calibration set for `model`, checked.

  ``runtime`` names the runtime in the messages (e.g. 'OpenVINO').

  Raises:
    ConfigError: no representative data, or they give no examples.
  """
  if representative_data is None:
    raise ConfigError(f'{runtime} int8 needs representative data (the train '
                      'split) to calibrate; none was given.')
  samples = calibration_samples(representative_data,
                                serving_input_specs(model), num_samples)
  require_calibration_samples(samples, runtime, 'int8')
  return samples


def _iter_feature_batches(data: RepresentativeData) -> Iterator[Mapping]:
  if isinstance(data, Mapping):
    yield data
    return
  for element in data.as_numpy_iterator():
    yield element[0] if isinstance(element, tuple) else element
