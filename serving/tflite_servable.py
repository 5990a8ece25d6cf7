"""The TFLite backend: prepared interpreters, with int8 models served as float ones.

``tf.lite.Interpreter`` is not thread-safe, so each servable keeps a small pool
of interpreters (as TF Serving's ``TfLiteInterpreterPool`` does) and a request
borrows one for the duration of a call. Each interpreter is prepared once at
load: ``allocate_tensors()`` on the whole interpreter (which is also what applies
TFLite's default XNNPACK delegate), and every signature bound to its tensor
indices (:class:`~leantfx.runtimes.tflite.PreparedSignature`). A request then costs ``set_tensor`` per
input, ``invoke()`` and ``get_tensor`` per output; inputs are resized and
tensors re-allocated only when the request's shapes differ from the previous
request's on that interpreter (a new batch size).

``SignatureRunner.__call__`` is not used on the request path: in TF 2.16 it
resizes every input and re-allocates on each call, and it allocates only its
own subgraph, so an interpreter that never saw ``allocate_tensors()`` runs
without the XNNPACK delegate (MobileNetV2 1.0 224px, 1 thread: about 2x the
time of ``invoke()`` on a prepared interpreter; see docs/measurements.md).

Inputs and outputs that the converter quantized (int8/uint8/int16 tensors
with a scale) are exposed with dtype float: requests are quantized with the
tensor's ``(scale, zero_point)`` and outputs dequantized, so the same JSON
works against the float SavedModel and the int8 TFLite model.

TFLite is the one runtime served by a servable of its own rather than on a
serving session (serving/runtime_servable.py, which every other runtime
shares): a .tflite file may carry several signatures, each served under
its key (a session serves ``serving_default`` only), and this servable
counts each interpreter's resizes (``resizes``), which the serving tests
read. Its request path is as short as a session's (bound tensors, one
``invoke()``).
"""
import dataclasses
import hashlib
import json
import os
import queue
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

from leantfx.runtimes import tflite as tflite_runtime
from leantfx.serving import dtypes
from leantfx.serving import request_limits
from leantfx.serving import servable as servable_lib
from leantfx.serving import signature as signature_lib
from leantfx.serving import status

# Two interpreters: this code targets small machines (2 cores); a request
# that finds both busy waits for one rather than oversubscribing the CPU.
DEFAULT_NUM_INTERPRETERS = 2
# One thread per interpreter: the pool, not intra-op threads, uses the cores.
DEFAULT_NUM_THREADS = 1
# Written beside model.tflite by leantfx's TFLite pusher.
MANIFEST_FILENAME = 'manifest.json'
_QUANTIZED_DTYPES = (np.int8, np.uint8, np.int16)


@dataclasses.dataclass(frozen=True)
class _Quantization:
  scale: float
  zero_point: int
  dtype: np.dtype

  def quantize(self, values: np.ndarray) -> np.ndarray:
    info = np.iinfo(self.dtype)
    scaled = np.round(values.astype(np.float64) / self.scale + self.zero_point)
    return np.clip(scaled, info.min, info.max).astype(self.dtype)

  def dequantize(self, values: np.ndarray) -> np.ndarray:
    return ((values.astype(np.float32) - np.float32(self.zero_point)) *
            np.float32(self.scale))


def _quantization_of(detail: Mapping) -> Optional[_Quantization]:
  dtype = np.dtype(detail['dtype'])
  scale, zero_point = detail.get('quantization', (0.0, 0))
  if dtype.type in _QUANTIZED_DTYPES and scale:
    return _Quantization(float(scale), int(zero_point), dtype)
  return None


def _exposed_spec(detail: Mapping) -> signature_lib.TensorSpec:
  quantization = _quantization_of(detail)
  dtype = (dtypes.DT_FLOAT if quantization is not None
           else dtypes.from_numpy(detail['dtype']))
  shape = detail.get('shape_signature')
  if shape is None:
    shape = detail['shape']
  return signature_lib.TensorSpec(dtype, tuple(int(d) for d in shape),
                                  detail.get('name', ''))


