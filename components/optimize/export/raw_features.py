"""Variants that take raw features: the Transform folded into the export.

The optimizer builds and measures every variant on *transformed* features
(``image_xf``, ``<column>_xf``: what the Keras model's inputs are). A client
of the pushed model must not have to re-implement the Transform, so the
exported model is wrapped in the same contract as the Trainer's SavedModel
``serving_default`` (leantfx/raw_serving.py): raw columns in, ``probabilities``,
``class_ids`` and ``classes`` out.

Where the raw -> transformed step lives, per runtime:
  TFLite   in the .tflite graph, so any TFLite client (not only
           ``leantfx serve``) sends the SavedModel's request. Numeric and
           pixel columns go through the real tf.Transform layer
           (``transform_features_layer()``): its analyzer results (means,
           standard deviations) are constants of that graph and the
           converter turns its arithmetic, mean imputation and clipping into
           builtin ops; nothing is re-implemented, so nothing can drift.
           Vocabulary columns cannot go that way: TFT's graph densifies the
           sparse strings (SparseToDense on strings) and hashes into its OOV
           bucket (StringToHashBucketFast), which TFLite has only as flex
           (TF Select) ops. Those columns are looked up instead in a constant
           hash table built from the Transform's own vocabulary file
           (leantfx/raw_serving.vocabulary_table: file order, one OOV id),
           which TFLite runs as a builtin; the Transform is given the column
           as absent and the converter prunes its unused string ops. In
           int8 the model body is quantized as before; inputs and outputs
           stay float32 numbers and strings (tflite_export ``float_io``), so
           no client scales anything.
  ONNX     the same wrapper SavedModel through tf2onnx: the constant tables
           become ai.onnx.ml CategoryMapper nodes (raw_runtimes.py).
  OpenVINO the same wrapper for numeric and pixel columns. OpenVINO alone
           has no hash-table op (openvino-tokenizers adds a string-keyed
           one), so a vocabulary column is not looked up in its graph,
           which keeps such an IR readable without that package: the
           wrapper takes that column as its
           int64 vocabulary ids (``lookups_outside``), the vocabularies
           travel beside the IR (leantfx/runtimes/string_lookups.py, pushed and
           hashed in the version's manifest) and OpenVINO's serving
           session maps a request's strings to ids with them
           (string_lookups.StringLookup, the table's mapping in numpy) before
           the model.
           Free text and dates are in the IR, their features rebuilt from
           the string ops openvino-tokenizers converts (openvino_strings.py,
           ``lookup_only_strings``); such an IR needs that package where it
           is read.

Parity (tests/optimize/test_raw_features.py): on eval rows the raw-input
variant's probabilities match the transformed-input variant's and the
TFT-then-Keras output within quantization error.

Exported, measured and checked against the transformed-input variant the
same way for every runtime: raw_exports.py.
"""
import dataclasses
import os
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.export import openvino_strings
from leantfx.components.optimize.export import tflite as tflite_export
from leantfx.runtimes import serving_export
from leantfx.errors import ConfigError
from leantfx.errors import InputDataError
from leantfx.models import features
from leantfx.models import text_features
from leantfx import raw_serving


def _model_call(model, specs: Mapping[str, tf.TensorSpec]):
  """A function {input name: tensor} -> the model's single output tensor."""
  inputs = model.input

  def call(named):
    if isinstance(inputs, Mapping):
      return model(named, training=False)
    if isinstance(inputs, (list, tuple)):
      return model([named[n] for n in specs], training=False)
    return model(named[next(iter(specs))], training=False)

  return call


def _is_vocabulary_column(column: str,
                          transformed_spec: Mapping[str, Any]) -> bool:
  """A categorical column: one int64 vocabulary id a row.

  A string column's transformed feature tells its role apart
  (models/preprocessing.py): a category is one int64 id, a free text
  MAX_TERMS ids beside its weights (models/text_features.py), a date a
  float32 calendar block (models/date_features.py). Text and dates go
  through the real Transform layer, strings and all.
  """
  feature = transformed_spec.get(features.transformed_name(column))
  return (feature is not None and feature.dtype == tf.int64 and
          tuple(getattr(feature, 'shape', ())) in ((), (1,)) and
          features.text_weights_name(column) not in transformed_spec)


