"""Bulk scoring: a span's raw CSV rows through a pushed model (``leantfx score``).

What TFX's BulkInferrer does for a SavedModel, for every runtime leantfx
pushes (SavedModel, TFLite, OpenVINO, ONNX): the version is loaded the way
``leantfx serve`` loads it (loading.load_servable, then the columns' names as
written, renamed_inputs), and its ``serving_default`` scores the rows.

1. ``plan`` reads the span once in this process: its CSV files (the
   ExampleGen's rule, leantfx/spans.py), the same header in each, the rows of
   each file, the byte blocks the workers share (csv_format.record_blocks)
   and, for ``--split train|eval``, the columns' kinds over the whole span,
   so each row's tf.Example has the ExampleGen's bytes and its split is the
   pipeline's (leantfx/splits.py);
2. a Beam pipeline scores the blocks side by side: each worker loads the
   version once (``setup``) and writes, per block, a CSV part and a part of
   ``PredictionLog`` records (TF Serving's format, gzipped TFRecord, one
   predict_log per model call of up to CALL_ROWS rows, in predictions.csv's
   order, inputs under the model's own input names as TF Serving takes
   them), plus the block's counts; nothing is grouped, so memory does not
   grow with rows;
3. ``finish`` checks rows in == rows out (every block scored, each file's
   rows read as counted in step 1, every row of the split scored), joins the
   CSV parts in file order with each row's file and record number, and
   renames the folder into place: a failed or stopped run leaves no
   ``--out``.

The output folder:
  predictions.csv     file, row (1 = the file's first record), the label as
                      written (with --label), the columns the model does
                      not take (identifiers) as written, then every output
                      of the model
                      (a [batch, k] output as k columns ``name_0`` ..);
  prediction_logs/    part-NNNNN.tfrecord.gz, PredictionLog protos;
  summary.json        the model, the span, rows per file read and scored and,
                      with --label, accuracy (classification) or RMSE.
"""
import csv
import dataclasses
import json
import math
import os
import shutil
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from leantfx import columns as columns_lib
from leantfx import csv_format
from leantfx import spans
from leantfx import splits as splits_lib
from leantfx.errors import InputDataError
from leantfx.serving import feature_names
from leantfx.serving import inference
from leantfx.serving import loading
from leantfx.serving import renamed_inputs
from leantfx.serving import servable as servable_lib
from leantfx.serving import signature as signature_lib
from leantfx.serving import tensor_proto

PREDICTIONS_FILE = 'predictions.csv'
LOGS_DIR = 'prediction_logs'
SUMMARY_FILE = 'summary.json'
ALL_ROWS = 'all'
SPLIT_CHOICES = (ALL_ROWS,) + splits_lib.NAMES
# Rows per model call inside a block.
CALL_ROWS = 1024
_PARTS_DIR = 'parts'


@dataclasses.dataclass(frozen=True)
class ScoreJob:
  """Everything the workers need (plain values: it is pickled to them).

  Attributes:
    model_name: the name the PredictionLogs carry.
    version: the version scored.
    version_dir: its directory.
    span_dir: the span's folder.
    header: the CSV header (names as written).
    rows: {file path: records}.
    blocks: [(file path, start, end)], in file order.
    label: the label column (None: not given).
    split: 'all', 'train' or 'eval'.
    kinds: every column's kind over the span (for a split), else None.
    normalize_labels: the label lost surrounding white space in the run.
    input_keys: {input name as served: the model's own input name}.
    outputs: the output names of serving_default, in order.
    classification: the model answers classes.
    kept: the span's columns the model does not take, the label aside
      (identifiers: column_roles leaves them out of the features), copied
      to predictions.csv as written so a prediction joins back to its row.
  """
  model_name: str
  version: int
  version_dir: str
  span_dir: str
  header: Tuple[str, ...]
  rows: Mapping[str, int]
  blocks: Tuple[Tuple[str, int, int], ...]
  label: Optional[str]
  split: str
  kinds: Optional[Mapping[str, Optional[str]]]
  normalize_labels: bool
  input_keys: Mapping[str, str]
  outputs: Tuple[str, ...]
  classification: bool
  kept: Tuple[str, ...] = ()


