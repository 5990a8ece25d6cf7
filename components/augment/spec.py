"""Augment's ComponentSpec: artifact keys, parameters and file names."""
from tfx import types
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter
from tfx.types.component_spec import ExecutionParameter

# Inputs.
EXAMPLES_KEY = 'examples'
SCHEMA_KEY = 'schema'
# Outputs.
AUGMENTED_EXAMPLES_KEY = 'augmented_examples'
# Execution properties: config dataclasses as JSON.
AUGMENT_CONFIG_KEY = 'augment_config'
DATASET_KEY = 'dataset'

TRAIN_SPLIT = 'train'
# Beside the Split-* folders of the output artifact.
REPORT_FILE = 'augment_report.json'
# Custom properties of the output artifact (JSON strings), read by the run
# summary: {class: count} before and after, and the noisy-row counts.
CLASS_COUNTS_BEFORE_PROPERTY = 'class_counts_before'
CLASS_COUNTS_AFTER_PROPERTY = 'class_counts_after'
NOISY_ROWS_PROPERTY = 'noisy_rows'


class AugmentSpec(types.ComponentSpec):
  """Augment: validated examples -> examples with an augmented train split."""

  PARAMETERS = {
      AUGMENT_CONFIG_KEY: ExecutionParameter(type=str),
      DATASET_KEY: ExecutionParameter(type=str),
  }
  INPUTS = {
      EXAMPLES_KEY:
          ChannelParameter(type=standard_artifacts.Examples),
      SCHEMA_KEY:
          ChannelParameter(type=standard_artifacts.Schema),
  }
  OUTPUTS = {
      AUGMENTED_EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
  }
