"""ONNX Runtime, everything about it: files, predictor, timer, export, serving.

Running. ``ONNXPredictor`` opens model.onnx in an ``InferenceSession`` on
the CPU execution provider with a fixed intra-op thread count (sequential
execution, every graph optimization), and feeds it through ``feed``
(strings as ``str`` objects). ``ONNXTimer`` binds the inputs once through
IO binding and times ``run_with_iobinding`` alone; the per-call overhead
path is ``session.run(None, feed)``, the one-line call a client writes.

Exporting (``ONNXExporter``, the runtime's ``Exporter``). 'float32' is
tf2onnx's conversion of the model's serving SavedModel (the signature
serving_export.save_serving_model writes; the inputs keep their Keras
names, opset 17). 'int8' is ONNX Runtime's static quantization of that
file in the QDQ format (QuantizeLinear/DequantizeLinear pairs, which ONNX
Runtime fuses into integer kernels), weights per channel, calibrated on
train-split examples. The file is ``model.onnx``, the layout Triton's and
OpenVINO Model Server's model repositories read. A raw-feature export
converts the wrapper SavedModel, its vocabulary tables included; a graph
with string ops (a free-text or date column's preprocessing: split, regex
replace, join) converts them to onnxruntime-extensions' ops (tf2onnx's
extra opset, domain ai.onnx.contrib), and every session of such a file
registers that library's kernels (``open_session``).

Serving (``ONNXSession``, what ``leantfx serve`` runs a pushed version on):
one session shared by concurrent requests (its ``run`` is thread-safe),
strings converted as ``feed`` converts them.

TensorFlow, tf2onnx, onnx and onnxruntime are imported inside the functions
that use them: importing this module (the registry does, and so every
``leantfx`` command) stays cheap.
"""
import logging
import os
import tempfile
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from leantfx.errors import ConfigError
from leantfx.runtimes import exporter as exporter_lib
from leantfx.runtimes import runtime as runtime_lib
from leantfx.runtimes import serving_export
from leantfx.runtimes import timing

MODEL_FILE = 'model.onnx'
# A ModelProto's first byte: field 1 (ir_version), wire type 0 (varint).
_MODEL_PROTO_FIRST_BYTE = b'\x08'
FLOAT32 = exporter_lib.FLOAT32
INT8 = exporter_lib.INT8
MODES = exporter_lib.MODES
# The float32 file an int8 export quantizes, in an Exporter's cache.
_FLOAT32_CACHE_KEY = 'onnx_float32'
OPSET = 17
# onnxruntime-extensions' op domain, tf2onnx's extra opset for string ops.
STRING_OPS_DOMAIN = 'ai.onnx.contrib'
# TF string ops tf2onnx converts only to that domain's ops.
_STRING_LIBRARY_OPS = frozenset((
    'StringSplit', 'StringSplitV2', 'StaticRegexReplace', 'StringJoin',
    'StringToHashBucketFast', 'ReduceJoin'))
# The ops an int8 export leaves in float32 when their int8 kernels answer
# differently with the batch size or thread count (quantize_int8).
_FLOAT_FALLBACK_OPS = ('MatMul', 'Gemm')
# The model property that says so, in the file itself.
INT8_FLOAT_OPS_PROP = 'leantfx_int8_float_ops'


# ------------------------------------------------------------- running ---

def uses_string_library(path: str) -> bool:
  """The file holds onnxruntime-extensions' ops (domain ai.onnx.contrib)."""
  import onnx  # pylint: disable=g-import-not-at-top
  model = onnx.load(path, load_external_data=False)
  return any(o.domain == STRING_OPS_DOMAIN for o in model.opset_import)


