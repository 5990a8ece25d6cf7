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
from leantfx.serving import servable as servable_lib
from leantfx.serving import signature as signature_lib
from leantfx.serving import status


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
               batch_all: bool = True):
    """Serves the manager's models.

    Args:
      manager: the loaded models.
      batcher: merges concurrent predict calls; None runs each at once.
      batch_all: send every model's predict calls through the batcher;
        False sends only those of models whose kind gains from it
        (``Servable.batching_pays``).
    """
    self.manager = manager
    self.batcher = batcher
    self.batch_all = batch_all

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
    if self.batcher is not None and (self.batch_all or
                                     servable.batching_pays):
      outputs = self.batcher.run(servable, signature.name, inputs, aliases,
                                 deadline)
    else:
      outputs = servable.run(signature.name, inputs, aliases)
    return ServedBy(servable.name, servable.version, signature.name), outputs

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
