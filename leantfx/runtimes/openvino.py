"""OpenVINO, everything about it: files, predictor, timer, export, serving.

Running. ``OpenVINOPredictor`` compiles model.xml for the CPU with a fixed
thread count (``INFERENCE_NUM_THREADS``, one stream, the latency hint) and
runs examples through one infer request. ``OpenVINOTimer`` prepares an infer
request with the inputs set once, then times ``request.infer()`` alone; the
per-call overhead path is ``compiled_model(inputs)``, the one-line call a
client writes (tensors built from numpy per call, a new result dict).

Batch 1 runs on a copy of the model compiled for a static batch of 1
(``CompiledModels``; ``compile_model(..., batch_size=1)``), other batches
on the IR as exported (its batch dim dynamic). OpenVINO 2026.4's CPU plugin
answers wrongly at batch 1 on a dynamic-batch int8 IR: its AVX-512 int8 1x1
convolution (brgconv_avx512_1x1_I8) with a per-channel FakeQuantize fused
into it (NNCF quantizes a depthwise convolution's input per channel) gives
wrong values when the output is one pixel (batch 1, a 1x1 feature map),
and only with a dynamic shape: the same IR is right at batch 2 or more,
right when reshaped to a static [1, ...], right with the CPU capped to
AVX2. NNCF's MobileNetV2 0.35 on the 32 px digits answered class 8 for
every digit at batch 1 (accuracy 0.083 against 0.947 at batch 2). A
static batch of 1 is also faster (no shape inference per call): infer()
p50 at 1 thread 0.021 against 0.026 ms for the digits CNN in float32, 0.16
against 0.22 ms for that MobileNetV2 in int8. A caller that runs batch 1
and other batches holds two compiled models (about 11 MB more for it).

A server that compiles the IR as pushed (OpenVINO Model Server) runs batch
1 on the dynamic batch. The raw-feature push therefore also records how far
the dynamic batch's batch-1 answers are from the static copy's
(``OpenVINOPredictor.push_facts``, ``DYNAMIC_BATCH_ONE_ATOL``), and
``leantfx deploy ovms`` has OVMS reload such a model at each request's batch
size.

Exporting (``OpenVINOExporter``, the runtime's ``Exporter``). The model is
saved as a SavedModel with its serving signature
(``serving_export.save_serving_model``, the same graph the TFLite converter
reads) and read by ``openvino.convert_model``. 'float32' keeps float32
weights (``compress_to_fp16=False``); 'int8' is NNCF post-training
quantization of that model, calibrated on train-split examples (the
representative data TFLite's int8 uses). The IR is ``model.xml`` (the
graph) and ``model.bin`` (the weights) in one directory, the layout
OpenVINO Model Server reads. A raw-feature export converts the wrapper
SavedModel with its vocabulary columns taken as ids, and writes the
vocabularies beside the IR (string_lookups.py).

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

Serving (``OpenVINOSession``, what ``leantfx serve`` runs a pushed
version on): a pool of infer requests per compiled model (batch 1 on the
static copy), each with its input tensors reused from one request to the
next.

OpenVINO, NNCF and TensorFlow are imported inside the functions that use
them: importing this module (the registry does, and so every ``leantfx``
command) stays cheap.
"""
import logging
import os
import queue
import tempfile
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence
from xml.etree import ElementTree

import numpy as np

from leantfx.errors import ConfigError
from leantfx.runtimes import exporter as exporter_lib
from leantfx.runtimes import runtime as runtime_lib
from leantfx.runtimes import serving_export
from leantfx.runtimes import string_lookups
from leantfx.runtimes import timing

