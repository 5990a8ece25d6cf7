"""TFLite conversion of tf_keras models, post-training quantization included.

This module holds every TFLite conversion mode, among them the post-training
quantization ones (float16, dynamic range, int8, 16x8), one mode at a time.
Quantization-aware training, which changes the model before conversion, is
components/optimize/techniques/qat.py.

The model is first saved as a SavedModel with a ``serving_default`` signature
whose input names are the model's input keys (e.g. ``image_xf``;
leantfx/runtimes/serving_export.py, which every runtime's export reads), and
the converter reads that SavedModel, so the ``.tflite`` file carries the same
signature: ``interpreter.get_signature_runner()(image_xf=...)`` works on every
mode.

Modes (names follow the TFLite post-training quantization guide):
  float32        no optimization.
  float16        weights stored as float16 (``supported_types=[tf.float16]``).
  dynamic_range  int8 weights, float activations (``Optimize.DEFAULT`` only).
  int8           full integer: int8 weights and activations, int8 model input
                 and output, ``TFLITE_BUILTINS_INT8`` only. Needs representative
                 data from the train split, except for a quantization-aware
                 trained model, whose fake-quant ranges already fix every scale.
  int16x8        int16 activations, int8 weights
                 (``EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8``),
                 float input and output; needs representative data.

ONNX export is not offered: ``tf2onnx`` and ``onnxruntime`` are not
dependencies of leantfx.
"""
import os
import tempfile
from typing import Callable, Dict, List, Optional

import numpy as np
import tensorflow as tf

from leantfx.errors import ConfigError
from leantfx.runtimes import serving_export

FLOAT32 = 'float32'
FLOAT16 = 'float16'
DYNAMIC_RANGE = 'dynamic_range'
INT8 = 'int8'
INT16X8 = 'int16x8'
MODES = (FLOAT32, FLOAT16, DYNAMIC_RANGE, INT8, INT16X8)
# Modes whose activation ranges come from calibration data.
CALIBRATED_MODES = (INT8, INT16X8)

_QUANTIZATION_MODULE = 'tensorflow_model_optimization.python.core.quantization'


def is_quantization_aware(model) -> bool:
  """Whether the model holds tfmot quantization wrappers (QAT, PQAT, CQAT)."""
  return any(
      type(layer).__module__.startswith(_QUANTIZATION_MODULE)
      for layer in _all_layers(model))


def _all_layers(model) -> List:
  layers = []
  for layer in getattr(model, 'layers', []):
    layers.append(layer)
    if hasattr(layer, 'layers'):
      layers.extend(_all_layers(layer))
  return layers