def _check_manifest(path: str, content: bytes) -> None:
  """Checks model.tflite against the pusher's manifest.json, when present.

  The pusher records the file's size and SHA-256; a truncated or swapped file
  fails here instead of loading garbage (a flatbuffer is not self-checking).
  """
  manifest_path = os.path.join(path, MANIFEST_FILENAME)
  if not os.path.isfile(manifest_path):
    return
  try:
    with open(manifest_path, encoding='utf-8') as f:
      manifest = json.load(f)
  except (OSError, ValueError) as e:
    raise servable_lib.LoadError(
        f'{manifest_path} is not valid JSON: {e}', status.Code.DATA_LOSS
    ) from e
  size = manifest.get('size_bytes')
  if size is not None and size != len(content):
    raise servable_lib.LoadError(
        f'{servable_lib.TFLITE_FILENAME} in {path} has {len(content)} bytes '
        f'but {MANIFEST_FILENAME} says {size}; the push is incomplete.',
        status.Code.DATA_LOSS)
  digest = manifest.get('sha256')
  if digest and hashlib.sha256(content).hexdigest() != digest:
    raise servable_lib.LoadError(
        f'{servable_lib.TFLITE_FILENAME} in {path} does not match the sha256 '
        f'in {MANIFEST_FILENAME}.', status.Code.DATA_LOSS)


