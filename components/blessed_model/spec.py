"""LastBlessedModel's ComponentSpec: the record folder in, a Model out."""
from tfx import types
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter
from tfx.types.component_spec import ExecutionParameter

# Output: the same key as a LatestBlessedModelStrategy Resolver's.
MODEL_KEY = 'model'
# Execution property: the record folder (records.records_dir()).
RECORDS_DIR_KEY = 'records_dir'
# Custom properties of the output Model.
FOUND_PROPERTY = 'blessed_model_found'
SOURCE_URI_PROPERTY = 'blessed_model_uri'


class LastBlessedModelSpec(types.ComponentSpec):
  """Record folder -> a copy of the last blessed model (empty if none)."""

  PARAMETERS = {
      RECORDS_DIR_KEY: ExecutionParameter(type=str),
  }
  INPUTS = {}
  OUTPUTS = {
      MODEL_KEY: ChannelParameter(type=standard_artifacts.Model),
  }
