"""Exports a tf_keras model to ONNX: float32 (tf2onnx), or int8 static QDQ.

'float32' is tf2onnx's conversion of the model's serving function (the
inputs keep their Keras names, opset 17). 'int8' is ONNX Runtime's static
quantization of that file in the QDQ format (QuantizeLinear/DequantizeLinear
pairs, which ONNX Runtime fuses into integer kernels), weights per channel,
calibrated on train-split examples. The file is ``model.onnx``, the layout
Triton's and OpenVINO Model Server's model repositories read.
"""
import os
import tempfile
from typing import Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from leantfx.components.optimize import tflite_export
from leantfx.errors import ConfigError

FLOAT32 = 'float32'
INT8 = 'int8'
MODES = (FLOAT32, INT8)
MODEL_FILE = 'model.onnx'
OPSET = 17


def convert_float(model, output_path: str) -> str:
  """tf2onnx conversion of a tf_keras model's serving function."""
  import tf2onnx  # pylint: disable=g-import-not-at-top
  specs = tflite_export.serving_input_specs(model)
  names = list(specs)
  inputs = model.input
  output_names = list(model.output_names)

  def serve(*args):
    features = dict(zip(names, args))
    if isinstance(inputs, dict):
      outputs = model(features, training=False)
    elif isinstance(inputs, (list, tuple)):
      outputs = model([features[n] for n in names], training=False)
    else:
      outputs = model(args[0], training=False)
    if isinstance(outputs, dict):
      return dict(outputs)
    if isinstance(outputs, (list, tuple)):
      return dict(zip(output_names, outputs))
    return {output_names[0]: outputs}

  signature = [specs[n] for n in names]
  function = tf.function(serve, input_signature=signature)
  tf2onnx.convert.from_function(function, input_signature=signature,
                                opset=OPSET, output_path=output_path)
  return output_path


def quantize_int8(float_path: str, output_path: str,
                  samples: List[Dict[str, np.ndarray]],
                  exclude: Sequence[str] = ()) -> str:
  """Static QDQ int8 quantization of an ONNX file, per-channel weights.

  ``exclude``: node names to leave in float (a raw-feature model's folded
  Transform: raw_runtimes.preprocessing_node_names).

  Raises:
    ConfigError: `samples` is empty.
  """
  tflite_export.require_calibration_samples(samples, 'ONNX', INT8)
  import onnx  # pylint: disable=g-import-not-at-top
  from onnxruntime import quantization  # pylint: disable=g-import-not-at-top
  names = [i.name for i in onnx.load(float_path, load_external_data=False
                                    ).graph.input]

  class Reader(quantization.CalibrationDataReader):
    """Yields the batch-1 calibration feature dicts, then None."""

    def __init__(self):
      super().__init__()
      self._samples = iter([{n: s[n] for n in names} for s in samples])

    def get_next(self):
      return next(self._samples, None)

  reader = Reader()
  quantization.quantize_static(
      float_path, output_path, reader,
      quant_format=quantization.QuantFormat.QDQ,
      per_channel=True,
      activation_type=quantization.QuantType.QUInt8,
      weight_type=quantization.QuantType.QInt8,
      nodes_to_exclude=list(exclude) or None)
  return output_path


def export_onnx(model,
                mode: str,
                representative_data=None,
                *,
                output_dir: str,
                num_calibration_samples: int = (
                    tflite_export.DEFAULT_CALIBRATION_SAMPLES),
                float_path: Optional[str] = None) -> str:
  """Writes model.onnx for a tf_keras model.

  Args:
    model: the tf_keras model.
    mode: 'float32' or 'int8'.
    representative_data: train-split features or dataset (int8).
    output_dir: the directory to write model.onnx into.
    num_calibration_samples: calibration examples.
    float_path: an existing float32 model.onnx of `model` to quantize
      (converted here when None).

  Returns:
    The path of model.onnx.

  Raises:
    ConfigError: unknown mode; int8 without (or with empty) calibration data.
  """
  if mode not in MODES:
    raise ConfigError(f'Unknown ONNX mode {mode!r}; use one of {MODES}.')
  os.makedirs(output_dir, exist_ok=True)
  output_path = os.path.join(output_dir, MODEL_FILE)
  if mode == FLOAT32:
    return convert_float(model, output_path)
  if representative_data is None:
    raise ConfigError('ONNX int8 needs representative data (the train '
                      'split) to calibrate; none was given.')
  samples = tflite_export.calibration_samples(
      representative_data, tflite_export.serving_input_specs(model),
      num_calibration_samples)
  tflite_export.require_calibration_samples(samples, 'ONNX', mode)
  with tempfile.TemporaryDirectory(prefix='leantfx-onnx-') as tmp:
    if float_path is None:
      float_path = convert_float(model, os.path.join(tmp, MODEL_FILE))
    return quantize_int8(float_path, output_path, samples)
