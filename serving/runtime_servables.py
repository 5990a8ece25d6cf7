"""The x86 server runtimes' backends: OpenVINO IR and ONNX versions.

The ModelOptimizer pushes its OpenVINO pick as ``model.xml`` + ``model.bin``
and its ONNX pick as ``model.onnx``, each with the pusher's ``manifest.json``
(leantfx/runtimes/push.py). These servables load such a version and show
the same face as the SavedModel and TFLite ones (one ``serving_default``
signature with the model's inputs and outputs, ``run`` on numpy arrays), so
the same REST and gRPC clients work against every runtime.

A version is checked against its manifest before it loads
(``push.check_version``: every file's size and sha256): a truncated or
altered copy is refused with DATA_LOSS, and the model manager keeps serving
the version it had.

OpenVINO: the model is compiled for the CPU, and a small pool of infer
requests serves concurrent requests (an infer request runs one call at a
time). A model whose batch dim is dynamic is compiled twice, each with its
pool: for a static batch of 1, which batch-1 requests run on (OpenVINO's CPU
plugin can answer a dynamic-batch int8 IR wrongly at batch 1:
leantfx/runtimes/openvino.py), and as exported, for the other batches. ONNX Runtime:
one session (its ``run`` is thread-safe) with one intra-op thread per call.

String tensors (the ModelOptimizer's raw-feature exports take categorical
columns as strings and answer 'classes'): requests carry strings as numpy
object arrays of bytes and answers give them back the same way, as the
SavedModel and TFLite servables do. OpenVINO's string ports take a numpy
bytes ('S') array and return a str ('U') one; ONNX Runtime's
'tensor(string)' takes and returns ``str`` objects (an object array of bytes
would be read as "b'...'", which looks up as unseen). The runtime modules
convert those strings (leantfx/runtimes/openvino.strings_in,
leantfx/runtimes/onnx.strings_in, which the ModelOptimizer's predictors use
too); the answers are turned back here, so clients see one contract.

A raw-feature OpenVINO version of a model with vocabulary columns takes
those columns as int64 vocabulary ids (OpenVINO runs no lookup table) and
carries the vocabularies (leantfx/runtimes/string_lookups.py, listed in
its manifest): the servable shows those inputs as strings, as the
SavedModel's serving_default takes them, and maps each request's strings to
ids before the model.
"""
import os
import queue
from typing import Dict, List, Mapping, Sequence

import numpy as np

from leantfx.runtimes import onnx as onnx_runtime
from leantfx.runtimes import openvino as openvino_runtime
from leantfx.runtimes import push
from leantfx.runtimes import string_lookups
from leantfx.errors import ConfigError
from leantfx.serving import dtypes
from leantfx.serving import servable as servable_lib
from leantfx.serving import signature as signature_lib
from leantfx.serving import status
from leantfx.serving import tflite_servable

SIGNATURE = 'serving_default'
DEFAULT_NUM_REQUESTS = 2
DEFAULT_NUM_THREADS = 1


def _objects(values: List[object], shape) -> np.ndarray:
  array = np.empty(len(values), dtype=object)
  array[:] = values
  return array.reshape(shape)


def _bytes_objects(value) -> np.ndarray:
  """A string array as the servables answer it: an object array of bytes."""
  value = np.asarray(value)
  out = [v if isinstance(v, bytes) else str(v).encode('utf-8')
         for v in value.ravel()]
  return _objects(out, value.shape)


def _check_manifest(path: str) -> None:
  if not os.path.isfile(os.path.join(path, push.MANIFEST_FILE)):
    return  # A version not written by leantfx's pusher: nothing to check.
  try:
    push.check_version(path)
  except (ConfigError, ValueError, OSError) as e:
    raise servable_lib.LoadError(str(e), status.Code.DATA_LOSS) from e


def _signature_defs(signature: signature_lib.Signature) -> Dict[str, object]:
  return tflite_servable._signature_defs({SIGNATURE: signature})  # pylint: disable=protected-access


class _RuntimeServable(servable_lib.Servable):
  """Shared parts: one signature, its protos."""

  _signature: signature_lib.Signature

  @property
  def signatures(self) -> Mapping[str, signature_lib.Signature]:
    return {SIGNATURE: self._signature}

  @property
  def signature_defs(self) -> Mapping[str, object]:
    return self._defs


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


