"""Raw-feature variants: the Transform folded into TFLite, raw columns in.

Each fixture runs the project's real preprocessing_fn through tft_beam on the
bundled data (digits: 64 pixel columns; penguins: numbers with gaps and two
vocabularies), trains the real architecture for a few steps on the Transform's
output, and then checks parity on held-out rows: the raw-input .tflite
against (a) the Transform-then-Keras output and (b) the same mode's
transformed-input .tflite (tflite_export, what the optimizer measures).
"""
import dataclasses
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from leantfx.components.optimize import config as config_lib_optimize
from leantfx.components.optimize import executor as executor_lib
from leantfx.components.optimize.steps import raw_fold
from leantfx.components.optimize.evaluation import measure
from leantfx.runtimes import openvino as openvino_runtime
from leantfx.components.optimize.evaluation import quality as quality_lib
from leantfx.components.optimize.evaluation import selection
from leantfx.components.optimize.export import raw_exports
from leantfx.components.optimize.export import raw_features
from leantfx.components.optimize.export import tflite as tflite_export
from leantfx.errors import ConfigError
from leantfx.errors import InputDataError
from leantfx.models import model as model_lib
from leantfx.serving import tflite_servable
from tests.optimize import raw_fixture

pytestmark = pytest.mark.unit

_NUM_TRAIN = raw_fixture.NUM_TRAIN
_NUM_EVAL = raw_fixture.NUM_EVAL
_tft_rows = raw_fixture._tft_rows  # pylint: disable=protected-access
# A float32 graph computes the same arithmetic as TF up to float rounding.
_FLOAT_TOLERANCE = 1e-4
# int8: one quantization step of the probabilities output is 1/256; the
# body's accumulated rounding is a few steps. Both int8 files (raw and
# transformed input) quantize the body alike, so they agree more closely
# with each other than either does with float.
_INT8_VS_FLOAT_TOLERANCE = 0.1
_INT8_VS_INT8_TOLERANCE = 2 / 256


def _transformed_tflite_probabilities(fx, mode):
  flatbuffer = tflite_export.export_tflite(fx.model, mode,
                                           fx.transformed_train)
  interpreter = tf.lite.Interpreter(model_content=flatbuffer)
  runner = interpreter.get_signature_runner()
  out = []
  for i in range(_NUM_EVAL):
    feed = {}
    for name, detail in runner.get_input_details().items():
      value = fx.transformed_eval[name][i:i + 1]
      if detail['dtype'] == np.int8:
        scale, zero = detail['quantization']
        value = np.round(value / scale + zero)
      feed[name] = value.astype(detail['dtype'])
    (result,) = runner(**feed).values()
    detail = next(iter(runner.get_output_details().values()))
    if detail['dtype'] == np.int8:
      scale, zero = detail['quantization']
      result = (result.astype(np.float32) - zero) * scale
    out.append(result[0])
  return np.stack(out)


def _check_parity(fx, mode, tolerance_vs_reference, tolerance_vs_transformed):
  flatbuffer = raw_features.export_raw_tflite(
      fx.model, fx.tft_output, fx.spec.label, fx.spec.classes, mode,
      fx.raw_train)
  runner = tf.lite.Interpreter(
      model_content=flatbuffer).get_signature_runner()
  assert set(runner.get_input_details()) == set(fx.raw_eval)
  out = raw_features.run_raw_tflite(flatbuffer, fx.raw_eval)
  probabilities = out['probabilities']
  assert probabilities.shape == fx.reference.shape
  np.testing.assert_allclose(probabilities, fx.reference,
                             atol=tolerance_vs_reference)
  if tolerance_vs_transformed is not None:
    np.testing.assert_allclose(
        probabilities, _transformed_tflite_probabilities(fx, mode),
        atol=tolerance_vs_transformed)
  np.testing.assert_array_equal(out['class_ids'],
                                np.argmax(probabilities, axis=1))
  names = [c.decode() for c in out['classes']]
  assert names == [fx.spec.classes[i] for i in out['class_ids']]
  return flatbuffer