def _vocabularies(tf_transform_output, serving_spec, model_specs
                 ) -> Dict[str, List[bytes]]:
  """{column: its vocabulary} for every categorical column the model takes.

  preprocessing_fn names each vocabulary file after its column
  (models/preprocessing.py); a sparse string column whose transformed
  feature the model takes is categorical.
  """
  vocabularies = {}
  transformed = tf_transform_output.transformed_feature_spec()
  for column, feature in serving_spec.items():
    if (feature.dtype != tf.string or
        features.transformed_name(column) not in model_specs or
        not _is_vocabulary_column(column, transformed)):
      continue
    try:
      vocabularies[column] = tf_transform_output.vocabulary_by_name(column)
    except ValueError as e:
      raise ConfigError(
          f'The model takes {features.transformed_name(column)!r} but the '
          f'transform graph has no vocabulary named {column!r}: {e}. '
          'Export with the transform graph of the preprocessing_fn the model '
          'was trained with.') from e
  return vocabularies


def _absent(value: tf.Tensor, feature) -> Any:
  """A column as parse_example gives it when no row has it."""
  rows = tf.shape(value, out_type=tf.int64)[0]
  if isinstance(feature, tf.io.FixedLenFeature):
    return tf.fill(
        tf.concat([[rows], tf.constant(feature.shape, tf.int64)], 0), '')
  return tf.SparseTensor(tf.zeros([0, 2], tf.int64),
                         tf.zeros([0], feature.dtype), tf.stack([rows, 1]))


def text_constants(tf_transform_output, serving_spec, model_specs
                  ) -> Dict[str, Tuple[Any, List[int], int]]:
  """{text column: (vocabulary table, document frequencies, train rows)}.

  The Transform looks a text's terms up in tables read from its asset
  files, which a .tflite or an ONNX file cannot carry; the export rebuilds
  the same features with text_features.serving_text from these constants
  (the Transform's own vocabulary and counts, so nothing can drift).

  Raises:
    ConfigError: the Transform wrote no vocabularies for a text column.
  """
  texts = {}
  for column in serving_spec:
    if features.text_weights_name(column) not in model_specs:
      continue
    try:
      vocabulary, frequencies, documents = (
          text_features.document_frequencies(tf_transform_output, column))
    except ValueError as e:
      raise ConfigError(
          f'The model takes the text column {column!r} but the transform '
          f'graph has no usable vocabulary for it: {e}. Export with the '
          'transform graph of the preprocessing_fn the model was trained '
          'with.') from e
    texts[column] = (raw_serving.vocabulary_table(vocabulary), frequencies,
                     documents)
  return texts


def _string_preprocessed_columns(tf_transform_output, serving_spec,
                                 model_specs) -> List[str]:
  """The model's string columns that are not vocabulary columns: free text
  and dates, preprocessed with string ops."""
  transformed = tf_transform_output.transformed_feature_spec()
  return sorted(
      c for c, f in serving_spec.items()
      if f.dtype == tf.string and
      features.transformed_name(c) in model_specs and
      not _is_vocabulary_column(c, transformed))


def needs_select_tf_ops(model, tf_transform_output, label: str,
                        identifiers: Sequence[str] = ()) -> bool:
  """The raw export runs string ops TFLite has as TF Select ops only:
  a free-text or a date column's preprocessing."""
  serving_spec = raw_serving.serving_feature_spec(
      tf_transform_output.raw_feature_spec(), label, identifiers)
  return bool(_string_preprocessed_columns(
      tf_transform_output, serving_spec,
      serving_export.serving_input_specs(model)))


def categorical_vocabularies(model, tf_transform_output, label: str,
                             identifiers: Sequence[str] = ()
                            ) -> Dict[str, List[bytes]]:
  """{column: its vocabulary, in file order} for the model's categories."""
  serving_spec = raw_serving.serving_feature_spec(
      tf_transform_output.raw_feature_spec(), label, identifiers)
  return _vocabularies(tf_transform_output, serving_spec,
                       serving_export.serving_input_specs(model))