class OpenVINOServable(_RuntimeServable):
  """A model.xml + model.bin version, on a pool of infer requests."""

  platform = openvino_runtime.RUNTIME.name

  def __init__(self, name: str, version: int, path: str,
               num_requests: int = DEFAULT_NUM_REQUESTS,
               num_threads: int = DEFAULT_NUM_THREADS):
    super().__init__(name, version, path)
    _check_manifest(path)
    xml = openvino_runtime.RUNTIME.model_path(path)
    try:
      models = openvino_runtime.CompiledModels(xml, num_threads)
      # Every kind now: a load error shows at load, and no request waits
      # for a compile.
      compiled_of = {kind: models.get(kind) for kind in models.kinds()}
    except Exception as e:  # pylint: disable=broad-except
      raise servable_lib.LoadError(
          f'{xml} is not a loadable OpenVINO model: {type(e).__name__}: {e}',
          status.Code.DATA_LOSS) from e
    self._models = models
    compiled = compiled_of[models.ANY]
    try:
      self._lookups = string_lookups.read_string_lookups(path)
    except ValueError as e:
      raise servable_lib.LoadError(str(e), status.Code.DATA_LOSS) from e
    self._inputs = {p.get_any_name().split(':')[0]: p for p in compiled.inputs}
    unknown = sorted(set(self._lookups) - set(self._inputs))
    if unknown:
      raise servable_lib.LoadError(
          f'{path}: {string_lookups.STRING_LOOKUPS_FILE} names {unknown}, which '
          f'{xml} does not take (it takes {sorted(self._inputs)}).',
          status.Code.DATA_LOSS)
    self._outputs = {
        openvino_runtime._port_name(p): p for p in compiled.outputs}  # pylint: disable=protected-access
    self._string_inputs = {
        a for a, p in self._inputs.items()
        if p.get_element_type().get_type_name() == 'string'}
    self._string_outputs = {
        a for a, p in self._outputs.items()
        if p.get_element_type().get_type_name() == 'string'}
    # A pool of infer requests per compiled model, each request with its
    # model's ports.
    self._pools: Dict[str, 'queue.Queue[_BoundRequest]'] = {}
    for kind, kind_compiled in compiled_of.items():
      kind_inputs = {p.get_any_name().split(':')[0]: p
                     for p in kind_compiled.inputs}
      kind_outputs = {openvino_runtime._port_name(p): p  # pylint: disable=protected-access
                      for p in kind_compiled.outputs}
      self._pools[kind] = queue.Queue()
      for _ in range(max(1, num_requests)):
        self._pools[kind].put(_BoundRequest(
            kind_compiled.create_infer_request(), kind_inputs, kind_outputs))

    def spec(port, alias):
      shape = tuple(-1 if d.is_dynamic else d.get_length()
                    for d in port.get_partial_shape())
      dtype = (dtypes.DT_STRING if alias in self._lookups else
               dtypes.from_numpy(port.get_element_type().to_dtype()))
      return signature_lib.TensorSpec(dtype, shape, alias)

    self._signature = signature_lib.Signature(
        name=SIGNATURE, method_name=signature_lib.PREDICT_METHOD,
        inputs={a: spec(p, a) for a, p in sorted(self._inputs.items())},
        outputs={a: spec(p, a) for a, p in sorted(self._outputs.items())})
    self._defs = _signature_defs(self._signature)

  def run(self, signature_name: str, inputs: Mapping[str, np.ndarray],
          output_aliases: Sequence[str]) -> Dict[str, np.ndarray]:
    pool = self._pools[self._models.kind(
        openvino_runtime.batch_size_of(inputs.values()))]
    bound = pool.get()
    try:
      for a, v in inputs.items():
        if a in self._lookups:
          bound.write(a, bound.inputs[a], self._lookups[a](v))
        elif a in self._string_inputs:
          # A string tensor's size follows its strings: set a new one.
          bound.set_new(a, bound.inputs[a], openvino_runtime.strings_in(v))
        else:
          bound.write(a, bound.inputs[a], v)
      bound.request.infer()
      out = {}
      for a in output_aliases:
        tensor = bound.request.get_tensor(bound.outputs[a])
        if a in self._string_outputs:
          out[a] = _bytes_objects(tensor.bytes_data)
        else:
          out[a] = np.array(tensor.data)
      return out
    except (RuntimeError, ValueError, TypeError) as e:
      raise status.invalid_argument(
          f'OpenVINO model {self.name} failed: {e}') from None
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


class ONNXServable(_RuntimeServable):
  """A model.onnx version, on one ONNX Runtime session."""

  platform = onnx_runtime.RUNTIME.name

  def __init__(self, name: str, version: int, path: str,
               num_threads: int = DEFAULT_NUM_THREADS):
    super().__init__(name, version, path)
    _check_manifest(path)
    model_path = onnx_runtime.RUNTIME.model_path(path)
    try:
      self._session = onnx_runtime.open_session(model_path, num_threads)
    except Exception as e:  # pylint: disable=broad-except
      raise servable_lib.LoadError(
          f'{model_path} is not a loadable ONNX model: {type(e).__name__}: '
          f'{e}', status.Code.DATA_LOSS) from e

    def spec(node):
      shape = tuple(d if isinstance(d, int) else -1 for d in node.shape)
      return signature_lib.TensorSpec(
          dtypes.from_numpy(
              onnx_runtime.NUMPY_TYPES.get(node.type, np.float32)), shape,
          node.name)

    self._string_inputs = {n.name for n in self._session.get_inputs()
                           if n.type == 'tensor(string)'}
    self._string_outputs = {n.name for n in self._session.get_outputs()
                            if n.type == 'tensor(string)'}
    self._signature = signature_lib.Signature(
        name=SIGNATURE, method_name=signature_lib.PREDICT_METHOD,
        inputs={n.name: spec(n) for n in self._session.get_inputs()},
        outputs={n.name: spec(n) for n in self._session.get_outputs()})
    self._defs = _signature_defs(self._signature)

  def run(self, signature_name: str, inputs: Mapping[str, np.ndarray],
          output_aliases: Sequence[str]) -> Dict[str, np.ndarray]:
    names: List[str] = list(output_aliases)
    try:
      # Only strings are converted (the runtime's strings_in); numbers,
      # checked against the signature already, go as they came.
      feed = {a: (onnx_runtime.strings_in(v) if a in self._string_inputs
                  else np.ascontiguousarray(v)) for a, v in inputs.items()}
      values = self._session.run(names, feed)
    except Exception as e:  # pylint: disable=broad-except
      raise status.invalid_argument(
          f'ONNX model {self.name} failed: {e}') from None
    return {n: (_bytes_objects(v) if n in self._string_outputs else v)
            for n, v in zip(names, values)}

  def close(self) -> None:
    self._session = None
