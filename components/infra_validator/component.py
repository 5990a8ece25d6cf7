"""InfraValidator: the model loaded and queried in the server that will run it.

TFX's InfraValidator starts TensorFlow Serving in Docker or Kubernetes and
serves the SavedModel only. This one starts ``leantfx serve`` (TF Serving's
APIs, every runtime leantfx pushes) in a subprocess on loopback ports, with
the Trainer's SavedModel and the warm-up requests TF Serving reads
(``assets.extra/tf_serving_warmup_requests``: real eval rows), queries it
over REST and gRPC with the eval split's raw rows, checks each answer against
the SavedModel's own answer computed in this process, and times batch-1
requests alone and from 8 clients (leantfx/infra_check.py). The pipeline
runs it after the Evaluator, for a model the Evaluator blessed, and the
Pusher pushes only what it blessed: the SavedModel with its warm-up file.
"""
import json
from typing import Sequence

from tfx import types
from tfx.dsl.components.base import base_component
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_artifacts

from leantfx.components.infra_validator import executor
from leantfx.components.infra_validator import spec as spec_lib


class InfraValidator(base_component.BaseComponent):
  """Serves the trained model in ``leantfx serve`` and checks its answers.

  Outputs:
    blessing: TFX's InfraBlessing (spec.py: blessed, has_model, the
      stamped model with its warm-up file, the reason when not blessed and
      the measured figures as custom properties).
  """

  SPEC_CLASS = spec_lib.InfraValidatorSpec
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

  def __init__(self,
               model: types.BaseChannel,
               model_blessing: types.BaseChannel,
               examples: types.BaseChannel,
               model_name: str,
               serve_args: Sequence[str] = ()):
    """Builds the component.

    Args:
      model: the Trainer's Model (Format-Serving SavedModel).
      model_blessing: the Evaluator's blessing; an unblessed model is not
        served.
      examples: the ExampleGen's Examples: the eval split's raw rows query
        the model and become its warm-up requests.
      model_name: the model's name in the server (the pushed directory's).
      serve_args: further ``leantfx serve`` options, as deployed.
    """
    component_spec = spec_lib.InfraValidatorSpec(
        model=model,
        model_blessing=model_blessing,
        examples=examples,
        model_name=model_name,
        serve_args=json.dumps(list(serve_args)),
        blessing=types.Channel(type=standard_artifacts.InfraBlessing))
    super().__init__(spec=component_spec)
