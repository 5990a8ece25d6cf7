"""Exports a tf_keras model to OpenVINO IR: float32, or int8 calibrated by NNCF.

The model is saved as a SavedModel with its serving signature
(``serving_export.save_serving_model``, the same graph the TFLite converter
reads) and read by ``openvino.convert_model``. 'float32' keeps float32
weights (``compress_to_fp16=False``); 'int8' is NNCF post-training
quantization of that model, calibrated on train-split examples (the
representative data TFLite's int8 uses). The IR is ``model.xml`` (the graph)
and ``model.bin`` (the weights) in one directory, the layout OpenVINO Model
Server reads.

A MatMul with no bias that feeds another MatMul (a Dense with
use_bias=False before another Dense: low_rank.py's '<name>_svd_u' layer is
one) stays in float in the int8 IR (``bias_free_matmul_names``). Quantized,
OpenVINO 2026.4's CPU plugin answers such an IR wrongly whenever it fuses
the MatMul chain into one snippets Subgraph, which it can do for static
shapes with one thread per stream: how leantfx scores and times batch 1,
and what the OVMS config leantfx writes asks for a model reshaped to each
request's batch. NNCF quantizes the weights per output channel; with no
bias Add between, that per-channel dequantization scale is folded into the
next activation's FakeQuantize (the runtime graph keeps no dequantization
Multiply for it), which the fused Subgraph gets wrong. The low-rank digits
model answered at chance (about 0.1 on the eval split; the same
IR at two threads 0.996 on all 1797 digits, and 0.966, its float model's,
with the bias-free MatMul left in float). On a digits MLP, per-tensor
weights, a non-zero bias on the layer, or the chain left unfused
(SNIPPETS_MODE DISABLE) each answer right too.
"""
import logging
import os
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from leantfx.runtimes import string_lookups
from leantfx.runtimes import exporter as exporter_lib
from leantfx.runtimes import serving_export
from leantfx.errors import ConfigError
from leantfx.runtimes import openvino as openvino_runtime
from leantfx.runtimes import registry as runtimes_lib

FLOAT32 = exporter_lib.FLOAT32
INT8 = exporter_lib.INT8
MODES = exporter_lib.MODES
XML_FILE = openvino_runtime.RUNTIME.model_file
BIN_FILE = 'model.bin'


def convert(saved_model_dir: str):
  """The SavedModel's serving signature as an ``openvino.Model``.

  ``convert_model`` sets the root logger to ERROR (and adds a filter) while
  it works and puts them back only when it succeeds: a conversion that
  raises would leave the later INFO and WARNING lines of every logger
  without a level of its own (Beam's, leantfx.*) out of the run's log. The
  root logger's level, filters and handlers are put back either way.
  OpenVINO's telemetry is declined first (runtimes.decline_openvino_telemetry).
  """
  runtimes_lib.decline_openvino_telemetry()
  import openvino as ov  # pylint: disable=g-import-not-at-top
  root = logging.getLogger()
  level, filters, handlers = root.level, list(root.filters), list(root.handlers)
  try:
    return ov.convert_model(saved_model_dir)
  finally:
    root.setLevel(level)
    root.filters[:] = filters
    root.handlers[:] = handlers


def quantize_int8(ov_model, samples: List[Dict[str, np.ndarray]],
                  ignored: Sequence[str] = ()):
  """NNCF post-training int8 quantization of an ``openvino.Model``.

  Args:
    ov_model: the float model.
    samples: batch-1 feature dicts keyed by input name (calibration).
    ignored: friendly names of ops to leave in float (a raw-feature
      model's folded Transform: preprocessing_op_names).
      ``bias_free_matmul_names`` are always left in float (the module
      docstring says why).

  Returns:
    The quantized openvino.Model.

  Raises:
    ConfigError: `samples` is empty.
  """
  serving_export.require_calibration_samples(samples, 'OpenVINO', INT8)
  runtimes_lib.decline_openvino_telemetry()
  import nncf  # pylint: disable=g-import-not-at-top
  names = [p.get_any_name() for p in ov_model.inputs]

  def transform(sample):
    return {name: sample[_feature_name(name, sample)] for name in names}

  scope = {}
  ignored = list(ignored) + [name for name in bias_free_matmul_names(ov_model)
                             if name not in ignored]
  if ignored:
    scope['ignored_scope'] = nncf.IgnoredScope(names=ignored, validate=False)
  # fast_bias_correction=False: NNCF's full BiasCorrection (it re-runs the
  # quantized subgraph per layer on the calibration rows) instead of its
  # default one-pass estimate. On the MobileNetV2 digits model (figure 6 of
  # benchmarks/bench_optimize.py, docs/measurements.md) the default lost
  # 6.1 pt of eval accuracy to int8 and the full correction 0.28 pt, same
  # 100 rows; it took 9 s instead of 5 s.
  return nncf.quantize(ov_model, nncf.Dataset(samples, transform),
                       subset_size=len(samples), fast_bias_correction=False,
                       **scope)