def test_digits_float32_takes_raw_pixels_and_matches_the_transform(
    digits_fixture):
  _check_parity(digits_fixture, tflite_export.FLOAT32, _FLOAT_TOLERANCE,
                _FLOAT_TOLERANCE)


def test_digits_int8_takes_raw_pixels_within_quantization_error(
    digits_fixture):
  _check_parity(digits_fixture, tflite_export.INT8,
                _INT8_VS_FLOAT_TOLERANCE, _INT8_VS_INT8_TOLERANCE)


def test_digits_raw_wrapper_runs_in_openvino_float32(digits_fixture,
                                                     tmp_path):
  """OpenVINO reads the same raw-input SavedModel (numeric columns only).

  Vocabulary columns are looked up outside the IR (OpenVINO has no
  HashTableV2 / LookupTableFindV2): tests/optimize/test_raw_runtimes.py.
  """
  ov = pytest.importorskip('openvino')
  fx = digits_fixture
  saved_model = raw_features.save_raw_serving_model(
      fx.model, fx.tft_output, fx.spec.label, fx.spec.classes,
      str(tmp_path / 'wrapper'))
  # In float32, as openvino_runtime.compile_model runs every IR (a CPU with
  # bfloat16 instructions would otherwise run it in bfloat16).
  compiled = ov.Core().compile_model(
      openvino_runtime.convert(saved_model), 'CPU',
      {'INFERENCE_PRECISION_HINT': 'f32'})
  feed = {}
  for port in compiled.inputs:
    # convert_model names a SavedModel input after its signature argument.
    column = port.get_any_name().split(':')[0]
    feed[port.get_any_name()] = fx.raw_eval[column]
  results = {port.get_any_name(): value
             for port, value in compiled(feed).items()}
  assert len(feed) == len(fx.raw_eval)
  (probabilities,) = [v for k, v in results.items() if 'probabilities' in k]
  np.testing.assert_allclose(probabilities, fx.reference,
                             atol=_FLOAT_TOLERANCE)


def test_penguins_float32_folds_vocabularies_and_gaps(penguins_fixture):
  _check_parity(penguins_fixture, tflite_export.FLOAT32, _FLOAT_TOLERANCE,
                _FLOAT_TOLERANCE)


def test_penguins_int8_quantizes_the_body_and_keeps_the_transform_float(
    penguins_fixture):
  """Quantizing the folded Transform cost penguins 3-14 accuracy points.

  int8 with raw inputs quantizes the model body only: its fully connected
  layers run int8, the z-scores, imputation and lookups in float.
  """
  fx = penguins_fixture
  # Against float only: the transformed-input int8 quantizes its inputs
  # too and is itself the one that strays (one eval row by 0.86).
  flatbuffer = _check_parity(fx, tflite_export.INT8, _INT8_VS_FLOAT_TOLERANCE,
                             None)
  interpreter = tf.lite.Interpreter(model_content=flatbuffer)
  interpreter.allocate_tensors()
  tensors = {t['index']: t for t in interpreter.get_tensor_details()}
  kinds = {}
  for op in interpreter._get_ops_details():  # pylint: disable=protected-access
    first = op['inputs'][0] if len(op['inputs']) else None
    if first is not None and first >= 0:
      kinds.setdefault(op['op_name'], set()).add(tensors[first]['dtype'])
  assert kinds['FULLY_CONNECTED'] == {np.int8}, kinds
  assert np.float32 in kinds['SUB'], kinds  # the z-score, in float
  assert np.int8 not in kinds['SUB'], kinds
  reference = np.argmax(fx.reference, axis=1)
  got = raw_features.run_raw_tflite(flatbuffer, fx.raw_eval)['class_ids']
  assert float((got == reference).mean()) >= 0.95


