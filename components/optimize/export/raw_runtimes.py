"""Raw-feature exports for the x86 server runtimes: OpenVINO IR and ONNX.

The same contract as the raw-feature .tflite (raw_features.py,
leantfx/raw_serving.py): one [batch] input per raw column (float32 with NaN
for a missing number, string with '' for a missing category), and
``probabilities``, ``class_ids``, ``classes`` out (``predictions`` for a
regression). The graph is raw_features.save_raw_serving_model's wrapper
SavedModel (the real tf.Transform layer for numeric and pixel columns, a
constant hash table from the Transform's vocabulary file for each
vocabulary column), read by each runtime's converter:

  OpenVINO  ``openvino.convert_model`` of the wrapper (openvino_export.convert)
            and, for int8, NNCF calibrated on raw train rows, the folded
            Transform left in float (quantize_openvino_int8). Numeric
            columns convert; string outputs become OpenVINO string ports.
            Vocabulary columns cannot be looked up in the IR (the
            converter has no HashTableV2 / LookupTableFindV2): such a model
            takes each vocabulary column as its int64 ids
            (save_raw_serving_model's ``lookups_outside``) and the export
            writes the vocabularies beside model.xml
            (raw_serving.STRING_LOOKUPS_FILE, pushed with it); whoever calls
            the IR maps strings to ids with them first (openvino_feed here,
            serving/runtime_servables.py in ``leantfx serve``). OpenVINO
            Model Server, which does not read that file, takes the ids.
  ONNX      tf2onnx of the wrapper's serving signature (opset
            onnx_export.OPSET). The vocabulary tables become ai.onnx.ml
            CategoryMapper nodes (keys and ids read from the tables, the OOV
            id as default), which ONNX Runtime runs. tf2onnx's
            ``from_function`` does not hand the tables' contents to that
            conversion, so the SavedModel loader (tf2onnx.tf_loader, what
            ``python -m tf2onnx.convert --saved-model`` runs) is used. int8 is
            onnx_export.quantize_int8's static QDQ calibrated on raw rows,
            the folded Transform left in float (quantize_onnx_int8).

String tensors per runtime (what a client or the servable must pass):
  ONNX Runtime takes ``str`` objects: an object array of ``bytes`` is read
  as "b'...'" and silently looks up as out-of-vocabulary. Its string outputs
  come back as ``str`` objects. OpenVINO takes numpy 'S' / 'U' arrays (not
  object arrays) and returns 'U' arrays. ``onnx_feed`` and ``openvino_feed``
  shape a raw request ({column: [n] array}) for each; ``openvino_feed`` also
  turns a vocabulary column into its ids when given the export's lookups.

Files: model.xml + model.bin (OpenVINO) or model.onnx in ``output_dir``, the
names openvino_export / onnx_export write and push.RUNTIME_FILES lists.

Exported, measured and checked against the transformed-input variant the
same way for every runtime: raw_exports.py.
"""
import os
import tempfile
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.export import onnx as onnx_export
from leantfx.runtimes import onnx as onnx_runtime
from leantfx.components.optimize.export import openvino as openvino_export
from leantfx.runtimes import openvino as openvino_runtime
from leantfx.components.optimize.export import raw_features
from leantfx.runtimes import registry as runtimes_lib
from leantfx.runtimes import runtime as runtime_lib
from leantfx.components.optimize.export import tflite as tflite_export
from leantfx.errors import ConfigError
from leantfx import raw_serving

OPENVINO = 'openvino'
ONNX = 'onnx'
RUNTIMES = (OPENVINO, ONNX)
FLOAT32 = 'float32'
INT8 = 'int8'
MODES = (FLOAT32, INT8)
# The manifest fact (and measure_raw key) of RawPredictor.dynamic_batch_one_gap,
# and how many eval rows it is measured on (the plugin bug it watches for
# answers every row wrongly).
DYNAMIC_BATCH_ONE_GAP = 'dynamic_batch_one_max_abs_diff'
DYNAMIC_BATCH_ONE_ROWS = 100


def _is_string(value: np.ndarray) -> bool:
  return np.asarray(value).dtype.kind in ('O', 'S', 'U')


def _as_str(value) -> str:
  return value.decode('utf-8') if isinstance(value, bytes) else str(value)