def _is_constant(output) -> bool:
  node = output.get_node()
  if node.get_type_name() == 'Convert':  # A compressed constant.
    node = node.input_value(0).get_node()
  return node.get_type_name() == 'Constant'


def bias_free_matmul_names(ov_model) -> List[str]:
  """Friendly names of the MatMuls with no bias that feed another MatMul.

  A MatMul counts when its weights are a constant and its output, through
  ops whose other inputs are all constants (ReLU, a reshape, a constant
  scale), each with that one consumer, reaches another MatMul before any
  Add or Subtract of a constant (a bias). quantize_int8 leaves them in
  float (the module docstring says why).
  """
  names = []
  for op in ov_model.get_ordered_ops():
    if op.get_type_name() != 'MatMul' or not _is_constant(op.input_value(1)):
      continue
    node = op
    while len(node.outputs()) == 1:
      consumers = list(node.output(0).get_target_inputs())
      if len(consumers) != 1:
        break
      consumer = consumers[0]
      following = consumer.get_node()
      kind = following.get_type_name()
      if kind == 'MatMul':
        names.append(op.get_friendly_name())
        break
      others = [following.input_value(i)
                for i in range(following.get_input_size())
                if i != consumer.get_index()]
      if kind in ('Add', 'Subtract') or not all(map(_is_constant, others)):
        break
      node = following
  return names


def _feature_name(port_name: str, sample: Dict[str, np.ndarray]) -> str:
  # convert_model names a SavedModel input after the signature argument;
  # some versions add a ':0' tensor suffix.
  if port_name in sample:
    return port_name
  base = port_name.split(':')[0]
  if base in sample:
    return base
  raise ConfigError(f'OpenVINO input {port_name!r} matches no feature of '
                    f'{sorted(sample)}.')


def export_openvino(model,
                    mode: str,
                    representative_data=None,
                    *,
                    output_dir: str,
                    num_calibration_samples: int = (
                        serving_export.DEFAULT_CALIBRATION_SAMPLES),
                    saved_model_dir: Optional[str] = None) -> str:
  """Writes model.xml and model.bin for a tf_keras model.

  Args:
    model: the tf_keras model (not QAT-wrapped models: NNCF quantizes).
    mode: 'float32' or 'int8'.
    representative_data: train-split features or dataset (int8).
    output_dir: the directory to write model.xml and model.bin into.
    num_calibration_samples: examples NNCF calibrates on.
    saved_model_dir: an existing serving SavedModel of `model` to convert
      (saved to a temporary directory when None).

  Returns:
    The path of model.xml.

  Raises:
    ConfigError: unknown mode; int8 without (or with empty) calibration data.
  """
  if mode not in MODES:
    raise ConfigError(f'Unknown OpenVINO mode {mode!r}; use one of {MODES}.')
  samples = []
  if mode == INT8:
    samples = serving_export.int8_calibration_samples(
        model, representative_data, num_calibration_samples, 'OpenVINO')
  with tempfile.TemporaryDirectory(prefix='leantfx-openvino-') as tmp:
    if saved_model_dir is None:
      saved_model_dir = serving_export.save_serving_model(
          model, os.path.join(tmp, 'saved_model'))
    return export_saved_model(saved_model_dir, mode, samples, output_dir)


def export_saved_model(saved_model_dir: str, mode: str,
                       samples: Optional[List[Dict[str, np.ndarray]]],
                       output_dir: str) -> str:
  """Writes model.xml and model.bin for a serving SavedModel.

  ``samples``: batch-1 calibration feature dicts (int8). Returns the path
  of model.xml.
  """
  if mode not in MODES:
    raise ConfigError(f'Unknown OpenVINO mode {mode!r}; use one of {MODES}.')
  if mode == INT8:
    serving_export.require_calibration_samples(samples or [], 'OpenVINO', mode)
  import openvino as ov  # pylint: disable=g-import-not-at-top
  ov_model = convert(saved_model_dir)
  if mode == INT8:
    ov_model = quantize_int8(ov_model, samples)
  os.makedirs(output_dir, exist_ok=True)
  xml_path = os.path.join(output_dir, XML_FILE)
  ov.save_model(ov_model, xml_path, compress_to_fp16=False)
  return xml_path