def test_leantfx_serve_answers_raw_requests_with_unseen_and_missing_values(
    penguins_fixture, tmp_path):
  fx = penguins_fixture
  flatbuffer = raw_features.export_raw_tflite(
      fx.model, fx.tft_output, fx.spec.label, fx.spec.classes,
      tflite_export.FLOAT32)
  version_dir = tmp_path / 'penguins' / '1'
  version_dir.mkdir(parents=True)
  (version_dir / 'model.tflite').write_bytes(flatbuffer)
  servable = tflite_servable.TfLiteServable('penguins', 1, str(version_dir))
  request = {k: v[:8].copy() for k, v in fx.raw_eval.items()}
  # An island the Transform never saw (the OOV id), a missing sex and a
  # missing number (NaN: the Transform's mean).
  request['island'][0] = b'Atlantis'
  request['sex'][1] = b''
  request['body_mass_g'][2] = np.nan
  signature = servable.signatures['serving_default']
  assert set(signature.inputs) == set(request)
  out = servable.run('serving_default', request,
                     ['probabilities', 'class_ids', 'classes'])
  servable.close()
  np.testing.assert_allclose(out['probabilities'], fx.predict(request),
                             atol=_FLOAT_TOLERANCE)
  np.testing.assert_array_equal(
      out['class_ids'], np.argmax(out['probabilities'], axis=1))


def test_same_request_same_answer_as_the_trainers_saved_model(
    penguins_fixture, tmp_path):
  """The raw .tflite and the Trainer's serving_default, on one request."""
  fx = penguins_fixture
  # The signatures run_fn exports (models/model.py), on this model.
  signatures = model_lib._signatures(  # pylint: disable=protected-access
      fx.model, fx.tft_output, fx.spec)
  fx.model.save(str(tmp_path / 'saved_model'), save_format='tf',
                signatures=signatures)
  serving = tf.saved_model.load(
      str(tmp_path / 'saved_model')).signatures['serving_default']
  expected = serving(**{k: tf.constant(v) for k, v in fx.raw_eval.items()})
  flatbuffer = raw_features.export_raw_tflite(
      fx.model, fx.tft_output, fx.spec.label, fx.spec.classes,
      tflite_export.FLOAT32)
  runner = tf.lite.Interpreter(
      model_content=flatbuffer).get_signature_runner()
  _, saved_inputs = serving.structured_input_signature
  assert set(runner.get_input_details()) == set(saved_inputs)
  assert set(runner.get_output_details()) == set(expected)
  got = raw_features.run_raw_tflite(flatbuffer, fx.raw_eval)
  np.testing.assert_allclose(got['probabilities'],
                             expected['probabilities'].numpy(),
                             atol=_FLOAT_TOLERANCE)
  np.testing.assert_array_equal(got['class_ids'],
                                expected['class_ids'].numpy())
  np.testing.assert_array_equal(got['classes'], expected['classes'].numpy())


def test_a_model_input_the_transform_does_not_make_is_a_clear_error(
    digits_fixture, tmp_path):
  inputs = tf.keras.Input(shape=(3,), name='not_a_feature_xf')
  model = tf.keras.Model(inputs, tf.keras.layers.Dense(2)(inputs))
  with pytest.raises(ConfigError, match='not_a_feature_xf'):
    raw_features.save_raw_serving_model(model, digits_fixture.tft_output,
                                        'digit', ('0', '1'),
                                        str(tmp_path / 'sm'))


# ---------------------------------------- what the optimizer pushes ---


def _write_raw_examples(path, fx, indices):
  """The bundled rows as the raw tf.Examples ExampleGen writes (gzipped)."""
  columns = fx.columns
  with tf.io.TFRecordWriter(str(path), options='GZIP') as writer:
    for row in _tft_rows(columns, fx.raw_spec, indices):
      feature = {}
      for name, value in row.items():
        values = value if isinstance(value, list) else [value]
        if fx.raw_spec[name].dtype == tf.string:
          feature[name] = tf.train.Feature(
              bytes_list=tf.train.BytesList(value=values))
        else:
          feature[name] = tf.train.Feature(
              float_list=tf.train.FloatList(value=values))
      writer.write(tf.train.Example(features=tf.train.Features(
          feature=feature)).SerializeToString())


def _raw_inputs(fx, tmp_path):
  path = tmp_path / 'eval.gz'
  _write_raw_examples(path, fx, range(_NUM_TRAIN, _NUM_TRAIN + _NUM_EVAL))
  eval_data = raw_features.read_raw_split([str(path)], fx.tft_output,
                                          fx.spec.label)
  train = measure.LabeledData(fx.raw_train, np.zeros(_NUM_TRAIN))
  return raw_features.RawInputs(fx.tft_output, fx.spec.label,
                                tuple(fx.spec.classes), train, eval_data)