def open_session(path: str, num_threads: int):
  """An InferenceSession on the CPU with `num_threads` intra-op threads.

  A file with onnxruntime-extensions' string ops gets that library's
  kernels registered.

  Raises:
    ConfigError: the file needs onnxruntime-extensions and it is not
      installed.
  """
  import onnxruntime as ort  # pylint: disable=g-import-not-at-top
  options = ort.SessionOptions()
  if uses_string_library(path):
    try:
      import onnxruntime_extensions  # pylint: disable=g-import-not-at-top
    except ImportError as e:
      raise ConfigError(
          f'{path} preprocesses text or dates with onnxruntime-extensions\' '
          'string ops, and onnxruntime-extensions is not installed: pip '
          'install -c constraints.txt onnxruntime-extensions.') from e
    options.register_custom_ops_library(
        onnxruntime_extensions.get_library_path())
  options.intra_op_num_threads = int(num_threads)
  options.inter_op_num_threads = 1
  options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
  options.graph_optimization_level = (
      ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
  return ort.InferenceSession(path, options,
                              providers=['CPUExecutionProvider'])


# ONNX Runtime's tensor type names -> numpy types (strings: ``str``
# objects in an object array).
NUMPY_TYPES = {'tensor(float)': np.float32, 'tensor(double)': np.float64,
               'tensor(int64)': np.int64, 'tensor(int32)': np.int32,
               'tensor(int8)': np.int8, 'tensor(uint8)': np.uint8,
               'tensor(bool)': np.bool_, 'tensor(string)': np.object_}


def strings_in(value) -> np.ndarray:
  """A string array as ONNX Runtime reads it: an object array of ``str``.

  An object array of ``bytes`` would be read as "b'...'", which a
  vocabulary looks up as unseen.
  """
  value = np.asarray(value)
  out = np.empty(value.size, dtype=object)
  out[:] = [v.decode('utf-8') if isinstance(v, bytes) else str(v)
            for v in value.ravel()]
  return out.reshape(value.shape)


def feed(input_types: Mapping[str, type], values: Mapping[str, np.ndarray],
         lookups: Optional[runtime_lib.Lookups] = None
        ) -> Dict[str, np.ndarray]:
  """``values`` as ONNX Runtime takes them for inputs of ``input_types``.

  A column in ``lookups`` becomes its ids; a string input's values become
  ``str`` objects (strings_in), and so do strings for an input of unknown
  type; the rest is cast to its input's type (float32 by default, int64
  for vocabulary ids). The optimizer's predictors feed a session through
  it; the serving session (``ONNXSession``) converts its string inputs with
  strings_in too (its numbers are checked against the signature already).
  """
  out = {}
  for name, value in values.items():
    if lookups and name in lookups:
      value = lookups[name](value)
    dtype = input_types.get(name)
    if dtype is np.object_ or (dtype is None and
                               runtime_lib.is_string(value)):
      out[name] = strings_in(value)
    else:
      out[name] = np.ascontiguousarray(value, dtype or np.float32)
  return out


# Answers to the same rows may differ this much (in any float output)
# between batch sizes, repeats and thread counts before an int8 file is
# called batch-dependent: an int8 kernel's rounding moves an output by a
# quantum (1/255 of a uint8 range); the defect this catches moved
# probabilities by 0.4-0.99.
BATCH_INVARIANCE_TOLERANCE = 0.02
# The batch the check runs (ONNX Runtime 1.23.2's int8 MatMul answered
# wrongly from batch 32 up, never at 1-16, on this machine's Xeon with
# AVX-512 VNNI and AMX).
INVARIANCE_BATCH = 64


def batch_dependence(path: str,
                     samples: Sequence[Mapping[str, np.ndarray]]) -> float:
  """How far one file's answers to the same rows move with how it is run.

  The rows (batch-1 feeds as ONNX Runtime takes them, tiled to
  INVARIANCE_BATCH) are run as one batch three times and one at a time, on
  one intra-op thread and on two; the result is the largest absolute gap
  between any two of those answers, over every float output. A sound file
  answers 0 (or a rounding quantum): a row's answer depends on that row
  alone. Measured on a MobileNetV2's static int8 file (ONNX Runtime 1.23.2,
  every graph optimization): repeats of one batch of 64 digits rows gave
  probabilities up to 0.998 apart; the same file run with its QDQ pairs
  left unfused gave none.
  """
  if not samples:
    return 0.0
  rows = [samples[i % len(samples)] for i in range(INVARIANCE_BATCH)]
  batch = {name: np.concatenate([np.asarray(r[name]) for r in rows])
           for name in rows[0]}
  answers = []
  for threads in (1, 2):
    session = open_session(path, threads)
    floats = [o.name for o in session.get_outputs()
              if o.type in ('tensor(float)', 'tensor(double)')]
    if not floats:
      return 0.0
    for _ in range(3):
      answers.append(session.run(floats, batch))
    singles = [session.run(floats, dict(r)) for r in rows]
    answers.append([np.concatenate([s[k] for s in singles])
                    for k in range(len(floats))])
  first = answers[0]
  return max(float(np.max(np.abs(np.asarray(a, np.float64) -
                                 np.asarray(b, np.float64))))
             for answer in answers[1:] for a, b in zip(answer, first))


class ONNXPredictor:
  """Runs model.onnx in ONNX Runtime: a variant, or a raw-feature export.

  The score is 'probabilities' (or 'predictions' for a regression) when the
  model has it, else its one output (runtime_lib.score_output).
  """

  def __init__(self, path: str,
               num_threads: int = timing.DEFAULT_NUM_THREADS,
               lookups: Optional[runtime_lib.Lookups] = None):
    self.path = path
    self.session = open_session(path, num_threads)
    self.lookups = dict(lookups or {})
    self.input_names = [i.name for i in self.session.get_inputs()]
    # Each input's numpy type (float32, int64 for a vocabulary id, str
    # objects for a string): features are cast to it.
    self.input_types = {i.name: NUMPY_TYPES.get(i.type, np.float32)
                        for i in self.session.get_inputs()}
    self.output_name = runtime_lib.score_output(
        [o.name for o in self.session.get_outputs()])

  def feed(self, features: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    missing = [n for n in self.input_names if n not in features]
    if missing:
      raise ConfigError(f'The features lack the ONNX input(s) {missing}; they '
                        f'have {sorted(features)}.')
    return feed(self.input_types, {n: features[n] for n in self.input_names},
                self.lookups)

  def predict(self, features: Mapping[str, np.ndarray]) -> np.ndarray:
    (scores,) = self.session.run([self.output_name], self.feed(features))
    return np.asarray(scores, np.float32)

  def bind(self, features: Mapping[str, np.ndarray]) -> Callable[[], Any]:
    """The feed converted once, then ``session.run`` on it (IO binding, the
    timer's call, takes no string tensors)."""
    inputs, run, output = self.feed(features), self.session.run, [
        self.output_name]
    return lambda: run(output, inputs)

  def push_facts(self, rows: Sequence[Mapping[str, np.ndarray]]
                ) -> Dict[str, Any]:
    del rows  # A session answers every batch the same way.
    return {}


class ONNXTimer(timing.RuntimeTimer):
  """A session with IO binding: inputs bound once, the output preallocated."""

  def __init__(self, label: str, path: str, num_threads: int,
               features: Mapping[str, np.ndarray]):
    self.variant = timing.LatencyVariant(label, path, num_threads)
    self.predictor = ONNXPredictor(path, num_threads)
    self.inputs = self.predictor.feed(features)
    self.batch_size = int(next(iter(self.inputs.values())).shape[0])
    session = self.predictor.session
    self.binding = session.io_binding()
    for name, value in self.inputs.items():
      self.binding.bind_cpu_input(name, value)
    self.binding.bind_output(self.predictor.output_name)
    # The first run allocates the output; later runs reuse it.
    session.run_with_iobinding(self.binding)
    run, binding = session.run_with_iobinding, self.binding
    self.invoke = lambda: run(binding)

  def call(self) -> None:
    self.predictor.session.run(None, self.inputs)


# ----------------------------------------------------------- exporting ---

def convert_saved_model(saved_model_dir: str, output_path: str) -> str:
  """tf2onnx of a SavedModel's serving signature (lookup tables included).

  The inputs and outputs keep the signature's names (opset 17). An op
  tf2onnx cannot map raises here (continue_on_error=False) instead of
  leaving a TF op in the file that ONNX Runtime refuses.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tf2onnx import convert  # pylint: disable=g-import-not-at-top
  from tf2onnx import tf_loader  # pylint: disable=g-import-not-at-top
  graph_def, inputs, outputs, tables, renames = tf_loader.from_saved_model(
      saved_model_dir, None, None,
      signatures=[serving_export.SERVING_SIGNATURE],
      return_initialized_tables=True, return_tensors_to_rename=True)
  from tf2onnx import utils  # pylint: disable=g-import-not-at-top
  ops = {n.op for n in graph_def.node} | {
      n.op for f in graph_def.library.function for n in f.node_def}
  strings = bool(ops & _STRING_LIBRARY_OPS)
  extra_opset = [utils.make_opsetid(STRING_OPS_DOMAIN, 1)] if strings else None
  # tf2onnx turns StringLower into ONNX's StringNormalizer, which needs the
  # en_US.UTF-8 locale installed on the serving machine; the library's own
  # StringLower lowercases UTF-8 without one.
  custom_ops = {'StringLower': STRING_OPS_DOMAIN} if strings else None
  with tf.device('/cpu:0'):
    convert._convert_common(  # pylint: disable=protected-access
        graph_def, name=saved_model_dir, continue_on_error=False,
        opset=OPSET, input_names=inputs, output_names=outputs,
        tensors_to_rename=renames, initialized_tables=tables,
        output_path=output_path, extra_opset=extra_opset,
        custom_ops=custom_ops)
  return output_path


def quantize_int8(float_path: str, output_path: str,
                  samples: List[Dict[str, np.ndarray]],
                  exclude: Sequence[str] = ()) -> str:
  """Static QDQ int8 quantization of an ONNX file, per-channel weights.

  ``exclude``: node names to leave in float (a raw-feature model's folded
  Transform: preprocessing_node_names).

  The file must answer a row the same whatever it is batched with and
  however many threads run it (batch_dependence, on the calibration rows). When it does not, the MatMul and Gemm nodes are left
  in float32 and the file is checked again; the model property
  INT8_FLOAT_OPS_PROP then says so and why.

  Raises:
    ConfigError: `samples` is empty, or the file is still batch-dependent
      with its MatMuls in float32 (nothing is left at output_path).
  """
  serving_export.require_calibration_samples(samples, 'ONNX', INT8)
  import onnx  # pylint: disable=g-import-not-at-top
  from onnxruntime import quantization  # pylint: disable=g-import-not-at-top
  float_model = onnx.load(float_path, load_external_data=False)
  names = [i.name for i in float_model.graph.input]
  feeds = [{n: s[n] for n in names} for s in samples]

  class Reader(quantization.CalibrationDataReader):
    """Yields the batch-1 calibration feature dicts, then None."""

    def __init__(self):
      super().__init__()
      self._samples = iter(feeds)

    def get_next(self):
      return next(self._samples, None)

  def quantize(excluded: Sequence[str]) -> float:
    quantization.quantize_static(
        float_path, output_path, Reader(),
        quant_format=quantization.QuantFormat.QDQ,
        per_channel=True,
        activation_type=quantization.QuantType.QUInt8,
        weight_type=quantization.QuantType.QInt8,
        nodes_to_exclude=list(excluded) or None)
    return batch_dependence(output_path, feeds)

  tolerance = BATCH_INVARIANCE_TOLERANCE
  gap = quantize(exclude)
  if gap <= tolerance:
    return output_path
  # A file whose answers move with the batch size or the thread count would
  # score one way here and answer another way in a server. Seen with ONNX
  # Runtime's fused int8 MatMul (docs/optimize.md): its MatMuls and Gemms
  # stay float, the rest int8, when that makes the file sound.
  matmuls = [n.name for n in float_model.graph.node
             if n.op_type in _FLOAT_FALLBACK_OPS and n.name
             and n.name not in exclude]
  left = quantize(list(exclude) + matmuls) if matmuls else gap
  if matmuls and left <= tolerance:
    note = (f'{", ".join(_FLOAT_FALLBACK_OPS)} left in float32: their int8 '
            f'answered up to {gap:.3f} apart with the batch size or thread '
            f'count (ONNX Runtime {_ort_version()})')
    quantized = onnx.load(output_path)
    onnx.helper.set_model_props(quantized, {INT8_FLOAT_OPS_PROP: note})
    onnx.save(quantized, output_path)
    logging.warning('ONNX int8 %s: %s.', output_path, note)
    return output_path
  os.remove(output_path)
  raise ConfigError(
      f'ONNX Runtime {_ort_version()} answers the int8 model differently '
      f'with the batch size or thread count (up to {left:.3f} in an output '
      f'for the same rows, tolerance {tolerance}), also with its MatMul and '
      'Gemm nodes left in float32; the int8 ONNX file is not built. Ship '
      'the ONNX float32 file, or OpenVINO or TFLite int8.')


def _ort_version() -> str:
  import onnxruntime  # pylint: disable=g-import-not-at-top
  return onnxruntime.__version__


def export_onnx(model,
                mode: str,
                representative_data=None,
                *,
                output_dir: str,
                num_calibration_samples: int = (
                    serving_export.DEFAULT_CALIBRATION_SAMPLES)) -> str:
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
    samples = serving_export.int8_calibration_samples(
        model, representative_data, num_calibration_samples, 'ONNX')
  with tempfile.TemporaryDirectory(prefix='leantfx-onnx-') as tmp:
    saved_model = serving_export.save_serving_model(
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
    serving_export.require_calibration_samples(samples or [], 'ONNX', mode)
  os.makedirs(output_dir, exist_ok=True)
  output_path = os.path.join(output_dir, MODEL_FILE)
  if mode == FLOAT32:
    return convert_saved_model(saved_model_dir, output_path)
  with tempfile.TemporaryDirectory(prefix='leantfx-onnx-') as tmp:
    if float_path is None:
      float_path = convert_saved_model(saved_model_dir,
                                       os.path.join(tmp, MODEL_FILE))
    return quantize_int8(float_path, output_path, samples)


def _convert_raw(saved_model: str, output_path: str) -> str:
  """tf2onnx of the SavedModel's serving signature, tables included."""
  try:
    return convert_saved_model(saved_model, output_path)
  except Exception as e:  # pylint: disable=broad-except
    lines = str(e).strip().splitlines()
    raise ConfigError(
        'tf2onnx cannot convert the raw-feature model: '
        f'{type(e).__name__}: {lines[-1] if lines else ""}. Ship the '
        'transformed-input model for ONNX, or TFLite for raw-feature '
        'inputs.') from e


def export_raw(saved_model: str, mode: str,
               samples: List[Mapping[str, np.ndarray]],
               output_dir: str) -> str:
  """Writes model.onnx of a raw-feature wrapper SavedModel:
  Exporter.export_raw (exporter.py).

  tf2onnx's SavedModel loader (tf2onnx.tf_loader, what ``python -m
  tf2onnx.convert --saved-model`` runs) turns the vocabulary tables into
  ai.onnx.ml CategoryMapper nodes (keys and ids read from the tables, the
  OOV id as default), which ONNX Runtime runs; ``from_function`` does not
  hand the tables' contents to that conversion.
  """
  os.makedirs(output_dir, exist_ok=True)
  output_path = os.path.join(output_dir, MODEL_FILE)
  if mode == FLOAT32:
    return _convert_raw(saved_model, output_path)
  with tempfile.TemporaryDirectory(prefix='leantfx-raw-onnx-') as scratch:
    float_path = _convert_raw(saved_model, os.path.join(scratch, MODEL_FILE))
    if uses_string_library(float_path):
      raise ConfigError(
          'ONNX int8 of a raw-column model whose free-text or date columns '
          'run onnxruntime-extensions\' string ops: ONNX Runtime\'s int8 '
          'calibrator opens the model without that library and cannot run '
          'it. Push the float32 raw-column ONNX file, or TFLite int8.')
    return quantize_raw_int8(float_path, output_path,
                             [feed({}, s) for s in samples])


# ONNX ops whose weights make them the model body's (Gather: an embedding
# table, when its data is an initializer).
_WEIGHTED_ONNX_OPS = frozenset(('Conv', 'ConvTranspose', 'MatMul', 'Gemm',
                                'Gather'))


def preprocessing_node_names(onnx_model) -> List[str]:
  """Names of the ONNX nodes before the model body (the folded Transform).

  As openvino.preprocessing_op_names (leantfx/runtimes/openvino.py): no weighted node (Conv, MatMul, Gemm,
  a Gather on a constant) upstream, and not one itself.
  """
  graph = onnx_model.graph
  constants = {i.name for i in graph.initializer}
  constants.update(o for n in graph.node if n.op_type == 'Constant'
                   for o in n.output)

  def weighted(node) -> bool:
    if node.op_type == 'Gather':
      return bool(node.input) and node.input[0] in constants
    return node.op_type in _WEIGHTED_ONNX_OPS

  # Tensors computed by or behind a weighted node. ONNX lists a graph's
  # nodes in topological order.
  behind_body = set()
  names = []
  for node in graph.node:
    behind = any(i in behind_body for i in node.input)
    if behind or weighted(node):
      behind_body.update(node.output)
    elif node.name:
      names.append(node.name)
  return names


def quantize_raw_int8(float_path: str, output_path: str,
                       samples: List[Dict[str, np.ndarray]]) -> str:
  """Static QDQ int8 of the raw-feature model: the body, not the Transform.

  quantize_int8's settings (QDQ, per-channel int8 weights,
  uint8 activations) with the preprocessing nodes excluded, for the reason
  openvino.quantize_raw_int8 gives: quantizing them puts a Q/DQ pair on each
  raw column with its calibration range, which clips values beyond it
  (digits, 5 calibration rows: 0.043 max probability gap to the
  transformed-input int8; none with the Transform excluded).

  Args:
    float_path: the float raw-feature model.onnx.
    output_path: the int8 model.onnx to write.
    samples: batch-1 raw requests as ONNX Runtime takes them
      (``feed``), keyed by column.

  Returns:
    output_path.

  Raises:
    ConfigError: `samples` is empty.
  """
  import onnx  # pylint: disable=g-import-not-at-top
  return quantize_int8(
      float_path, output_path, samples,
      exclude=preprocessing_node_names(
          onnx.load(float_path, load_external_data=False)))


class ONNXExporter(exporter_lib.Exporter):
  """ONNX through tf2onnx; int8 by ONNX Runtime's static QDQ quantization."""

  export_modules = ('onnxruntime.quantization',)

  def export_saved_model(self, saved_model_dir: str, mode: str,
                         samples: Optional[List[Dict[str, np.ndarray]]],
                         output_dir: str, cache: Dict[str, Any]) -> str:
    # int8 quantizes the float32 conversion when that mode made one.
    path = export_saved_model(saved_model_dir, mode, samples, output_dir,
                              float_path=cache.get(_FLOAT32_CACHE_KEY))
    if mode == FLOAT32:
      cache[_FLOAT32_CACHE_KEY] = path
    return path

  def export_raw(self, saved_model: str, mode: str,
                 samples: List[Mapping[str, np.ndarray]],
                 vocabularies: Mapping[str, List[bytes]],
                 output_dir: str) -> str:
    del vocabularies  # The tables are in the graph (CategoryMapper).
    return export_raw(saved_model, mode, samples, output_dir)


# ------------------------------------------------------------- serving ---

class ONNXSession(runtime_lib.ServingSession):
  """A model.onnx version served on one ONNX Runtime session.

  The session's ``run`` is thread-safe, so concurrent requests share it,
  each on ``num_threads`` intra-op threads. A string input is converted to
  ``str`` objects (``strings_in``: ONNX Runtime's 'tensor(string)' reads
  an object array of bytes as "b'...'", which looks up as unseen), and a
  string output back to bytes; numbers, checked against the signature
  already, go as they came.
  """

  def __init__(self, folder: str,
               num_threads: int = timing.DEFAULT_NUM_THREADS):
    model_path = os.path.join(folder, MODEL_FILE)
    try:
      self._session = open_session(model_path, num_threads)
    except Exception as e:  # pylint: disable=broad-except
      raise runtime_lib.SessionLoadError(
          f'{model_path} is not a loadable ONNX model: {type(e).__name__}: '
          f'{e}') from e

    def spec(node):
      return runtime_lib.TensorSpec(
          np.dtype(NUMPY_TYPES.get(node.type, np.float32)),
          tuple(d if isinstance(d, int) else -1 for d in node.shape))

    self.inputs = {n.name: spec(n) for n in self._session.get_inputs()}
    self.outputs = {n.name: spec(n) for n in self._session.get_outputs()}
    self._string_inputs = {n.name for n in self._session.get_inputs()
                           if n.type == 'tensor(string)'}
    self._string_outputs = {n.name for n in self._session.get_outputs()
                            if n.type == 'tensor(string)'}
    # InferenceSession.run checks the feed's names in Python first (a tenth
    # of a served request's GIL time with digits' 64 inputs); the serving
    # path has checked them against the signature already, so it calls the
    # binding's run, which still refuses a wrong name or dtype itself.
    self._run = getattr(self._session, '_sess', self._session).run

  def run(self, inputs: Mapping[str, np.ndarray],
          output_aliases: Sequence[str]) -> Dict[str, np.ndarray]:
    names: List[str] = list(output_aliases) or list(self.outputs)
    try:
      feed = {a: (strings_in(v) if a in self._string_inputs
                  else np.ascontiguousarray(v)) for a, v in inputs.items()}
      values = self._run(names, feed, None)
    except Exception as e:  # pylint: disable=broad-except
      raise runtime_lib.SessionRunError(str(e)) from None
    return {n: (runtime_lib.bytes_objects(v) if n in self._string_outputs
                else v)
            for n, v in zip(names, values)}

  def close(self) -> None:
    self._session = None


# ---------------------------------------------------------- the runtime ---

class ONNXRuntime(runtime_lib.Runtime):
  """ONNX Runtime's CPU execution provider: model.onnx."""

  name = 'onnx'
  label = 'ONNX'
  model_file = MODEL_FILE
  files = (MODEL_FILE,)
  required_modules = ('onnxruntime', 'tf2onnx', 'onnx')
  timed_call = 'InferenceSession.run_with_iobinding(), inputs bound once'
  exporter = ONNXExporter()

  def predictor(self, path: str,
                num_threads: int = timing.DEFAULT_NUM_THREADS,
                lookups: Optional[runtime_lib.Lookups] = None
               ) -> ONNXPredictor:
    return ONNXPredictor(path, num_threads, lookups)

  def timer(self, label: str, path: str, num_threads: int,
            features: Mapping[str, np.ndarray]) -> ONNXTimer:
    return ONNXTimer(label, path, num_threads, features)

  def serving_session(self, folder: str,
                      num_threads: int = timing.DEFAULT_NUM_THREADS
                     ) -> ONNXSession:
    return ONNXSession(folder, num_threads)

  def check_files(self, folder: str) -> None:
    """The file is there, not empty, and starts as an ONNX ModelProto does.

    A serialized ModelProto opens with its field 1, ``ir_version`` (which
    every ONNX file carries), as a varint: the byte 0x08.
    """
    super().check_files(folder)
    path = self.model_path(folder)
    with open(path, 'rb') as f:
      head = f.read(1)
    if head != _MODEL_PROTO_FIRST_BYTE:
      raise runtime_lib.SessionLoadError(
          f'{path} is not an ONNX model: it starts with {head!r}, not the '
          f'ir_version field ({_MODEL_PROTO_FIRST_BYTE!r}).')

  def verify(self, folder: str) -> None:
    """ONNX's checker on the file, then the serving session opened once."""
    import onnx  # pylint: disable=g-import-not-at-top
    path = self.model_path(folder)
    try:
      onnx.checker.check_model(path)
    except Exception as e:  # pylint: disable=broad-except
      raise runtime_lib.SessionLoadError(
          f'{path} fails ONNX\'s checker: {type(e).__name__}: {e}') from e
    super().verify(folder)


RUNTIME = ONNXRuntime()