_LOG = logging.getLogger(__name__)
FLOAT32 = exporter_lib.FLOAT32
INT8 = exporter_lib.INT8
MODES = exporter_lib.MODES
XML_FILE = 'model.xml'
BIN_FILE = 'model.bin'
# The largest score difference between a batch-1 call on the dynamic batch
# and on the static copy that still counts as the same answer: float
# rounding between two compiles is about 1e-6, the plugin bug moved the
# test model's probabilities by 0.03-0.05 and MobileNetV2's to one class.
DYNAMIC_BATCH_ONE_ATOL = 1e-3
# The manifest facts of OpenVINOPredictor.push_facts: the largest score gap
# between the two, and whether it is within DYNAMIC_BATCH_ONE_ATOL.
DYNAMIC_BATCH_ONE_GAP = 'dynamic_batch_one_max_abs_diff'
DYNAMIC_BATCH_ONE_OK = 'dynamic_batch_one_ok'


# ------------------------------------------------------------- running ---

# The openvino-tokenizers ops a raw-feature IR of free text or dates holds
# (components/optimize/export/openvino_strings.py).
_STRING_OPS = ('StringTensorUnpack', 'StringTensorPack', 'CaseFold',
               'RegexNormalization', 'RegexSplit', 'VocabEncoder',
               'RaggedToDense', 'RaggedToSparse', 'RaggedToRagged')


def openvino_with_string_ops():
  """The openvino module, with openvino-tokenizers' ops when installed.

  Importing openvino_tokenizers adds its extension (string ops and their
  TensorFlow-frontend conversions) to every ``ov.Core`` and frontend made
  afterwards, so each place that reads or converts an IR goes through
  here: a serving process, the InfraValidator's and the model-file
  check's child processes and the optimizer's export worker alike. Without
  the package a numeric IR still reads; one with string ops fails in
  ``read_model``, which says so.
  """
  import openvino as ov  # pylint: disable=g-import-not-at-top
  try:
    import openvino_tokenizers  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    pass
  return ov


def read_model(core, xml_path: str):
  """``core.read_model``; an IR of string ops without openvino-tokenizers
  is a ConfigError saying what to install.

  Raises:
    ConfigError: the IR holds openvino-tokenizers ops and the package is
      not installed.
  """
  try:
    return core.read_model(xml_path)
  except RuntimeError as e:
    text = str(e)
    missing = [op for op in _STRING_OPS if op in text]
    try:
      import openvino_tokenizers  # pylint: disable=g-import-not-at-top,unused-import
    except ImportError:
      if missing:
        raise ConfigError(
            f'{xml_path} takes raw text or dates through openvino-tokenizers '
            f'ops ({missing[0]}), which this environment lacks: install '
            'openvino-tokenizers==2026.4.1.0 (pip install '
            '"leantfx[runtimes]").') from e
    raise


def _batch_shapes(model, batch_size: int) -> Dict[int, object]:
  """{input index: its shape with the batch dim set} for dynamic batches.

  An input whose first dimension is dynamic gets `batch_size` there; inputs
  whose batch is static already (or of unknown or zero rank) are left out.
  """
  import openvino as ov  # pylint: disable=g-import-not-at-top
  shapes = {}
  for index, port in enumerate(model.inputs):
    shape = port.get_partial_shape()
    if (shape.rank.is_dynamic or shape.rank.get_length() == 0 or
        shape[0].is_static):
      continue
    dims = list(shape)
    dims[0] = ov.Dimension(batch_size)
    shapes[index] = ov.PartialShape(dims)
  return shapes