def test_raw_examples_read_as_requests_labelled_by_the_transform(
    penguins_fixture, tmp_path):
  fx = penguins_fixture
  raw = _raw_inputs(fx, tmp_path)
  assert set(raw.eval.features) == set(fx.raw_eval)
  for column, expected in fx.raw_eval.items():
    got = raw.eval.features[column]
    if expected.dtype == object:
      assert list(got) == list(expected), column
    else:
      np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
      np.testing.assert_allclose(got, expected, rtol=1e-6)
  expected_labels = [fx.spec.classes.index(v) for v in
                     fx.columns[fx.spec.label][_NUM_TRAIN:
                                               _NUM_TRAIN + _NUM_EVAL]]
  np.testing.assert_array_equal(raw.eval.labels, expected_labels)


def test_unreadable_raw_examples_are_a_clear_error(penguins_fixture,
                                                   tmp_path):
  path = tmp_path / 'not_gzip'
  path.write_bytes(b'not a TFRecord file at all')
  with pytest.raises(InputDataError, match='Cannot read raw examples'):
    raw_features.read_raw_split([str(path)], penguins_fixture.tft_output,
                                penguins_fixture.spec.label)


def _transformed_variant(fx, mode, tmp_path):
  path = str(tmp_path / f'{mode}.tflite')
  tflite_export.export_tflite(fx.model, mode, fx.transformed_train,
                              output_path=path)
  return measure.VariantMetrics(
      name=f'cand/{mode}', technique='baseline', tflite_mode=mode,
      runtime='tflite', path=path, accuracy=None, num_examples=0,
      size_bytes=0, gzipped_bytes=0, latency_p50_ms=0.0, latency_p99_ms=0.0,
      latency_runs=0, num_threads=1)


def _transformed_eval(fx, raw):
  transformed = fx.transform(raw.eval.features)
  return measure.LabeledData(
      {n: transformed[n].numpy() for n in fx.transformed_eval},
      raw.eval.labels)


def test_the_pick_exported_with_raw_inputs_scores_as_gated(penguins_fixture,
                                                           tmp_path):
  fx = penguins_fixture
  raw = _raw_inputs(fx, tmp_path)
  variant = _transformed_variant(fx, tflite_export.FLOAT32, tmp_path)
  path, facts = raw_exports.export_checked(
      fx.model, variant, raw, _transformed_eval(fx, raw),
      quality_lib.ACCURACY, 0.01, num_threads=1, latency_runs=20,
      warmup_runs=2, calibration_samples=50)
  assert path == str(tmp_path / 'float32.raw.tflite')
  assert facts['inputs'] == 'raw' and facts['eval_examples'] == _NUM_EVAL
  assert facts['latency_includes_preprocessing'] is True
  assert facts['latency_p50_ms'] > 0
  assert facts['accuracy'] == pytest.approx(
      facts['transformed_input_accuracy'], abs=1e-9)
  runner = tf.lite.Interpreter(model_path=path).get_signature_runner()
  assert set(runner.get_input_details()) == set(fx.raw_eval)


def test_an_export_that_scores_below_its_twin_is_refused(penguins_fixture,
                                                         tmp_path):
  """A folded Transform computing something else must not be pushed."""
  fx = penguins_fixture
  raw = _raw_inputs(fx, tmp_path)
  reference = _transformed_eval(fx, raw)
  # The raw rows' labels no longer match: the export scores far worse than
  # the transformed-input variant on the "same" rows.
  wrong = raw_features.RawInputs(
      raw.tf_transform_output, raw.label, raw.classes, raw.train,
      measure.LabeledData(raw.eval.features,
                          (raw.eval.labels + 1) % len(fx.spec.classes)))
  variant = _transformed_variant(fx, tflite_export.FLOAT32, tmp_path)
  with pytest.raises(raw_features.RawParityError, match='accuracy'):
    raw_exports.export_checked(
        fx.model, variant, wrong, reference, quality_lib.ACCURACY, 0.01,
        num_threads=1, latency_runs=20, warmup_runs=2,
        calibration_samples=50)


