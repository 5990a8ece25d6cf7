"""ONNX Runtime as the runtime runs it: a session with inputs bound once.

``ONNXPredictor`` opens model.onnx in an ``InferenceSession`` on the CPU
execution provider with a fixed intra-op thread count (sequential execution,
every graph optimization), and feeds it through ``feed`` (strings as ``str``
objects, as ``leantfx serve``'s ONNX servable converts strings).
``ONNXTimer`` binds the inputs once through IO binding and times
``run_with_iobinding`` alone; the per-call overhead path is
``session.run(None, feed)``, the one-line call a client writes.
"""
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

import numpy as np

from leantfx.runtimes import runtime as runtime_lib
from leantfx.runtimes import timing
from leantfx.errors import ConfigError


def open_session(path: str, num_threads: int):
  """An InferenceSession on the CPU with `num_threads` intra-op threads."""
  import onnxruntime as ort  # pylint: disable=g-import-not-at-top
  options = ort.SessionOptions()
  options.intra_op_num_threads = int(num_threads)
  options.inter_op_num_threads = 1
  options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
  options.graph_optimization_level = (
      ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
  return ort.InferenceSession(path, options,
                              providers=['CPUExecutionProvider'])


# ONNX Runtime's tensor type names -> numpy types (strings: ``str``
# objects in an object array).
NUMPY_TYPES = {'tensor(float)': np.float32, 'tensor(double)': np.float64,
               'tensor(int64)': np.int64, 'tensor(int32)': np.int32,
               'tensor(int8)': np.int8, 'tensor(uint8)': np.uint8,
               'tensor(bool)': np.bool_, 'tensor(string)': np.object_}


def strings_in(value) -> np.ndarray:
  """A string array as ONNX Runtime reads it: an object array of ``str``.

  An object array of ``bytes`` would be read as "b'...'", which a
  vocabulary looks up as unseen.
  """
  value = np.asarray(value)
  out = np.empty(value.size, dtype=object)
  out[:] = [v.decode('utf-8') if isinstance(v, bytes) else str(v)
            for v in value.ravel()]
  return out.reshape(value.shape)


def feed(input_types: Mapping[str, type], values: Mapping[str, np.ndarray],
         lookups: Optional[runtime_lib.Lookups] = None
        ) -> Dict[str, np.ndarray]:
  """``values`` as ONNX Runtime takes them for inputs of ``input_types``.

  A column in ``lookups`` becomes its ids; a string input's values become
  ``str`` objects (strings_in), and so do strings for an input of unknown
  type; the rest is cast to its input's type (float32 by default, int64
  for vocabulary ids). The optimizer's predictors feed a session through
  it; ``leantfx serve``'s ONNX servable converts its string inputs with
  strings_in too (its numbers are checked against the signature already).
  """
  out = {}
  for name, value in values.items():
    if lookups and name in lookups:
      value = lookups[name](value)
    dtype = input_types.get(name)
    if dtype is np.object_ or (dtype is None and
                               runtime_lib.is_string(value)):
      out[name] = strings_in(value)
    else:
      out[name] = np.ascontiguousarray(value, dtype or np.float32)
  return out


# Answers to the same rows may differ this much (in any float output)
# between batch sizes, repeats and thread counts before an int8 file is
# called batch-dependent: an int8 kernel's rounding moves an output by a
# quantum (1/255 of a uint8 range); the defect this catches moved
# probabilities by 0.4-0.99.
BATCH_INVARIANCE_TOLERANCE = 0.02
# The batch the check runs (ONNX Runtime 1.23.2's int8 MatMul answered
# wrongly from batch 32 up, never at 1-16, on this machine's Xeon with
# AVX-512 VNNI and AMX).
INVARIANCE_BATCH = 64


def batch_dependence(path: str,
                     samples: Sequence[Mapping[str, np.ndarray]]) -> float:
  """How far one file's answers to the same rows move with how it is run.

  The rows (batch-1 feeds as ONNX Runtime takes them, tiled to
  INVARIANCE_BATCH) are run as one batch three times and one at a time, on
  one intra-op thread and on two; the result is the largest absolute gap
  between any two of those answers, over every float output. A sound file
  answers 0 (or a rounding quantum): a row's answer depends on that row
  alone. Measured on a MobileNetV2's static int8 file (ONNX Runtime 1.23.2,
  every graph optimization): repeats of one batch of 64 digits rows gave
  probabilities up to 0.998 apart; the same file run with its QDQ pairs
  left unfused gave none.
  """
  if not samples:
    return 0.0
  rows = [samples[i % len(samples)] for i in range(INVARIANCE_BATCH)]
  batch = {name: np.concatenate([np.asarray(r[name]) for r in rows])
           for name in rows[0]}
  answers = []
  for threads in (1, 2):
    session = open_session(path, threads)
    floats = [o.name for o in session.get_outputs()
              if o.type in ('tensor(float)', 'tensor(double)')]
    if not floats:
      return 0.0
    for _ in range(3):
      answers.append(session.run(floats, batch))
    singles = [session.run(floats, dict(r)) for r in rows]
    answers.append([np.concatenate([s[k] for s in singles])
                    for k in range(len(floats))])
  first = answers[0]
  return max(float(np.max(np.abs(np.asarray(a, np.float64) -
                                 np.asarray(b, np.float64))))
             for answer in answers[1:] for a, b in zip(answer, first))


class ONNXPredictor:
  """Runs model.onnx in ONNX Runtime: a variant, or a raw-feature export.

  The score is 'probabilities' (or 'predictions' for a regression) when the
  model has it, else its one output (runtime_lib.score_output).
  """

  def __init__(self, path: str,
               num_threads: int = timing.DEFAULT_NUM_THREADS,
               lookups: Optional[runtime_lib.Lookups] = None):
    self.path = path
    self.session = open_session(path, num_threads)
    self.lookups = dict(lookups or {})
    self.input_names = [i.name for i in self.session.get_inputs()]
    # Each input's numpy type (float32, int64 for a vocabulary id, str
    # objects for a string): features are cast to it.
    self.input_types = {i.name: NUMPY_TYPES.get(i.type, np.float32)
                        for i in self.session.get_inputs()}
    self.output_name = runtime_lib.score_output(
        [o.name for o in self.session.get_outputs()])

  def feed(self, features: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    missing = [n for n in self.input_names if n not in features]
    if missing:
      raise ConfigError(f'The features lack the ONNX input(s) {missing}; they '
                        f'have {sorted(features)}.')
    return feed(self.input_types, {n: features[n] for n in self.input_names},
                self.lookups)

  def predict(self, features: Mapping[str, np.ndarray]) -> np.ndarray:
    (scores,) = self.session.run([self.output_name], self.feed(features))
    return np.asarray(scores, np.float32)

  def bind(self, features: Mapping[str, np.ndarray]) -> Callable[[], Any]:
    """The feed converted once, then ``session.run`` on it (IO binding, the
    timer's call, takes no string tensors)."""
    inputs, run, output = self.feed(features), self.session.run, [
        self.output_name]
    return lambda: run(output, inputs)

  def push_facts(self, rows: Sequence[Mapping[str, np.ndarray]]
                ) -> Dict[str, Any]:
    del rows  # A session answers every batch the same way.
    return {}


class ONNXTimer(timing.RuntimeTimer):
  """A session with IO binding: inputs bound once, the output preallocated."""

  def __init__(self, label: str, path: str, num_threads: int,
               features: Mapping[str, np.ndarray]):
    self.variant = timing.LatencyVariant(label, path, num_threads)
    self.predictor = ONNXPredictor(path, num_threads)
    self.inputs = self.predictor.feed(features)
    self.batch_size = int(next(iter(self.inputs.values())).shape[0])
    session = self.predictor.session
    self.binding = session.io_binding()
    for name, value in self.inputs.items():
      self.binding.bind_cpu_input(name, value)
    self.binding.bind_output(self.predictor.output_name)
    # The first run allocates the output; later runs reuse it.
    session.run_with_iobinding(self.binding)
    run, binding = session.run_with_iobinding, self.binding
    self.invoke = lambda: run(binding)

  def call(self) -> None:
    self.predictor.session.run(None, self.inputs)


class ONNXRuntime(runtime_lib.Runtime):
  """ONNX Runtime's CPU execution provider: model.onnx."""

  name = 'onnx'
  label = 'ONNX'
  model_file = 'model.onnx'
  files = ('model.onnx',)
  required_modules = ('onnxruntime', 'tf2onnx', 'onnx')
  timed_call = 'InferenceSession.run_with_iobinding(), inputs bound once'

  def predictor(self, path: str,
                num_threads: int = timing.DEFAULT_NUM_THREADS,
                lookups: Optional[runtime_lib.Lookups] = None
               ) -> ONNXPredictor:
    return ONNXPredictor(path, num_threads, lookups)

  def timer(self, label: str, path: str, num_threads: int,
            features: Mapping[str, np.ndarray]) -> ONNXTimer:
    return ONNXTimer(label, path, num_threads, features)


RUNTIME = ONNXRuntime()
