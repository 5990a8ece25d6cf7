"""What every runtime implements: one interface, one module per runtime.

A runtime the ModelOptimizer exports to and ``leantfx serve`` runs (TFLite,
OpenVINO, ONNX Runtime) is a ``Runtime``:

- ``name`` and ``label``: how configs and messages name it;
- ``model_file``, ``files`` and ``optional_files``: the layout of an
  export and of a pushed version (``model_file`` is the one it loads, and
  the one ``leantfx serve`` recognizes a version by);
- ``required_modules``: what must be installed to export and run it;
- ``predictor``: the model loaded, predicting a batch of features: the
  transformed features of a variant, or the raw columns of a raw-feature
  export (a column the model takes as vocabulary ids looked up first;
  strings converted as the runtime reads them, by its module's functions,
  which ``leantfx serve``'s servables use too);
- ``timer``: the model prepared for the interleaved latency measurement,
  its inputs bound once (``timing.RuntimeTimer``); ``timed_call`` says
  which call is timed;
- ``exporter``: how the ModelOptimizer writes its variants from a
  candidate's serving SavedModel, float32 and int8, and its raw-feature
  export from the Transform's wrapper SavedModel (exporter.py's
  ``Exporter``; serving_export.py saves the SavedModel and draws the int8
  calibration rows); None for TFLite, whose variants the optimizer builds
  in its own process beside training;
- ``serving_session``: a pushed version loaded for ``leantfx serve``
  (``ServingSession``: its inputs and outputs as numpy dtype and shape,
  ``run``, ``close``), which serving/runtime_servable.py wraps for every
  runtime (status codes, signature protos, the manifest check). TFLite
  keeps a servable of its own (serving/tflite_servable.py says why);
- ``check_files`` and ``verify``: what ``leantfx serve`` checks before a
  version's files reach the runtime's native loader. ``check_files`` runs
  in the server (sizes and magic bytes: reading bytes cannot crash it);
  ``verify`` opens the files with the runtime's own loader and runs in a
  child process (serving/model_file_check.py), where a loader that crashes
  on a damaged file takes only the child down. By default it opens the
  version's serving session; a runtime with its own verifier overrides it.

Each runtime's module (tflite.py, openvino.py, onnx.py here) holds all of
that for its runtime, with its heavy imports (TensorFlow, OpenVINO, NNCF,
tf2onnx, ONNX Runtime) inside the functions that need them, and
registry.py lists them: adding a runtime is one module plus its line in the
registry's ``BY_NAME``. The optimizer (components/optimize/export/) and the
server (serving/loading.py) reach a runtime only through the registry
(tests/optimize/test_runtime_interface.py registers one that is not
leantfx's and checks both reach it).
"""
import abc
import os
from typing import (Any, Callable, Dict, Mapping, NamedTuple, Optional,
                    Protocol, Sequence, Tuple)

import numpy as np

from leantfx.runtimes import exporter as exporter_lib
from leantfx.runtimes import timing

# The outputs scored, in preference order, when a model has several (a
# raw-feature export answers 'probabilities' or 'predictions' beside class
# ids and names, as the Trainer's serving signature does).
SCORE_OUTPUTS = ('probabilities', 'predictions')


# {column: a callable mapping a [batch] array of strings to int64 ids}: the
# vocabularies a model that takes vocabulary ids carries beside its file
# (string_lookups.StringLookup).
Lookups = Mapping[str, Callable[[np.ndarray], np.ndarray]]


def is_string(value) -> bool:
  """Whether an array holds strings (bytes, str or object)."""
  return np.asarray(value).dtype.kind in ('O', 'S', 'U')


def score_output(names: Sequence[str]) -> str:
  """The output scored: the first of SCORE_OUTPUTS a model has, else the
  first name in sorted order (a variant's model has one output)."""
  return next((n for n in SCORE_OUTPUTS if n in names), sorted(names)[0])


class Predictor(Protocol):
  """A model loaded in its runtime: features in, the scored output out."""

  def predict(self, features: Mapping[str, np.ndarray]) -> np.ndarray:
    """The score output ('probabilities', or 'predictions') for a batch."""


class RawPredictor(Predictor, Protocol):
  """A server runtime's predictor, as the raw-column fold measures it."""

  def bind(self, features: Mapping[str, np.ndarray]) -> Callable[[], Any]:
    """Prepares ``features`` once; returns the runtime's own call on them."""

  def push_facts(self, rows: Sequence[Mapping[str, np.ndarray]]
                ) -> Dict[str, Any]:
    """Facts about the model the push's manifest keeps, measured on
    batch-1 ``rows`` (none for most runtimes)."""


class TensorSpec(NamedTuple):
  """One input or output of a serving session.

  Attributes:
    dtype: its numpy type; ``object`` for strings (object arrays of bytes).
    shape: its dims, -1 where a dim is not fixed (the batch).
  """
  dtype: np.dtype
  shape: Tuple[int, ...]


class SessionLoadError(Exception):
  """A version's files cannot be loaded to serve (truncated, altered, or
  not this runtime's model); the message says which file and why."""


class SessionRunError(Exception):
  """The model refused a request's inputs, or failed on them."""


def bytes_objects(value) -> np.ndarray:
  """A string array as a serving session answers it: an object array of
  bytes (what the SavedModel and TFLite servables answer too)."""
  value = np.asarray(value)
  out = np.empty(value.size, dtype=object)
  out[:] = [v if isinstance(v, bytes) else str(v).encode('utf-8')
            for v in value.ravel()]
  return out.reshape(value.shape)