def _without_train_rows(fx, raw):
  """``raw`` with no train rows: an int8 export has nothing to calibrate on."""
  return raw_features.RawInputs(
      raw.tf_transform_output, raw.label, raw.classes,
      measure.LabeledData({k: v[:0] for k, v in fx.raw_train.items()},
                          np.zeros(0)), raw.eval)


def test_a_failed_raw_export_pushes_the_transformed_file_and_says_so(
    penguins_fixture, tmp_path):
  """An empty int8 calibration set: the optimizer lists it, and goes on."""
  fx = penguins_fixture
  raw = _raw_inputs(fx, tmp_path)
  empty = _without_train_rows(fx, raw)
  variant = _transformed_variant(fx, tflite_export.INT8, tmp_path)
  failures = []
  config = config_lib_optimize.OptimizationConfig()
  path, facts = raw_fold.fold_one_pick(
      variant, {'cand': fx.model}, empty, _transformed_eval(fx, raw), config,
      failures)
  assert path is None  # The caller pushes the transformed-input file.
  assert facts == {'inputs': 'transformed'}
  (failure,) = failures
  assert failure['candidate'] == 'cand/int8'
  assert failure['stage'] == 'raw-feature export'
  assert failure['pushed_inputs'] == 'transformed'
  assert 'calibration needs at least one' in failure['error']
  assert 'takes the transformed features instead' in failure['error']
  assert not os.path.exists(raw_features.raw_path(variant.path))


def test_a_pick_whose_raw_export_fails_gives_way_to_the_next_blessed(
    penguins_fixture, tmp_path):
  """raw_fold.give_way: the int8 pick cannot calibrate (no train rows), so
  the float32 variant, blessed too, is exported and pushed in its place."""
  fx = penguins_fixture
  raw = _raw_inputs(fx, tmp_path)
  empty = _without_train_rows(fx, raw)
  int8, float32 = (
      selection.GateDecision(dataclasses.replace(
          _transformed_variant(fx, mode, tmp_path), accuracy=0.9,
          size_bytes=size), blessed=True, reasons=())
      for mode, size in ((tflite_export.INT8, 10), (tflite_export.FLOAT32,
                                                     40)))
  refused = selection.GateDecision(dataclasses.replace(
      float32.variant, name='cand/float16', size_bytes=20), blessed=False,
                                   reasons=('too far',))
  decisions = [int8, refused, float32]
  config = config_lib_optimize.OptimizationConfig(latency_runs=20,
                                                  warmup_runs=2)
  assert selection.select(decisions, config.policy) is int8
  failures = []
  transformed = _transformed_eval(fx, raw)
  exports = raw_fold.fold_raw_columns(
      {'tflite': int8.variant}, {'cand': fx.model}, empty, transformed,
      config, failures)
  assert exports['tflite'] == (None, {'inputs': 'transformed'})
  selected, picks, exports = raw_fold.give_way(
      decisions, int8, {}, exports, {'cand': fx.model}, empty, transformed,
      config, failures)
  assert selected is float32 and picks == {}
  path, facts = exports['tflite']
  assert path == raw_features.raw_path(float32.variant.path)
  assert facts['inputs'] == 'raw'
  (failure,) = failures
  assert failure['candidate'] == 'cand/int8'
  assert failure['replaced_by'] == 'cand/float32'
  assert 'pushed_inputs' not in failure
  assert 'calibration needs at least one' in failure['error']
  assert 'transformed features' not in failure['error']


def test_no_blessed_variant_left_keeps_the_transformed_pick(
    penguins_fixture, tmp_path):
  """raw_fold.give_way with nothing else blessed: the pick stays, pushed
  with transformed inputs, and its failure says so."""
  fx = penguins_fixture
  raw = _raw_inputs(fx, tmp_path)
  int8 = selection.GateDecision(dataclasses.replace(
      _transformed_variant(fx, tflite_export.INT8, tmp_path), accuracy=0.9),
                                blessed=True, reasons=())
  failures = [{'candidate': 'cand/int8', 'stage': 'raw-feature export',
               'error': 'E' + raw_fold.TRANSFORMED_INSTEAD,
               'pushed_inputs': 'transformed'}]
  exports = {'tflite': (None, {'inputs': 'transformed'})}
  selected, picks, after = raw_fold.give_way(
      [int8], int8, {}, exports, {'cand': fx.model}, raw,
      _transformed_eval(fx, raw), config_lib_optimize.OptimizationConfig(),
      failures)
  assert selected is int8 and picks == {} and after == exports
  assert failures[0]['pushed_inputs'] == 'transformed'


