"""Graph pieces for continuous retraining, used by pipeline.create_pipeline.

Kept apart from pipeline.py so that file stays a readable list of stages:
  * a rolling window of the newest K spans for Transform and Trainer: every
    run's ExampleGen ingests only the newest span, and a Resolver with
    SpanRangeStrategy collects the K newest spans ExampleGen has ever ingested
    (from ML Metadata). On Kubeflow (window_in_example_gen) ExampleGen reads
    the K spans itself instead (components/span_window_example_gen);
  * warm start: a Resolver of the latest blessed model feeds the Trainer's
    ``base_model`` (models/warm_start.py loads its weights);
  * the last blessed model (the Evaluator's baseline, the warm start's base)
    from ML Metadata with a Resolver, or, for the open-source KFP backend,
    which runs no resolver task, from the records the Pusher keeps under the
    pipeline root (components/blessed_model/): one LastBlessedModel task
    serves both;
  * RuntimeParameters for the data root, the pinned span and the train steps,
    so one compiled Kubeflow spec serves every run (their defaults are the
    config's values).
"""
from typing import Dict, List, Optional, Union

from tfx import v1 as tfx
from tfx.proto import range_config_pb2

from leantfx import config as config_lib
from leantfx.components.blessed_model import component as blessed_model
from leantfx.components.versioned_pusher import executor as pusher_executor
from leantfx.pipeline import run_parameters

SPAN_WINDOW_RESOLVER_ID = 'span_window_resolver'
WARM_START_RESOLVER_ID = 'warm_start_model_resolver'
BASELINE_RESOLVER_ID = 'latest_blessed_model_resolver'
LAST_BLESSED_MODEL_ID = 'LastBlessedModel'
# The parameters' names and JSON values live in run_parameters (no TFX).
DATA_ROOT_PARAMETER = run_parameters.DATA_ROOT_PARAMETER
RANGE_CONFIG_PARAMETER = run_parameters.RANGE_CONFIG_PARAMETER
TRAIN_ARGS_PARAMETER = run_parameters.TRAIN_ARGS_PARAMETER
SPAN_WINDOW_PARAMETER = run_parameters.SPAN_WINDOW_PARAMETER
pinned_span_json = run_parameters.pinned_span_json
train_args_json = run_parameters.train_args_json


def data_root(
    config: config_lib.PipelineConfig
) -> Union[str, tfx.dsl.experimental.RuntimeParameter]:
  """ExampleGen's input_base: the data root, or a runtime parameter of it."""
  if not config.orchestration.runtime_parameters:
    return config.data_root
  return tfx.dsl.experimental.RuntimeParameter(
      name=DATA_ROOT_PARAMETER, ptype=str, default=config.data_root)


def span_range(
    config: config_lib.PipelineConfig
) -> Union[None, range_config_pb2.RangeConfig,
           tfx.dsl.experimental.RuntimeParameter]:
  """ExampleGen's range_config: the pinned span, or None for the newest."""
  span = config.orchestration.span
  if config.orchestration.runtime_parameters:
    # TFX accepts a string parameter for a proto field and the Kubeflow V2
    # ExampleGen driver parses it as JSON; '' means no range (newest span).
    return tfx.dsl.experimental.RuntimeParameter(
        name=RANGE_CONFIG_PARAMETER, ptype=str,
        default=pinned_span_json(span))
  if span is None:
    return None
  return range_config_pb2.RangeConfig(
      static_range=range_config_pb2.StaticRange(
          start_span_number=span, end_span_number=span))


def train_args(
    config: config_lib.PipelineConfig
) -> Union[tfx.proto.TrainArgs, tfx.dsl.experimental.RuntimeParameter]:
  """The Trainer's train_args; a runtime parameter (JSON) if asked."""
  steps = config.training.train_steps
  if not config.orchestration.runtime_parameters:
    return tfx.proto.TrainArgs(num_steps=steps)
  return tfx.dsl.experimental.RuntimeParameter(
      name=TRAIN_ARGS_PARAMETER, ptype=str, default=train_args_json(steps))


def span_window_size(
    config: config_lib.PipelineConfig
) -> Union[int, tfx.dsl.experimental.RuntimeParameter]:
  """K for SpanWindowCsvExampleGen; a runtime parameter (int) if asked."""
  window = config.orchestration.span_window
  if not config.orchestration.runtime_parameters:
    return window
  return tfx.dsl.experimental.RuntimeParameter(
      name=SPAN_WINDOW_PARAMETER, ptype=int, default=window)


