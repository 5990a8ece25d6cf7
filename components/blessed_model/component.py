"""LastBlessedModel, and the Evaluator that takes its (possibly empty) Model.

On the open-source KFP backend no ML Metadata resolver runs ("resolver
executors not implemented"), so the last blessed model comes from the
records the Pusher keeps under the pipeline root (records.py): a small
container task copies the newest recorded model into its output Model. The
Evaluator's baseline and the Trainer's warm start read that one Model.

Its output always exists on KFP, empty before any model was blessed:
BaselineEvaluatorExecutor is TFX's Evaluator executor that drops such an
empty baseline (so the change thresholds are skipped, as they are on a
first local run; the pipeline's Evaluator, components/relative_gate, runs
on it); the warm start finds no model in it and trains cold, saying why
(models/warm_start.py).

The cost: the task runs in every run (the records change between runs while
its inputs do not) and its output is a new artifact each time, so the
Evaluator, and a warm-started Trainer, are never KFP cache hits.
"""
from typing import Any, Dict, List

from tfx import types
from tfx import v1 as tfx
from tfx.components.evaluator import executor as evaluator_executor
from tfx.dsl.components.base import base_component
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_component_specs

from leantfx.components.blessed_model import executor
from leantfx.components.blessed_model import records
from leantfx.components.blessed_model import spec as spec_lib

records_dir = records.records_dir


class LastBlessedModel(base_component.BaseComponent):
  """The newest model the Pusher recorded, copied into a Model artifact.

  Outputs:
    model: Model; custom property blessed_model_found (1 or 0) and, when
      found, blessed_model_uri (the recorded Trainer output).
  """

  SPEC_CLASS = spec_lib.LastBlessedModelSpec
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

  def __init__(self, records_dir: str):  # pylint: disable=redefined-outer-name
    """Builds the component.

    Args:
      records_dir: the Pusher's record folder (``records_dir()``).
    """
    super().__init__(spec=spec_lib.LastBlessedModelSpec(
        records_dir=records_dir,
        model=types.Channel(type=tfx.types.standard_artifacts.Model)))


class BaselineEvaluatorExecutor(evaluator_executor.Executor):
  """TFX's Evaluator executor, without a baseline Model that holds no model."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    key = standard_component_specs.BASELINE_MODEL_KEY
    baselines = input_dict.get(key) or []
    if baselines and not all(executor.has_model(m) for m in baselines):
      input_dict = dict(input_dict)
      input_dict[key] = []
    super().Do(input_dict, output_dict, exec_properties)