def versions(model_base_path: str) -> List[int]:
  """The numeric version folders of a model base path, oldest first."""
  if not os.path.isdir(model_base_path):
    return []
  return sorted(int(d) for d in os.listdir(model_base_path)
                if d.isdigit() and os.path.isdir(
                    os.path.join(model_base_path, d)))


def model_folder(base: str, name: Optional[str]) -> str:
  """The folder of a model's versions: ``base`` itself, or ``base/<name>``.

  Like ``leantfx serve --model-base-path``, ``base`` may be the folder a push
  writes models into (OUTPUT/tflite): then ``name`` picks the model, or the
  only model there is used.

  Raises:
    InputDataError: no versions there, or several models and no name.
  """
  if not os.path.isdir(base):
    raise InputDataError(
        f'--model-base-path {base} is not a folder. Give the folder a push '
        'writes versions into, e.g. OUTPUT/tflite/NAME (or OUTPUT/tflite '
        'with --model NAME).')
  if versions(base):
    return base
  if name is not None and versions(os.path.join(base, name)):
    return os.path.join(base, name)
  models = sorted(d for d in os.listdir(base)
                  if versions(os.path.join(base, d)))
  if name is None and len(models) == 1:
    return os.path.join(base, models[0])
  if models:
    raise InputDataError(
        f'{base} holds the models {", ".join(models)}: '
        + (f'none is named {name!r}. ' if name is not None else '')
        + 'Give --model NAME.')
  raise InputDataError(
      f'{base} holds no version folder (1/, 2/, ...) and no model folder of '
      'versions: nothing was pushed there.')


def load(version_dir: str, name: str, version: int) -> servable_lib.Servable:
  """A version as ``leantfx serve`` loads it (columns' names as written).

  Raises:
    InputDataError: the version does not load; the message says why.
  """
  try:
    column_keys = feature_names.read_feature_names(version_dir)
    loaded = loading.load_servable(name, version, version_dir)
  except (feature_names.FeatureNamesError, servable_lib.LoadError) as e:
    raise InputDataError(f'{version_dir}: the model does not load: {e}') from e
  try:
    return renamed_inputs.in_original_names(loaded, column_keys)
  except servable_lib.LoadError as e:
    loaded.close()
    raise InputDataError(f'{version_dir}: {e}') from e


def _signature(servable: servable_lib.Servable) -> signature_lib.Signature:
  signature = servable.signatures.get(signature_lib.DEFAULT_SIGNATURE)
  if signature is None:
    raise InputDataError(
        f'{servable.path}: the model has no {signature_lib.DEFAULT_SIGNATURE} '
        'signature; leantfx score scores the raw columns through it.')
  return signature


def _span_dir(data_root: str, span: Optional[int]) -> str:
  """span-<span>/ of data_root; None: the newest span (one folder of it)."""
  if span is not None:
    return spans.span_path(data_root, span)
  found = spans.list_span_dirs(data_root)
  if not found:
    raise InputDataError(
        f'{data_root} holds no span-<N> folder; give --data-root the folder '
        'of the span folders.')
  newest = [path for number, path in found if number == found[-1][0]]
  if len(newest) > 1:
    raise InputDataError(
        f'{data_root}: {len(newest)} folders are span {found[-1][0]} '
        f'({", ".join(os.path.basename(p) for p in newest)}); give --span '
        'and keep one folder per span.')
  return newest[0]


