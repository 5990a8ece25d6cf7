"""One servable for every runtime with a serving session (OpenVINO, ONNX, ...).

The ModelOptimizer pushes its OpenVINO pick as ``model.xml`` + ``model.bin``
and its ONNX pick as ``model.onnx``, each with the pusher's ``manifest.json``
(leantfx/runtimes/push.py). ``RuntimeServable`` loads such a version through
its runtime's ``serving_session`` (leantfx/runtimes/runtime.py; each
runtime's module holds its session) and shows the same face as the
SavedModel and TFLite servables (one ``serving_default`` signature with the
model's inputs and outputs, ``run`` on numpy arrays), so the same REST and
gRPC clients work against every runtime. Nothing here depends on which
runtime it wraps: serving a new runtime needs its session, not a servable.

A version is checked against its manifest before it loads
(``push.check_version``: every file's size and sha256): a truncated or
altered copy is refused with DATA_LOSS, as a file the runtime cannot load
is, and the model manager keeps serving the version it had. A request the
model refuses answers INVALID_ARGUMENT.

The request path is the session's own ``run`` (infer requests with their
input tensors reused, a thread-safe session): this class adds one call and
the translation of a failure into a status, nothing per input.

String tensors (the ModelOptimizer's raw-feature exports take categorical
columns as strings and answer 'classes'): requests carry strings as numpy
object arrays of bytes and answers give them back the same way, as the
SavedModel and TFLite servables do; each session converts them as its
runtime reads them.
"""
import os
from typing import Dict, Mapping, Sequence

import numpy as np

from leantfx.errors import ConfigError
from leantfx.runtimes import push
from leantfx.runtimes import runtime as runtime_lib
from leantfx.runtimes import timing
from leantfx.serving import dtypes
from leantfx.serving import servable as servable_lib
from leantfx.serving import signature as signature_lib
from leantfx.serving import status
from leantfx.serving import tflite_servable

SIGNATURE = 'serving_default'


def _check_manifest(path: str) -> None:
  if not os.path.isfile(os.path.join(path, push.MANIFEST_FILE)):
    return  # A version not written by leantfx's pusher: nothing to check.
  try:
    push.check_version(path)
  except (ConfigError, ValueError, OSError) as e:
    raise servable_lib.LoadError(str(e), status.Code.DATA_LOSS) from e


def _tensor_spec(alias: str,
                 spec: runtime_lib.TensorSpec) -> signature_lib.TensorSpec:
  return signature_lib.TensorSpec(dtypes.from_numpy(spec.dtype), spec.shape,
                                  alias)


class RuntimeServable(servable_lib.Servable):
  """A version of a runtime's push, on the runtime's serving session."""

  def __init__(self, runtime: runtime_lib.Runtime, name: str, version: int,
               path: str, num_threads: int = timing.DEFAULT_NUM_THREADS):
    """Checks the version against its manifest and loads it.

    Args:
      runtime: the runtime whose files the version holds.
      name: model name.
      version: version number.
      path: the version directory.
      num_threads: the runtime's threads per request.

    Raises:
      LoadError: DATA_LOSS for files that do not match the manifest or that
        the runtime cannot load.
    """
    super().__init__(name, version, path)
    self.platform = runtime.name
    self._label = runtime.label
    _check_manifest(path)
    try:
      self._session = runtime.serving_session(path, num_threads)
    except runtime_lib.SessionLoadError as e:
      raise servable_lib.LoadError(str(e), status.Code.DATA_LOSS) from e
    self._run = self._session.run
    self._signature = signature_lib.Signature(
        name=SIGNATURE, method_name=signature_lib.PREDICT_METHOD,
        inputs={a: _tensor_spec(a, s)
                for a, s in self._session.inputs.items()},
        outputs={a: _tensor_spec(a, s)
                 for a, s in self._session.outputs.items()})
    self._defs = tflite_servable._signature_defs({SIGNATURE: self._signature})  # pylint: disable=protected-access

  @property
  def signatures(self) -> Mapping[str, signature_lib.Signature]:
    return {SIGNATURE: self._signature}

  @property
  def signature_defs(self) -> Mapping[str, object]:
    return self._defs

  def run(self, signature_name: str, inputs: Mapping[str, np.ndarray],
          output_aliases: Sequence[str]) -> Dict[str, np.ndarray]:
    try:
      return self._run(inputs, output_aliases)
    except runtime_lib.SessionRunError as e:
      raise status.invalid_argument(
          f'{self._label} model {self.name} failed: {e}') from None

  def close(self) -> None:
    self._session.close()
