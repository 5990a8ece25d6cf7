"""How a version directory is loaded: which backend serves it, then the load.

The backend is chosen per version directory, through the runtime registry
(leantfx/runtimes/registry.py): a version holding a runtime's ``model_file``
(model.tflite, model.xml, model.onnx: the ModelOptimizer's pushes) is served
by that runtime, checked in the registry's order: on the runtime's serving
session, wrapped by the one servable every runtime shares
(:mod:`runtime_servable`), unless ``SERVABLES`` gives the runtime a servable
of its own (TFLite's: :mod:`tflite_servable` says why). A new runtime in the
registry is served with no line here. Otherwise ``saved_model.pb``/
``.pbtxt`` means a TensorFlow SavedModel (:mod:`saved_model_servable`). A
model config's ``model_platform`` may name a runtime to force it
(``"tflite"``, as TF Serving's config spells TFLite).
A runtime's version is checked first (:mod:`model_file_check`: sizes,
magic bytes, its manifest, and the runtime's own loader in a child process),
so a damaged file never reaches a native loader in the server.
Every backend is a :class:`servable.Servable`; the model manager loads
versions through :func:`load_servable` and never asks which backend it got.
"""
import os
from typing import Callable, Dict, Optional

from leantfx.runtimes import registry as runtimes_lib
from leantfx.runtimes import runtime as runtime_lib
from leantfx.runtimes import tflite as tflite_runtime
from leantfx.serving import model_file_check
from leantfx.serving import saved_model_servable
from leantfx.serving import servable as servable_lib
from leantfx.serving import status
from leantfx.serving import tflite_servable

ServableFactory = Callable[[str, int, str], servable_lib.Servable]


# The runtimes served by a servable of their own rather than on their
# serving session (:mod:`runtime_servable`).
SERVABLES: Dict[runtime_lib.Runtime, ServableFactory] = {
    tflite_runtime.RUNTIME: tflite_servable.TfLiteServable,
}


def _runtime_servable(runtime: runtime_lib.Runtime, name: str, version: int,
                      path: str) -> servable_lib.Servable:
  """A version on its runtime's serving session.

  :mod:`runtime_servable` is imported when first used: it loads TensorFlow
  (through the push's manifest check); importing this module (every
  ``leantfx`` command does, through the CLI) does not.
  """
  from leantfx.serving import runtime_servable  # pylint: disable=g-import-not-at-top
  return runtime_servable.RuntimeServable(runtime, name, version, path)


def runtime_of(path: str, configured_platform: str = ''
              ) -> Optional[runtime_lib.Runtime]:
  """The runtime that serves a version directory; None for a SavedModel.

  Args:
    path: the version directory.
    configured_platform: ``model_platform`` from the model config ('' or
      ``tensorflow`` for auto, a runtime's name to force it).

  Raises:
    servable_lib.LoadError: NOT_FOUND when the directory holds no kind of
      model, INVALID_ARGUMENT when the configured platform is unknown.
  """
  if configured_platform in runtimes_lib.BY_NAME:
    return runtimes_lib.BY_NAME[configured_platform]
  if configured_platform not in ('', servable_lib.PLATFORM_TENSORFLOW):
    raise servable_lib.LoadError(
        f'Unknown model_platform {configured_platform!r}; use "tensorflow" '
        '(SavedModel, or the runtime whose model file the version has: '
        f'{_model_files()}) or a runtime\'s name to force it: '
        f'{", ".join(repr(r) for r in runtimes_lib.RUNTIMES)}.',
        status.Code.INVALID_ARGUMENT)
  for runtime in runtimes_lib.BY_NAME.values():
    if os.path.isfile(runtime.model_path(path)):
      return runtime
  if any(os.path.isfile(os.path.join(path, f))
         for f in servable_lib.SAVED_MODEL_FILENAMES):
    return None
  # TensorFlow's own message for a directory without a SavedModel.
  raise servable_lib.LoadError(
      f'SavedModel file does not exist at: {path}/'
      '{saved_model.pbtxt|saved_model.pb}; a runtime\'s version needs its '
      f'model file: {_model_files()}.', status.Code.NOT_FOUND)


def _model_files() -> str:
  """'model.tflite (TFLite), model.xml (OpenVINO), ...' from the registry."""
  return ', '.join(f'{r.model_file} ({r.label})'
                   for r in runtimes_lib.BY_NAME.values())


def load_servable(name: str, version: int, path: str,
                  configured_platform: str = '') -> servable_lib.Servable:
  """Loads one version directory with the backend it calls for.

  Args:
    name: model name.
    version: version number.
    path: the version directory.
    configured_platform: see :func:`runtime_of`.

  Returns:
    The loaded servable (not yet warmed up).

  Raises:
    servable_lib.LoadError: the directory is missing files, truncated or not
      a model (model_file_check.ModelFileError when its files fail the
      checks before the loader).
  """
  runtime = runtime_of(path, configured_platform)
  if runtime is None:
    return saved_model_servable.SavedModelServable(name, version, path)
  model_file_check.check_version(runtime, path)
  if runtime in SERVABLES:
    return SERVABLES[runtime](name, version, path)
  return _runtime_servable(runtime, name, version, path)
