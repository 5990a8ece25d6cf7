"""AutoTuner's ComponentSpec: TFX's TunerSpec plus the Baselines and the margin."""
from tfx.types import standard_component_specs
from tfx.types.component_spec import ChannelParameter
from tfx.types.component_spec import ExecutionParameter

from leantfx.components.baselines import spec as baselines_spec

BASELINES_KEY = 'baselines'
# How far behind the strong baseline the untuned network may be before the
# search runs (models/auto_tune.py's margin_of: the relative gate's margin).
MARGIN_KEY = 'baseline_margin'
# The TFX Tuner's output keys, as its executor writes them.
BEST_HYPERPARAMETERS_KEY = standard_component_specs.BEST_HYPERPARAMETERS_KEY
TUNER_RESULTS_KEY = standard_component_specs.TUNER_RESULTS_KEY


class AutoTunerSpec(standard_component_specs.TunerSpec):
  """TFX's Tuner inputs and outputs, with the Baselines artifact."""

  PARAMETERS = dict(standard_component_specs.TunerSpec.PARAMETERS, **{
      MARGIN_KEY: ExecutionParameter(type=float),
  })
  INPUTS = dict(standard_component_specs.TunerSpec.INPUTS, **{
      BASELINES_KEY: ChannelParameter(type=baselines_spec.Baselines),
  })