def export_raw(saved_model: str, mode: str,
               samples: List[Mapping[str, np.ndarray]],
               vocabularies: Mapping[str, List[bytes]],
               output_dir: str) -> str:
  """Writes model.xml + model.bin (and the vocabularies) of a raw-feature
  wrapper SavedModel: Exporter.export_raw (exporter.py).

  Vocabulary columns cannot be looked up in the IR (the converter has no
  HashTableV2 / LookupTableFindV2): the wrapper takes them as their int64
  ids (``lookups_outside``) and ``vocabularies`` are written beside
  model.xml (string_lookups.STRING_LOOKUPS_FILE, pushed with it); whoever
  calls the IR maps strings to ids with them first
  (leantfx/runtimes/openvino.input_value). OpenVINO Model Server, which
  does not read that file, takes the ids.
  """
  import openvino as ov  # pylint: disable=g-import-not-at-top
  lookups = {c: string_lookups.StringLookup(v)
             for c, v in vocabularies.items()}
  try:
    ov_model = convert(saved_model)
  except Exception as e:  # pylint: disable=broad-except
    raise ConfigError(_openvino_failure(e)) from e
  if mode == INT8:
    ov_model = quantize_raw_int8(ov_model, [
        {c: openvino_runtime.input_value(v, lookups.get(c), np.float32)
         for c, v in sample.items()} for sample in samples])
  os.makedirs(output_dir, exist_ok=True)
  stale = os.path.join(output_dir, string_lookups.STRING_LOOKUPS_FILE)
  if os.path.exists(stale):
    os.remove(stale)
  xml_path = os.path.join(output_dir, XML_FILE)
  ov.save_model(ov_model, xml_path, compress_to_fp16=False)
  if vocabularies:
    string_lookups.write_string_lookups(output_dir, vocabularies)
  return xml_path


# Ops whose weights make them the model body's (Gather: an embedding table,
# when its data is a constant): an op with none of these upstream is the
# Transform's (raw -> transformed features).
_WEIGHTED_OPENVINO_OPS = frozenset(
    ('Convolution', 'GroupConvolution', 'MatMul', 'Gather'))


def preprocessing_op_names(ov_model) -> List[str]:
  """Friendly names of the ops before the model body (the folded Transform).

  An op is preprocessing when no weighted op (convolution, matmul, a gather
  on a constant: an embedding) is upstream of it and it is not one itself.
  """
  def producers(op):
    return [i.get_source_output().get_node() for i in op.inputs()]

  def weighted(op) -> bool:
    if op.get_type_name() == 'Gather':
      inputs = producers(op)
      return bool(inputs) and inputs[0].get_type_name() == 'Constant'
    return op.get_type_name() in _WEIGHTED_OPENVINO_OPS

  behind_body = {}
  names = []
  for op in ov_model.get_ordered_ops():  # Topological order.
    behind = any(behind_body.get(p.get_name()) or weighted(p)
                 for p in producers(op))
    behind_body[op.get_name()] = behind  # get_name(): unique per op.
    if (not behind and not weighted(op) and
        op.get_type_name() not in ('Constant', 'Parameter', 'Result')):
      names.append(op.get_friendly_name())
  return names


def quantize_raw_int8(ov_model, samples: List[Dict[str, np.ndarray]]):
  """NNCF int8 of the raw-feature model: the body only, not the Transform.

  quantize_int8 with the preprocessing left in float:
  quantized as a whole, NNCF puts a quantizer on every raw input column
  (through the Transform's concat and scaling), each with the range that
  column showed in calibration, which clips eval values beyond it (digits:
  0.15 max probability error and 93% class agreement against 0.11 and 98%
  for the transformed-input int8). Excluding the preprocessing ops leaves
  one quantizer on the transformed features, as the transformed-input
  model has.

  Args:
    ov_model: the float raw-feature openvino.Model.
    samples: batch-1 raw requests as the IR takes them, keyed by column.

  Returns:
    The quantized openvino.Model.

  Raises:
    ConfigError: `samples` is empty.
  """
  return quantize_int8(
      ov_model, samples, ignored=preprocessing_op_names(ov_model))


def _openvino_failure(error: Exception) -> str:
  text = str(error)
  failed = [line.split(':', 1)[1].strip() for line in text.splitlines()
            if line.strip().startswith('-- Conversion is failed for:')]
  detail = (f'it has no conversion for {failed[0]}' if failed else
            f'{type(error).__name__}: {text.strip().splitlines()[-1]}'
            if text.strip() else type(error).__name__)
  return (f'OpenVINO cannot convert the raw-feature model: {detail}. Ship the '
          'transformed-input model for OpenVINO, or use ONNX or TFLite for '
          'raw-feature inputs.')


class OpenVINOExporter(exporter_lib.Exporter):
  """OpenVINO IR through openvino.convert_model; int8 by NNCF."""

  runtime = openvino_runtime.RUNTIME
  lookups_outside = True

  def export_saved_model(self, saved_model_dir: str, mode: str,
                         samples: Optional[List[Dict[str, np.ndarray]]],
                         output_dir: str, cache: Dict[str, Any]) -> str:
    del cache  # Each mode converts the SavedModel (NNCF quantizes a model).
    return export_saved_model(saved_model_dir, mode, samples, output_dir)

  def export_raw(self, saved_model: str, mode: str,
                 samples: List[Mapping[str, np.ndarray]],
                 vocabularies: Mapping[str, List[bytes]],
                 output_dir: str) -> str:
    return export_raw(saved_model, mode, samples, vocabularies, output_dir)


EXPORTER = OpenVINOExporter()