def convert_saved_model(
    saved_model_dir: str,
    mode: str,
    representative_data: Optional[serving_export.RepresentativeData] = None,
    *,
    quantization_aware: bool = False,
    num_calibration_samples: int = (
        serving_export.DEFAULT_CALIBRATION_SAMPLES),
    float_io: bool = False,
    select_tf_ops: bool = False) -> bytes:
  """Converts a SavedModel's serving signature to TFLite.

  Args:
    saved_model_dir: a SavedModel with a 'serving_default' signature.
    mode: one of MODES.
    representative_data: train-split features for the calibrated modes.
    quantization_aware: the model was quantization-aware trained; 'int8' then
      takes its ranges from the fake-quant ops and needs no calibration data.
    num_calibration_samples: examples used for calibration.
    float_io: keep the signature's inputs and outputs as they are (float32
      numbers, strings) in 'int8' too, and quantize only the model body
      (QUANTIZED_BODY_OPS): the raw-feature preprocessing in front of it
      (components/optimize/export/raw_features.py) stays float, with
      quantize/dequantize at the body's edges.
    select_tf_ops: let ops TFLite has no builtin for run as TF Select
      (flex) ops: the string ops of a free-text or date column's
      preprocessing (models/text_features.py, date_features.py). The
      interpreter of the tensorflow package (tf.lite.Interpreter, which
      leantfx serve uses) links the flex delegate; a bare tflite-runtime
      does not.

  Returns:
    The .tflite flatbuffer.

  Raises:
    ConfigError: unknown mode, or a calibrated mode without representative
      data.
  """
  if mode not in MODES:
    raise ConfigError(f'Unknown TFLite mode {mode!r}; use one of {MODES}.')
  needs_data = mode in CALIBRATED_MODES and not (
      mode == INT8 and quantization_aware)
  if needs_data and representative_data is None:
    raise ConfigError(
        f'TFLite mode {mode!r} is full-integer quantization and needs '
        'representative data (the train split) to calibrate activation '
        f'ranges; none was given for {saved_model_dir}. Pass '
        'representative_data, or use a quantization-aware trained model for '
        "'int8', or choose 'dynamic_range'.")

  converter = tf.lite.TFLiteConverter.from_saved_model(
      saved_model_dir, signature_keys=[serving_export.SERVING_SIGNATURE])
  if mode != FLOAT32:
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
  select = [tf.lite.OpsSet.SELECT_TF_OPS] if select_tf_ops else []
  if select_tf_ops:
    converter.target_spec.supported_ops = [
        tf.lite.OpsSet.TFLITE_BUILTINS] + select
  if mode == FLOAT16:
    converter.target_spec.supported_types = [tf.float16]
  if mode == INT8 and not float_io:
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
    # A QAT graph is fully quantized by its fake-quant ops already. Setting
    # TFLITE_BUILTINS_INT8 for it trips TF 2.16's conversion metrics, which
    # look for fake-quant ops without the graph and then demand a
    # representative dataset.
    if not quantization_aware:
      converter.target_spec.supported_ops = [
          tf.lite.OpsSet.TFLITE_BUILTINS_INT8
      ]
  if mode == INT16X8:
    converter.target_spec.supported_ops = [
        tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8
    ] + select
  if needs_data:
    specs = _signature_inputs(saved_model_dir)
    samples = serving_export.calibration_samples(representative_data, specs,
                                                 num_calibration_samples)
    if not samples:
      raise ConfigError(
          f'The representative data for TFLite mode {mode!r} are empty; '
          'calibration needs at least one train example.')
    converter.representative_dataset = _generator(samples)
    if mode == INT8 and float_io and not quantization_aware:
      return _body_int8(converter, saved_model_dir, samples, select_tf_ops)
  return converter.convert()


# The model body's op types, which 'int8' with float_io quantizes; every other
# op type in the graph (the folded Transform's arithmetic, lookups, casts)
# stays float.
QUANTIZED_BODY_OPS = frozenset((
    'FULLY_CONNECTED', 'CONV_2D', 'DEPTHWISE_CONV_2D', 'TRANSPOSE_CONV',
    'BATCH_MATMUL', 'MAX_POOL_2D', 'AVERAGE_POOL_2D', 'MEAN', 'SOFTMAX'))


def _body_int8(converter, saved_model_dir: str,
               samples: List[Dict[str, np.ndarray]],
               select_tf_ops: bool = False) -> bytes:
  """int8 for the model body, float for the preprocessing in front of it.

  Quantizing the folded Transform puts an int8 range on each raw column
  (body mass in grams beside a bill depth in millimetres) and on each step
  of its arithmetic: measured on penguins, that cost the raw-input int8
  model 3 to 14 points of accuracy, against none for the body alone. The
  converter's selective quantization (the quantization debugger's
  denylist) keeps every op type that is not in QUANTIZED_BODY_OPS float.
  """
  float_model = convert_saved_model(saved_model_dir, FLOAT32,
                                    select_tf_ops=select_tf_ops)
  interpreter = tf.lite.Interpreter(model_content=float_model)
  # The op types of the graph; the public Analyzer only prints them.
  op_types = {d['op_name'] for d in interpreter._get_ops_details()}  # pylint: disable=protected-access
  debugger = tf.lite.experimental.QuantizationDebugger(
      converter=converter, debug_dataset=_generator(samples),
      debug_options=tf.lite.experimental.QuantizationDebugOptions(
          denylisted_ops=sorted(op_types - QUANTIZED_BODY_OPS)))
  return debugger.get_nondebug_quantized_model()


