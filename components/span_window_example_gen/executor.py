"""Executor of SpanWindowCsvExampleGen: CSV files of spans N-K+1..N in one run.

The ExampleGen driver (TFX's local one, or the Kubeflow V2 one that runs
before the executor's container) resolves the newest span N as usual. This
executor then reads the CSV files of every span from N-K+1 to N that exists,
infers the column types over all of them at once (so a column is the same
type in every span) and writes one Examples artifact, split as configured.

It reuses the DoFns of TFX's CsvExampleGen executor (TFX is pinned at 1.16 in
constraints.txt), so a row becomes the same tf.Example here as there.
"""
import os
from typing import Any, Dict, List, Tuple

import apache_beam as beam
import tensorflow as tf
from tfx.components.example_gen import utils as example_gen_utils
from tfx.components.example_gen.base_example_gen_executor import BaseExampleGenExecutor
from tfx.components.example_gen.csv_example_gen import executor as csv_executor
from tfx.dsl.io import fileio
from tfx.types import standard_component_specs
from tfx.utils import io_utils
from tfx_bsl.coders import csv_decoder

from leantfx import spans

SPAN_WINDOW_KEY = 'span_window'
SPAN_PATTERN_KEY = 'span_pattern'


def window_spans(newest_span: int, window: int) -> List[int]:
  """Spans newest_span-window+1 .. newest_span, none below 0."""
  if window < 1:
    raise ValueError(f'span_window must be >= 1, got {window}.')
  return list(range(max(0, newest_span - window + 1), newest_span + 1))


def window_files(input_base: str, span_pattern: str, newest_span: int,
                 window: int) -> List[Tuple[int, List[str]]]:
  """The CSV files of each span of the window that exists, oldest first.

  Args:
    input_base: the data root.
    span_pattern: the split pattern with one {SPAN} (e.g. spans.CSV_PATTERN).
    newest_span: the span the driver resolved.
    window: how many spans, counting the newest.

  Returns:
    (span, sorted files) for every span of the window that has files.

  Raises:
    ValueError: for a pattern without exactly one {SPAN}, or when the newest
      span itself has no file.
  """
  if span_pattern.count(spans.SPAN_TOKEN) != 1:
    raise ValueError(
        f'The span pattern {span_pattern!r} must contain {spans.SPAN_TOKEN} '
        'exactly once (formats such as {SPAN:2} or dates are not supported by '
        'the span window).')
  found = []
  for span in window_spans(newest_span, window):
    pattern = os.path.join(input_base,
                           span_pattern.replace(spans.SPAN_TOKEN, str(span)))
    files = sorted(fileio.glob(pattern))
    if files:
      found.append((span, files))
  if not found or found[-1][0] != newest_span:
    raise ValueError(
        f'The newest span {newest_span} has no file matching '
        f'{os.path.join(input_base, span_pattern)}.')
  return found


def _check_headers(spans: List[Tuple[int, List[str]]]) -> List[str]:
  """The shared CSV header; a clear error naming the first file that differs."""
  first = spans[0][1][0]
  header = io_utils.load_csv_column_names(first)
  for _, files in spans:
    for path in files:
      other = io_utils.load_csv_column_names(path)
      if other != header:
        raise ValueError(
            f'The CSV header of {path} ({",".join(other)}) differs from that of '
            f'{first} ({",".join(header)}): every span of the window must have '
            'the same columns. Fix the file, or train on a window that starts '
            'after the change.')
  return header


@beam.ptransform_fn
@beam.typehints.with_input_types(beam.Pipeline)
@beam.typehints.with_output_types(tf.train.Example)
def _WindowCsvToExample(pipeline: beam.Pipeline, exec_properties: Dict[str, Any],
                        split_pattern: str) -> beam.pvalue.PCollection:
  """Reads the window's CSV files into tf.Examples (types inferred jointly)."""
  del split_pattern  # The newest span's resolved pattern; the window is wider.
  spans = window_files(
      exec_properties[standard_component_specs.INPUT_BASE_KEY],
      exec_properties[SPAN_PATTERN_KEY],
      int(exec_properties[example_gen_utils.SPAN_PROPERTY_NAME]),
      int(exec_properties[SPAN_WINDOW_KEY]))
  column_names = _check_headers(spans)
  files = [path for _, paths in spans for path in paths]
  parsed = (
      pipeline
      | 'WindowFiles' >> beam.Create(files)
      | 'ReadFromText' >> beam.ParDo(
          csv_executor._ReadCsvRecordsFromTextFile())  # pylint: disable=protected-access
      | 'ParseCSVLine' >> beam.ParDo(csv_decoder.ParseCSVLine(delimiter=','))
      | 'ExtractParsedCSVLines' >> beam.Keys())
  column_infos = beam.pvalue.AsSingleton(
      parsed
      | 'InferColumnTypes' >> beam.CombineGlobally(
          csv_decoder.ColumnTypeInferrer(column_names, skip_blank_lines=True)))
  return parsed | 'ToTFExample' >> beam.ParDo(
      csv_executor._ParsedCsvToTfExample(), column_infos)  # pylint: disable=protected-access


class Executor(BaseExampleGenExecutor):
  """CsvExampleGen over the newest span_window spans."""

  def GetInputSourceToExamplePTransform(self) -> beam.PTransform:
    return _WindowCsvToExample

  def Do(self, input_dict, output_dict, exec_properties) -> None:
    super().Do(input_dict, output_dict, exec_properties)
    # The span (and version, fingerprint) the driver resolved, on the
    # Examples artifact itself: TFX's Kubeflow V2 entry point writes the
    # executor's artifacts, not the driver's, into the task's ExecutorOutput,
    # and downstream tasks (the ValidationGate's drift check) read the span
    # there. Locally the driver already set the same values.
    for examples in output_dict[standard_component_specs.EXAMPLES_KEY]:
      for key in (example_gen_utils.SPAN_PROPERTY_NAME,
                  example_gen_utils.VERSION_PROPERTY_NAME):
        if exec_properties.get(key) is not None:
          examples.set_int_custom_property(key, int(exec_properties[key]))
      fingerprint = exec_properties.get(
          example_gen_utils.FINGERPRINT_PROPERTY_NAME)
      if fingerprint:
        examples.set_string_custom_property(
            example_gen_utils.FINGERPRINT_PROPERTY_NAME, fingerprint)
