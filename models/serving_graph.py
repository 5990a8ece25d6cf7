"""What a raw-column client makes the server run: the serving graph's cost.

The pushed SavedModel's ``serving_default`` takes TF Serving's raw columns and
runs the Transform graph before the model, so its cost can grow with the
column count, not with the model. ``measure`` counts its ops (the nodes of
its graph and of every function it calls, the Transform among them) and times
a call in TensorFlow at batch 1 and 32. The Pusher records it for the run
summary; bench_serving prints it beside the servers' figures.
"""
import dataclasses
import time
from typing import Any, Dict, Mapping, Optional

import numpy as np
import tensorflow as tf

from leantfx import decision_forests

SIGNATURE = 'serving_default'
BATCHES = (1, 32)


@dataclasses.dataclass(frozen=True)
class ServingCost:
  """The serving graph's size and its call cost (None: could not be timed)."""
  ops: int
  call_ms: Dict[int, Optional[float]]  # batch -> median ms of one call


def _column(spec: tf.TensorSpec, batch: int, value: Any) -> tf.Tensor:
  shape = [batch] + [d if d is not None else 1 for d in spec.shape[1:]]
  if value is None:
    value = b'' if spec.dtype == tf.string else 0
  return tf.constant(np.full(shape, value, dtype=object) if
                     spec.dtype == tf.string else np.full(shape, value),
                     dtype=spec.dtype)


def measure(saved_model_dir: str, row: Optional[Mapping[str, Any]] = None,
            calls: int = 50) -> ServingCost:
  """Counts serving_default's ops and times it at batch 1 and 32.

  Args:
    saved_model_dir: the SavedModel.
    row: one instance's raw value per input (each column filled with it);
      without it, zeros and empty strings (the cost does not depend on them).
    calls: timed calls per batch size (after one untimed call).

  Returns:
    The op count and, per batch size, the median call in ms; a batch size
    whose call fails (a graph that refuses the filler values) is None.

  Raises:
    KeyError: the SavedModel has no serving_default signature.
  """
  decision_forests.ensure_ops(saved_model_dir)  # A tree model's TF-DF ops.
  signature = tf.saved_model.load(saved_model_dir).signatures[SIGNATURE]
  graph = signature.graph.as_graph_def()
  ops = len(graph.node) + sum(len(f.node_def) for f in graph.library.function)
  specs = signature.structured_input_signature[1]
  call_ms: Dict[int, Optional[float]] = {}
  for batch in BATCHES:
    try:
      columns = {name: _column(spec, batch, (row or {}).get(name))
                 for name, spec in specs.items()}
      signature(**columns)
    except (tf.errors.OpError, ValueError, TypeError):
      call_ms[batch] = None
      continue
    times = []
    for _ in range(calls):
      start = time.perf_counter()
      signature(**columns)
      times.append(time.perf_counter() - start)
    call_ms[batch] = 1000 * float(np.median(times))
  return ServingCost(ops=ops, call_ms=call_ms)
