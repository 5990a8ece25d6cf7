"""How a version directory is loaded: which backend serves it, then the load.

The backend is chosen per version directory: ``model.tflite`` means TFLite
(:mod:`tflite_servable`), ``model.xml`` OpenVINO and ``model.onnx`` ONNX
Runtime (:mod:`runtime_servables`), ``saved_model.pb``/``.pbtxt`` a
TensorFlow SavedModel (:mod:`saved_model_servable`). A model config's
``model_platform: "tflite"`` forces TFLite. Every backend is a
:class:`servable.Servable`; the model manager loads versions through
:func:`load_servable` and never asks which backend it got.
"""
import os

from leantfx.serving import saved_model_servable
from leantfx.serving import servable as servable_lib
from leantfx.serving import status
from leantfx.serving import tflite_servable


def detect_platform(path: str, configured_platform: str = '') -> str:
  """Returns which backend serves a version directory.

  Args:
    path: the version directory.
    configured_platform: ``model_platform`` from the model config ('' or
      ``tensorflow`` for auto, ``tflite`` to force TFLite).

  Raises:
    servable_lib.LoadError: NOT_FOUND when the directory holds no kind of
      model, or the configured platform is unknown.
  """
  if configured_platform not in ('', servable_lib.PLATFORM_TENSORFLOW,
                                 servable_lib.PLATFORM_TFLITE):
    raise servable_lib.LoadError(
        f'Unknown model_platform {configured_platform!r}; use "tensorflow" '
        '(SavedModel, or TFLite when the version has model.tflite) or '
        '"tflite".', status.Code.INVALID_ARGUMENT)
  if configured_platform == servable_lib.PLATFORM_TFLITE or os.path.isfile(
      os.path.join(path, servable_lib.TFLITE_FILENAME)):
    return servable_lib.PLATFORM_TFLITE
  # The ModelOptimizer's OpenVINO and ONNX pushes.
  if os.path.isfile(os.path.join(path, servable_lib.OPENVINO_FILENAME)):
    return servable_lib.PLATFORM_OPENVINO
  if os.path.isfile(os.path.join(path, servable_lib.ONNX_FILENAME)):
    return servable_lib.PLATFORM_ONNX
  if any(os.path.isfile(os.path.join(path, f))
         for f in servable_lib.SAVED_MODEL_FILENAMES):
    return servable_lib.PLATFORM_TENSORFLOW
  # TensorFlow's own message for a directory without a SavedModel.
  raise servable_lib.LoadError(
      f'SavedModel file does not exist at: {path}/'
      '{saved_model.pbtxt|saved_model.pb}; a TFLite version needs '
      f'{servable_lib.TFLITE_FILENAME}.', status.Code.NOT_FOUND)


def load_servable(name: str, version: int, path: str,
                  configured_platform: str = '') -> servable_lib.Servable:
  """Loads one version directory with the backend it calls for.

  Args:
    name: model name.
    version: version number.
    path: the version directory.
    configured_platform: see :func:`detect_platform`.

  Returns:
    The loaded servable (not yet warmed up).

  Raises:
    servable_lib.LoadError: the directory is missing files, truncated or not
      a model.
  """
  platform = detect_platform(path, configured_platform)
  if platform == servable_lib.PLATFORM_TFLITE:
    return tflite_servable.TfLiteServable(name, version, path)
  if platform in (servable_lib.PLATFORM_OPENVINO, servable_lib.PLATFORM_ONNX):
    # Imported on the first OpenVINO or ONNX version only: importing the
    # module loads TensorFlow (its runtime and raw-feature imports do), which
    # a server of TFLite versions never needs.
    from leantfx.serving import runtime_servables  # pylint: disable=g-import-not-at-top
    if platform == servable_lib.PLATFORM_OPENVINO:
      return runtime_servables.OpenVINOServable(name, version, path)
    return runtime_servables.ONNXServable(name, version, path)
  return saved_model_servable.SavedModelServable(name, version, path)
