"""The serving API as plain Python calls, shared by the REST and gRPC fronts.

A request names a model (and optionally a version or a label, and a
signature); :class:`PredictionService` finds the servable through the
:class:`ModelManager`, sends predict calls through the batch scheduler when
batching is on, and returns arrays. The fronts only translate wire formats.
"""
import dataclasses
import time
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from leantfx.serving import batch_scheduler as batch_scheduler_lib
from leantfx.serving import dtypes
from leantfx.serving import inference
from leantfx.serving import model_manager as model_manager_lib
from leantfx.serving import renamed_inputs
from leantfx.serving import request_limits
from leantfx.serving import servable as servable_lib
from leantfx.serving import signature as signature_lib
from leantfx.serving import status

DEFAULT_MAX_ROWS_PER_CALL = request_limits.DEFAULT_MAX_ROWS_PER_CALL


def _batch_rows(signature: signature_lib.Signature,
                inputs: Mapping[str, np.ndarray]) -> int:
  """The rows a request's inputs share, or 0 when it cannot be split.

  A request splits when every input has a leading dimension of the same
  size that the signature leaves open (None or -1): a model with a fixed
  batch dimension takes its batch whole.
  """
  rows = None
  for name, array in inputs.items():
    spec = signature.inputs.get(name)
    shape = spec.shape if spec is not None else None
    if np.ndim(array) == 0 or not shape or shape[0] not in (None, -1):
      return 0
    if rows is None:
      rows = array.shape[0]
    elif array.shape[0] != rows:
      return 0
  return rows or 0


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """Which model version and signature a request is for (``ModelSpec`` proto).

  Attributes:
    name: model name.
    version: a specific version, or None for the latest serving one.
    label: a version label, or None.
    signature_name: '' for ``serving_default``.
  """
  name: str
  version: Optional[int] = None
  label: Optional[str] = None
  signature_name: str = ''


@dataclasses.dataclass(frozen=True)
class ServedBy:
  """The model spec a response reports: what actually ran."""
  name: str
  version: int
  signature_name: str


