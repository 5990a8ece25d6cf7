"""TFLite as the runtime runs it: an interpreter allocated once, signatures bound once.

``prepare_interpreter`` allocates a fresh ``tf.lite.Interpreter`` (the call
that applies TFLite's default delegate, XNNPACK on CPU) and binds each
signature as a ``PreparedSignature``: after that a call is set the inputs,
``invoke()``, read the outputs; tensors are resized only when a shape
changes. The ModelOptimizer's measurement (measure.py) and ``leantfx serve``'s
TFLite backend (serving/tflite_servable.py) both run models through it, so
the latency the gate sees is the latency the server gives.

``TFLitePredictor`` (a .tflite file's serving signature, float features in,
float scores out: an int8 model's inputs quantized and its outputs
dequantized) and ``TFLiteTimer`` (the same, prepared for the interleaved
latency measurement) are the TFLite ``Runtime``'s predictor and timer
(runtime.py). TensorFlow is imported when a predictor is made, not with the
module: a TFLite server does not load it here.
"""
import importlib.machinery
import importlib.util
import os
import sys
from typing import Any, Dict, Mapping, Optional, Sequence

import numpy as np

from leantfx.errors import ConfigError
from leantfx.runtimes import runtime as runtime_lib
from leantfx.runtimes import serving_export
from leantfx.runtimes import timing


class PreparedSignature:
  """One signature of a ``tf.lite.Interpreter``, bound once, run by ``invoke()``.

  Built on an interpreter whose ``allocate_tensors()`` has run (see
  :func:`prepare_interpreter`). :meth:`bind` sets the inputs, resizing them
  and re-allocating the signature's tensors only when a shape differs from
  the bound one; :meth:`invoke` runs the kernels; :meth:`outputs` copies the
  outputs out. Like the interpreter, it serves one thread at a time.

  The signature's tensor indices come from ``get_signature_runner``, which is
  dropped at once: while a SignatureRunner lives it holds a reference to the
  interpreter's wrapper, and ``Interpreter.invoke()`` refuses to run
  (``_ensure_safe``). A signature in subgraph 0 (every single-signature model)
  runs through the public ``set_tensor``/``invoke``/``get_tensor``; another
  subgraph through the same wrapper calls ``SignatureRunner`` makes, with its
  subgraph index (the public methods address subgraph 0 only).

  Attributes:
    key: the signature key.
    input_details: input name -> the tensor's details (as the runner has them).
    output_details: output name -> the tensor's details.
    resizes: how many times :meth:`bind` resized and re-allocated.
  """

  def __init__(self, interpreter, key: str):
    runner = interpreter.get_signature_runner(key)
    self.key = key
    self.input_details = runner.get_input_details()
    self.output_details = runner.get_output_details()
    self._subgraph = int(runner._subgraph_index)  # pylint: disable=protected-access
    del runner
    self._interpreter = interpreter
    self._input_index = {n: int(d['index'])
                         for n, d in self.input_details.items()}
    self._output_index = {n: int(d['index'])
                          for n, d in self.output_details.items()}
    if self._subgraph != 0:
      # interpreter.allocate_tensors() allocates subgraph 0 only.
      interpreter._interpreter.AllocateTensors(self._subgraph)  # pylint: disable=protected-access
    self._shapes: Optional[Dict[str, tuple]] = {
        n: tuple(int(x) for x in d['shape'])
        for n, d in self.input_details.items()}
    self.resizes = 0

  @property
  def subgraph_index(self) -> int:
    return self._subgraph

  def bound_shapes(self) -> Optional[Dict[str, tuple]]:
    """The input shapes the tensors are allocated for (None after a failure)."""
    return None if self._shapes is None else dict(self._shapes)

  def bind(self, inputs: Mapping[str, np.ndarray]) -> None:
    """Sets every input; resizes and re-allocates only on a shape change.

    Raises:
      ValueError: an input is missing or unknown, or the interpreter rejects
        a shape or dtype.
    """
    if len(inputs) != len(self._input_index) or any(
        n not in self._input_index for n in inputs):
      raise ValueError(
          f'Signature {self.key!r} takes the inputs '
          f'{sorted(self._input_index)}; got {sorted(inputs)}.')
    bound = self._shapes
    if bound is None or any(np.shape(v) != bound[n]
                            for n, v in inputs.items()):
      self._resize({n: tuple(np.shape(v)) for n, v in inputs.items()})
    interpreter, index = self._interpreter, self._input_index
    if self._subgraph == 0:
      for name, value in inputs.items():
        interpreter.set_tensor(index[name], value)
    else:
      for name, value in inputs.items():
        interpreter._interpreter.SetTensor(  # pylint: disable=protected-access
            index[name], value, self._subgraph)

  def _resize(self, shapes: Mapping[str, tuple]) -> None:
    interpreter = self._interpreter
    old = self._shapes or {}
    # Until the allocation succeeds the bound shapes are unknown: a failed
    # resize must not let the next request skip resizing.
    self._shapes = None
    for name, shape in shapes.items():
      if old.get(name) == shape:
        continue
      size = np.array(shape, dtype=np.int32)
      if self._subgraph == 0:
        interpreter.resize_tensor_input(self._input_index[name], size)
      else:
        interpreter._interpreter.ResizeInputTensor(  # pylint: disable=protected-access
            self._input_index[name], size, False, self._subgraph)
    if self._subgraph == 0:
      interpreter.allocate_tensors()
    else:
      interpreter._interpreter.AllocateTensors(self._subgraph)  # pylint: disable=protected-access
    self._shapes = dict(shapes)
    self.resizes += 1

  def invoke(self) -> None:
    """Runs the kernels on the bound inputs (releases the GIL)."""
    if self._subgraph == 0:
      self._interpreter.invoke()
    else:
      self._interpreter._interpreter.Invoke(self._subgraph)  # pylint: disable=protected-access

  def outputs(self, names: Optional[Sequence[str]] = None
             ) -> Dict[str, np.ndarray]:
    """Copies of the outputs (all of them unless `names` is given)."""
    get = self._interpreter.get_tensor
    return {n: get(self._output_index[n], self._subgraph)
            for n in (self._output_index if names is None else names)}

  def run(self, inputs: Mapping[str, np.ndarray],
          names: Optional[Sequence[str]] = None) -> Dict[str, np.ndarray]:
    """bind + invoke + outputs."""
    self.bind(inputs)
    self.invoke()
    return self.outputs(names)


