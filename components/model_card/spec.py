"""ModelCardGenerator's ComponentSpec: artifact keys, parameters, the card type.

The inputs are the artifacts of the run whose push the card describes; all
but the Pusher's are read for their figures only. The card goes to
``<card base>/<model name>/<pushed version>/model_card.{json,md,html}`` and a
copy into the output artifact.
"""
from tfx import types
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter
from tfx.types.component_spec import ExecutionParameter

from leantfx.components.optimize import spec as optimize_spec
from leantfx.components.validation_gate import spec as gate_spec

# Inputs.
STATISTICS_KEY = 'statistics'
VALIDATION_REPORT_KEY = 'validation_report'
MODEL_KEY = 'model'
EVALUATION_KEY = 'evaluation'
MODEL_BLESSING_KEY = 'model_blessing'
INFRA_BLESSING_KEY = 'infra_blessing'
PUSHED_MODEL_KEY = 'pushed_model'
OPTIMIZED_MODEL_KEY = 'optimized_model'
OPTIMIZATION_REPORT_KEY = 'optimization_report'
# Output.
MODEL_CARD_KEY = 'model_card'
# Execution properties.
MODEL_NAME_KEY = 'model_name'
CARD_BASE_KEY = 'card_base'
# JSON: {"name", "label", "task", "classes"} of the dataset.
DATASET_KEY = 'dataset'
# JSON: leantfx.config.ModelCardConfig (target_qps, core_hour_price).
CARD_CONFIG_KEY = 'card_config'
# JSON: the EvalConfig's slicing specs as configured (the card says which
# slices were asked for).
SLICING_KEY = 'slicing'

JSON_FILE = 'model_card.json'
MARKDOWN_FILE = 'model_card.md'
HTML_FILE = 'model_card.html'
CARD_FILES = (JSON_FILE, MARKDOWN_FILE, HTML_FILE)
# Custom properties of the output artifact.
CARD_PATH_PROPERTY = 'card_path'
VERSION_PROPERTY = 'pushed_version'


class ModelCard(types.Artifact):
  """model_card.json (Model Card Toolkit's layout), .md and .html of a push."""
  TYPE_NAME = 'leantfx.ModelCard'


class ModelCardGeneratorSpec(types.ComponentSpec):
  """ModelCardGenerator: the run's artifacts -> the pushed model's card."""

  PARAMETERS = {
      MODEL_NAME_KEY: ExecutionParameter(type=str),
      CARD_BASE_KEY: ExecutionParameter(type=str),
      DATASET_KEY: ExecutionParameter(type=str),
      CARD_CONFIG_KEY: ExecutionParameter(type=str),
      SLICING_KEY: ExecutionParameter(type=str, optional=True),
  }
  INPUTS = {
      STATISTICS_KEY:
          ChannelParameter(type=standard_artifacts.ExampleStatistics),
      VALIDATION_REPORT_KEY:
          ChannelParameter(type=gate_spec.DataValidationReport,
                           optional=True),
      MODEL_KEY:
          ChannelParameter(type=standard_artifacts.Model),
      EVALUATION_KEY:
          ChannelParameter(type=standard_artifacts.ModelEvaluation),
      MODEL_BLESSING_KEY:
          ChannelParameter(type=standard_artifacts.ModelBlessing),
      INFRA_BLESSING_KEY:
          ChannelParameter(type=standard_artifacts.InfraBlessing),
      PUSHED_MODEL_KEY:
          ChannelParameter(type=standard_artifacts.PushedModel),
      OPTIMIZED_MODEL_KEY:
          ChannelParameter(type=standard_artifacts.Model, optional=True),
      OPTIMIZATION_REPORT_KEY:
          ChannelParameter(type=optimize_spec.OptimizationReport,
                           optional=True),
  }
  OUTPUTS = {
      MODEL_CARD_KEY: ChannelParameter(type=ModelCard),
  }
