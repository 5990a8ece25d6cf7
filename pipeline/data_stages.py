"""Graph pieces for the data side of the pipeline, used by pipeline.py.

  * ExampleGen by format: leantfx's CsvExampleGen, ImportExampleGen
    (TFRecord files of tf.Examples) or ImageExampleGen
    (span-N/<class>/*.png|jpg);
  * the ValidationGate after ExampleValidator, with its drift baseline folder
    (the statistics of earlier spans that passed) under the pipeline root;
  * Augment between the gate and Transform: Transform only runs once the gate
    passed, and trains on the augmented, rebalanced train split;
  * what Transform and Trainer need from the schema and the options (value
    domains for the noisy-row policy, class weights), through custom_config.
"""
from typing import Any, Dict, List, Union

from tfx import v1 as tfx
from tfx.utils import io_utils

from leantfx import config as config_lib
from leantfx import spans
from leantfx.components.augment import component as augment_component
from leantfx.components.augment import examples as examples_lib
from leantfx.components.csv_example_gen import component as csv_gen
from leantfx.components.csv_example_gen import options as csv_options
from leantfx.components.image_example_gen import component as image_gen
from leantfx.components.image_example_gen import decode as image_decode
from leantfx.components.span_window_example_gen import component as window_gen
from leantfx.components.validation_gate import component as gate_component
from leantfx.errors import ConfigError

# ExampleGen split patterns: the span layout is leantfx/spans.py.
CSV_PATTERN = spans.CSV_PATTERN
TFRECORD_PATTERN = spans.TFRECORD_PATTERN
GATE_ID = 'ValidationGate'
# The CSV ExampleGen's node id: TFX's own component's, so task names, ML
# Metadata queries and caches read the same as before.
EXAMPLE_GEN_ID = 'CsvExampleGen'
AUGMENT_ID = 'Augment'


def image_settings(config: config_lib.PipelineConfig
                  ) -> image_decode.ImageSettings:
  """ImageExampleGen's settings from the DatasetSpec and ingestion options."""
  spec = config.dataset
  height, width, channels = spec.image_shape
  return image_decode.ImageSettings(
      height=height, width=width, channels=channels,
      image_feature=spec.image_key, label_feature=spec.label,
      bad_images=config.ingestion.bad_images)


def csv_read_options(config: config_lib.PipelineConfig
                    ) -> csv_options.CsvReadOptions:
  """The CSV ExampleGen's options from the DatasetSpec, in the file's names."""
  spec = config.dataset
  # Text, dates and identifiers are strings as written whatever they hold
  # (an id of digits, a date); markers are missing only in numeric columns.
  as_text = (spec.categorical_features + spec.text_features +
             spec.date_features + spec.identifier_columns)
  return csv_options.CsvReadOptions(
      label=spec.original_name(spec.label),
      label_as_text=not spec.is_regression,
      categorical_columns=tuple(spec.original_name(c) for c in as_text),
      normalize_labels=config.ingestion.normalize_labels,
      marker_columns=tuple(spec.original_name(c)
                           for c in spec.numeric_features
                           if spec.missing_markers),
      missing_markers=spec.missing_markers,
      min_rows_per_class=config.ingestion.min_rows_per_class or 0)


