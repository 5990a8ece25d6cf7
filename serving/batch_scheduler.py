"""Server-side batching of concurrent predict requests.

Requests for the same model version, signature, outputs and inner input
shapes wait in one queue; ``num_batch_threads`` workers each take up to
``max_batch_size`` rows from a queue that is full or whose oldest request has
waited ``batch_timeout_micros``, concatenate the inputs along dimension 0, run
the model once and hand each request its slice of the outputs. That is the
behaviour of TF Serving's ``BatchingSession`` on a ``SharedBatchScheduler``;
requests larger than ``max_batch_size`` run on their own instead of failing.
"""
import dataclasses
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from leantfx.serving import batching_parameters
from leantfx.serving import servable as servable_lib
from leantfx.serving import status


@dataclasses.dataclass
class _Task:
  inputs: Mapping[str, np.ndarray]
  rows: int
  enqueued_at: float
  done: threading.Event = dataclasses.field(default_factory=threading.Event)
  outputs: Optional[Dict[str, np.ndarray]] = None
  error: Optional[BaseException] = None
  taken: bool = False


@dataclasses.dataclass
class _Queue:
  servable: servable_lib.Servable
  signature_name: str
  output_aliases: Tuple[str, ...]
  tasks: List[_Task] = dataclasses.field(default_factory=list)
  rows: int = 0


def _rows_of(inputs: Mapping[str, np.ndarray]) -> int:
  rows = None
  for array in inputs.values():
    if array.ndim == 0:
      raise status.invalid_argument(
          'Batching Run() input tensors must have at least one dimension')
    if rows is not None and array.shape[0] != rows:
      raise status.invalid_argument(
          'Batching Run() input tensors must have equal 0th-dimension size')
    rows = array.shape[0]
  return rows or 0


class BatchScheduler:
  """Merges concurrent requests into batched model calls."""

  def __init__(self, config: batching_parameters.BatchingConfig):
    self._config = config
    self._timeout_s = config.batch_timeout_micros / 1e6
    self._queues: Dict[Any, _Queue] = {}
    self._cond = threading.Condition()
    self._stopping = False
    self._threads = [
        threading.Thread(target=self._work, name=f'leantfx-batch-{i}',
                         daemon=True)
        for i in range(config.num_batch_threads)
    ]
    self.batches_run = 0
    self.rows_run = 0
    for thread in self._threads:
      thread.start()

  def run(self, servable: servable_lib.Servable, signature_name: str,
          inputs: Mapping[str, np.ndarray], output_aliases: Sequence[str],
          deadline: Optional[float] = None) -> Dict[str, np.ndarray]:
    """Runs one request through a batch and returns its outputs.

    Args:
      servable: the version (held by the caller until this returns).
      signature_name: the resolved signature key.
      inputs: validated inputs, all with the same dimension 0.
      output_aliases: outputs to return.
      deadline: ``time.monotonic()`` by which the caller gives up.

    Returns:
      alias -> this request's rows of each output.

    Raises:
      ServingError: inputs without a batch dimension, a full queue
        (UNAVAILABLE), the deadline passing (DEADLINE_EXCEEDED) or the model
        failing.
    """
    rows = _rows_of(inputs)
    if rows > self._config.max_batch_size or rows == 0:
      return servable.run(signature_name, inputs, output_aliases)
    key = (id(servable), signature_name, tuple(output_aliases),
           tuple(sorted((alias, array.dtype.str, array.shape[1:])
                        for alias, array in inputs.items())))
    task = _Task(inputs, rows, time.monotonic())
    with self._cond:
      if self._stopping:
        raise status.unavailable('The server is shutting down.')
      queue = self._queues.get(key)
      if queue is None:
        queue = _Queue(servable, signature_name, tuple(output_aliases))
        self._queues[key] = queue
      queued_batches = -(-queue.rows // self._config.max_batch_size)
      if queued_batches >= self._config.max_enqueued_batches:
        raise status.unavailable(
            'The batch scheduling queue to which this task was submitted is '
            'full')
      queue.tasks.append(task)
      queue.rows += rows
      self._cond.notify()
    remaining = None if deadline is None else max(0.0,
                                                  deadline - time.monotonic())
    if not task.done.wait(remaining):
      with self._cond:
        if not task.taken:
          queue.tasks.remove(task)
          queue.rows -= task.rows
      raise status.deadline_exceeded(
          'Request timed out waiting for a batch (the deadline passed).')
    if task.error is not None:
      raise task.error
    return task.outputs

  def _take_ready(self, now: float) -> Tuple[Optional[_Queue], List[_Task],
                                             Optional[float]]:
    """Returns (queue, tasks to run, None) or (None, [], seconds to wait)."""
    wait = None
    for key, queue in list(self._queues.items()):
      if not queue.tasks:
        del self._queues[key]
        continue
      ready_at = queue.tasks[0].enqueued_at + self._timeout_s
      if (queue.rows >= self._config.max_batch_size or now >= ready_at or
          self._stopping):
        taken, rows = [], 0
        while queue.tasks and rows + queue.tasks[0].rows <= \
            self._config.max_batch_size:
          task = queue.tasks.pop(0)
          task.taken = True
          taken.append(task)
          rows += task.rows
        queue.rows -= rows
        return queue, taken, None
      wait = ready_at - now if wait is None else min(wait, ready_at - now)
    return None, [], wait

  def _work(self):
    while True:
      with self._cond:
        while True:
          queue, tasks, wait = self._take_ready(time.monotonic())
          if tasks:
            break
          if self._stopping and not self._queues:
            return
          self._cond.wait(wait)
      self._run_batch(queue, tasks)

  def _padded_size(self, rows: int) -> int:
    for size in self._config.allowed_batch_sizes:
      if size >= rows:
        return size
    return rows

  def _run_batch(self, queue: _Queue, tasks: List[_Task]):
    try:
      rows = sum(task.rows for task in tasks)
      padded = self._padded_size(rows)
      merged = {}
      for alias in tasks[0].inputs:
        parts = [task.inputs[alias] for task in tasks]
        if padded > rows:
          # TF Serving pads with copies of the first row.
          first = parts[0][:1]
          parts.append(np.repeat(first, padded - rows, axis=0))
        merged[alias] = (parts[0] if len(parts) == 1
                         else np.concatenate(parts, axis=0))
      outputs = queue.servable.run(queue.signature_name, merged,
                                   queue.output_aliases)
      for alias, array in outputs.items():
        if array.ndim == 0 or array.shape[0] != padded:
          raise status.internal(
              "Batched output tensor's 0th dimension does not equal the sum "
              'of the 0th dimension sizes of the input tensors (output '
              f'{alias} has shape {list(array.shape)} for {padded} rows).')
      offset = 0
      for task in tasks:
        task.outputs = {alias: array[offset:offset + task.rows]
                        for alias, array in outputs.items()}
        offset += task.rows
      self.batches_run += 1
      self.rows_run += rows
    except BaseException as e:  # pylint: disable=broad-except
      for task in tasks:
        task.error = e
    finally:
      for task in tasks:
        task.done.set()

  def stop(self, timeout_s: float = 10.0) -> None:
    """Runs what is queued, then stops the workers."""
    with self._cond:
      self._stopping = True
      self._cond.notify_all()
    for thread in self._threads:
      thread.join(timeout_s)