def _check_exportable(tf_transform_output, serving_spec, specs,
                      lookups_outside: bool, lookup_only_strings: bool
                     ) -> None:
  """Refuses a model the wrapper cannot serve raw.

  Raises:
    ConfigError: the Transform does not produce one of the model's inputs,
      or a runtime without TensorFlow's string kernels would get free-text
      or date columns.
  """
  transformed = tf_transform_output.transformed_feature_spec()
  missing = sorted(set(specs) - set(transformed))
  if missing:
    raise ConfigError(
        f'The model takes {missing}, which the Transform does not produce '
        f'(it produces {sorted(transformed)}); export the model with the '
        'transform graph it was trained on.')
  strings = _string_preprocessed_columns(tf_transform_output, serving_spec,
                                         specs)
  if lookups_outside and not lookup_only_strings and strings:
    raise ConfigError(
        f'The model takes the free-text or date column(s) {strings}, whose '
        'preprocessing runs TensorFlow string kernels (split, join, regex, '
        'string to number, lookup tables) that this runtime lacks and has '
        'no lookup-only rebuild for. Serve these columns raw with TFLite, '
        'ONNX, OpenVINO or the SavedModel.')


def save_raw_serving_model(model, tf_transform_output, label: str,
                           classes: Sequence[str], export_dir: str, *,
                           lookups_outside: bool = False,
                           lookup_only_strings: bool = False,
                           identifiers: Sequence[str] = ()) -> str:
  """Saves ``model`` behind the Transform, with the raw serving signature.

  Args:
    model: a tf_keras classifier on transformed features (any optimized
      variant's Keras model; its inputs are transformed feature names).
    tf_transform_output: the run's ``tft.TFTransformOutput``.
    label: the raw label column (left out of the request).
    classes: class names in class-id order; empty for a regression (the
      signature then answers 'predictions', as the Trainer's does).
    export_dir: the SavedModel directory to write.
    lookups_outside: each vocabulary column comes in as its int64 ids
      ([batch], string_lookups.StringLookup's output) instead of strings, so
      the graph holds no lookup table (for OpenVINO, which runs none).
    lookup_only_strings: free-text and date columns are preprocessed with
      the string ops openvino-tokenizers converts (openvino_strings.py)
      instead of the Transform's and serving_text's.
    identifiers: identifier columns (DatasetSpec.identifier_columns): in
      the raw data, not features, so not in the request.

  Returns:
    export_dir.

  Raises:
    ConfigError: the Transform does not produce one of the model's inputs;
      free text or dates for a runtime without lookup tables.
  """
  specs = serving_export.serving_input_specs(model)
  serving_spec = raw_serving.serving_feature_spec(
      tf_transform_output.raw_feature_spec(), label, identifiers)
  _check_exportable(tf_transform_output, serving_spec, specs,
                    lookups_outside, lookup_only_strings)
  tft_layer = tf_transform_output.transform_features_layer()
  call = _model_call(model, specs)
  vocabularies = _vocabularies(tf_transform_output, serving_spec, specs)
  tables = {} if lookups_outside else {
      column: raw_serving.vocabulary_table(vocabulary)
      for column, vocabulary in vocabularies.items()
  }
  texts = text_constants(tf_transform_output, serving_spec, specs)
  lookup_texts, dates = {}, {}
  if lookup_only_strings:
    lookup_texts = {
        column: openvino_strings.TextLookups(
            *text_features.document_frequencies(tf_transform_output, column))
        for column in texts}
    dates = {
        column: openvino_strings.date_lookups(tft_layer, serving_spec, column)
        for column in _string_preprocessed_columns(
            tf_transform_output, serving_spec, specs) if column not in texts}
    texts = {}
  input_specs = raw_serving.raw_input_specs(serving_spec)
  if lookups_outside:
    for column in vocabularies:
      input_specs[column] = tf.TensorSpec([None], tf.int64, name=column)
  apart = set(vocabularies) | set(texts) | set(lookup_texts) | set(dates)

  @tf.function(input_signature=[input_specs])
  def serve(raw):
    parsed = raw_serving.raw_to_parsed(
        {c: v for c, v in raw.items() if c not in apart}, serving_spec)
    for column in apart:
      # Its features come from constant tables below; the Transform sees
      # the column as absent (empty: a gap in every row), and the
      # converters drop the Transform's unused string ops for it.
      parsed[column] = _absent(raw[column], serving_spec[column])
    out = dict(tft_layer(parsed))
    for column in vocabularies:
      out[features.transformed_name(column)] = (
          tf.reshape(raw[column], [-1, 1]) if lookups_outside else
          raw_serving.vocabulary_ids(raw[column], tables[column]))
    for column, (table, frequencies, documents) in texts.items():
      out.update(text_features.serving_text(raw[column], column, table,
                                            frequencies, documents))
    for column, lookups in lookup_texts.items():
      out.update(lookups.outputs(raw[column], column))
    for column, lookups in dates.items():
      out[features.transformed_name(column)] = lookups.block(raw[column])
    named = {n: tf.cast(out[n], specs[n].dtype) for n in specs}
    if not classes:
      # A regression: the Trainer's serving_default answers 'predictions'.
      return {'predictions': tf.reshape(call(named), [-1])}
    return raw_serving.classification_outputs(call(named), classes)

  holder = tf.Module()
  holder.model_variables = list(model.variables)
  holder.tft_layer = tft_layer
  holder.vocabulary_tables = list(tables.values()) + [
      t[0] for t in texts.values()] + [
          table for lookups in list(lookup_texts.values()) + list(
              dates.values()) for table in lookups.tables]
  holder.serve = serve
  tf.saved_model.save(
      holder, export_dir,
      signatures={
          serving_export.SERVING_SIGNATURE: serve.get_concrete_function()
      })
  return export_dir


