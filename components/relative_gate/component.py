"""RelativeGateEvaluator: TFX's Evaluator, blessing against the run's own baselines.

TFMA's thresholds are fixed when the pipeline is built, and the baselines
(components/baselines) are measured in the run. Rather than a second step
that rewrites the Evaluator's blessing after the fact, the Evaluator itself
reads the Baselines artifact and validates with the bound they give
(rule.py, thresholds.py): one ModelBlessing, written by TFMA, so the
InfraValidator, the Pusher, the ModelOptimizer's condition, the model card
and the last-blessed-model resolver read what they always read, and the
change threshold (no worse than the last blessed model) stays TFMA's.
"""
from typing import List, Optional

import tensorflow_model_analysis as tfma
from tfx import types
from tfx.dsl.components.base import base_beam_component
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_artifacts
from tfx.utils import json_utils

from leantfx.components.relative_gate import executor
from leantfx.components.relative_gate import spec as spec_lib


class RelativeGateEvaluator(base_beam_component.BaseBeamComponent):
  """TFX's Evaluator with a Baselines input and a margin.

  Outputs:
    evaluation: ModelEvaluation (TFMA's, its EvalConfig with the bound used).
    blessing: ModelBlessing; custom properties TFX's, and ``relative_gate``
      (the gate's bounds and the baselines' figures, JSON).
  """

  SPEC_CLASS = spec_lib.RelativeGateEvaluatorSpec
  EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

  def __init__(self,
               examples: types.BaseChannel,
               model: types.BaseChannel,
               baselines: types.BaseChannel,
               eval_config: tfma.EvalConfig,
               baseline_model: Optional[types.BaseChannel] = None,
               example_splits: Optional[List[str]] = None,
               baseline_margin: Optional[float] = None,
               module_path: Optional[str] = None):
    """Builds the component.

    Args:
      examples: the Examples to evaluate on.
      model: the candidate Model.
      baselines: the Baselines artifact of this run's split.
      eval_config: the EvalConfig as built (absolute and change thresholds).
      baseline_model: the last blessed model (the change thresholds).
      example_splits: the splits to evaluate (default 'eval').
      baseline_margin: how far behind the strong baseline a model may be
        (accuracy points; regression: a fraction of its RMSE); None: no
        relative bound.
      module_path: the Evaluator's user module (its custom model loader,
        e.g. one that registers TF-DF's ops for a tree model), or None.
    """
    super().__init__(spec=spec_lib.RelativeGateEvaluatorSpec(
        examples=examples,
        model=model,
        baseline_model=baseline_model,
        baselines=baselines,
        feature_slicing_spec=None,
        fairness_indicator_thresholds=json_utils.dumps(None),
        example_splits=json_utils.dumps(example_splits),
        eval_config=eval_config,
        baseline_margin=baseline_margin,
        module_path=module_path,
        evaluation=types.Channel(type=standard_artifacts.ModelEvaluation),
        blessing=types.Channel(type=standard_artifacts.ModelBlessing)))