def plan(model_base_path: str, data_root: str, span: Optional[int] = None,
         version: Optional[int] = None, model_name: Optional[str] = None,
         label: Optional[str] = None, split: str = ALL_ROWS,
         normalize_labels: bool = False) -> ScoreJob:
  """Reads the model's signature and the span (step 1 of the module doc).

  Raises:
    InputDataError: no such version or span, a model that does not load, a
      span whose files differ in header, lack a column the model takes, or
      are not CSV; --split without --label.
  """
  if split not in SPLIT_CHOICES:
    raise InputDataError(f'--split {split}: choose one of {SPLIT_CHOICES}.')
  model_base_path = model_folder(model_base_path, model_name)
  found = versions(model_base_path)
  if version is None:
    version = found[-1]
  elif version not in found:
    raise InputDataError(
        f'{model_base_path} has no version {version}; it has '
        f'{", ".join(map(str, found))}.')
  version_dir = os.path.join(model_base_path, str(version))
  name = model_name or os.path.basename(os.path.normpath(model_base_path))
  servable = load(version_dir, name, version)
  try:
    signature = _signature(servable)
    column_keys = feature_names.read_feature_names(version_dir) or {}
  finally:
    servable.close()
  inputs = dict(signature.inputs)
  string_inputs = [n for n, spec in inputs.items()
                   if spec.dtype.proto_name == 'DT_STRING']
  classification = 'classes' in signature.outputs

  span_dir = _span_dir(data_root, span)
  files = spans.span_csv_files(span_dir)
  header = csv_format.span_header(files)
  absent = [n for n in inputs if n not in header]
  if absent:
    raise InputDataError(
        f'{files[0]}: the model takes column(s) {absent}, which the span\'s '
        f'header {header} does not have.')
  if label is not None and label not in header:
    raise InputDataError(
        f'{files[0]}: --label {label!r} is not a column of the header '
        f'{header}.')
  if split != ALL_ROWS and label is None:
    raise InputDataError(
        f'--split {split} needs --label: the ExampleGen split each row by '
        'the bytes of all its columns, the label included.')
  text_columns = string_inputs + (
      [label] if label is not None and classification else [])
  # Checked here, in this process, whatever runs the workers: a word in a
  # column the model takes as a number (or in a regression's label).
  numeric = [n for n in inputs if n not in string_inputs] + (
      [label] if label is not None and 'predictions' in signature.outputs
      else [])
  rows, kinds, blocks = {}, {}, []
  for path in files:
    count = 0
    for batch in csv_format.checked_batches(path, header):
      count += batch.num_rows
      _check_numbers(batch, numeric, path)
      if split != ALL_ROWS:
        kinds = csv_format.merge_kinds(
            kinds, csv_format.batch_kinds(batch, skip=text_columns))
    rows[path] = count
    blocks.extend((path, start, end)
                  for start, end in csv_format.record_blocks(path))
  if split != ALL_ROWS:
    kinds.update({name: csv_format.BYTES for name in text_columns})
  return ScoreJob(
      model_name=name, version=version, version_dir=version_dir,
      span_dir=span_dir, header=tuple(header), rows=rows,
      blocks=tuple(blocks), label=label, split=split,
      kinds=kinds if split != ALL_ROWS else None,
      normalize_labels=normalize_labels,
      input_keys={n: column_keys.get(n, n) for n in inputs},
      outputs=tuple(signature.outputs), classification=classification,
      kept=tuple(c for c in header if c not in inputs and c != label))


def _check_numbers(batch: pa.RecordBatch, names: Sequence[str],
                   path: str) -> None:
  """Refuses a column of ``names`` whose present values are not all numbers.

  Raises:
    InputDataError: naming the file, the column and a value.
  """
  for name in names:
    column = batch.column(batch.schema.get_field_index(name))
    if csv_format.array_kind(column) != csv_format.BYTES:
      continue
    words = [t for t in column.drop_null().unique().to_pylist()
             if csv_format.value_kind(t) == csv_format.BYTES]
    raise InputDataError(
        f'{path}: column {name!r} holds a value that is not a number '
        f'({words[0]!r}); the model takes it as a number. Fix or remove '
        'those rows.')


