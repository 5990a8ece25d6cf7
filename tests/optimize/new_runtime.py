"""A runtime that is not leantfx's, written as one module: the whole of it.

tests/optimize/test_runtime_interface.py registers it with the one line a
new runtime adds to leantfx/runtimes/registry.py's ``BY_NAME`` and checks
that the optimizer's export, its predictors and ``leantfx serve`` reach it
with no other edit. It is what a module in leantfx/runtimes/ would hold:
files, predictor, timer, export and serving session.

"LiteRT" here is TFLite's interpreter under another name and file
(model.litert, a float32 TFLite flatbuffer), so it runs anywhere the tests
run. Its export converts the candidate's serving SavedModel with the TFLite
converter; it offers float32 only and no raw-feature export.
"""
import os
import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from leantfx.errors import ConfigError
from leantfx.runtimes import exporter as exporter_lib
from leantfx.runtimes import runtime as runtime_lib
from leantfx.runtimes import serving_export
from leantfx.runtimes import timing
from leantfx.runtimes import tflite as tflite_runtime

MODEL_FILE = 'model.litert'


class LiteRTExporter(exporter_lib.Exporter):
  """The serving SavedModel through the TFLite converter, float32 only."""

  modes = (exporter_lib.FLOAT32,)

  def export_saved_model(self, saved_model_dir: str, mode: str,
                         samples: Optional[List[Dict[str, np.ndarray]]],
                         output_dir: str, cache: Dict[str, Any]) -> str:
    del samples, cache  # float32 only: nothing to calibrate or share.
    if mode not in self.modes:
      raise ConfigError(f'Unknown LiteRT mode {mode!r}; use one of '
                        f'{self.modes}.')
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    converter = tf.lite.TFLiteConverter.from_saved_model(
        saved_model_dir, signature_keys=[serving_export.SERVING_SIGNATURE])
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, MODEL_FILE)
    with open(path, 'wb') as f:
      f.write(converter.convert())
    return path

  def export_raw(self, saved_model: str, mode: str,
                 samples: List[Mapping[str, np.ndarray]],
                 vocabularies: Mapping[str, List[bytes]],
                 output_dir: str) -> str:
    raise ConfigError('LiteRT offers no raw-feature export; ship the '
                      'transformed-input model.')


class LiteRTSession(runtime_lib.ServingSession):
  """One prepared interpreter, one request at a time (it is not
  thread-safe)."""

  def __init__(self, folder: str, num_threads: int):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    path = os.path.join(folder, MODEL_FILE)
    try:
      interpreter = tf.lite.Interpreter(model_path=path,
                                        num_threads=num_threads)
      self._signature = tflite_runtime.prepare_interpreter(interpreter)[
          serving_export.SERVING_SIGNATURE]
    except Exception as e:  # pylint: disable=broad-except
      raise runtime_lib.SessionLoadError(
          f'{path} is not a loadable LiteRT model: {type(e).__name__}: '
          f'{e}') from e
    self._lock = threading.Lock()

    def spec(detail):
      shape = detail.get('shape_signature')
      return runtime_lib.TensorSpec(
          np.dtype(detail['dtype']),
          tuple(int(d) for d in (detail['shape'] if shape is None else
                                 shape)))

    self.inputs = {n: spec(d) for n, d in
                   sorted(self._signature.input_details.items())}
    self.outputs = {n: spec(d) for n, d in
                    sorted(self._signature.output_details.items())}

  def run(self, inputs: Mapping[str, np.ndarray],
          output_aliases: Sequence[str]) -> Dict[str, np.ndarray]:
    with self._lock:
      try:
        return self._signature.run(inputs, output_aliases)
      except (ValueError, RuntimeError) as e:
        raise runtime_lib.SessionRunError(str(e)) from None


class LiteRTRuntime(runtime_lib.Runtime):
  """TFLite's interpreter on a model.litert file."""

  name = 'litert'
  label = 'LiteRT'
  model_file = MODEL_FILE
  files = (MODEL_FILE,)
  required_modules = ('tensorflow',)
  timed_call = 'invoke() on a prepared interpreter, inputs bound once'
  exporter = LiteRTExporter()

  def predictor(self, path: str,
                num_threads: int = timing.DEFAULT_NUM_THREADS,
                lookups: Optional[runtime_lib.Lookups] = None
               ) -> tflite_runtime.TFLitePredictor:
    if lookups:
      raise ConfigError(f'{path}: LiteRT takes no vocabulary ids.')
    return tflite_runtime.TFLitePredictor(path, num_threads=num_threads)

  def timer(self, label: str, path: str, num_threads: int,
            features: Optional[Mapping[str, np.ndarray]]
           ) -> tflite_runtime.TFLiteTimer:
    return tflite_runtime.TFLiteTimer(
        timing.LatencyVariant(label, path, num_threads, features))

  def serving_session(self, folder: str,
                      num_threads: int = timing.DEFAULT_NUM_THREADS
                     ) -> LiteRTSession:
    return LiteRTSession(folder, num_threads)


RUNTIME = LiteRTRuntime()
