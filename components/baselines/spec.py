"""Baselines' ComponentSpec: artifact keys, parameters and the Baselines type."""
from tfx import types
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter
from tfx.types.component_spec import ExecutionParameter

# Inputs.
EXAMPLES_KEY = 'examples'
SCHEMA_KEY = 'schema'
# Outputs.
BASELINES_KEY = 'baselines'
# Execution properties.
DATASET_KEY = 'dataset'  # The DatasetSpec as JSON (config.to_json_dict).
MAX_ROWS_KEY = 'max_rows'  # At most this many rows of each split are fit on.

TRAIN_SPLIT = 'train'
EVAL_SPLIT = 'eval'
# Inside the output artifact.
BASELINES_FILE = 'baselines.json'
# Custom property of the output artifact: the same JSON, so that the run
# summary and the relative gate read it from ML Metadata alone.
FIGURES_PROPERTY = 'figures'


class Baselines(types.Artifact):
  """baselines.json: each baseline's eval-split figure and fit time."""
  TYPE_NAME = 'leantfx.Baselines'


class BaselinesSpec(types.ComponentSpec):
  """Baselines: ExampleGen's train/eval split + schema -> baseline figures."""

  PARAMETERS = {
      DATASET_KEY: ExecutionParameter(type=str),
      MAX_ROWS_KEY: ExecutionParameter(type=int),
  }
  INPUTS = {
      EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
      SCHEMA_KEY: ChannelParameter(type=standard_artifacts.Schema),
  }
  OUTPUTS = {
      BASELINES_KEY: ChannelParameter(type=Baselines),
  }
