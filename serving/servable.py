"""A loaded model version, whatever runs it: the face every backend presents.

The backends (:mod:`saved_model_servable`, :mod:`tflite_servable`,
:mod:`runtime_servable`) present the same face: signatures with dtypes and
shapes, the ``SignatureDef`` protos that the metadata API returns, and
``run(signature, inputs, outputs)`` on numpy arrays. The request path never
asks which backend it talks to. Which backend loads a version directory, and
the loading itself, is :mod:`loading`'s job; the files and platform names it
goes by are here, beside the face, because the backends read them too.
"""
import abc
import threading
from typing import Dict, Mapping, Optional, Sequence

import numpy as np

from leantfx.runtimes import tflite as tflite_runtime
from leantfx.serving import signature as signature_lib
from leantfx.serving import status

SAVED_MODEL_FILENAMES = ('saved_model.pb', 'saved_model.pbtxt')
PLATFORM_TENSORFLOW = 'tensorflow'
# The ModelOptimizer's pushes: each runtime's platform is its name, and a
# version holds its model file (leantfx/runtimes/; loading.py picks the
# runtime). TFLite's, for its servable.
PLATFORM_TFLITE = tflite_runtime.RUNTIME.name
TFLITE_FILENAME = tflite_runtime.RUNTIME.model_file


class LoadError(Exception):
  """A version directory could not be turned into a servable.

  Attributes:
    code: the canonical status code reported in the model status.
  """

  def __init__(self, message: str, code: status.Code = status.Code.UNKNOWN):
    super().__init__(message)
    self.code = code


class Servable(abc.ABC):
  """One loaded version of one model.

  Attributes:
    name: model name.
    version: version number.
    path: the version directory.
  """

  platform = ''
  # Whether merging concurrent requests into one call pays for this kind of
  # model in a one-process server: what ``serve --batching auto`` (the
  # default) batches. Measured (docs/measurements.md, serving): a
  # SavedModel's call has a fixed cost that a batch shares, so it gains;
  # the prepared runtimes (TFLite, OpenVINO, ONNX Runtime) lose throughput
  # or break even, the hand-off to a batch thread costing what the shared
  # call saves.
  batching_pays = False
  # The most rows one call of this kind of model takes when a request is run
  # in parts, below the server's --max-rows-per-call; None: no bound of its
  # own. A runtime whose call holds Python's interpreter lock (the GIL)
  # stalls every other request's Python for the whole call, so its calls
  # are kept short enough for small requests to run between them.
  max_rows_per_call: Optional[int] = None

  def __init__(self, name: str, version: int, path: str):
    self.name = name
    self.version = version
    self.path = path
    self._in_flight = 0
    self._in_flight_lock = threading.Condition()

  @property
  @abc.abstractmethod
  def signatures(self) -> Mapping[str, signature_lib.Signature]:
    """Runnable signatures by key."""

  @property
  @abc.abstractmethod
  def signature_defs(self) -> Mapping[str, object]:
    """``SignatureDef`` protos by key, as GetModelMetadata returns them."""

  @abc.abstractmethod
  def run(self, signature_name: str, inputs: Mapping[str, np.ndarray],
          output_aliases: Sequence[str]) -> Dict[str, np.ndarray]:
    """Runs one signature on validated inputs.

    Args:
      signature_name: a key of :attr:`signatures`.
      inputs: alias -> array, already checked against the signature.
      output_aliases: the outputs to return.

    Returns:
      alias -> array for each of `output_aliases`.

    Raises:
      ServingError: the model rejected the inputs or failed.
    """

  def close(self) -> None:
    """Releases the model's resources; no request runs on it afterwards."""

  # In-flight accounting: the manager unloads a version only once the requests
  # that started on it have finished.
  def acquire(self) -> None:
    with self._in_flight_lock:
      self._in_flight += 1

  def release(self) -> None:
    with self._in_flight_lock:
      self._in_flight -= 1
      if self._in_flight == 0:
        self._in_flight_lock.notify_all()

  @property
  def in_flight(self) -> int:
    return self._in_flight

  def wait_idle(self, timeout_s: float) -> bool:
    """Waits until no request runs on this version; False on timeout."""
    with self._in_flight_lock:
      return self._in_flight_lock.wait_for(lambda: self._in_flight == 0,
                                           timeout=timeout_s)

  def __repr__(self):
    return f'{type(self).__name__}({self.name!r}, {self.version})'
