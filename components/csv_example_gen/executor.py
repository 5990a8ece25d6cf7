"""Executor of leantfx's CsvExampleGen: a span's CSV files as tf.Examples.

TFX's driver resolves the newest span (or the pinned one) and its
fingerprint as for any FileBasedExampleGen. Then:

1. ``scan_files`` reads every file once (leantfx/csv_format.py): the header
   (the same in every file), the rows per file and each column's kind over
   all files, so a column has one type in the whole span; and cuts each
   file into blocks of whole records (csv_format.record_blocks), so that
   the workers share a span of one big file as well as one of many files;
2. the Beam stage encodes each block's records (csv_format.encode_batch,
   leantfx/example_bytes.py) under the columns' feature keys
   (leantfx/columns.py): numbers as int64/float, text exactly as written
   (the label of a classification and categorical columns always as text);
3. TFX's base executor splits them by hash (4:1 by default, TFX's own
   ``GenerateExamplesByBeam``), and components/split_writer.py writes each
   split shuffled in gzipped TFRecord shards, as TFX's WriteSplit lays them out,
   without the Reshuffle that kept every record in the runner's process;
4. the Examples artifact records the span, the rows read per file and in all
   (leantfx/row_counts.py), which the ValidationGate checks against the
   splits before anything trains, and the names as written of the columns
   whose feature key differs (``feature_names``), which its report uses.

With ``min_rows_per_class`` (``--min-rows-per-class``), the scan also counts
the rows of each class over every file read, the Beam stage leaves out the
rows of the classes under that count, and the artifact records them by
class (``rows_dropped_by_class``), which the ValidationGate's row count
takes as dropped by that option.
"""
import json
import os
from typing import Any, Dict, Iterable, List, Mapping, Sequence, Tuple

import apache_beam as beam
from tfx.components.example_gen import utils as example_gen_utils
from tfx.dsl.io import fileio
from tfx.proto import example_gen_pb2
from tfx.types import standard_component_specs
from tfx.utils import proto_utils

from leantfx import columns as columns_lib
from leantfx import csv_format
from leantfx import row_counts
from leantfx import spans
from leantfx.components.csv_example_gen import options as options_lib
from leantfx.components import split_writer
from leantfx.errors import InputDataError

# What Do learnt from the scan, handed to the Beam stage (this execution only).
_PLAN_KEY = '_leantfx_csv_plan'
# The least bytes of a file's block, the unit of work of the Beam stage:
# one parse block of pyarrow (~44k rows of 23 numbers and words), so a
# 190 MB file of 1M rows is 23 blocks for the workers to share.
BLOCK_BYTES = csv_format.BLOCK_BYTES


def span_dir_of(exec_properties: Mapping[str, Any]) -> str:
  """The folder of the span the driver resolved (its pattern's folder)."""
  input_config = example_gen_pb2.Input()
  proto_utils.json_to_proto(
      exec_properties[standard_component_specs.INPUT_CONFIG_KEY], input_config)
  pattern = input_config.splits[0].pattern
  return os.path.dirname(os.path.join(
      exec_properties[standard_component_specs.INPUT_BASE_KEY], pattern))


def span_files(span_dir: str) -> List[str]:
  """A span's CSV files (leantfx/spans.py's rule); refuses anything else."""
  return spans.span_csv_files(span_dir, fileio.listdir, fileio.isdir)


def scan_files(files: Sequence[str],
               options: options_lib.CsvReadOptions) -> Dict[str, Any]:
  """Reads every file once: header, rows per file and column kinds.

  Args:
    files: the CSV files, all with the same header.
    options: which columns are read as text.

  Returns:
    {'header': [...], 'kinds': {column: kind or None}, 'rows': {path: n},
     'blocks': {path: [[start, end], ...]}} (csv_format.record_blocks),
    'dropped': {class: rows} of the classes under
    options.min_rows_per_class ({} without it).

  Raises:
    InputDataError: a file whose header differs from the first, a record
      that is not valid CSV, a classification label left empty.
  """
  kinds: Dict[str, Any] = {}
  rows = {}
  blocks = {}
  classes: Dict[str, int] = {}
  for path in files:
    with fileio.open(path, 'rb'):
      pass  # Fails early, with the path, when the file cannot be opened.
  header = csv_format.span_header(files)
  _check_header(files[0], header, options)
  for path in files:
    count = 0
    for batch in csv_format.checked_batches(path, header, None,
                                            options.marker_columns,
                                            options.missing_markers):
      count += batch.num_rows
      kinds = csv_format.merge_kinds(
          kinds, csv_format.batch_kinds(batch, skip=options.text_columns))
      if options.label_as_text:
        missing = batch.column(options.label).null_count
        if missing:
          raise InputDataError(
              f'{path}: {missing} row(s) have no value in the label column '
              f'{options.label!r}. Every row needs a label: fill them in or '
              'delete those rows.')
      if options.min_rows_per_class:
        for value, n in csv_format.label_counts(
            batch, options.label, options.normalize_labels).items():
          classes[value] = classes.get(value, 0) + n
    rows[path] = count
    blocks[path] = csv_format.record_blocks(path, BLOCK_BYTES)
  for name in options.text_columns:
    kinds[name] = csv_format.BYTES
  dropped = {c: n for c, n in sorted(classes.items())
             if n < options.min_rows_per_class}
  if classes and len(classes) - len(dropped) < 2:
    raise InputDataError(
        f'min_rows_per_class {options.min_rows_per_class} would drop '
        f'{len(dropped)} of the {len(classes)} classes of {options.label!r} '
        f'in {files[0]} and the span\'s other files, leaving fewer than 2 to '
        'train on. Pass a smaller --min-rows-per-class, or add rows.')
  return {'header': header, 'kinds': kinds, 'rows': rows, 'blocks': blocks,
          'dropped': dropped}


