"""A loaded model version, whatever runs it, and how a version directory is loaded.

Both backends (:mod:`saved_model_servable`, :mod:`tflite_servable`) present the
same face: signatures with dtypes and shapes, the ``SignatureDef`` protos that
the metadata API returns, and ``run(signature, inputs, outputs)`` on numpy
arrays. The request path never asks which backend it talks to.

The backend is chosen per version directory: ``model.tflite`` means TFLite,
``model.xml`` OpenVINO, ``model.onnx`` ONNX Runtime
(:mod:`runtime_servables`), ``saved_model.pb``/``.pbtxt`` a TensorFlow
SavedModel. A model config's
``model_platform: "tflite"`` forces TFLite.
"""
import abc
import os
import threading
from typing import Dict, Mapping, Sequence

import numpy as np

from leantfx.serving import signature as signature_lib
from leantfx.serving import status

TFLITE_FILENAME = 'model.tflite'
SAVED_MODEL_FILENAMES = ('saved_model.pb', 'saved_model.pbtxt')
PLATFORM_TENSORFLOW = 'tensorflow'
PLATFORM_TFLITE = 'tflite'
PLATFORM_OPENVINO = 'openvino'
PLATFORM_ONNX = 'onnx'
OPENVINO_FILENAME = 'model.xml'
ONNX_FILENAME = 'model.onnx'


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


def detect_platform(path: str, configured_platform: str = '') -> str:
  """Returns which backend serves a version directory.

  Args:
    path: the version directory.
    configured_platform: ``model_platform`` from the model config ('' or
      ``tensorflow`` for auto, ``tflite`` to force TFLite).

  Raises:
    LoadError: NOT_FOUND when the directory holds neither kind of model, or
      the configured platform is unknown.
  """
  if configured_platform not in ('', PLATFORM_TENSORFLOW, PLATFORM_TFLITE):
    raise LoadError(
        f'Unknown model_platform {configured_platform!r}; use "tensorflow" '
        '(SavedModel, or TFLite when the version has model.tflite) or '
        '"tflite".', status.Code.INVALID_ARGUMENT)
  if configured_platform == PLATFORM_TFLITE or os.path.isfile(
      os.path.join(path, TFLITE_FILENAME)):
    return PLATFORM_TFLITE
  # The ModelOptimizer's OpenVINO and ONNX pushes, known by their model file.
  if os.path.isfile(os.path.join(path, OPENVINO_FILENAME)):
    return PLATFORM_OPENVINO
  if os.path.isfile(os.path.join(path, ONNX_FILENAME)):
    return PLATFORM_ONNX
  if any(os.path.isfile(os.path.join(path, f)) for f in SAVED_MODEL_FILENAMES):
    return PLATFORM_TENSORFLOW
  # TensorFlow's own message for a directory without a SavedModel.
  raise LoadError(
      f'SavedModel file does not exist at: {path}/'
      '{saved_model.pbtxt|saved_model.pb}; a TFLite version needs '
      f'{TFLITE_FILENAME}.', status.Code.NOT_FOUND)


def load_servable(name: str, version: int, path: str,
                  configured_platform: str = '') -> Servable:
  """Loads one version directory with the backend it calls for.

  Args:
    name: model name.
    version: version number.
    path: the version directory.
    configured_platform: see :func:`detect_platform`.

  Returns:
    The loaded servable (not yet warmed up).

  Raises:
    LoadError: the directory is missing files, truncated or not a model.
  """
  platform = detect_platform(path, configured_platform)
  if platform == PLATFORM_TFLITE:
    from leantfx.serving import tflite_servable  # pylint: disable=g-import-not-at-top
    return tflite_servable.TfLiteServable(name, version, path)
  if platform in (PLATFORM_OPENVINO, PLATFORM_ONNX):
    from leantfx.serving import runtime_servables  # pylint: disable=g-import-not-at-top
    if platform == PLATFORM_OPENVINO:
      return runtime_servables.OpenVINOServable(name, version, path)
    return runtime_servables.ONNXServable(name, version, path)
  from leantfx.serving import saved_model_servable  # pylint: disable=g-import-not-at-top
  return saved_model_servable.SavedModelServable(name, version, path)
