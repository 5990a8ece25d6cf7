"""SpanWindowCsvExampleGen: leantfx's CsvExampleGen over the newest K spans.

Locally the span window is a Resolver with SpanRangeStrategy over the spans
earlier runs ingested (pipeline/retraining.py). TFX 1.16's Kubeflow V2
compiler cannot compile that resolver (it supports only the LatestArtifact
and LatestBlessedModel strategies), so on Kubeflow the window is read here
instead: the usual ExampleGen driver finds the newest span N, and the
executor reads spans N-K+1..N. K is an ordinary int parameter, so it can be a
RuntimeParameter of the compiled pipeline.

It is still a FileBasedExampleGen, so the V2 compiler gives it the file-based
ExampleGen driver (span resolution, fingerprint) like CsvExampleGen.
"""
from typing import Optional, Union

from tfx import types
from tfx.components.example_gen import component as example_gen_component
from tfx.dsl.components.base import base_beam_component
from tfx.dsl.components.base import executor_spec
from tfx.orchestration import data_types
from tfx.proto import example_gen_pb2
from tfx.proto import range_config_pb2
from tfx.types import standard_artifacts
from tfx.types import standard_component_specs
from tfx.types.component_spec import ExecutionParameter

from leantfx.components.csv_example_gen import options as csv_options
from leantfx.components.span_window_example_gen import executor


class SpanWindowExampleGenSpec(standard_component_specs.FileBasedExampleGenSpec):
  """FileBasedExampleGen's spec plus the window size and the span pattern."""
  PARAMETERS = {
      **standard_component_specs.FileBasedExampleGenSpec.PARAMETERS,
      executor.SPAN_WINDOW_KEY: ExecutionParameter(type=int),
      executor.SPAN_PATTERN_KEY: ExecutionParameter(type=str),
  }


class SpanWindowCsvExampleGen(example_gen_component.FileBasedExampleGen):
  """Reads the CSV files of the newest ``span_window`` spans in one run."""

  SPEC_CLASS = SpanWindowExampleGenSpec
  EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

  def __init__(self,
               input_base: Union[str, data_types.RuntimeParameter],
               span_pattern: str,
               span_window: Union[int, data_types.RuntimeParameter],
               output_config: example_gen_pb2.Output,
               read_options: csv_options.CsvReadOptions,
               range_config: Optional[Union[range_config_pb2.RangeConfig,
                                            data_types.RuntimeParameter]] = None):
    """Builds the component.

    Args:
      input_base: the data root holding span folders.
      span_pattern: the CSV pattern of one span, with {SPAN} once.
      span_window: K, how many spans (the newest included) to read.
      output_config: the train/eval split.
      read_options: the label and which columns are read as text.
      range_config: a static range pinning the newest span, or None.
    """
    input_config = example_gen_pb2.Input(splits=[
        example_gen_pb2.Input.Split(name='single_split', pattern=span_pattern)
    ])
    spec = SpanWindowExampleGenSpec(
        input_base=input_base,
        input_config=input_config,
        output_config=output_config,
        custom_config=csv_options.custom_config(read_options),
        range_config=range_config,
        output_data_format=example_gen_pb2.FORMAT_TF_EXAMPLE,
        output_file_format=example_gen_pb2.FORMAT_TFRECORDS_GZIP,
        span_window=span_window,
        span_pattern=span_pattern,
        examples=types.Channel(type=standard_artifacts.Examples))
    # FileBasedExampleGen.__init__ builds the base spec; this one adds keys.
    base_beam_component.BaseBeamComponent.__init__(self, spec=spec)