def compile_model(xml_path: str, num_threads: int,
                  batch_size: Optional[int] = None, profiling: bool = False):
  """Reads and compiles model.xml for the CPU with `num_threads` threads.

  In float32: on a CPU with bfloat16 instructions (AVX512_BF16, AMX; this
  machine's included) OpenVINO's CPU plugin runs a float32 IR in bfloat16
  unless told otherwise (INFERENCE_PRECISION_HINT), which moved penguins'
  probabilities by up to 0.008. A variant called float32 is run and timed
  in float32; an int8 IR's quantized ops stay int8.

  Args:
    xml_path: the IR's model.xml.
    num_threads: the CPU threads of an inference.
    batch_size: when given, the inputs' dynamic batch dims are fixed to it
      before compiling (the module docstring says why batch 1 wants it); the
      compiled model then takes only that batch. None compiles the IR's
      shapes as they are.
    profiling: turn on the CPU plugin's per-layer profiling
      (ENABLE_PROFILING; infer requests then report ``profiling_info``).

  Returns:
    The openvino.CompiledModel.
  """
  import openvino.properties as props  # pylint: disable=g-import-not-at-top
  import openvino.properties.hint as hints  # pylint: disable=g-import-not-at-top
  ov = openvino_with_string_ops()
  core = ov.Core()
  model = read_model(core, xml_path)
  if batch_size is not None:
    shapes = _batch_shapes(model, batch_size)
    if shapes:
      model.reshape(shapes)
  return core.compile_model(model, 'CPU', {
      props.inference_num_threads: int(num_threads),
      props.num_streams: 1,
      hints.performance_mode: hints.PerformanceMode.LATENCY,
      hints.inference_precision: ov.Type.f32,
      props.enable_profiling: bool(profiling),
      # The plugin pins its threads by default, each process to the same
      # first cores: two `leantfx serve --workers 2` processes shared one
      # core (875 req/s on 1.05 cores of 2, digits, docs/figures.md of
      # 2026-12-07 04:09) while ONNX Runtime's workers used both.
      hints.enable_cpu_pinning: False,
  })


def has_dynamic_batch(xml_path: str) -> bool:
  """Whether any input of model.xml has a dynamic first dimension."""
  core = openvino_with_string_ops().Core()
  return bool(_batch_shapes(read_model(core, xml_path), 1))


def batch_size_of(values) -> Optional[int]:
  """The batch of a call's input arrays: their common first dimension.

  None when they have none in common (a scalar input, or first dimensions
  that differ): such a call goes to the model as exported, which reports it.
  """
  sizes = {np.shape(v)[0] if np.ndim(v) else None for v in values}
  return sizes.pop() if len(sizes) == 1 else None


class CompiledModels:
  """model.xml compiled for batch-1 calls and for any other batch.

  A model whose batch dim is dynamic is compiled twice (each when first
  asked for): for a static batch of 1, which every batch-1 call runs on,
  and as exported, for the other batches (the module docstring says why).
  A model with a static batch is compiled once, as exported.

  Attributes:
    path: the model.xml.
    dynamic_batch: whether the IR's batch dim is dynamic.
  """

  ONE = 'batch 1'
  ANY = 'any batch'

  def __init__(self, xml_path: str, num_threads: int):
    self.path = xml_path
    self.num_threads = num_threads
    self.dynamic_batch = has_dynamic_batch(xml_path)
    self._compiled = {}
    self._requests = {}

  def kinds(self):
    """The kinds calls can run on: (ANY, ONE), or (ANY,) for a static batch."""
    return (self.ANY, self.ONE) if self.dynamic_batch else (self.ANY,)

  def kind(self, batch_size: Optional[int]) -> str:
    """ONE for a batch-1 call on a dynamic-batch model, else ANY."""
    return self.ONE if batch_size == 1 and self.dynamic_batch else self.ANY

  def get(self, kind: str):
    """The openvino.CompiledModel of a kind (ONE or ANY), compiled once.

    ONE is ANY for a model whose batch is static. It falls back to ANY, with
    a warning, if the IR cannot be compiled at a static batch of 1 (a graph
    whose shapes do not follow its batch).
    """
    if kind == self.ONE and not self.dynamic_batch:
      kind = self.ANY
    if kind not in self._compiled:
      if kind == self.ONE:
        try:
          self._compiled[kind] = compile_model(self.path, self.num_threads,
                                               batch_size=1)
        except Exception as e:  # pylint: disable=broad-except
          _LOG.warning(
              '%s does not compile at a static batch of 1 (%s: %s); batch-1 '
              'calls run on its dynamic batch, where OpenVINO CPU int8 '
              'results can be wrong.', self.path, type(e).__name__, e)
          self._compiled[kind] = self.get(self.ANY)
      else:
        self._compiled[kind] = compile_model(self.path, self.num_threads)
    return self._compiled[kind]

  def for_batch(self, batch_size: Optional[int]):
    """The compiled model a call of `batch_size` examples runs on."""
    return self.get(self.kind(batch_size))

  def request_for(self, batch_size: Optional[int]):
    """The infer request a call of `batch_size` runs on (one per kind)."""
    kind = self.kind(batch_size)
    if kind not in self._requests:
      self._requests[kind] = self.get(kind).create_infer_request()
    return self._requests[kind]


