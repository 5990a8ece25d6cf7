"""leantfx's CsvExampleGen: a FileBasedExampleGen over a span's CSV files.

It stands where TFX's CsvExampleGen stood (same node id, same output
artifact and splits) and differs where that one lost data or changed it:
it reads every file the pre-flight checks read (``.CSV`` too), keeps labels
and categorical values exactly as written, takes any column name a CSV can
hold (under its feature key, leantfx/columns.py) and records the rows it
read per file. executor.py says how.
"""
from typing import Optional

from tfx import v1 as tfx
from tfx.components.example_gen.component import FileBasedExampleGen
from tfx.dsl.components.base import executor_spec

from leantfx import spans
from leantfx.components.csv_example_gen import executor
from leantfx.components.csv_example_gen import options as options_lib


class CsvExampleGen(FileBasedExampleGen):
  """Reads the newest (or pinned) span of CSV files into Examples."""

  EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

  def __init__(self, input_base,
               read_options: options_lib.CsvReadOptions,
               output_config: Optional[tfx.proto.Output] = None,
               range_config=None):
    """Builds the component.

    Args:
      input_base: the data root holding span-N/ folders (or a runtime
        parameter).
      read_options: the label and which columns are read as text.
      output_config: the split configuration.
      range_config: the span range to consider (None: the newest span).
    """
    super().__init__(
        input_base=input_base,
        input_config=tfx.proto.Input(splits=[
            tfx.proto.Input.Split(name='single_split',
                                  pattern=spans.CSV_PATTERN)
        ]),
        output_config=output_config,
        range_config=range_config,
        custom_config=options_lib.custom_config(read_options))
