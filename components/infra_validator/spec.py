"""InfraValidator's ComponentSpec: artifact keys, parameters and properties.

The output is TFX's standard ``InfraBlessing`` with TFX's layout
(tfx/components/infra_validator/executor.py): an ``INFRA_BLESSED`` or
``INFRA_NOT_BLESSED`` file, custom property ``blessed`` (1/0) and, when
blessed, the SavedModel with its warm-up requests in ``stamped_model/`` and
``has_model`` = 1, which TFX's Pusher (and the VersionedPusher) push instead
of the Trainer's model.
"""
from typing import Dict

from ml_metadata.proto import metadata_store_pb2
from tfx import types
from tfx.types import standard_artifacts
from tfx.types import standard_component_specs
from tfx.types.component_spec import ChannelParameter
from tfx.types.component_spec import ExecutionParameter

# Inputs (TFX's InfraValidator's keys, and the Evaluator's blessing).
MODEL_KEY = standard_component_specs.MODEL_KEY
MODEL_BLESSING_KEY = standard_component_specs.MODEL_BLESSING_KEY
EXAMPLES_KEY = standard_component_specs.EXAMPLES_KEY
# Output.
BLESSING_KEY = standard_component_specs.BLESSING_KEY
# Execution properties.
MODEL_NAME_KEY = 'model_name'
# JSON list of further ``leantfx serve`` options (the deployment's).
SERVE_ARGS_KEY = 'serve_args'

# The split whose rows query the model: the Evaluator's.
EVAL_SPLIT = 'eval'
# TFX's names (tfx/components/infra_validator/executor.py).
BLESSED_FILE = 'INFRA_BLESSED'
NOT_BLESSED_FILE = 'INFRA_NOT_BLESSED'
BLESSED_PROPERTY = 'blessed'
HAS_MODEL_PROPERTY = 'has_model'
# leantfx's: why a model was not blessed (the run summary prints it).
REASON_PROPERTY = 'reason'
# Each figure of leantfx/infra_check.py is a float custom property
# '<FIGURE_PREFIX><figure>' (infra_latency_p50_ms_batch1, ...).
FIGURE_PREFIX = 'infra_'
# Seconds the executor took (reading rows, the offline answers, the copy,
# the server's start and every request).
SECONDS_PROPERTY = 'infra_seconds'


def recorded_figures(blessing: metadata_store_pb2.Artifact
                    ) -> Dict[str, float]:
  """The figures an InfraBlessing records, by infra_check's names.

  Args:
    blessing: the InfraBlessing as ML Metadata holds it (a TFX Artifact's
      ``mlmd_artifact``).

  Returns:
    figure name ('latency_p99_ms_concurrent', ..., 'seconds') -> value.
  """
  return {key[len(FIGURE_PREFIX):]: value.double_value
          for key, value in blessing.custom_properties.items()
          if key.startswith(FIGURE_PREFIX)}


class InfraValidatorSpec(types.ComponentSpec):
  """InfraValidator: model + Evaluator's blessing + raw eval rows -> InfraBlessing."""

  PARAMETERS = {
      MODEL_NAME_KEY: ExecutionParameter(type=str),
      SERVE_ARGS_KEY: ExecutionParameter(type=str, optional=True),
  }
  INPUTS = {
      MODEL_KEY: ChannelParameter(type=standard_artifacts.Model),
      MODEL_BLESSING_KEY: ChannelParameter(
          type=standard_artifacts.ModelBlessing),
      EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples),
  }
  OUTPUTS = {
      BLESSING_KEY: ChannelParameter(type=standard_artifacts.InfraBlessing),
  }