def export_raw_tflite(model, tf_transform_output, label: str,
                      classes: Sequence[str], mode: str,
                      raw_representative_data: Optional[
                          Mapping[str, np.ndarray]] = None,
                      *, output_path: Optional[str] = None,
                      num_calibration_samples: int = (
                          serving_export.DEFAULT_CALIBRATION_SAMPLES),
                      identifiers: Sequence[str] = ()
                     ) -> bytes:
  """Converts ``model`` behind the Transform to a raw-input .tflite.

  Args:
    model: the variant's Keras model (transformed-feature inputs).
    tf_transform_output: the run's ``tft.TFTransformOutput``.
    label: the raw label column.
    classes: class names in class-id order.
    mode: a tflite_export mode.
    raw_representative_data: raw train columns ({column: [n] array}) for
      the calibrated modes.
    output_path: the .tflite file to write, if given.
    num_calibration_samples: examples used for calibration.
    identifiers: identifier columns, left out of the request.

  Returns:
    The flatbuffer.

  Raises:
    ConfigError: unknown mode, a calibrated mode without raw representative
      data, or a model input the Transform does not produce.
  """
  if mode not in tflite_export.MODES:
    raise ConfigError(
        f'Unknown TFLite mode {mode!r}; use one of {tflite_export.MODES}.')
  quantization_aware = tflite_export.is_quantization_aware(model)
  with tempfile.TemporaryDirectory(prefix='leantfx-raw-tflite-') as tmp:
    export_dir = save_raw_serving_model(model, tf_transform_output, label,
                                        classes, os.path.join(tmp, 'sm'),
                                        identifiers=identifiers)
    flatbuffer = tflite_export.convert_saved_model(
        export_dir, mode, raw_representative_data,
        quantization_aware=quantization_aware,
        num_calibration_samples=num_calibration_samples, float_io=True,
        select_tf_ops=needs_select_tf_ops(model, tf_transform_output,
                                          label, identifiers))
  if output_path:
    os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)
    with open(output_path, 'wb') as f:
      f.write(flatbuffer)
  return flatbuffer


def run_raw_tflite(model_content: bytes, raw: Mapping[str, np.ndarray],
                   num_threads: int = 1) -> Mapping[str, np.ndarray]:
  """Runs a raw-input .tflite on a batch of raw columns ({column: [n]}).

  For checks, not timing: it builds an interpreter and calls the
  SignatureRunner once (measure.py times prepared interpreters).
  """
  interpreter = tf.lite.Interpreter(model_content=model_content,
                                    num_threads=num_threads)
  runner = interpreter.get_signature_runner(serving_export.SERVING_SIGNATURE)
  details = runner.get_input_details()
  feed = {}
  for name, detail in details.items():
    value = np.asarray(raw[name])
    feed[name] = value if detail['dtype'] == np.object_ else value.astype(
        detail['dtype'])
  return runner(**feed)


def _column(value, feature) -> np.ndarray:
  """A parsed column as the raw request carries it: [n], gaps NaN or ''."""
  if feature.dtype != tf.string:
    # The request carries every number as float32 (raw_serving), int64
    # columns included, and NaN for a gap.
    value = tf.cast(value, tf.float32)
  if isinstance(value, tf.SparseTensor):
    missing = '' if feature.dtype == tf.string else float('nan')
    value = tf.sparse.to_dense(
        tf.sparse.reset_shape(value, [value.dense_shape[0], 1]), missing)
  value = tf.reshape(value, [-1]).numpy()
  if feature.dtype == tf.string:
    return value.astype(object)
  return value.astype(np.float32)


