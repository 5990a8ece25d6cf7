"""OpenVINO as the runtime runs it: a compiled model and an infer request.

``OpenVINOPredictor`` compiles model.xml for the CPU with a fixed thread
count (``INFERENCE_NUM_THREADS``, one stream, the latency hint) and runs
examples through one infer request. ``OpenVINOTimer`` prepares an infer
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
"""
import logging
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

import numpy as np

from leantfx.runtimes import runtime as runtime_lib
from leantfx.runtimes import string_lookups
from leantfx.runtimes import timing
from leantfx.errors import ConfigError

_LOG = logging.getLogger(__name__)
# The largest score difference between a batch-1 call on the dynamic batch
# and on the static copy that still counts as the same answer: float
# rounding between two compiles is about 1e-6, the plugin bug moved the
# test model's probabilities by 0.03-0.05 and MobileNetV2's to one class.
DYNAMIC_BATCH_ONE_ATOL = 1e-3
# The manifest facts of OpenVINOPredictor.push_facts: the largest score gap
# between the two, and whether it is within DYNAMIC_BATCH_ONE_ATOL.
DYNAMIC_BATCH_ONE_GAP = 'dynamic_batch_one_max_abs_diff'
DYNAMIC_BATCH_ONE_OK = 'dynamic_batch_one_ok'


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
  import openvino as ov  # pylint: disable=g-import-not-at-top
  import openvino.properties as props  # pylint: disable=g-import-not-at-top
  import openvino.properties.hint as hints  # pylint: disable=g-import-not-at-top
  core = ov.Core()
  model = core.read_model(xml_path)
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
  })


def has_dynamic_batch(xml_path: str) -> bool:
  """Whether any input of model.xml has a dynamic first dimension."""
  import openvino as ov  # pylint: disable=g-import-not-at-top
  return bool(_batch_shapes(ov.Core().read_model(xml_path), 1))


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
  The optimizer's predictors feed an IR through it; ``leantfx serve``'s
  OpenVINO servable converts its strings with strings_in too.
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


class OpenVINORuntime(runtime_lib.Runtime):
  """OpenVINO IR on the CPU plugin: model.xml + model.bin."""

  name = 'openvino'
  label = 'OpenVINO'
  model_file = 'model.xml'
  files = ('model.xml', 'model.bin')
  # The vocabularies of the columns a raw-feature IR takes as ids (OpenVINO
  # runs no lookup table), beside model.xml and pushed with it.
  optional_files = (string_lookups.STRING_LOOKUPS_FILE,)
  required_modules = ('openvino', 'nncf')
  timed_call = 'InferRequest.infer() on a compiled model, inputs set once'

  def predictor(self, path: str,
                num_threads: int = timing.DEFAULT_NUM_THREADS,
                lookups: Optional[runtime_lib.Lookups] = None
               ) -> OpenVINOPredictor:
    return OpenVINOPredictor(path, num_threads, lookups)

  def timer(self, label: str, path: str, num_threads: int,
            features: Mapping[str, np.ndarray]) -> OpenVINOTimer:
    return OpenVINOTimer(label, path, num_threads, features)


RUNTIME = OpenVINORuntime()