def test_an_int64_column_with_gaps_reads_as_float32_with_nan():
  """SchemaGen's INT columns (penguins' year) arrive as the request's float32."""
  sparse = tf.SparseTensor(indices=[[0, 0], [2, 0]],
                           values=tf.constant([2007, 2009], tf.int64),
                           dense_shape=[3, 1])
  got = raw_features._column(  # pylint: disable=protected-access
      sparse, tf.io.VarLenFeature(tf.int64))
  assert got.dtype == np.float32
  np.testing.assert_array_equal(got, [2007.0, np.nan, 2009.0])
  dense = raw_features._column(  # pylint: disable=protected-access
      tf.constant([[3], [4]], tf.int64), tf.io.FixedLenFeature([1], tf.int64))
  np.testing.assert_array_equal(dense, np.array([3.0, 4.0], np.float32))


def test_calibration_rows_are_drawn_across_the_split():
  """Not the first rows: Augment appends its rows class by class."""
  labels = np.repeat(np.arange(3), 100)
  data = measure.LabeledData({'x': labels.astype(np.float32)}, labels)
  picked = raw_features.sample_rows(data, 30)
  assert len(picked) == 30
  assert set(picked.labels) == {0, 1, 2}
  np.testing.assert_array_equal(picked.features['x'], picked.labels)
  assert raw_features.sample_rows(data, 30).labels.tolist() == (
      picked.labels.tolist())  # seeded
  assert raw_features.sample_rows(data, 1000) is data


def _examples_artifact(root, fx, train_rows, eval_rows):
  """An Examples artifact whose splits hold the given bundled rows."""
  from tfx.types import standard_artifacts  # pylint: disable=g-import-not-at-top
  for split, rows in (('train', train_rows), ('eval', eval_rows)):
    os.makedirs(os.path.join(root, f'Split-{split}'))
    _write_raw_examples(os.path.join(root, f'Split-{split}', 'data.gz'), fx,
                        rows)
  artifact = standard_artifacts.Examples()
  artifact.uri = str(root)
  artifact.split_names = '["train", "eval"]'
  return artifact


def test_raw_int8_calibrates_on_the_rows_as_they_arrived(penguins_fixture,
                                                          tmp_path):
  """calibration_examples (the ExampleGen's) feed the calibration rows."""
  fx = penguins_fixture
  evals = range(_NUM_TRAIN, _NUM_TRAIN + _NUM_EVAL)
  # The Transform's input holds train rows 0..9 only; the ExampleGen's
  # every train row.
  augmented = _examples_artifact(tmp_path / 'augmented', fx, range(10), evals)
  arrived = _examples_artifact(tmp_path / 'arrived', fx, range(_NUM_TRAIN),
                               evals)
  config = config_lib_optimize.OptimizationConfig()
  properties = {'raw_serving': json.dumps(
      {'label': fx.spec.label, 'classes': list(fx.spec.classes)})}
  uri = fx.tft_output.transform_savedmodel_dir.rsplit('/', 1)[0]
  plain = executor_lib._raw_inputs(  # pylint: disable=protected-access
      {'examples': [augmented]}, properties, uri, config)
  assert len(plain.train.labels) == 10
  both = executor_lib._raw_inputs(  # pylint: disable=protected-access
      {'examples': [augmented], 'calibration_examples': [arrived]},
      properties, uri, config)
  assert len(both.train.labels) == min(_NUM_TRAIN, config.calibration_samples)
  # Scoring rows still come from the examples the Transform read.
  assert len(both.eval.labels) == len(plain.eval.labels) == _NUM_EVAL
