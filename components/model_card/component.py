"""ModelCardGenerator: the pushed model's card, from the run's artifacts.

Runs after the Pusher (and the ModelOptimizer), on every orchestrator: its
inputs are artifacts, so the card reads the same ML Metadata record on the
local runner and on Kubeflow. See executor.py for what it writes.
"""
import json
from typing import Any, Mapping, Optional, Sequence

from tfx import types
from tfx.dsl.components.base import base_component
from tfx.dsl.components.base import executor_spec

from leantfx import config as config_lib
from leantfx.components.model_card import executor
from leantfx.components.model_card import spec as spec_lib


class ModelCardGenerator(base_component.BaseComponent):
  """Writes model_card.{json,md,html} for the version the Pusher pushed.

  Outputs:
    model_card: a copy of the card, with the card's folder and the pushed
      version as custom properties.
  """

  SPEC_CLASS = spec_lib.ModelCardGeneratorSpec
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

  def __init__(self,
               statistics: types.BaseChannel,
               model: types.BaseChannel,
               evaluation: types.BaseChannel,
               model_blessing: types.BaseChannel,
               infra_blessing: types.BaseChannel,
               pushed_model: types.BaseChannel,
               model_name: str,
               card_base: str,
               dataset: Mapping[str, Any],
               card_config: config_lib.ModelCardConfig,
               slicing: Sequence[str] = (),
               validation_report: Optional[types.BaseChannel] = None,
               optimized_model: Optional[types.BaseChannel] = None,
               optimization_report: Optional[types.BaseChannel] = None):
    """Builds the component.

    Args:
      statistics: StatisticsGen's statistics of the span.
      model: the Trainer's Model (its training facts and compute record).
      evaluation: the Evaluator's ModelEvaluation.
      model_blessing: the Evaluator's blessing.
      infra_blessing: the InfraValidator's blessing and figures.
      pushed_model: the Pusher's PushedModel: the version the card is of.
      model_name: the model's folder under card_base.
      card_base: where the cards go (<card_base>/<model>/<version>/).
      dataset: {'name', 'label', 'task', 'classes', 'model_kind'}.
      card_config: what the card prices.
      slicing: the Evaluator's configured slices, by TFMA's names.
      validation_report: the ValidationGate's report, when it runs.
      optimized_model: the ModelOptimizer's model (its compute record).
      optimization_report: the ModelOptimizer's report (each runtime's pick).
    """
    spec = spec_lib.ModelCardGeneratorSpec(
        statistics=statistics,
        validation_report=validation_report,
        model=model,
        evaluation=evaluation,
        model_blessing=model_blessing,
        infra_blessing=infra_blessing,
        pushed_model=pushed_model,
        optimized_model=optimized_model,
        optimization_report=optimization_report,
        model_name=model_name,
        card_base=card_base,
        dataset=json.dumps(dict(dataset), sort_keys=True),
        card_config=json.dumps(config_lib.to_json_dict(card_config),
                               sort_keys=True),
        slicing=json.dumps(list(slicing)),
        model_card=types.Channel(type=spec_lib.ModelCard))
    super().__init__(spec=spec)