def prepare_interpreter(interpreter) -> Dict[str, PreparedSignature]:
  """Allocates a fresh interpreter and binds each of its signatures.

  ``Interpreter.allocate_tensors()`` is the call that applies TFLite's
  default delegate (XNNPACK on CPU); a SignatureRunner's own allocation does
  not, so it must run here, once, before any signature is invoked.
  """
  interpreter.allocate_tensors()
  return {key: PreparedSignature(interpreter, key)
          for key in interpreter.get_signature_list()}


def quantize(value: np.ndarray, detail: Mapping[str, Any]) -> np.ndarray:
  """Casts a float input to the tensor's dtype, quantizing int8/int16."""
  dtype = detail['dtype']
  scale, zero_point = detail['quantization']
  if np.issubdtype(dtype, np.integer) and scale:
    info = np.iinfo(dtype)
    q = np.round(np.asarray(value, np.float32) / scale + zero_point)
    return np.clip(q, info.min, info.max).astype(dtype)
  return np.asarray(value).astype(dtype)


def dequantize(value: np.ndarray, detail: Mapping[str, Any]) -> np.ndarray:
  scale, zero_point = detail['quantization']
  if np.issubdtype(detail['dtype'], np.integer) and scale:
    return (value.astype(np.float32) - zero_point) * scale
  return value.astype(np.float32)