def _port_name(port) -> str:
  return sorted(port.get_names())[0] if port.get_names() else port.get_any_name()


def strings_in(value) -> np.ndarray:
  """A string array as OpenVINO's string ports read it: numpy bytes ('S').

  OpenVINO takes 'S' / 'U' arrays, not object arrays, and answers 'U'.
  """
  value = np.asarray(value)
  out = [v if isinstance(v, bytes) else str(v).encode('utf-8')
         for v in value.ravel()]
  return np.array(out, dtype=np.bytes_).reshape(value.shape)


def input_value(value, lookup=None, dtype=None) -> np.ndarray:
  """One input as OpenVINO takes it.

  A column the model takes as vocabulary ids (``lookup``, its
  StringLookup) becomes its int64 ids; strings become numpy bytes
  (strings_in); the rest is cast to ``dtype`` (None keeps it), contiguous.
  The optimizer's predictors feed an IR through it; the serving session
  (``OpenVINOSession``) converts its strings with strings_in too.
  """
  if lookup is not None:
    return lookup(value)
  if runtime_lib.is_string(value):
    return strings_in(value)
  return np.ascontiguousarray(value, dtype)


class OpenVINOPredictor:
  """Runs model.xml on the CPU through one infer request, in float.

  A variant, or a raw-feature export (strings fed as numpy bytes, a column
  in ``lookups`` as its vocabulary ids: ``input_value``). The score is
  'probabilities' (or 'predictions') when the model has it, else its one
  output (runtime_lib.score_output).

  A batch-1 call runs on the model compiled for a static batch of 1, other
  batches on the model as exported (CompiledModels); each keeps its infer
  request.
  """

  def __init__(self, xml_path: str,
               num_threads: int = timing.DEFAULT_NUM_THREADS,
               lookups: Optional[runtime_lib.Lookups] = None):
    self.path = xml_path
    self.lookups = dict(lookups or {})
    self.models = CompiledModels(xml_path, num_threads)
    # The ports of the model batch-1 calls run on (the one scoring uses):
    # compiling it here also reports an IR that does not load.
    compiled = self.models.for_batch(1)
    self.input_names = {}
    # Each input's numpy type (float32, or int64 for a vocabulary id):
    # features are cast to it, not all to float32.
    self.input_types = {p.get_any_name(): p.get_element_type().to_dtype()
                        for p in compiled.inputs}
    for port in compiled.inputs:
      for name in port.get_names():
        self.input_names.setdefault(port.get_any_name(), set()).add(
            name.split(':')[0])
    outputs = {_port_name(p): i for i, p in enumerate(compiled.outputs)}
    self.output_name = runtime_lib.score_output(list(outputs))
    self.output_index = outputs[self.output_name]

  def compiled_for(self, batch_size: Optional[int]):
    """The openvino.CompiledModel a call of `batch_size` examples runs on."""
    return self.models.for_batch(batch_size)

  def request_for(self, batch_size: Optional[int]):
    """The infer request a call of `batch_size` examples runs on."""
    return self.models.request_for(batch_size)

  def feed(self, features: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """{port name: array} from features keyed by the Keras input names."""
    feed = {}
    for port, names in self.input_names.items():
      match = [n for n in names if n in features]
      if not match:
        raise ConfigError(
            f'The features lack the OpenVINO input {port!r} (names '
            f'{sorted(names)}); they have {sorted(features)}.')
      feed[port] = input_value(features[match[0]],
                               self.lookups.get(match[0]),
                               self.input_types[port])
    return feed

  def predict(self, features: Mapping[str, np.ndarray]) -> np.ndarray:
    feed = self.feed(features)
    request = self.request_for(batch_size_of(feed.values()))
    result = request.infer(feed)
    return np.asarray(result[self.output_index], np.float32)

  def bind(self, features: Mapping[str, np.ndarray]) -> Callable[[], Any]:
    """The inputs set once on the infer request; returns its ``infer``."""
    import openvino as ov  # pylint: disable=g-import-not-at-top
    feed = self.feed(features)
    request = self.request_for(batch_size_of(feed.values()))
    for port, value in feed.items():
      request.set_tensor(port, ov.Tensor(value))
    return request.infer

  def dynamic_batch_one_gap(
      self, rows: Sequence[Mapping[str, np.ndarray]]) -> float:
    """How far the IR as pushed answers batch 1 from what leantfx runs.

    The largest difference of the score between a batch-1 call on the
    model's dynamic batch (what OpenVINO Model Server compiles) and on the
    static batch-1 copy (what ``predict`` runs), over the batch-1 ``rows``.
    0.0 for a model whose batch is static.
    """
    as_pushed, static = self.request_for(None), self.request_for(1)
    gap = 0.0
    for row in rows:
      feed = self.feed(row)
      dynamic, one = (np.array(request.infer(feed)[self.output_index])
                      for request in (as_pushed, static))
      gap = max(gap, float(np.abs(dynamic - one).max()))
    return gap

  def push_facts(self, rows: Sequence[Mapping[str, np.ndarray]]
                ) -> Dict[str, Any]:
    """What a server compiling the IR as pushed would answer at batch 1:
    the gap (DYNAMIC_BATCH_ONE_GAP) and whether it is within
    DYNAMIC_BATCH_ONE_ATOL (DYNAMIC_BATCH_ONE_OK, which ``leantfx deploy
    ovms`` reads)."""
    gap = self.dynamic_batch_one_gap(rows)
    return {DYNAMIC_BATCH_ONE_GAP: gap,
            DYNAMIC_BATCH_ONE_OK: gap <= DYNAMIC_BATCH_ONE_ATOL}


class OpenVINOTimer(timing.RuntimeTimer):
  """An infer request with the inputs set once; ``infer()`` is timed.

  Both timed paths run on the model the predictor runs that batch on (at
  batch 1, the one compiled for a static batch of 1).
  """

  def __init__(self, label: str, xml_path: str, num_threads: int,
               features: Mapping[str, np.ndarray]):
    import openvino as ov  # pylint: disable=g-import-not-at-top
    self.variant = timing.LatencyVariant(label, xml_path, num_threads)
    self.predictor = OpenVINOPredictor(xml_path, num_threads)
    self.inputs = self.predictor.feed(features)
    self.batch_size = int(next(iter(self.inputs.values())).shape[0])
    self.compiled = self.predictor.compiled_for(self.batch_size)
    request = self.predictor.request_for(self.batch_size)
    for port, value in self.inputs.items():
      request.set_tensor(port, ov.Tensor(value))
    self.invoke = request.infer

  def call(self) -> None:
    self.compiled(self.inputs)


# ----------------------------------------------------------- exporting ---

def decline_openvino_telemetry() -> None:
  """Declines OpenVINO's and NNCF's telemetry in this process.

  openvino.convert_model and nncf.quantize send usage events through the
  openvino_telemetry package unless the user ran its opt-out, and each
  event is sent from a new multiprocessing process: in the ModelOptimizer's
  spawned worker that is a fresh Python importing TensorFlow, six at a time
  (measured: 6 such processes at 15% CPU each, throughout a digits run's
  exports, slowing the training beside them), for a network call a
  pipeline has no business making. This answers the consent check as a
  declined opt-in would, for every tool that asks (the check runs at each
  tool's initialisation), without writing the user's consent file.
  Idempotent; nothing happens when openvino_telemetry is not installed.
  """
  try:
    from openvino_telemetry.utils import opt_in_checker  # pylint: disable=g-import-not-at-top
  except ImportError:
    return
  declined = opt_in_checker.ConsentCheckResult.DECLINED

  def check(self, enable_opt_in_dialog, disable_in_ci=False):  # pylint: disable=unused-argument
    return declined

  opt_in_checker.OptInChecker.check = check
  # A tool initialised before this call keeps its answer: withdraw it.
  import openvino_telemetry  # pylint: disable=g-import-not-at-top
  instance = getattr(openvino_telemetry.Telemetry,
                     '_SingletonMetaClass__single_instance', None)
  if instance is not None:
    instance.consent = False


def convert(saved_model_dir: str):
  """The SavedModel's serving signature as an ``openvino.Model``.

  ``convert_model`` sets the root logger to ERROR (and adds a filter) while
  it works and puts them back only when it succeeds: a conversion that
  raises would leave the later INFO and WARNING lines of every logger
  without a level of its own (Beam's, leantfx.*) out of the run's log. The
  root logger's level, filters and handlers are put back either way.
  OpenVINO's telemetry is declined first (decline_openvino_telemetry).
  """
  decline_openvino_telemetry()
  ov = openvino_with_string_ops()
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
  decline_openvino_telemetry()
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
  (input_value). OpenVINO Model Server, which
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
        {c: input_value(v, lookups.get(c), np.float32)
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
  # The frontend's summary names the ops it has no rule for, or failed on.
  failed = [line.split(':', 1)[1].strip() for line in text.splitlines()
            if line.strip().startswith(('-- Conversion is failed for:',
                                        '-- No conversion rule found for'))]
  detail = (f'it has no conversion for {failed[0]}' if failed else
            f'{type(error).__name__}: {text.strip().splitlines()[-1]}'
            if text.strip() else type(error).__name__)
  return (f'OpenVINO cannot convert the raw-feature model: {detail}. Ship the '
          'transformed-input model for OpenVINO, or use ONNX or TFLite for '
          'raw-feature inputs.')


class OpenVINOExporter(exporter_lib.Exporter):
  """OpenVINO IR through openvino.convert_model; int8 by NNCF."""

  lookups_outside = True
  # Free text and dates in openvino-tokenizers' string ops.
  lookup_only_strings = True

  def prepare_process(self) -> None:
    decline_openvino_telemetry()

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


# ------------------------------------------------------------- serving ---

# Infer requests per compiled model of a served version: an infer request
# runs one call at a time, and this code targets small machines (2 cores).
DEFAULT_NUM_REQUESTS = 2


class _BoundRequest:
  """An infer request and the input tensors set on it.

  A request writes its values into the tensors the previous request of the
  same shapes left set (``infer(dict)`` wraps and sets a tensor per input on
  every call: about 30 us each in OpenVINO's Python binding, 2.9 ms for the
  64 inputs of a digits row against 0.6 ms written in place). A new shape
  (another batch size) sets a new tensor; an infer request's own tensors
  cannot grow.
  """

  def __init__(self, request, inputs: Mapping[str, object],
               outputs: Mapping[str, object]):
    self.request = request
    self.inputs = inputs  # alias -> its compiled model's input port
    self.outputs = outputs  # alias -> its compiled model's output port
    self._tensors: Dict[str, tuple] = {}  # alias -> (ov.Tensor, shape)

  def write(self, alias: str, port, value: np.ndarray) -> None:
    held = self._tensors.get(alias)
    if held is not None and held[1] == value.shape:
      held[0].data[...] = value
      return
    self.set_new(alias, port, np.ascontiguousarray(value))
    self._tensors[alias] = (self.request.get_tensor(port), value.shape)

  def set_new(self, alias: str, port, value: np.ndarray) -> None:
    import openvino as ov  # pylint: disable=g-import-not-at-top
    self._tensors.pop(alias, None)
    self.request.set_tensor(port, ov.Tensor(value))


class OpenVINOSession(runtime_lib.ServingSession):
  """A model.xml + model.bin version served on a pool of infer requests.

  A small pool of infer requests serves concurrent requests (an infer
  request runs one call at a time). A model whose batch dim is dynamic is
  compiled twice, each with its pool (``CompiledModels``): for a static
  batch of 1, which batch-1 requests run on (the module docstring says
  why), and as exported, for the other batches.

  Strings: OpenVINO's string ports take a numpy bytes ('S') array
  (``strings_in``) and return a str ('U') one, answered as bytes. A
  raw-feature version of a model with vocabulary columns takes those
  columns as int64 vocabulary ids and carries the vocabularies
  (string_lookups.py, listed in its manifest): the session shows those
  inputs as strings, as the SavedModel's serving_default takes them, and
  maps each request's strings to ids before the model.
  """

  def __init__(self, folder: str,
               num_threads: int = timing.DEFAULT_NUM_THREADS,
               num_requests: int = DEFAULT_NUM_REQUESTS):
    xml = os.path.join(folder, XML_FILE)
    try:
      models = CompiledModels(xml, num_threads)
      # Every kind now: a load error shows at load, and no request waits
      # for a compile.
      compiled_of = {kind: models.get(kind) for kind in models.kinds()}
    except Exception as e:  # pylint: disable=broad-except
      raise runtime_lib.SessionLoadError(
          f'{xml} is not a loadable OpenVINO model: {type(e).__name__}: '
          f'{e}') from e
    self._models = models
    compiled = compiled_of[models.ANY]
    try:
      self._lookups = string_lookups.read_string_lookups(folder)
    except ValueError as e:
      raise runtime_lib.SessionLoadError(str(e)) from e
    ports_in = {p.get_any_name().split(':')[0]: p for p in compiled.inputs}
    unknown = sorted(set(self._lookups) - set(ports_in))
    if unknown:
      raise runtime_lib.SessionLoadError(
          f'{folder}: {string_lookups.STRING_LOOKUPS_FILE} names {unknown}, '
          f'which {xml} does not take (it takes {sorted(ports_in)}).')
    ports_out = {_port_name(p): p for p in compiled.outputs}
    self._string_inputs = {
        a for a, p in ports_in.items()
        if p.get_element_type().get_type_name() == 'string'}
    self._string_outputs = {
        a for a, p in ports_out.items()
        if p.get_element_type().get_type_name() == 'string'}
    # A pool of infer requests per compiled model, each request with its
    # model's ports.
    self._pools: Dict[str, 'queue.Queue[_BoundRequest]'] = {}
    for kind, kind_compiled in compiled_of.items():
      kind_inputs = {p.get_any_name().split(':')[0]: p
                     for p in kind_compiled.inputs}
      kind_outputs = {_port_name(p): p for p in kind_compiled.outputs}
      self._pools[kind] = queue.Queue()
      for _ in range(max(1, num_requests)):
        self._pools[kind].put(_BoundRequest(
            kind_compiled.create_infer_request(), kind_inputs, kind_outputs))

    def spec(port, alias):
      return runtime_lib.TensorSpec(
          np.dtype(object) if alias in self._lookups else
          np.dtype(port.get_element_type().to_dtype()),
          tuple(-1 if d.is_dynamic else d.get_length()
                for d in port.get_partial_shape()))

    self.inputs = {a: spec(p, a) for a, p in sorted(ports_in.items())}
    self.outputs = {a: spec(p, a) for a, p in sorted(ports_out.items())}

  def run(self, inputs: Mapping[str, np.ndarray],
          output_aliases: Sequence[str]) -> Dict[str, np.ndarray]:
    pool = self._pools[self._models.kind(batch_size_of(inputs.values()))]
    bound = pool.get()
    try:
      for a, v in inputs.items():
        if a in self._lookups:
          bound.write(a, bound.inputs[a], self._lookups[a](v))
        elif a in self._string_inputs:
          # A string tensor's size follows its strings: set a new one.
          bound.set_new(a, bound.inputs[a], strings_in(v))
        else:
          bound.write(a, bound.inputs[a], v)
      bound.request.infer()
      out = {}
      for a in output_aliases:
        tensor = bound.request.get_tensor(bound.outputs[a])
        if a in self._string_outputs:
          out[a] = runtime_lib.bytes_objects(tensor.bytes_data)
        else:
          out[a] = np.array(tensor.data)
      return out
    except (RuntimeError, ValueError, TypeError) as e:
      raise runtime_lib.SessionRunError(str(e)) from None
    finally:
      pool.put(bound)

  def close(self) -> None:
    for pool in self._pools.values():
      while True:
        try:
          pool.get_nowait()
        except queue.Empty:
          break
    self._models = None


# ---------------------------------------------------------- the runtime ---

class OpenVINORuntime(runtime_lib.Runtime):
  """OpenVINO IR on the CPU plugin: model.xml + model.bin."""

  name = 'openvino'
  label = 'OpenVINO'
  model_file = XML_FILE
  files = (XML_FILE, BIN_FILE)
  # The vocabularies of the columns a raw-feature IR takes as ids (OpenVINO
  # runs no lookup table), beside model.xml and pushed with it.
  optional_files = (string_lookups.STRING_LOOKUPS_FILE,)
  required_modules = ('openvino', 'nncf')
  timed_call = 'InferRequest.infer() on a compiled model, inputs set once'
  exporter = OpenVINOExporter()

  def predictor(self, path: str,
                num_threads: int = timing.DEFAULT_NUM_THREADS,
                lookups: Optional[runtime_lib.Lookups] = None
               ) -> OpenVINOPredictor:
    return OpenVINOPredictor(path, num_threads, lookups)

  def timer(self, label: str, path: str, num_threads: int,
            features: Mapping[str, np.ndarray]) -> OpenVINOTimer:
    return OpenVINOTimer(label, path, num_threads, features)

  def serving_session(self, folder: str,
                      num_threads: int = timing.DEFAULT_NUM_THREADS
                     ) -> OpenVINOSession:
    return OpenVINOSession(folder, num_threads)

  def check_files(self, folder: str) -> None:
    """model.xml is an IR's XML and model.bin holds every weight it names.

    Each constant of the IR names its bytes in model.bin (``<data
    offset=".." size="..">``): a model.bin shorter than the last of them is
    a truncated copy, found here before OpenVINO maps the file.
    """
    super().check_files(folder)
    xml, weights = (os.path.join(folder, name) for name in self.files)
    try:
      root = ElementTree.parse(xml).getroot()
    except ElementTree.ParseError as e:
      raise runtime_lib.SessionLoadError(
          f'{xml} is not an OpenVINO IR: its XML does not parse ({e}).'
      ) from e
    if root.tag != 'net':
      raise runtime_lib.SessionLoadError(
          f'{xml} is not an OpenVINO IR: its root element is <{root.tag}>, '
          'not <net>.')
    needed = 0
    for data in root.iter('data'):
      offset, size = data.get('offset'), data.get('size')
      if offset is not None and size is not None:
        try:
          needed = max(needed, int(offset) + int(size))
        except ValueError as e:
          raise runtime_lib.SessionLoadError(
              f'{xml} names weights at offset {offset!r}, size {size!r}, '
              'which are not numbers.') from e
    have = os.path.getsize(weights)
    if have < needed:
      raise runtime_lib.SessionLoadError(
          f'{weights} has {have} bytes but {xml} reads up to byte {needed}: '
          'a truncated copy.')


RUNTIME = OpenVINORuntime()
