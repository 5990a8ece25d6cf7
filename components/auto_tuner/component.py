"""AutoTuner: the Tuner of ``--tune auto``, reading the run's baselines.

TFX's Tuner searches whatever the data; with ``--tune auto`` the search is
worth its trials only where the network trails what a strong off-the-shelf
model reaches on the same split. This Tuner reads the Baselines artifact
(components/baselines) beside TFX's inputs, probes the untuned network, and
searches only when the probe trails (models/auto_tune.py). Its outputs are
TFX's Tuner's, so the Trainer takes its best_hyperparameters as always.
"""
from typing import Any, Dict

from tfx import types
from tfx.dsl.components.base import base_component
from tfx.dsl.components.base import executor_spec
from tfx.proto import trainer_pb2
from tfx.types import standard_artifacts
from tfx.utils import json_utils

from leantfx.components.auto_tuner import executor
from leantfx.components.auto_tuner import spec as spec_lib


class AutoTuner(base_component.BaseComponent):
  """TFX's Tuner with a Baselines input and a margin.

  Outputs:
    best_hyperparameters: HyperParameters (the untuned values, {}, when
      there was no search or no trial beat the probe); custom property
      ``auto_tune``: the decision, its reason and figures (JSON).
    tuner_results: TunerResults (the trials; [] without a search).
  """

  SPEC_CLASS = spec_lib.AutoTunerSpec
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

  def __init__(self, examples: types.BaseChannel, schema: types.BaseChannel,
               transform_graph: types.BaseChannel,
               baselines: types.BaseChannel, tuner_fn: str,
               train_args: trainer_pb2.TrainArgs,
               eval_args: trainer_pb2.EvalArgs, baseline_margin: float,
               custom_config: Dict[str, Any]):
    """Builds the component.

    Args:
      examples: the transformed examples.
      schema: the schema.
      transform_graph: the Transform's graph.
      baselines: the Baselines artifact of this run's split.
      tuner_fn: the dotted path of tuner_fn (models/tuning.py).
      train_args: steps of each trial (and of the probe).
      eval_args: validation steps.
      baseline_margin: accuracy points the untuned network may trail the
        strong baseline by before the search runs.
      custom_config: tuner_fn's custom_config (dataset, training).
    """
    super().__init__(spec=spec_lib.AutoTunerSpec(
        examples=examples, schema=schema, transform_graph=transform_graph,
        base_model=None, baselines=baselines, module_file=None,
        tuner_fn=tuner_fn, train_args=train_args, eval_args=eval_args,
        tune_args=None, baseline_margin=float(baseline_margin),
        custom_config=json_utils.dumps(custom_config),
        best_hyperparameters=types.Channel(
            type=standard_artifacts.HyperParameters),
        tuner_results=types.Channel(type=standard_artifacts.TunerResults)))
