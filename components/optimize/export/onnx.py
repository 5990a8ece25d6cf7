"""Exports a tf_keras model to ONNX: float32 (tf2onnx), or int8 static QDQ.

'float32' is tf2onnx's conversion of the model's serving SavedModel (the
signature tflite_export.save_serving_model writes; the inputs keep their
Keras names, opset 17). 'int8' is ONNX Runtime's static
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

from leantfx.components.optimize.export import tflite as tflite_export
from leantfx.errors import ConfigError

FLOAT32 = 'float32'
INT8 = 'int8'
MODES = (FLOAT32, INT8)
MODEL_FILE = 'model.onnx'
OPSET = 17


def convert_saved_model(saved_model_dir: str, output_path: str) -> str:
  """tf2onnx of a SavedModel's serving signature (lookup tables included).

  The inputs and outputs keep the signature's names (opset 17). An op
  tf2onnx cannot map raises here (continue_on_error=False) instead of
  leaving a TF op in the file that ONNX Runtime refuses.
  """
  from tf2onnx import convert  # pylint: disable=g-import-not-at-top
  from tf2onnx import tf_loader  # pylint: disable=g-import-not-at-top
  graph_def, inputs, outputs, tables, renames = tf_loader.from_saved_model(
      saved_model_dir, None, None,
      signatures=[tflite_export.SERVING_SIGNATURE],
      return_initialized_tables=True, return_tensors_to_rename=True)
  with tf.device('/cpu:0'):
    convert._convert_common(  # pylint: disable=protected-access
        graph_def, name=saved_model_dir, continue_on_error=False,
        opset=OPSET, input_names=inputs, output_names=outputs,
        tensors_to_rename=renames, initialized_tables=tables,
        output_path=output_path)
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
                    tflite_export.DEFAULT_CALIBRATION_SAMPLES)) -> str:
  """Writes model.onnx for a tf_keras model (through its serving SavedModel).

  Args:
    model: the tf_keras model.
    mode: 'float32' or 'int8'.
    representative_data: train-split features or dataset (int8).
    output_dir: the directory to write model.onnx into.
    num_calibration_samples: calibration examples.

  Returns:
    The path of model.onnx.

  Raises:
    ConfigError: unknown mode; int8 without (or with empty) calibration data.
  """
  if mode not in MODES:
    raise ConfigError(f'Unknown ONNX mode {mode!r}; use one of {MODES}.')
  samples = None
  if mode == INT8:
    samples = tflite_export.int8_calibration_samples(
        model, representative_data, num_calibration_samples, 'ONNX')
  with tempfile.TemporaryDirectory(prefix='leantfx-onnx-') as tmp:
    saved_model = tflite_export.save_serving_model(
        model, os.path.join(tmp, 'saved_model'))
    return export_saved_model(saved_model, mode, samples, output_dir)


def export_saved_model(saved_model_dir: str, mode: str,
                       samples: Optional[List[Dict[str, np.ndarray]]],
                       output_dir: str,
                       float_path: Optional[str] = None) -> str:
  """Writes model.onnx for a serving SavedModel (what export_onnx saves).

  ``samples``: batch-1 calibration feature dicts (int8); ``float_path``: an
  existing float32 conversion of the same SavedModel to quantize.
  """
  if mode not in MODES:
    raise ConfigError(f'Unknown ONNX mode {mode!r}; use one of {MODES}.')
  if mode == INT8:
    tflite_export.require_calibration_samples(samples or [], 'ONNX', mode)
  os.makedirs(output_dir, exist_ok=True)
  output_path = os.path.join(output_dir, MODEL_FILE)
  if mode == FLOAT32:
    return convert_saved_model(saved_model_dir, output_path)
  with tempfile.TemporaryDirectory(prefix='leantfx-onnx-') as tmp:
    if float_path is None:
      float_path = convert_saved_model(saved_model_dir,
                                       os.path.join(tmp, MODEL_FILE))
    return quantize_int8(float_path, output_path, samples)