def input_arrays(batch: pa.RecordBatch, signature: signature_lib.Signature,
                 path: str) -> Dict[str, np.ndarray]:
  """A batch's columns as the raw-feature contract takes them.

  Numbers as the signature's dtype (missing: NaN), text as UTF-8 bytes
  (missing: ''), the way leantfx/raw_serving.py defines serving_default.

  Raises:
    InputDataError: a number column holding a value that is not a number.
  """
  arrays = {}
  for name, spec in signature.inputs.items():
    column = batch.column(batch.schema.get_field_index(name))
    if spec.dtype.proto_name == 'DT_STRING':
      values = column.fill_null('').cast(pa.binary()).to_numpy(
          zero_copy_only=False)
      arrays[name] = values.astype(object)
      continue
    present = np.logical_not(column.is_null().to_numpy(zero_copy_only=False))
    values = np.full(len(column), np.nan, dtype=np.float64)
    try:
      values[present] = csv_format.numbers(column, csv_format.FLOAT)
    except ValueError as e:
      raise InputDataError(
          f'{path}: column {name!r} holds a value that is not a number '
          f'({e}); the model takes it as a number.') from e
    arrays[name] = values.astype(spec.dtype.numpy or np.float32)
  return arrays


def _prediction_log(job: ScoreJob, inputs: Mapping[str, np.ndarray],
                    outputs: Mapping[str, np.ndarray]) -> bytes:
  """One model call (a chunk of rows) as a serialized PredictionLog."""
  from tensorflow_serving.apis import prediction_log_pb2  # pylint: disable=g-import-not-at-top
  log = prediction_log_pb2.PredictionLog()
  request = log.predict_log.request
  request.model_spec.name = job.model_name
  request.model_spec.version.value = job.version
  request.model_spec.signature_name = signature_lib.DEFAULT_SIGNATURE
  for name, values in inputs.items():
    request.inputs[job.input_keys[name]].CopyFrom(
        tensor_proto.from_ndarray(values))
  response = log.predict_log.response
  response.model_spec.CopyFrom(request.model_spec)
  for name, values in outputs.items():
    response.outputs[name].CopyFrom(tensor_proto.from_ndarray(values))
  return log.SerializeToString()


def _text(values: np.ndarray) -> List[List[str]]:
  """An output as CSV columns of text: [n] -> 1 column, [n, k] -> k."""
  values = values.reshape(len(values), -1)
  if values.dtype.kind in ('O', 'S'):
    return [[v.decode('utf-8', 'replace') if isinstance(v, bytes) else str(v)
             for v in column] for column in values.T]
  # numpy's str of a float32 is its shortest round-trip text.
  return [column.astype(str).tolist() for column in values.T]