class PredictionService:
  """Predict, Classify, Regress, metadata and status over loaded models."""

  def __init__(self, manager: model_manager_lib.ModelManager,
               batcher: Optional[batch_scheduler_lib.BatchScheduler] = None,
               batch_all: bool = True,
               max_rows_per_call: int = DEFAULT_MAX_ROWS_PER_CALL):
    """Serves the manager's models.

    Args:
      manager: the loaded models.
      batcher: merges concurrent predict calls; None runs each at once.
      batch_all: send every model's predict calls through the batcher;
        False sends only those of models whose kind gains from it
        (``Servable.batching_pays``).
      max_rows_per_call: a predict request with more rows runs as several
        model calls of at most this many rows, one after another.
    """
    self.manager = manager
    self.batcher = batcher
    self.batch_all = batch_all
    self.max_rows_per_call = max_rows_per_call

  def acquire(self, spec: ModelSpec) -> model_manager_lib.ServableHandle:
    """Returns a handle on the servable `spec` names (use with ``with``)."""
    if spec.version is not None and spec.label is not None:
      raise status.invalid_argument(
          f'Both model version ({spec.version}) and model version label '
          f'({spec.label}) cannot be supplied.')
    return self.manager.acquire(spec.name, spec.version, spec.label)

  @staticmethod
  def input_dtypes(servable: servable_lib.Servable,
                   signature_name: str) -> Dict[str, dtypes.DType]:
    """The input dtypes the REST API parses JSON against (``GetInfoMap``)."""
    name = signature_name or signature_lib.DEFAULT_SIGNATURE
    signature = servable.signatures.get(name)
    if signature is None:
      raise status.invalid_argument(
          f'Serving signature name: "{name}" not found in signature def')
    return signature.input_dtypes

  def predict(self, servable: servable_lib.Servable, signature_name: str,
              inputs: Mapping[str, np.ndarray],
              output_filter: Sequence[str] = (),
              deadline: Optional[float] = None
              ) -> Tuple[ServedBy, Dict[str, np.ndarray]]:
    """Runs a predict request on a held servable.

    Args:
      servable: from :meth:`acquire`.
      signature_name: '' for ``serving_default``.
      inputs: alias -> array.
      output_filter: aliases to return, empty for all.
      deadline: ``time.monotonic()`` after which the request gives up.

    Returns:
      (what served it, alias -> array).

    Raises:
      ServingError: invalid request, deadline passed, model failure.
    """
    signature = inference.predict_signature(servable, signature_name)
    try:
      signature_lib.check_predict_inputs(signature, inputs)
    except status.ServingError as e:
      raise renamed_inputs.with_key_hint(e, servable, signature.name,
                                         inputs) from None
    aliases = signature_lib.check_output_filter(signature, output_filter)
    if deadline is not None and time.monotonic() > deadline:
      raise status.deadline_exceeded('Request deadline passed before it ran.')
    rows = _batch_rows(signature, inputs)
    step = min(self.max_rows_per_call,
               servable.max_rows_per_call or self.max_rows_per_call)
    if rows > step:
      outputs = self._run_in_parts(servable, signature, inputs, aliases,
                                   deadline, rows, step)
    else:
      outputs = self._run(servable, signature.name, inputs, aliases, deadline)
    return ServedBy(servable.name, servable.version, signature.name), outputs

  def _run(self, servable, signature_name, inputs, aliases, deadline):
    if self.batcher is not None and (self.batch_all or
                                     servable.batching_pays):
      return self.batcher.run(servable, signature_name, inputs, aliases,
                              deadline)
    return servable.run(signature_name, inputs, aliases)

  def _run_in_parts(self, servable, signature, inputs, aliases, deadline,
                    rows: int, step: int) -> Dict[str, np.ndarray]:
    """Runs a large request as calls of `step` rows, in order.

    `step` is the server's max_rows_per_call, or the servable's own bound
    when lower (``Servable.max_rows_per_call``: a call that holds the GIL).

    A model's working memory grows with its batch (a dense layer's
    activations are rows x units); parts keep it at one part's. The outputs
    are joined along the batch dimension, which only holds when every
    output has one: a model with an output that does not (a vocabulary, a
    scalar) sees the whole request in one call instead.
    """
    parts: List[Dict[str, np.ndarray]] = []
    for start in range(0, rows, step):
      if deadline is not None and time.monotonic() > deadline:
        raise status.deadline_exceeded(
            f'Request deadline passed after {start} of its {rows} rows.')
      part = {name: array[start:start + step]
              for name, array in inputs.items()}
      outputs = self._run(servable, signature.name, part, aliases, deadline)
      expected = min(step, rows - start)
      if any(np.ndim(v) == 0 or np.shape(v)[0] != expected
             for v in outputs.values()):
        if parts or start:
          raise status.internal('An output lost its batch dimension part-way '
                                'through a request run in parts.')
        return self._run(servable, signature.name, inputs, aliases, deadline)
      parts.append(outputs)
    return {name: np.concatenate([p[name] for p in parts])
            for name in parts[0]}

  @staticmethod
  def classify(servable: servable_lib.Servable, signature_name: str,
               serialized_examples: Sequence[bytes]
               ) -> Tuple[ServedBy, List[List[Tuple[bytes, float]]]]:
    """Runs a classify request; see :func:`inference.classify`."""
    signature, results = inference.classify(servable, signature_name,
                                            serialized_examples)
    return ServedBy(servable.name, servable.version, signature.name), results

  @staticmethod
  def regress(servable: servable_lib.Servable, signature_name: str,
              serialized_examples: Sequence[bytes]
              ) -> Tuple[ServedBy, List[float]]:
    """Runs a regress request; see :func:`inference.regress`."""
    signature, values = inference.regress(servable, signature_name,
                                          serialized_examples)
    return ServedBy(servable.name, servable.version, signature.name), values

  def model_status(self, spec: ModelSpec
                   ) -> List[model_manager_lib.VersionState]:
    """Version states as GetModelStatus reports them, newest first."""
    if not spec.name:
      raise status.invalid_argument('Missing model name in request.')
    return self.manager.model_status(spec.name, spec.version, spec.label)