class TfLiteServable(servable_lib.Servable):
  """A ``model.tflite`` version, run on a pool of prepared interpreters."""

  platform = servable_lib.PLATFORM_TFLITE
  # ``Interpreter.invoke()`` keeps the GIL for the whole call (TF 2.16's
  # wrapper does not release it): 8192 rows of the 64-column digits model
  # are a 7.5 ms invoke during which no other thread of the server runs
  # Python, 1024 rows about 1 ms.
  max_rows_per_call = request_limits.TFLITE_MAX_ROWS_PER_CALL

  def __init__(self, name: str, version: int, path: str,
               num_interpreters: int = DEFAULT_NUM_INTERPRETERS,
               num_threads: int = DEFAULT_NUM_THREADS):
    """Loads the model into `num_interpreters` prepared interpreters.

    Args:
      name: model name.
      version: version number.
      path: the version directory (with model.tflite).
      num_interpreters: pool size: how many requests run at once on this
        version (an Interpreter serves one thread at a time).
      num_threads: threads of each interpreter.

    Raises:
      LoadError: the file is missing, not a TFLite flatbuffer, or has no
        signatures.
    """
    super().__init__(name, version, path)
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    model_path = os.path.join(path, servable_lib.TFLITE_FILENAME)
    try:
      with open(model_path, 'rb') as f:
        content = f.read()
      _check_manifest(path, content)
      interpreters = [
          tf.lite.Interpreter(model_content=content,
                              num_threads=max(1, num_threads))
          for _ in range(max(1, num_interpreters))]
      signature_list = interpreters[0].get_signature_list()
    except (IOError, OSError) as e:
      raise servable_lib.LoadError(
          f'Cannot read {model_path}: {e}', status.Code.NOT_FOUND) from e
    except Exception as e:  # pylint: disable=broad-except
      raise servable_lib.LoadError(
          f'{model_path} is not a loadable TFLite model: {type(e).__name__}: '
          f'{e}', status.Code.DATA_LOSS) from e
    if not signature_list:
      raise servable_lib.LoadError(
          f'{model_path} has no signatures. Convert it with '
          'tf.lite.TFLiteConverter.from_saved_model() or from_keras_model(), '
          'which keep the serving signature.', status.Code.FAILED_PRECONDITION)

    # Each pool entry: signature key -> PreparedSignature of one interpreter.
    self._pool: 'queue.Queue[Dict[str, tflite_runtime.PreparedSignature]]' = (
        queue.Queue())
    self._entries: List[Dict[str, tflite_runtime.PreparedSignature]] = []
    for interpreter in interpreters:
      try:
        prepared = tflite_runtime.prepare_interpreter(interpreter)
      except Exception as e:  # pylint: disable=broad-except
        raise servable_lib.LoadError(
            f'{model_path} cannot be prepared to run: {type(e).__name__}: '
            f'{e}', status.Code.FAILED_PRECONDITION) from e
      self._entries.append(prepared)
      self._pool.put(prepared)
    first = self._entries[0]
    self._signatures: Dict[str, signature_lib.Signature] = {}
    self._in_quant: Dict[str, Dict[str, Optional[_Quantization]]] = {}
    self._out_quant: Dict[str, Dict[str, Optional[_Quantization]]] = {}
    for key, prepared in first.items():
      in_details, out_details = prepared.input_details, prepared.output_details
      self._signatures[key] = signature_lib.Signature(
          name=key, method_name=signature_lib.PREDICT_METHOD,
          inputs={k: _exposed_spec(v) for k, v in sorted(in_details.items())},
          outputs={k: _exposed_spec(v) for k, v in sorted(out_details.items())})
      self._in_quant[key] = {k: _quantization_of(v)
                             for k, v in in_details.items()}
      self._out_quant[key] = {k: _quantization_of(v)
                              for k, v in out_details.items()}
    self._signature_defs = _signature_defs(self._signatures)

  @property
  def signatures(self) -> Mapping[str, signature_lib.Signature]:
    return self._signatures

  @property
  def signature_defs(self) -> Mapping[str, object]:
    return self._signature_defs

  @property
  def pool_size(self) -> int:
    return len(self._entries)

  def resizes(self) -> int:
    """Input resizes (each with a re-allocation) across the pool so far."""
    return sum(p.resizes for entry in self._entries for p in entry.values())

  def run(self, signature_name: str, inputs: Mapping[str, np.ndarray],
          output_aliases: Sequence[str]) -> Dict[str, np.ndarray]:
    feeds = {}
    in_quant = self._in_quant[signature_name]
    for alias, array in inputs.items():
      quantization = in_quant.get(alias)
      feeds[alias] = (quantization.quantize(array) if quantization is not None
                      else array)
    entry = self._pool.get()
    try:
      results = entry[signature_name].run(feeds, output_aliases)
    except (ValueError, RuntimeError) as e:
      raise status.invalid_argument(
          f'TFLite signature {signature_name} failed: {e}') from None
    finally:
      self._pool.put(entry)
    outputs = {}
    out_quant = self._out_quant[signature_name]
    for alias in output_aliases:
      quantization = out_quant.get(alias)
      value = results[alias]
      outputs[alias] = (quantization.dequantize(value)
                        if quantization is not None else value)
    return outputs

  def close(self) -> None:
    while True:
      try:
        self._pool.get_nowait()
      except queue.Empty:
        break
    self._entries = []


def _signature_defs(
    signatures: Mapping[str, signature_lib.Signature]) -> Dict[str, object]:
  """Builds ``SignatureDef`` protos so metadata looks as for a SavedModel."""
  from tensorflow.core.protobuf import meta_graph_pb2  # pylint: disable=g-import-not-at-top
  defs = {}
  for key, sig in signatures.items():
    signature_def = meta_graph_pb2.SignatureDef(method_name=sig.method_name)
    for target, specs in ((signature_def.inputs, sig.inputs),
                          (signature_def.outputs, sig.outputs)):
      for alias, spec in specs.items():
        info = target[alias]
        info.name = spec.tensor_name
        info.dtype = spec.dtype.enum
        for size in spec.shape or ():
          info.tensor_shape.dim.add(size=size)
    defs[key] = signature_def
  return defs