def read_raw_split(files: Sequence[str], tf_transform_output, label: str,
                   limit: Optional[int] = None,
                   batch_size: int = 256,
                   identifiers: Sequence[str] = ()) -> measure.LabeledData:
  """Raw examples as raw-feature requests, labelled by the Transform.

  Args:
    files: gzipped TFRecords of raw tf.Examples (one split of the Examples
      the Transform read).
    tf_transform_output: the run's ``tft.TFTransformOutput``: its raw
      feature spec parses the records, and its graph turns the raw label
      into the label the model was trained on (class id or target), so the
      labels cannot disagree with training.
    label: the raw label column (left out of the features).
    limit: read at most this many examples.
    batch_size: records parsed at a time.
    identifiers: identifier columns, not read (not in a request).

  Returns:
    LabeledData: {column: [n] float32 (NaN: missing) or bytes ('' missing)}
    and the transformed labels.

  Raises:
    InputDataError: the files cannot be read, or hold no example.
  """
  raw_spec = tf_transform_output.raw_feature_spec()
  serving_spec = raw_serving.serving_feature_spec(raw_spec, label,
                                                  identifiers)
  dataset = tf.data.TFRecordDataset(list(files), compression_type='GZIP')
  if limit is not None:
    dataset = dataset.take(limit)
  columns: Dict[str, List[np.ndarray]] = {c: [] for c in serving_spec}
  labels: List[np.ndarray] = []
  try:
    for serialized in dataset.batch(batch_size):
      parsed = tf.io.parse_example(serialized, raw_spec)
      transformed = tf_transform_output.transform_raw_features(
          dict(parsed), drop_unused_features=True)
      labels.append(np.reshape(
          transformed[features.LABEL_KEY].numpy(), [-1]))
      for column, feature in serving_spec.items():
        columns[column].append(_column(parsed[column], feature))
  except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
    raise InputDataError(
        f'Cannot read raw examples from {list(files)[:3]}: '
        f'{e.message.splitlines()[0]}. They must be the gzipped TFRecords '
        'the Transform read, matching its raw schema.') from e
  if not labels:
    raise InputDataError(f'{list(files)[:3]} hold no raw examples.')
  return measure.LabeledData(
      {c: np.concatenate(v) for c, v in columns.items()},
      np.concatenate(labels))


@dataclasses.dataclass(frozen=True)
class RawInputs:
  """What the optimizer needs to ship its pick with raw-feature inputs.

  Attributes:
    tf_transform_output: the run's ``tft.TFTransformOutput``.
    label: the raw label column.
    classes: class names in class-id order; empty for a regression.
    train: raw train rows (read_raw_split), calibrating the int8 modes.
    eval: the whole raw eval split, on which the export is measured.
    names: {feature key: name as written} of the columns whose key differs
      (leantfx/columns.py): what a client of the push sends.
    identifiers: identifier columns: in the raw Examples, not features, so
      no export takes them.
  """
  tf_transform_output: Any
  label: str
  classes: Tuple[str, ...]
  train: measure.LabeledData
  eval: measure.LabeledData
  names: Mapping[str, str] = dataclasses.field(default_factory=dict)
  identifiers: Tuple[str, ...] = ()


class RawParityError(ValueError):
  """The raw-feature export scores worse than its transformed-input twin."""


def raw_path(variant_path: str) -> str:
  """Where a variant's raw-feature export goes: beside its .tflite."""
  root, _ = os.path.splitext(variant_path)
  return root + '.raw.tflite'


def sample_rows(data: measure.LabeledData, count: int,
                seed: int = 0) -> measure.LabeledData:
  """``count`` rows drawn evenly at random (all of them when fewer).

  Calibration must see the split's spread: a split's first rows need not
  (the Augment component appends its new rows by class), and a low-rank
  model's narrow middle layer, calibrated on the first 100 rows of
  penguins' augmented train split, lost 29 points of accuracy in int8.
  """
  if count >= len(data):
    return data
  rows = np.sort(np.random.default_rng(seed).choice(len(data), count,
                                                    replace=False))
  return measure.LabeledData({c: v[rows] for c, v in data.features.items()},
                             data.labels[rows])