class TFLitePredictor:
  """Runs a .tflite signature on a prepared interpreter, in float.

  The interpreter is allocated once (applying the default delegate) and the
  signature bound once (:class:`PreparedSignature`, the
  object ``leantfx serve`` runs requests on); inputs
  are resized only when the batch shape changes.
  """

  def __init__(self, path: str,
               num_threads: int = timing.DEFAULT_NUM_THREADS,
               signature: str = serving_export.SERVING_SIGNATURE):
    self.path = path
    self.num_threads = num_threads
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    self.interpreter = tf.lite.Interpreter(model_path=path,
                                           num_threads=num_threads)
    signatures = self.interpreter.get_signature_list()
    if signature not in signatures:
      raise ConfigError(
          f'{path} has no TFLite signature {signature!r} (it has '
          f'{sorted(signatures)}); export it with leantfx tflite_export.')
    self.interpreter.allocate_tensors()
    self.signature = PreparedSignature(self.interpreter, signature)
    self.input_details = self.signature.input_details
    output_details = self.signature.output_details
    # A variant's model has one output; a raw-feature export (the Trainer's
    # serving_default contract) answers 'probabilities' or 'predictions'
    # beside class ids and names.
    self.output_name = runtime_lib.score_output(list(output_details))
    self.output_detail = output_details[self.output_name]

  @property
  def input_names(self):
    return sorted(self.input_details)

  def prepare(self, features: Mapping[str, np.ndarray]
             ) -> Dict[str, np.ndarray]:
    """Converts a float example (or batch) into the interpreter's dtypes."""
    missing = sorted(set(self.input_details) - set(features))
    if missing:
      raise ConfigError(
          f'The eval features lack the TFLite input(s) {missing}; they have '
          f'{sorted(features)}.')
    return {
        n: quantize(features[n], d) for n, d in self.input_details.items()
    }

  def run_prepared(self, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    """set_tensor, invoke, get_tensor (resizing only on a new batch shape)."""
    return self.signature.run(inputs, [self.output_name])[self.output_name]

  def predict(self, features: Mapping[str, np.ndarray]) -> np.ndarray:
    """Float outputs (dequantized) for an example or a batch."""
    return dequantize(self.run_prepared(self.prepare(features)),
                      self.output_detail)


class TFLiteTimer(timing.RuntimeTimer):
  """A .tflite variant prepared for timing: its inputs bound once."""

  def __init__(self, variant: timing.LatencyVariant):
    self.variant = variant
    self.predictor = TFLitePredictor(variant.path,
                                     num_threads=variant.num_threads)
    features = variant.features
    if features is None:
      features = {
          n: np.zeros([1] + [max(1, int(x)) for x in d['shape'][1:]],
                      np.float32)
          for n, d in self.predictor.input_details.items()}
    self.inputs = self.predictor.prepare(features)
    first = next(iter(self.inputs.values()), np.zeros(1))
    self.batch_size = int(first.shape[0]) if first.ndim else 1
    # Resized (once, if the batch differs from the allocated one) and set once.
    self.predictor.signature.bind(self.inputs)
    self.invoke = self.predictor.signature.invoke
    self._runner = None

  def call(self) -> None:
    """The SignatureRunner call path, on the same prepared interpreter."""
    if self._runner is None:
      self._runner = self.predictor.interpreter.get_signature_runner(
          self.predictor.signature.key)
    self._runner(**self.inputs)

  def close(self) -> None:
    # While the runner lives it holds the interpreter's wrapper, and
    # Interpreter.invoke() refuses to run.
    self._runner = None


# A TFLite flatbuffer's file identifier (schema.fbs: file_identifier "TFL3"),
# bytes 4..8 of the file, after the root table's offset.
FILE_IDENTIFIER = b'TFL3'
_IDENTIFIER_AT = 4
# The op resolver tf.lite.Interpreter uses by default (its
# OpResolverType.AUTO, which interpreter.py maps to id 1: the builtin ops
# with the default delegates).
_BUILTIN_OP_RESOLVER = 1
_WRAPPER = 'tensorflow/lite/python/interpreter_wrapper/' \
    '_pywrap_tensorflow_interpreter_wrapper'
# TFLite's schema as flatc's Python code (reads a flatbuffer in Python).
_SCHEMA = 'tensorflow/lite/python/schema_py_generated'


def _tensorflow_module(relative: str, suffixes: Sequence[str]):
  """A module of the tensorflow package, loaded from its file alone.

  Without importing the ``tensorflow`` package (five seconds of imports
  that a child checking one file does not need): TFLite's native
  interpreter module links only libtensorflow_framework, beside it, and its
  schema module imports only flatbuffers. None where TensorFlow is loaded
  already (import it the usual way then) or the file is not found.
  """
  if 'tensorflow' in sys.modules:
    return None
  spec = importlib.util.find_spec('tensorflow')
  for root in list(spec.submodule_search_locations or ()) if spec else []:
    for suffix in suffixes:
      path = os.path.join(os.path.dirname(root), relative + suffix)
      if os.path.isfile(path):
        name = os.path.basename(relative)
        loader = (importlib.machinery.ExtensionFileLoader(name, path)
                  if suffix in importlib.machinery.EXTENSION_SUFFIXES else
                  importlib.machinery.SourceFileLoader(name, path))
        module_spec = importlib.util.spec_from_file_location(
            name, path, loader=loader)
        module = importlib.util.module_from_spec(module_spec)
        loader.exec_module(module)
        return module
  return None


def _interpreter_wrapper():
  """TFLite's native interpreter module, the one tf.lite.Interpreter calls."""
  module = _tensorflow_module(_WRAPPER, importlib.machinery.EXTENSION_SUFFIXES)
  if module is None:
    from tensorflow.lite.python.interpreter_wrapper import _pywrap_tensorflow_interpreter_wrapper as module  # pylint: disable=g-import-not-at-top
  return module


def _schema():
  """TFLite's flatbuffer schema, generated Python (schema_py_generated)."""
  module = _tensorflow_module(_SCHEMA, ('.py',))
  if module is None:
    from tensorflow.lite.python import schema_py_generated as module  # pylint: disable=g-import-not-at-top
  return module


def read_flatbuffer(path: str, content: bytes) -> None:
  """Reads every table of a TFLite flatbuffer in Python, bounds checked.

  Python's reads of a truncated or cut buffer raise (struct.error,
  IndexError) where the native interpreter reads past the end of it. Each
  buffer stored after the flatbuffer (``offset``/``size``, models over
  2 GB) must lie inside the file.

  Args:
    path: the file, for messages.
    content: its bytes.

  Raises:
    runtime_lib.SessionLoadError: the flatbuffer does not read whole.
  """
  schema = _schema()
  try:
    model = schema.ModelT.InitFromPackedBuf(bytearray(content), 0)
  except Exception as e:  # pylint: disable=broad-except
    raise runtime_lib.SessionLoadError(
        f'{path} is not a whole TFLite model ({len(content)} bytes): its '
        f'flatbuffer does not read ({type(e).__name__}: {e}); a truncated '
        'or damaged copy.') from e
  if not model.subgraphs:
    raise runtime_lib.SessionLoadError(f'{path} holds no subgraph.')
  for index, buffer in enumerate(model.buffers or ()):
    offset, size = int(buffer.offset or 0), int(buffer.size or 0)
    if offset > 1 and offset + size > len(content):
      raise runtime_lib.SessionLoadError(
          f'{path}: buffer {index} lies at bytes {offset}-{offset + size}, '
          f'past the end of the file ({len(content)} bytes); a truncated '
          'copy.')


class TFLiteRuntime(runtime_lib.Runtime):
  """TensorFlow Lite's interpreter (XNNPACK on CPU): model.tflite."""

  name = 'tflite'
  label = 'TFLite'
  model_file = 'model.tflite'
  files = ('model.tflite',)
  required_modules = ('tensorflow',)
  timed_call = 'invoke() on a prepared interpreter, inputs bound once'

  def predictor(self, path: str,
                num_threads: int = timing.DEFAULT_NUM_THREADS,
                lookups: Optional[runtime_lib.Lookups] = None
               ) -> TFLitePredictor:
    if lookups:
      raise ConfigError(
          f'{path}: a TFLite model looks its vocabularies up in its graph; '
          f'it takes no vocabulary ids (got lookups for {sorted(lookups)}).')
    return TFLitePredictor(path, num_threads=num_threads)

  def timer(self, label: str, path: str, num_threads: int,
            features: Optional[Mapping[str, np.ndarray]]) -> TFLiteTimer:
    return TFLiteTimer(
        timing.LatencyVariant(label, path, num_threads, features))

  def check_files(self, folder: str) -> None:
    """The file is there, not empty, and carries TFLite's file identifier.

    A truncated model.tflite keeps its identifier (a flatbuffer is read
    from its root offset at the start): ``verify`` is what finds it.
    """
    super().check_files(folder)
    path = self.model_path(folder)
    with open(path, 'rb') as f:
      head = f.read(_IDENTIFIER_AT + len(FILE_IDENTIFIER))
    found = head[_IDENTIFIER_AT:]
    if found != FILE_IDENTIFIER:
      raise runtime_lib.SessionLoadError(
          f'{path} is not a TFLite model: bytes {_IDENTIFIER_AT}-'
          f'{_IDENTIFIER_AT + len(FILE_IDENTIFIER)} are {found!r}, not '
          f'the flatbuffer file identifier {FILE_IDENTIFIER!r}.')

  def verify(self, folder: str) -> None:
    """Reads the flatbuffer whole, then builds and allocates an interpreter.

    The flatbuffer is read in Python first (``read_flatbuffer``: bounds
    checked, so a truncated file fails there, the same way every time).
    Then the calls tf.lite.Interpreter and allocate_tensors() make, on
    TFLite's native module: that interpreter does not verify a
    flatbuffer's offsets and may crash (SIGSEGV) on a damaged file, which is
    why this runs in a child process.
    """
    path = self.model_path(folder)
    with open(path, 'rb') as f:
      content = f.read()
    read_flatbuffer(path, content)
    wrapper = _interpreter_wrapper()
    try:
      interpreter = wrapper.CreateWrapperFromBuffer(
          content, _BUILTIN_OP_RESOLVER, [], [], False, False)
      interpreter.AllocateTensors()
      for key in interpreter.GetSignatureDefs():
        interpreter.AllocateTensors(
            int(interpreter.GetSubgraphIndexFromSignature(key)))
    except (ValueError, RuntimeError) as e:
      raise runtime_lib.SessionLoadError(
          f'{path} is not a loadable TFLite model: {e}') from e
    del interpreter, content


RUNTIME = TFLiteRuntime()
