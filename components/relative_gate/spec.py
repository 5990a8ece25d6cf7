"""The gated Evaluator's ComponentSpec: TFX's EvaluatorSpec plus the baselines."""
from tfx.types import standard_component_specs
from tfx.types.component_spec import ChannelParameter
from tfx.types.component_spec import ExecutionParameter

from leantfx.components.baselines import spec as baselines_spec

BASELINES_KEY = 'baselines'
# How far behind the strong baseline a model may be; absent: no relative
# bound (only the absolute bounds and the last blessed model).
MARGIN_KEY = 'baseline_margin'
# Custom property of the blessing: the gate's bounds and the baselines'
# figures as JSON (the run summary, the run record and the model card read
# it).
GATE_PROPERTY = 'relative_gate'


class RelativeGateEvaluatorSpec(standard_component_specs.EvaluatorSpec):
  """TFX's Evaluator inputs and outputs, with the Baselines artifact."""

  PARAMETERS = dict(standard_component_specs.EvaluatorSpec.PARAMETERS, **{
      MARGIN_KEY: ExecutionParameter(type=float, optional=True),
  })
  INPUTS = dict(standard_component_specs.EvaluatorSpec.INPUTS, **{
      BASELINES_KEY: ChannelParameter(type=baselines_spec.Baselines),
  })