class ServingSession(abc.ABC):
  """A pushed version loaded in its runtime to serve requests.

  ``leantfx serve`` wraps it in one servable for every runtime
  (serving/runtime_servable.py: the signature, status codes, the manifest
  check), which calls ``run`` from several threads at once: a session is
  safe to call concurrently (a pool of infer requests, a thread-safe
  session). ``run`` is the request path: it binds, runs and reads the
  model with nothing in between.

  Attributes:
    inputs: alias -> TensorSpec of what a request carries, in the order
      the signature lists them.
    outputs: alias -> TensorSpec of what it may ask for.
  """
  inputs: Dict[str, TensorSpec]
  outputs: Dict[str, TensorSpec]

  @abc.abstractmethod
  def run(self, inputs: Mapping[str, np.ndarray],
          output_aliases: Sequence[str]) -> Dict[str, np.ndarray]:
    """Runs the model on one request.

    Args:
      inputs: alias -> array, already checked against ``inputs`` (dtype and
        shape); strings as object arrays of bytes.
      output_aliases: the outputs to return.

    Returns:
      alias -> array for each of ``output_aliases``; strings as object
      arrays of bytes (``bytes_objects``).

    Raises:
      SessionRunError: the model refused the inputs or failed.
    """

  def close(self) -> None:
    """Releases the model; no request runs on it afterwards."""


class Runtime(abc.ABC):
  """One runtime: its files, its predictor and its timer.

  Attributes:
    name: the runtime's name in configs, flags and push bases ('tflite').
    label: how messages and reports name it ('TFLite').
    model_file: the file the runtime loads, in an export's or a pushed
      version's folder.
    files: every file of the model, model_file first.
    optional_files: files pushed with the model when its export wrote them
      (listed and hashed in the manifest).
    required_modules: the Python modules its export and measurement import.
    timed_call: the call its timer times, as the variants' facts say it.
    exporter: how the ModelOptimizer writes its float32 and int8 variants
      (and raw-feature exports) in its worker; None for TFLite, whose
      variants are built in the optimizer's own process, beside training.
  """
  name: str
  label: str
  model_file: str
  files: Tuple[str, ...]
  optional_files: Tuple[str, ...] = ()
  required_modules: Tuple[str, ...] = ()
  timed_call: str = ''
  exporter: Optional[exporter_lib.Exporter] = None

  def model_path(self, folder: str) -> str:
    """The file this runtime loads in ``folder``."""
    return os.path.join(folder, self.model_file)

  def artifact_path(self, model_path: str) -> str:
    """What is sized and pushed: the model file, or the folder of a model
    that is several files (OpenVINO's model.xml + model.bin)."""
    if len(self.files) > 1:
      return os.path.dirname(model_path)
    return model_path

  def model_in_artifact(self, artifact: str) -> str:
    """The file this runtime loads in an ``artifact_path``."""
    if len(self.files) > 1:
      return self.model_path(artifact)
    return artifact

  @abc.abstractmethod
  def predictor(self, path: str,
                num_threads: int = timing.DEFAULT_NUM_THREADS,
                lookups: Optional[Lookups] = None) -> Predictor:
    """Loads the model file at ``path`` (``model_file``) to predict.

    ``lookups``: the vocabularies of the columns the model takes as ids
    (read from its folder by the caller); None or empty for most models.
    """

  @abc.abstractmethod
  def timer(self, label: str, path: str, num_threads: int,
            features: Optional[Mapping[str, np.ndarray]]
           ) -> timing.RuntimeTimer:
    """The model at ``path`` prepared for timing on ``features`` (a batch)."""

  def serving_session(self, folder: str,
                      num_threads: int = timing.DEFAULT_NUM_THREADS
                     ) -> ServingSession:
    """A pushed version's folder loaded to serve requests.

    What ``leantfx serve`` runs a version of this runtime on (its servable:
    serving/runtime_servable.py). TFLite's servable is its own
    (serving/tflite_servable.py, which says why) and has no session.

    Raises:
      SessionLoadError: the folder's files cannot be loaded.
    """
    raise SessionLoadError(f'{folder}: leantfx serve has no {self.label} '
                           'serving session.')

  def check_files(self, folder: str) -> None:
    """Checks a version's files without opening them in the runtime.

    Every file of ``files`` must be there and not empty; a runtime whose
    files carry magic bytes checks them too (by overriding this). Safe to
    run in the server: it reads bytes, nothing native parses them.

    Raises:
      SessionLoadError: a file is missing, empty or not this runtime's.
    """
    for name in self.files:
      path = os.path.join(folder, name)
      try:
        size = os.path.getsize(path)
      except OSError as e:
        raise SessionLoadError(f'{path} cannot be read: {e}') from e
      if size == 0:
        raise SessionLoadError(f'{path} is empty (0 bytes): the copy did '
                               'not finish or failed.')

  def verify(self, folder: str) -> None:
    """Opens a version's files with the runtime's own loader, then drops them.

    Run in a child process (serving/model_file_check.py): a native loader
    may crash on a damaged file. By default the version's serving session
    is opened and closed, the very load the server then does.

    Raises:
      SessionLoadError: the runtime refuses the files.
    """
    self.serving_session(folder, 1).close()

  def __repr__(self) -> str:
    return f'<Runtime {self.name}>'