def _check_header(path: str, header: Sequence[str],
                  options: options_lib.CsvReadOptions) -> None:
  absent = [c for c in (options.label,) + tuple(options.text_columns)
            if c not in header]
  if absent:
    raise InputDataError(
        f'{path}: column(s) {absent} are not in the header {list(header)}.')
  try:
    columns_lib.feature_keys(header)
  except ValueError as e:
    raise InputDataError(f'{path}: {e}') from e


class _EncodeBlock(beam.DoFn):
  """A block of a CSV file's records -> serialized tf.Examples."""

  def __init__(self, plan: Mapping[str, Any],
               options: options_lib.CsvReadOptions):
    self._plan = plan
    self._options = options
    self._keys = columns_lib.feature_keys(plan['header'])

  def process(self, block: Tuple[str, int, int]) -> Iterable[bytes]:
    path, start, end = block
    drop = sorted(self._plan.get('dropped') or ())
    for batch in csv_format.checked_batches(
        path, self._plan['header'], (start, end),
        self._options.marker_columns, self._options.missing_markers):
      batch = csv_format.without_labels(batch, self._options.label, drop,
                                        self._options.normalize_labels)
      yield from csv_format.encode_batch(
          batch, self._plan['kinds'], self._keys,
          strip_column=(self._options.label
                        if self._options.normalize_labels else None))


def planned_blocks(plan: Mapping[str, Any]) -> List[Tuple[str, int, int]]:
  """(path, start, end) of every block of the plan, in file order."""
  return [(path, start, end) for path in sorted(plan['blocks'])
          for start, end in plan['blocks'][path]]


@beam.ptransform_fn
@beam.typehints.with_input_types(beam.Pipeline)
@beam.typehints.with_output_types(bytes)
def _CsvToExamples(pipeline: beam.Pipeline, exec_properties: Dict[str, Any],
                   split_pattern: str) -> beam.pvalue.PCollection:
  """The planned files' records as serialized tf.Examples."""
  del split_pattern  # Do resolved the files (one span, or a window of them).
  plan = json.loads(exec_properties[_PLAN_KEY])
  options = options_lib.from_exec_properties(exec_properties)
  return (pipeline
          | 'Blocks' >> beam.Create(planned_blocks(plan))
          # One block per worker bundle: blocks are encoded side by side.
          | 'Spread' >> beam.Reshuffle()
          | 'Encode' >> beam.ParDo(_EncodeBlock(plan, options)))


class Executor(split_writer.ShuffledSplitsExecutor):
  """Reads the resolved span's CSV files (see the module docstring)."""

  def GetInputSourceToExamplePTransform(self) -> beam.PTransform:
    return _CsvToExamples

  def files_to_read(self, exec_properties: Mapping[str, Any]
                   ) -> List[Tuple[int, List[str]]]:
    """(span, files) of every span to read; here the resolved span only."""
    span = int(exec_properties.get(example_gen_utils.SPAN_PROPERTY_NAME) or 0)
    return [(span, span_files(span_dir_of(exec_properties)))]

  def Do(self, input_dict, output_dict, exec_properties) -> None:
    options = options_lib.from_exec_properties(exec_properties)
    files = [path for _, paths in self.files_to_read(exec_properties)
             for path in paths]
    plan = scan_files(files, options)
    properties = dict(exec_properties)
    properties[_PLAN_KEY] = json.dumps(plan)
    self._log_startup(input_dict, output_dict, properties)
    self.write_splits(output_dict, properties,
                      sum(plan['rows'].values()) -
                      sum(plan['dropped'].values()))
    rows = row_counts.by_name(plan['rows'])
    for examples in output_dict[standard_component_specs.EXAMPLES_KEY]:
      # The span (and version, fingerprint) the driver resolved, on the
      # artifact itself: TFX's Kubeflow V2 entry point publishes the
      # executor's artifacts, not the driver's, and the ValidationGate reads
      # the span there.
      for key in (example_gen_utils.SPAN_PROPERTY_NAME,
                  example_gen_utils.VERSION_PROPERTY_NAME):
        if exec_properties.get(key) is not None:
          examples.set_int_custom_property(key, int(exec_properties[key]))
      fingerprint = exec_properties.get(
          example_gen_utils.FINGERPRINT_PROPERTY_NAME)
      if fingerprint:
        examples.set_string_custom_property(
            example_gen_utils.FINGERPRINT_PROPERTY_NAME, fingerprint)
      examples.set_int_custom_property(row_counts.ROWS_READ_PROPERTY,
                                       sum(rows.values()))
      examples.set_string_custom_property(row_counts.ROWS_BY_FILE_PROPERTY,
                                          row_counts.encode(rows))
      if options.min_rows_per_class:
        examples.set_string_custom_property(
            row_counts.ROWS_DROPPED_PROPERTY,
            row_counts.encode(plan['dropped']))
      renamed = columns_lib.renamed(plan['header'])
      if renamed:
        examples.set_string_custom_property(
            columns_lib.FEATURE_NAMES_PROPERTY,
            json.dumps(renamed, ensure_ascii=False, sort_keys=True))