def example_gen(config: config_lib.PipelineConfig,
                input_base: Union[str, Any],
                output_config: tfx.proto.Output,
                range_config: Any = None,
                span_window: Any = 1) -> tfx.types.BaseNode:
  """The ExampleGen of the configured data format (newest span).

  With orchestration.window_in_example_gen (Kubeflow), CSV data is read by
  SpanWindowCsvExampleGen over the newest ``span_window`` spans; its node id
  stays CsvExampleGen, so task names do not change with the window.

  Raises:
    ConfigError: for a window read in ExampleGen on data that is not CSV.
  """
  data_format = config.ingestion.data_format
  if config.orchestration.window_in_example_gen:
    if data_format != 'csv':
      raise ConfigError(
          f'The span window on Kubeflow reads CSV spans only; the data format '
          f'is {data_format!r}. Compile with CSV data, or run the window '
          'locally with `leantfx run/watch --span-window K`.')
    return window_gen.SpanWindowCsvExampleGen(
        input_base=input_base, span_pattern=CSV_PATTERN,
        span_window=span_window, output_config=output_config,
        read_options=csv_read_options(config),
        range_config=range_config).with_id(EXAMPLE_GEN_ID)
  if data_format == 'images':
    return image_gen.ImageExampleGen(
        input_base=input_base, settings=image_settings(config),
        output_config=output_config, range_config=range_config)
  if data_format == 'csv':
    return csv_gen.CsvExampleGen(
        input_base=input_base, read_options=csv_read_options(config),
        output_config=output_config,
        range_config=range_config).with_id(EXAMPLE_GEN_ID)
  return tfx.components.ImportExampleGen(
      input_base=input_base,
      input_config=tfx.proto.Input(splits=[
          tfx.proto.Input.Split(name='single_split', pattern=TFRECORD_PATTERN)
      ]),
      output_config=output_config,
      range_config=range_config)


def gate_and_augment(config: config_lib.PipelineConfig,
                     examples: tfx.types.BaseChannel,
                     statistics: tfx.types.BaseChannel,
                     schema: tfx.types.BaseChannel,
                     anomalies: tfx.types.BaseChannel,
                     nodes: List[tfx.types.BaseNode]) -> tfx.types.BaseChannel:
  """Adds the resolver, the gate and Augment; returns the examples to train on.

  Args:
    config: the pipeline configuration (validation, augment, dataset).
    examples: ExampleGen's examples.
    statistics: StatisticsGen's statistics of them.
    schema: the schema channel.
    anomalies: ExampleValidator's anomalies.
    nodes: the pipeline's node list; the new nodes are appended.

  The drift baseline is the gate's baseline folder under the pipeline root,
  on every orchestrator (components/validation_gate/component.py explains
  why it is no Resolver).

  Returns:
    Augment's examples: eval unchanged, train augmented and rebalanced.
  """
  baseline_dir = None
  if config.validation.check_drift:
    baseline_dir = gate_component.baseline_dir(config.pipeline_root,
                                               config.pipeline_name)
  gate = gate_component.ValidationGate(
      examples=examples,
      statistics=statistics,
      schema=schema,
      anomalies=anomalies,
      allow_anomalies=config.validation.allow_anomalies,
      check_drift=config.validation.check_drift,
      baseline_dir=baseline_dir,
      expected_rows=(None if config.validation.expected_rows is None else
                     dict(config.validation.expected_rows)),
      text_features=config.dataset.text_features,
      date_formats=config.dataset.date_format).with_id(GATE_ID)
  augment = augment_component.Augment(
      examples=examples,
      schema=schema,
      dataset=config.dataset,
      augment_config=config.augment).with_id(AUGMENT_ID)
  # A task dependency, not a data one: Augment waits for the gate (which
  # fails the run on anomalies), yet stays cached when only the gate re-ran.
  augment.add_upstream_node(gate)
  nodes.extend([gate, augment])
  return augment.outputs['augmented_examples']


def training_custom_config(
    config: config_lib.PipelineConfig) -> Dict[str, Any]:
  """custom_config entries for Transform and Trainer.

  'domains': the schema's value domains of the feature columns (Transform
  imputes values outside them, the noisy-row policy); 'class_weights': 'auto'
  or 'none' (the Trainer weighs the loss by inverse class frequency).
  """
  domains = {}
  if config.dataset.schema_file:
    schema = io_utils.SchemaReader().read(config.dataset.schema_file)
    columns = set(config.dataset.feature_columns)
    domains = {
        name: domain.to_json()
        for name, domain in sorted(examples_lib.schema_domains(schema).items())
        if name in columns
    }
  return {'domains': domains, 'class_weights': config.class_weights}