def runtime_parameter_defaults(
    config: config_lib.PipelineConfig) -> Dict[str, Union[str, int]]:
  """Name -> default of every runtime parameter create_pipeline declares."""
  defaults = {
      DATA_ROOT_PARAMETER: config.data_root,
      RANGE_CONFIG_PARAMETER: pinned_span_json(config.orchestration.span),
      TRAIN_ARGS_PARAMETER: train_args_json(config.training.train_steps),
  }
  if config.orchestration.window_in_example_gen:
    defaults[SPAN_WINDOW_PARAMETER] = config.orchestration.span_window
  return defaults


def span_window_examples(config: config_lib.PipelineConfig,
                         examples: tfx.types.BaseChannel,
                         nodes: List[tfx.types.BaseNode]
                        ) -> tfx.types.BaseChannel:
  """Returns the examples of the newest K spans (adds a Resolver if K > 1).

  Args:
    config: the pipeline configuration (orchestration.span_window is K).
    examples: ExampleGen's output channel (the newest span).
    nodes: the pipeline's node list; the Resolver is appended to it.

  Returns:
    ``examples`` itself when K == 1, else the Resolver's examples channel.
  """
  window = config.orchestration.span_window
  if window <= 1 or config.orchestration.window_in_example_gen:
    # With window_in_example_gen, ExampleGen already read the K spans.
    return examples
  producer_id = examples.producer_component_id
  producer = next(n for n in nodes if n.id == producer_id)
  resolver = tfx.dsl.Resolver(
      strategy_class=tfx.dsl.experimental.SpanRangeStrategy,
      config={
          'range_config':
              range_config_pb2.RangeConfig(
                  rolling_range=range_config_pb2.RollingRange(
                      num_spans=window))
      },
      examples=tfx.dsl.Channel(
          type=tfx.types.standard_artifacts.Examples,
          producer_component_id=producer_id)).with_id(SPAN_WINDOW_RESOLVER_ID)
  # Resolve only after this run's ExampleGen has registered the newest span.
  resolver.add_upstream_node(producer)
  nodes.append(resolver)
  return resolver.outputs['examples']


def warm_start_model(
    config: config_lib.PipelineConfig,
    nodes: List[tfx.types.BaseNode]) -> Optional[tfx.types.BaseChannel]:
  """Returns the latest blessed model channel for base_model, or None.

  Args:
    config: the pipeline configuration (orchestration.warm_start).
    nodes: the pipeline's node list; the Resolver is appended to it.

  Returns:
    None when warm start is off; else the Resolver's model channel (empty on
    the first run, when nothing is blessed yet: the Trainer starts cold).
  """
  if not config.orchestration.warm_start:
    return None
  return latest_blessed_model(config, nodes, WARM_START_RESOLVER_ID)


def latest_blessed_model(config: config_lib.PipelineConfig,
                         nodes: List[tfx.types.BaseNode],
                         resolver_id: str) -> tfx.types.BaseChannel:
  """Returns a channel of the latest blessed model (empty before any).

  Args:
    config: the pipeline configuration (orchestration.kfp_backend).
    nodes: the pipeline's node list; the new node is appended to it.
    resolver_id: the id of the Resolver, where one is used.

  Returns:
    A LatestBlessedModelStrategy Resolver's model channel; with
    orchestration.blessed_model_from_records, the LastBlessedModel task's
    (one task, shared by every caller).
  """
  if not config.orchestration.blessed_model_from_records:
    resolver = tfx.dsl.Resolver(
        strategy_class=tfx.dsl.experimental.LatestBlessedModelStrategy,
        model=tfx.dsl.Channel(type=tfx.types.standard_artifacts.Model),
        model_blessing=tfx.dsl.Channel(
            type=tfx.types.standard_artifacts.ModelBlessing)).with_id(
                resolver_id)
    nodes.append(resolver)
    return resolver.outputs['model']
  node = next((n for n in nodes if n.id == LAST_BLESSED_MODEL_ID), None)
  if node is None:
    node = blessed_model.LastBlessedModel(
        records_dir=blessed_model.records_dir(
            config.pipeline_root, config.pipeline_name)).with_id(
                LAST_BLESSED_MODEL_ID)
    nodes.append(node)
  return node.outputs['model']


def pusher_custom_config(
    config: config_lib.PipelineConfig) -> Optional[Dict[str, str]]:
  """The Pusher's custom_config: where to keep its blessed-model records
  (with orchestration.blessed_model_from_records), else None."""
  if not config.orchestration.blessed_model_from_records:
    return None
  return {pusher_executor.RECORDS_DIR_CONFIG_KEY: blessed_model.records_dir(
      config.pipeline_root, config.pipeline_name)}
