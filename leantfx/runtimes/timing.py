"""What every runtime's timer shares: the variant to time and the timer's interface.

components/optimize/evaluation/measure.py's ``measure_latency_interleaved``
times the variants of every runtime in the same interleaved rounds; each
runtime's timer (tflite.py, openvino.py, onnx.py here: each ``Runtime``'s
``timer``, runtime.py) subclasses ``RuntimeTimer``. They live in this ground layer
because the runtime modules do, so the server uses those without the
optimizer.
"""
from typing import Callable, List, Mapping, NamedTuple, Optional

import numpy as np

DEFAULT_NUM_THREADS = 1


class LatencyVariant(NamedTuple):
  """One .tflite file to time, as ``measure_latency_interleaved`` takes it.

  Attributes:
    label: unique name of the variant in the result.
    path: the .tflite file.
    num_threads: interpreter threads (1, or the deploy target's count).
    features: float inputs by name, with the batch to time (e.g. one eval
      example); None times zeros of batch 1.
  """
  label: str
  path: str
  num_threads: int = DEFAULT_NUM_THREADS
  features: Optional[Mapping[str, np.ndarray]] = None


class RuntimeTimer:
  """A model prepared in its runtime for timing, its inputs bound once.

  The runtime modules (tflite.py's ``TFLiteTimer``, openvino.py, onnx.py)
  subclass it, so measure.py's ``measure_latency_interleaved`` times every
  runtime's variants in the same interleaved rounds.
  ``invoke`` is the runtime's own call on the bound inputs (what is timed as
  the latency); ``call`` is the one-line Python call path a client writes
  (inputs passed per call, outputs returned), timed for the per-call
  overhead.

  Attributes:
    variant: the label and thread count (a LatencyVariant).
    batch_size: the bound batch.
  """
  variant: 'LatencyVariant'
  batch_size: int = 1

  def invoke(self) -> None:
    raise NotImplementedError

  def call(self) -> None:
    raise NotImplementedError

  def close(self) -> None:
    """Releases what ``call`` may hold (nothing by default)."""

  def time_invokes(self, runs: int, clock: Callable[[], float]) -> List[float]:
    durations = []
    invoke = self.invoke
    for _ in range(runs):
      start = clock()
      invoke()
      durations.append(clock() - start)
    return durations

  def time_runner_calls(self, runs: int,
                        clock: Callable[[], float]) -> List[float]:
    durations = []
    call = self.call
    try:
      for _ in range(runs):
        start = clock()
        call()
        durations.append(clock() - start)
      return durations
    finally:
      self.close()