def onnx_feed(raw: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
  """A raw request as ONNX Runtime reads it: strings as ``str`` objects."""
  feed = {}
  for name, value in raw.items():
    value = np.asarray(value)
    if _is_string(value):
      feed[name] = np.array([_as_str(v) for v in value.ravel()],
                            dtype=object).reshape(value.shape)
    else:
      feed[name] = np.ascontiguousarray(value, np.float32)
  return feed


def openvino_feed(raw: Mapping[str, np.ndarray],
                  lookups: Optional[Mapping[str, raw_serving.StringLookup]]
                  = None) -> Dict[str, np.ndarray]:
  """A raw request as OpenVINO reads it: strings as a numpy 'S' array.

  A column in ``lookups`` (raw_serving.read_string_lookups of the export's
  folder) becomes its int64 vocabulary ids, which such an export takes.
  """
  feed = {}
  lookups = lookups or {}
  for name, value in raw.items():
    value = np.asarray(value)
    if name in lookups:
      feed[name] = lookups[name](value)
    elif _is_string(value):
      feed[name] = np.array([
          v if isinstance(v, bytes) else str(v).encode('utf-8')
          for v in value.ravel()], dtype=np.bytes_).reshape(value.shape)
    else:
      feed[name] = np.ascontiguousarray(value, np.float32)
  return feed


def raw_calibration_samples(raw: Mapping[str, np.ndarray],
                            num_samples: int) -> List[Dict[str, np.ndarray]]:
  """Up to ``num_samples`` batch-1 raw requests ({column: value[i:i+1]})."""
  if not raw:
    return []
  rows = min(len(np.asarray(v)) for v in raw.values())
  return [{c: np.asarray(v)[i:i + 1] for c, v in raw.items()}
          for i in range(min(rows, max(0, int(num_samples))))]


def _check_columns(raw: Mapping[str, np.ndarray], tf_transform_output,
                   label: str) -> None:
  serving_spec = raw_serving.serving_feature_spec(
      tf_transform_output.raw_feature_spec(), label)
  missing = sorted(set(serving_spec) - set(raw))
  if missing:
    raise ConfigError(
        f'The raw calibration rows lack the column(s) {missing}; they have '
        f'{sorted(raw)}. Pass the raw train split (raw_features.'
        'read_raw_split), one [n] array per raw column but the label.')


def export_raw(runtime: str, model, tf_transform_output, label: str,
               classes: Sequence[str], mode: str,
               raw_train_features: Optional[Mapping[str, np.ndarray]],
               *, output_dir: str,
               num_calibration_samples: int = (
                   tflite_export.DEFAULT_CALIBRATION_SAMPLES)) -> str:
  """Writes ``model`` behind the Transform as OpenVINO IR or ONNX.

  ``prepare_raw`` then ``convert_raw`` in this process (the ModelOptimizer
  runs the second half in its worker process).

  Args:
    runtime: 'openvino' or 'onnx'.
    model: the variant's tf_keras model (transformed-feature inputs).
    tf_transform_output: the run's ``tft.TFTransformOutput``.
    label: the raw label column (left out of the request).
    classes: class names in class-id order; empty for a regression.
    mode: 'float32' or 'int8'.
    raw_train_features: raw train columns ({column: [n] array}, NaN / ''
      for gaps) calibrating int8; unused for float32.
    output_dir: where model.xml + model.bin, or model.onnx, are written.
    num_calibration_samples: raw rows int8 calibrates on.

  Returns:
    The path of model.xml (OpenVINO) or model.onnx (ONNX).

  Raises:
    ConfigError: unknown runtime or mode; int8 without (or with empty) raw
      calibration rows, or rows lacking a column; a graph the runtime's
      converter cannot take (OpenVINO and vocabulary columns).
  """
  with tempfile.TemporaryDirectory(prefix='leantfx-raw-runtime-') as tmp:
    job = prepare_raw(runtime, model, tf_transform_output, label, classes,
                      mode, raw_train_features, scratch=tmp,
                      num_calibration_samples=num_calibration_samples)
    return convert_raw(output_dir=output_dir, **job)


def prepare_raw(runtime: str, model, tf_transform_output, label: str,
                classes: Sequence[str], mode: str,
                raw_train_features: Optional[Mapping[str, np.ndarray]],
                *, scratch: str,
                num_calibration_samples: int = (
                    tflite_export.DEFAULT_CALIBRATION_SAMPLES)
               ) -> Dict[str, Any]:
  """The half of ``export_raw`` that needs the Keras model and the Transform.

  Checks the request, draws the calibration rows and saves the wrapper
  SavedModel (raw_features.save_raw_serving_model; for OpenVINO with the
  vocabulary columns as ids) under ``scratch``, which must outlive the
  conversion.

  Returns:
    ``convert_raw``'s keyword arguments but output_dir; all of it pickles.

  Raises:
    ConfigError: as export_raw, but a conversion failure.
  """
  if runtime not in RUNTIMES:
    raise ConfigError(
        f'No raw-feature export for runtime {runtime!r}; use one of '
        f'{RUNTIMES} (TFLite: raw_features.export_raw_tflite).')
  if mode not in MODES:
    raise ConfigError(f'Unknown {runtimes_lib.LABELS[runtime]} mode {mode!r}; '
                      f'use one of {MODES}.')
  samples = []
  if mode == INT8:
    if raw_train_features is None:
      raise ConfigError(
          f'{runtimes_lib.LABELS[runtime]} int8 needs raw train rows to '
          'calibrate; none were given.')
    samples = raw_calibration_samples(raw_train_features,
                                      num_calibration_samples)
    tflite_export.require_calibration_samples(
        samples, runtimes_lib.LABELS[runtime], mode)
    _check_columns(raw_train_features, tf_transform_output, label)
  vocabularies = {}
  if runtime == OPENVINO:
    vocabularies = raw_features.categorical_vocabularies(
        model, tf_transform_output, label)
  saved_model = raw_features.save_raw_serving_model(
      model, tf_transform_output, label, classes,
      os.path.join(scratch, f'{runtime}_{mode}_saved_model'),
      lookups_outside=runtime == OPENVINO)
  return dict(runtime=runtime, saved_model=saved_model, mode=mode,
              samples=samples, vocabularies=vocabularies)


def convert_raw(*, runtime: str, saved_model: str, mode: str,
                samples: List[Dict[str, np.ndarray]],
                vocabularies: Mapping[str, List[bytes]],
                output_dir: str) -> str:
  """The half of ``export_raw`` that needs neither Keras nor the Transform.

  Converts ``prepare_raw``'s SavedModel, quantizes an int8 mode on its
  samples and writes the files (and an OpenVINO export's vocabularies) to
  ``output_dir``.

  Returns:
    The path of model.xml (OpenVINO) or model.onnx (ONNX).

  Raises:
    ConfigError: the runtime's converter cannot take the graph.
  """
  with tempfile.TemporaryDirectory(prefix='leantfx-raw-runtime-') as tmp:
    if runtime == OPENVINO:
      return _export_openvino(saved_model, vocabularies, mode, samples,
                              output_dir)
    return _export_onnx(saved_model, mode, samples, output_dir, tmp)


def _export_openvino(saved_model: str, vocabularies: Mapping[str, List[bytes]],
                     mode: str, samples: List[Dict[str, np.ndarray]],
                     output_dir: str) -> str:
  import openvino as ov  # pylint: disable=g-import-not-at-top
  lookups = {c: raw_serving.StringLookup(v) for c, v in vocabularies.items()}
  try:
    ov_model = openvino_export.convert(saved_model)
  except Exception as e:  # pylint: disable=broad-except
    raise ConfigError(_openvino_failure(e)) from e
  if mode == INT8:
    ov_model = quantize_openvino_int8(
        ov_model, [openvino_feed(s, lookups) for s in samples])
  os.makedirs(output_dir, exist_ok=True)
  stale = os.path.join(output_dir, raw_serving.STRING_LOOKUPS_FILE)
  if os.path.exists(stale):
    os.remove(stale)
  xml_path = os.path.join(output_dir, openvino_export.XML_FILE)
  ov.save_model(ov_model, xml_path, compress_to_fp16=False)
  if vocabularies:
    raw_serving.write_string_lookups(output_dir, vocabularies)
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


def quantize_openvino_int8(ov_model, samples: List[Dict[str, np.ndarray]]):
  """NNCF int8 of the raw-feature model: the body only, not the Transform.

  openvino_export.quantize_int8 with the preprocessing left in float:
  quantized as a whole, NNCF puts a quantizer on every raw input column
  (through the Transform's concat and scaling), each with the range that
  column showed in calibration, which clips eval values beyond it (digits:
  0.15 max probability error and 93% class agreement against 0.11 and 98%
  for the transformed-input int8). Excluding the preprocessing ops leaves
  one quantizer on the transformed features, as the transformed-input
  model has.

  Args:
    ov_model: the float raw-feature openvino.Model.
    samples: batch-1 raw requests (openvino_feed), keyed by column.

  Returns:
    The quantized openvino.Model.

  Raises:
    ConfigError: `samples` is empty.
  """
  return openvino_export.quantize_int8(
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


def _convert_onnx(saved_model: str, output_path: str) -> str:
  """tf2onnx of the SavedModel's serving signature, tables included."""
  try:
    return onnx_export.convert_saved_model(saved_model, output_path)
  except Exception as e:  # pylint: disable=broad-except
    lines = str(e).strip().splitlines()
    raise ConfigError(
        'tf2onnx cannot convert the raw-feature model: '
        f'{type(e).__name__}: {lines[-1] if lines else ""}. Ship the '
        'transformed-input model for ONNX, or TFLite for raw-feature '
        'inputs.') from e


def _export_onnx(saved_model: str, mode: str,
                 samples: List[Dict[str, np.ndarray]], output_dir: str,
                 scratch: str) -> str:
  os.makedirs(output_dir, exist_ok=True)
  output_path = os.path.join(output_dir, onnx_export.MODEL_FILE)
  if mode == FLOAT32:
    return _convert_onnx(saved_model, output_path)
  float_path = _convert_onnx(saved_model,
                             os.path.join(scratch, onnx_export.MODEL_FILE))
  return quantize_onnx_int8(float_path, output_path,
                            [onnx_feed(s) for s in samples])


# ONNX ops whose weights make them the model body's (Gather: an embedding
# table, when its data is an initializer).
_WEIGHTED_ONNX_OPS = frozenset(('Conv', 'ConvTranspose', 'MatMul', 'Gemm',
                                'Gather'))


def preprocessing_node_names(onnx_model) -> List[str]:
  """Names of the ONNX nodes before the model body (the folded Transform).

  As preprocessing_op_names: no weighted node (Conv, MatMul, Gemm, a Gather
  on a constant) upstream, and not one itself.
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


def quantize_onnx_int8(float_path: str, output_path: str,
                       samples: List[Dict[str, np.ndarray]]) -> str:
  """Static QDQ int8 of the raw-feature model: the body, not the Transform.

  onnx_export.quantize_int8's settings (QDQ, per-channel int8 weights,
  uint8 activations) with the preprocessing nodes excluded, for the reason
  quantize_openvino_int8 gives: quantizing them puts a Q/DQ pair on each
  raw column with its calibration range, which clips values beyond it
  (digits, 5 calibration rows: 0.043 max probability gap to the
  transformed-input int8; none with the Transform excluded).

  Args:
    float_path: the float raw-feature model.onnx.
    output_path: the int8 model.onnx to write.
    samples: batch-1 raw requests (onnx_feed), keyed by column.

  Returns:
    output_path.

  Raises:
    ConfigError: `samples` is empty.
  """
  import onnx  # pylint: disable=g-import-not-at-top
  return onnx_export.quantize_int8(
      float_path, output_path, samples,
      exclude=preprocessing_node_names(
          onnx.load(float_path, load_external_data=False)))


class RawPredictor:
  """A raw-feature export in its runtime: raw requests in, one score out.

  For the optimizer's checks and latency: the score is 'probabilities' (or
  'predictions' for a regression), picked by name
  (runtime_lib.SCORE_OUTPUTS), and strings are fed as each runtime reads
  them (onnx_feed, openvino_feed).
  """

  def __init__(self, runtime: str, path: str, num_threads: int = 1):
    if runtime not in RUNTIMES:
      raise ConfigError(f'Unknown runtime {runtime!r}; use one of {RUNTIMES}.')
    self.runtime = runtime
    if runtime == ONNX:
      self._session = onnx_runtime.open_session(path, num_threads)
      names = [o.name for o in self._session.get_outputs()]
      self._output = next(
          (n for n in runtime_lib.SCORE_OUTPUTS if n in names), names[0])
    else:
      # Batch-1 calls on a static-batch copy (leantfx/runtimes/openvino.py: the CPU
      # plugin can answer a dynamic-batch int8 IR wrongly at batch 1).
      self._models = openvino_runtime.CompiledModels(path, num_threads)
      self._lookups = raw_serving.read_string_lookups(os.path.dirname(path))
      compiled = self._models.get(self._models.ANY)
      ports = [openvino_runtime._port_name(p)  # pylint: disable=protected-access
               for p in compiled.outputs]
      self._output = next(
          (n for n in runtime_lib.SCORE_OUTPUTS if n in ports),
          sorted(ports)[0])

  @property
  def output_name(self) -> str:
    """The score output's name, as the model (and a server of it) names it."""
    return self._output

  def _request_for(self, batch_size):
    """(infer request, {column: input port}, score port) for a batch."""
    compiled = self._models.for_batch(batch_size)
    outputs = {openvino_runtime._port_name(p): p  # pylint: disable=protected-access
               for p in compiled.outputs}
    return (self._models.request_for(batch_size),
            {p.get_any_name().split(':')[0]: p for p in compiled.inputs},
            outputs[self._output])

  def predict(self, raw: Mapping[str, np.ndarray]) -> np.ndarray:
    """The score for a batch of raw columns ({column: [n] array})."""
    if self.runtime == ONNX:
      return np.asarray(self._session.run([self._output], onnx_feed(raw))[0])
    feed = openvino_feed(raw, self._lookups)
    request, inputs, port = self._request_for(
        openvino_runtime.batch_size_of(feed.values()))
    result = request.infer({inputs[c]: v for c, v in feed.items()})
    return np.array(result[port])

  def dynamic_batch_one_gap(self, data: measure.LabeledData,
                            rows: int) -> float:
    """How far the IR as pushed answers batch 1 from what leantfx runs.

    OpenVINO only: the largest difference of the score between a batch-1
    call on the model's dynamic batch (what OpenVINO Model Server compiles)
    and on the static batch-1 copy (what ``predict`` runs), over the first
    ``rows`` rows of ``data``. 0.0 for a model whose batch is static.
    """
    if self.runtime != OPENVINO:
      raise ConfigError('dynamic_batch_one_gap is for OpenVINO models; '
                        f'this one is {self.runtime!r}.')
    as_pushed, static = self._request_for(None), self._request_for(1)
    gap = 0.0
    for i in range(min(rows, len(data))):
      feed = openvino_feed(data.example(i), self._lookups)
      dynamic, one = (
          np.array(request.infer({inputs[c]: v for c, v in feed.items()})[port])
          for request, inputs, port in (as_pushed, static))
      gap = max(gap, float(np.abs(dynamic - one).max()))
    return gap

  def bind(self, raw: Mapping[str, np.ndarray]):
    """Prepares ``raw`` once; returns the runtime's own call on it.

    OpenVINO: the inputs set on the infer request, then ``infer()``. ONNX
    Runtime: the feed converted once, then ``session.run`` (its IO binding
    takes no string tensors).
    """
    if self.runtime == ONNX:
      feed, run, output = onnx_feed(raw), self._session.run, [self._output]
      return lambda: run(output, feed)
    import openvino as ov  # pylint: disable=g-import-not-at-top
    feed = openvino_feed(raw, self._lookups)
    request, inputs, _ = self._request_for(
        openvino_runtime.batch_size_of(feed.values()))
    for column, value in feed.items():
      request.set_tensor(inputs[column], ov.Tensor(value))
    return request.infer