def score_block(job: ScoreJob, servable: servable_lib.Servable, index: int,
                parts_dir: str) -> Dict[str, Any]:
  """Scores one block; writes its CSV and log parts; returns its counts."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  path, start, end = job.blocks[index]
  signature = _signature(servable)
  counts = {'block': index, 'path': path, 'read': 0, 'scored': 0,
            'labeled': 0, 'correct': 0, 'squared_error': 0.0, 'widths': {}}
  keys = columns_lib.feature_keys(job.header) if job.kinds else None
  strip = job.label if job.normalize_labels else None
  part = os.path.join(parts_dir, f'part-{index:05d}')
  options = tf.io.TFRecordOptions(compression_type='GZIP')
  with open(part + '.csv', 'w', encoding='utf-8', newline='') as f, \
      tf.io.TFRecordWriter(part + '.tfrecord.gz', options) as logs:
    writer = csv.writer(f)
    for batch in csv_format.checked_batches(path, job.header, (start, end)):
      first = counts['read']
      counts['read'] += batch.num_rows
      records = np.arange(first, first + batch.num_rows)
      if job.kinds is not None:
        examples = csv_format.encode_batch(batch, job.kinds, keys, strip)
        keep = np.array([splits_lib.split_of(e) == job.split
                         for e in examples], dtype=bool)
        batch, records = batch.filter(pa.array(keep)), records[keep]
      for at in range(0, batch.num_rows, CALL_ROWS):
        chunk = batch.slice(at, CALL_ROWS)
        inputs = input_arrays(chunk, signature, path)
        _, outputs = inference.predict(servable, '', inputs)
        outputs = {name: np.asarray(outputs[name]) for name in job.outputs}
        labels = compared = None
        if job.label is not None:
          column = chunk.column(chunk.schema.get_field_index(job.label))
          labels = column.to_pylist()  # As written, for the CSV.
          compared = (pc.utf8_trim_whitespace(column).to_pylist()
                      if job.normalize_labels else labels)
        columns = [(records[at:at + chunk.num_rows] + 1).tolist()]
        if labels is not None:
          columns.append(['' if v is None else v for v in labels])
        for name in job.kept:
          kept = chunk.column(chunk.schema.get_field_index(name))
          columns.append(kept.fill_null('').to_pylist())
        for name in job.outputs:
          text = _text(outputs[name])
          counts['widths'][name] = len(text)
          columns.extend(text)
        writer.writerows(zip(*columns))
        # One PredictionLog per model call, its rows in predictions.csv's
        # order: a log per row would cost more than the model.
        logs.write(_prediction_log(job, inputs, outputs))
        counts['scored'] += chunk.num_rows
        if compared is not None:
          _add_label_counts(counts, job, compared, outputs)
  with open(part + '.json', 'w', encoding='utf-8') as f:
    json.dump(counts, f)
  return counts


def _add_label_counts(counts: Dict[str, Any], job: ScoreJob,
                      labels: Sequence[Optional[str]],
                      outputs: Mapping[str, np.ndarray]) -> None:
  for i, label in enumerate(labels):
    if label is None:
      continue
    counts['labeled'] += 1
    if job.classification:
      predicted = outputs['classes'][i]
      if isinstance(predicted, bytes):
        predicted = predicted.decode('utf-8', 'replace')
      counts['correct'] += int(predicted == label)
    elif 'predictions' in outputs:
      counts['squared_error'] += (
          float(np.ravel(outputs['predictions'][i])[0]) - float(label)) ** 2


class _ScoreBlocks(beam.DoFn):
  """Block index -> the block scored (score_block); the version loaded once
  per worker."""

  def __init__(self, job: ScoreJob, parts_dir: str):
    self._job = job
    self._parts_dir = parts_dir
    self._servable = None

  def setup(self):
    self._servable = load(self._job.version_dir, self._job.model_name,
                          self._job.version)

  def process(self, index: int) -> Iterator[int]:
    yield score_block(self._job, self._servable, index,
                      self._parts_dir)['block']

  def teardown(self):
    if self._servable is not None:
      self._servable.close()


def run_beam(job: ScoreJob, work_dir: str,
             beam_pipeline_args: Sequence[str]) -> None:
  """Step 2: the blocks scored side by side on Beam (one block a bundle)."""
  parts_dir = os.path.join(work_dir, _PARTS_DIR)
  with beam.Pipeline(options=PipelineOptions(list(beam_pipeline_args))) as p:
    _ = (p
         | 'Blocks' >> beam.Create(list(range(len(job.blocks))))
         | 'Spread' >> beam.Reshuffle()
         | 'Score' >> beam.ParDo(_ScoreBlocks(job, parts_dir)))


def finish(job: ScoreJob, work_dir: str, out_dir: str) -> Dict[str, Any]:
  """Step 3: checks the counts, joins the parts, moves the folder into place.

  Raises:
    InputDataError: a block was not scored, or rows read or scored differ
      from the rows counted (the message names the file and counts).
  """
  parts_dir = os.path.join(work_dir, _PARTS_DIR)
  counts = []
  for index, (path, _, _) in enumerate(job.blocks):
    part = os.path.join(parts_dir, f'part-{index:05d}.json')
    if not os.path.isfile(part):
      raise InputDataError(
          f'Block {index} of {path} was not scored (no {part}); nothing was '
          'written to the output.')
    with open(part, encoding='utf-8') as f:
      counts.append(json.load(f))
  read = {path: 0 for path in job.rows}
  scored = {path: 0 for path in job.rows}
  for c in counts:
    read[c['path']] += c['read']
    scored[c['path']] += c['scored']
  for path, expected in job.rows.items():
    if read[path] != expected:
      raise InputDataError(
          f'{path}: {expected} rows counted but {read[path]} read by the '
          'scoring workers; nothing was written to the output.')
    if job.split == ALL_ROWS and scored[path] != expected:
      raise InputDataError(
          f'{path}: {expected} rows read but {scored[path]} scored; nothing '
          'was written to the output.')
  widths = {}
  for c in counts:
    widths.update(c['widths'])
  header = ['file', 'row'] + ([job.label] if job.label is not None else [])
  header.extend(job.kept)
  for name in job.outputs:
    width = widths.get(name, 1)
    header.extend([name] if width == 1 else
                  [f'{name}_{k}' for k in range(width)])
  logs_dir = os.path.join(work_dir, LOGS_DIR)
  os.makedirs(logs_dir)
  with open(os.path.join(work_dir, PREDICTIONS_FILE), 'w', encoding='utf-8',
            newline='') as out:
    writer = csv.writer(out)
    writer.writerow(header)
    offset = {path: 0 for path in job.rows}
    for index, c in enumerate(counts):
      name = os.path.relpath(c['path'], job.span_dir)
      part = os.path.join(parts_dir, f'part-{index:05d}')
      with open(part + '.csv', encoding='utf-8', newline='') as f:
        for row in csv.reader(f):
          writer.writerow([name, offset[c['path']] + int(row[0])] + row[1:])
      offset[c['path']] += c['read']
      os.replace(part + '.tfrecord.gz',
                 os.path.join(logs_dir, f'part-{index:05d}.tfrecord.gz'))
  shutil.rmtree(parts_dir)
  labeled = sum(c['labeled'] for c in counts)
  summary = {
      'model': job.model_name, 'version': job.version,
      'version_dir': job.version_dir, 'span_dir': job.span_dir,
      'split': job.split,
      'rows_read': sum(read.values()), 'rows_scored': sum(scored.values()),
      'rows_by_file': {os.path.relpath(p, job.span_dir): {
          'read': read[p], 'scored': scored[p]} for p in sorted(job.rows)},
      'label': job.label, 'labeled_rows': labeled,
  }
  if labeled and (job.classification or 'predictions' in job.outputs):
    if job.classification:
      summary['accuracy'] = sum(c['correct'] for c in counts) / labeled
    else:
      summary['rmse'] = math.sqrt(
          sum(c['squared_error'] for c in counts) / labeled)
  with open(os.path.join(work_dir, SUMMARY_FILE), 'w', encoding='utf-8') as f:
    json.dump(summary, f, indent=1, ensure_ascii=False)
  os.replace(work_dir, out_dir)
  return summary


def work_dir_for(out_dir: str) -> str:
  """The folder a score is written in before it is renamed to ``out_dir``.

  Raises:
    InputDataError: ``out_dir`` exists and is not empty.
  """
  out_dir = os.path.abspath(out_dir)
  # An empty folder stays as it is until finish() renames the complete
  # output over it (rename(2) replaces an empty directory).
  if os.path.exists(out_dir) and (not os.path.isdir(out_dir)
                                  or os.listdir(out_dir)):
    raise InputDataError(
        f'--out {out_dir} exists and is not an empty folder; give a new '
        'folder (scores are never written over earlier ones).')
  parent = os.path.dirname(out_dir)
  os.makedirs(parent, exist_ok=True)
  work = os.path.join(parent, f'.{os.path.basename(out_dir)}.partial-{os.getpid()}')
  shutil.rmtree(work, ignore_errors=True)
  os.makedirs(os.path.join(work, _PARTS_DIR))
  return work
