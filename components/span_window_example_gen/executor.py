"""Executor of SpanWindowCsvExampleGen: CSV files of spans N-K+1..N in one run.

The ExampleGen driver (TFX's local one, or the Kubeflow V2 one that runs
before the executor's container) resolves the newest span N as usual. This
executor then reads the CSV files of every span from N-K+1 to N that exists
with leantfx's CsvExampleGen executor, which infers the column types over
all of them at once (so a column is the same type in every span), counts
the rows per file and writes one Examples artifact, split as configured.
"""
import os
from typing import Any, List, Mapping, Tuple

from tfx.components.example_gen import utils as example_gen_utils
from tfx.dsl.io import fileio
from tfx.types import standard_component_specs

from leantfx import spans
from leantfx.components.csv_example_gen import executor as csv_executor

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
    span_dir = os.path.dirname(os.path.join(
        input_base, span_pattern.replace(spans.SPAN_TOKEN, str(span))))
    if not fileio.isdir(span_dir):
      continue
    files = csv_executor.span_files(span_dir) if span == newest_span else (
        spans.csv_entries(span_dir, fileio.listdir, fileio.isdir)[0])
    if files:
      found.append((span, files))
  if not found or found[-1][0] != newest_span:
    raise ValueError(
        f'The newest span {newest_span} has no file matching '
        f'{os.path.join(input_base, span_pattern)}.')
  return found


class Executor(csv_executor.Executor):
  """leantfx's CsvExampleGen over the newest span_window spans."""

  def files_to_read(self, exec_properties: Mapping[str, Any]
                   ) -> List[Tuple[int, List[str]]]:
    """(span, files) of every span of the window that exists, oldest first."""
    return window_files(
        exec_properties[standard_component_specs.INPUT_BASE_KEY],
        exec_properties[SPAN_PATTERN_KEY],
        int(exec_properties[example_gen_utils.SPAN_PROPERTY_NAME]),
        int(exec_properties[SPAN_WINDOW_KEY]))