def measure_raw(runtime: str, path: str, data: measure.LabeledData, quality,
                *, num_threads: int, latency_runs: int, warmup_runs: int
               ) -> Dict[str, float]:
  """Quality on ``data`` and batch-1 latency of a raw-feature export.

  Quality: the whole split in one batch. Latency, as the other variants'
  (measure.py): one eval row bound once, the runtime's own call timed
  (RawPredictor.bind); the Python call path a client writes (inputs
  converted and passed per call) is timed beside it, and the difference of
  the medians is the per-call overhead.

  Returns:
    quality.scores(...) plus latency_p50_ms, latency_p99_ms and
    call_overhead_ms; for OpenVINO also DYNAMIC_BATCH_ONE_GAP (what a
    server compiling the IR as pushed would answer differently at batch 1).
  """
  predictor = RawPredictor(runtime, path, num_threads)
  scores = quality.scores(predictor.predict(data.features), data.labels)
  row = data.example(0)

  def timed(call):
    for _ in range(warmup_runs):
      call()
    durations = []
    for _ in range(max(1, latency_runs)):
      start = time.perf_counter()
      call()
      durations.append(time.perf_counter() - start)
    return np.asarray(durations) * 1000.0

  called = timed(lambda: predictor.predict(row))
  bound = timed(predictor.bind(row))
  measured = dict(scores, latency_p50_ms=float(np.percentile(bound, 50)),
                  latency_p99_ms=float(np.percentile(bound, 99)),
                  call_overhead_ms=float(np.percentile(called, 50) -
                                         np.percentile(bound, 50)))
  if runtime == OPENVINO:
    measured[DYNAMIC_BATCH_ONE_GAP] = predictor.dynamic_batch_one_gap(
        data, DYNAMIC_BATCH_ONE_ROWS)
  return measured


def raw_dir(variant_dir: str) -> str:
  """Where a runtime variant's raw-feature export goes: beside its folder."""
  return variant_dir.rstrip('/') + '_raw'