def _generator(samples: List[Dict[str, np.ndarray]]) -> Callable:

  def representative_dataset():
    # Keyed by signature input name: the converter matches inputs by name.
    yield from samples

  return representative_dataset


def _signature_inputs(saved_model_dir: str) -> Dict[str, tf.TensorSpec]:
  loaded = tf.saved_model.load(saved_model_dir)
  fn = loaded.signatures[serving_export.SERVING_SIGNATURE]
  _, kwargs = fn.structured_input_signature
  return dict(kwargs)


def export_tflite(model,
                  mode: str,
                  representative_data: Optional[
                      serving_export.RepresentativeData] = None,
                  *,
                  output_path: Optional[str] = None,
                  saved_model_dir: Optional[str] = None,
                  num_calibration_samples: int = (
                      serving_export.DEFAULT_CALIBRATION_SAMPLES)
                 ) -> bytes:
  """Converts a tf_keras model to TFLite through a signed SavedModel.

  Args:
    model: a tf_keras model (dict inputs allowed; QAT models allowed).
    mode: one of MODES.
    representative_data: train-split features for 'int8' and 'int16x8'.
    output_path: if given, the .tflite file to write.
    saved_model_dir: where to keep the intermediate SavedModel (a temporary
      directory, removed afterwards, when None).
    num_calibration_samples: examples used for calibration.

  Returns:
    The .tflite flatbuffer.

  Raises:
    ConfigError: unknown mode, or a calibrated mode without representative
      data (checked before anything is saved).
  """
  quantization_aware = is_quantization_aware(model)
  if mode not in MODES:
    raise ConfigError(f'Unknown TFLite mode {mode!r}; use one of {MODES}.')
  if (mode in CALIBRATED_MODES and representative_data is None and
      not (mode == INT8 and quantization_aware)):
    raise ConfigError(
        f'TFLite mode {mode!r} needs representative data (the train split) '
        f'to calibrate activation ranges of model {model.name!r}, and none '
        "was given. Pass representative_data, quantization-aware train the "
        "model for 'int8', or choose 'dynamic_range'.")
  with tempfile.TemporaryDirectory(prefix='leantfx-tflite-') as tmp:
    export_dir = saved_model_dir or os.path.join(tmp, 'saved_model')
    serving_export.save_serving_model(model, export_dir)
    flatbuffer = export_saved_model_tflite(
        export_dir, mode, representative_data,
        quantization_aware=quantization_aware, output_path=output_path,
        num_calibration_samples=num_calibration_samples)
  return flatbuffer


def export_saved_model_tflite(
    saved_model_dir: str,
    mode: str,
    representative_data: Optional[serving_export.RepresentativeData] = None,
    *,
    quantization_aware: bool = False,
    output_path: Optional[str] = None,
    num_calibration_samples: int = (
        serving_export.DEFAULT_CALIBRATION_SAMPLES)) -> bytes:
  """export_tflite's conversion, of a serving SavedModel already saved.

  The ModelOptimizer saves each candidate's serving SavedModel once
  (save_serving_model) and converts every TFLite mode, and the server
  runtimes' exports, from it. ``quantization_aware``: the SavedModel is a
  QAT model's (its 'int8' takes the fake-quant ranges, no calibration).

  Returns:
    The .tflite flatbuffer (also written to ``output_path`` if given).
  """
  if mode not in MODES:
    raise ConfigError(f'Unknown TFLite mode {mode!r}; use one of {MODES}.')
  flatbuffer = convert_saved_model(
      saved_model_dir, mode,
      None if (mode == INT8 and quantization_aware) else representative_data,
      quantization_aware=quantization_aware,
      num_calibration_samples=num_calibration_samples)
  if output_path:
    os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)
    with open(output_path, 'wb') as f:
      f.write(flatbuffer)
  return flatbuffer
