"""Raw free text and dates through every export: the same answers as the
Transform then the Keras model.

The fixture (tests/optimize/raw_fixture.py, text_fixture) runs the real
preprocessing_fn on a generated ticket span (benchmarks/column_spans.py):
a description, a priority, a size, an ISO 8601 timestamp, and an identifier
column that is not a feature; its eval rows hold an empty text, a 10 kB
text, a Chinese text, an unparseable date and a missing date.
"""
import numpy as np
import pytest
import tensorflow as tf

from leantfx.components.optimize.export import raw_features
from leantfx.components.optimize.export import raw_runtimes
from leantfx.components.optimize.export import tflite as tflite_export
from leantfx.models import model as model_lib
from leantfx.serving import tflite_servable

pytestmark = pytest.mark.unit

# A float32 graph computes the same arithmetic as TF up to float rounding.
_FLOAT_TOLERANCE = 1e-4


def test_requests_carry_features_not_identifiers(text_fixture):
  fx = text_fixture
  assert 'ticket_id' in fx.raw_spec and 'ticket_id' not in fx.raw_eval
  assert set(fx.raw_eval) == {'description', 'priority', 'size', 'opened'}


def test_raw_tflite_takes_text_and_dates_and_matches_the_transform(
    text_fixture):
  fx = text_fixture
  flatbuffer = raw_features.export_raw_tflite(
      fx.model, fx.tft_output, fx.spec.label, fx.spec.classes,
      tflite_export.FLOAT32, identifiers=fx.spec.identifier_columns)
  runner = tf.lite.Interpreter(
      model_content=flatbuffer).get_signature_runner()
  assert set(runner.get_input_details()) == set(fx.raw_eval)
  out = raw_features.run_raw_tflite(flatbuffer, fx.raw_eval)
  np.testing.assert_allclose(out['probabilities'], fx.reference,
                             atol=_FLOAT_TOLERANCE)
  # The edge rows are there and answered like the rest.
  assert fx.raw_eval['description'][0] == b''
  assert len(fx.raw_eval['description'][1]) > 10_000


def test_leantfx_serve_runs_the_text_tflite_with_the_flex_delegate(
    text_fixture, tmp_path):
  fx = text_fixture
  flatbuffer = raw_features.export_raw_tflite(
      fx.model, fx.tft_output, fx.spec.label, fx.spec.classes,
      tflite_export.FLOAT32, identifiers=fx.spec.identifier_columns)
  version_dir = tmp_path / 'tickets' / '1'
  version_dir.mkdir(parents=True)
  (version_dir / 'model.tflite').write_bytes(flatbuffer)
  servable = tflite_servable.TfLiteServable('tickets', 1, str(version_dir))
  request = {k: v[:8].copy() for k, v in fx.raw_eval.items()}
  request['description'][4] = 'Ünïcödé, "quoted" und völlig neu'.encode()
  request['opened'][5] = b'2031-12-31T23:59:59+05:30'
  out = servable.run('serving_default', request,
                     ['probabilities', 'class_ids', 'classes'])
  servable.close()
  np.testing.assert_allclose(out['probabilities'], fx.predict(request),
                             atol=_FLOAT_TOLERANCE)


def test_trainers_saved_model_serves_raw_text_without_identifiers(
    text_fixture, tmp_path):
  fx = text_fixture
  signatures = model_lib._signatures(  # pylint: disable=protected-access
      fx.model, fx.tft_output, fx.spec)
  fx.model.save(str(tmp_path / 'saved_model'), save_format='tf',
                signatures=signatures)
  serving = tf.saved_model.load(
      str(tmp_path / 'saved_model')).signatures['serving_default']
  _, inputs = serving.structured_input_signature
  assert set(inputs) == set(fx.raw_eval)
  expected = serving(**{k: tf.constant(v) for k, v in fx.raw_eval.items()})
  np.testing.assert_allclose(expected['probabilities'].numpy(), fx.reference,
                             atol=_FLOAT_TOLERANCE)


def test_raw_onnx_takes_text_and_dates_within_float_error(text_fixture,
                                                          tmp_path):
  """tf2onnx with onnxruntime-extensions' string ops, run as leantfx
  serve's ONNX session runs it."""
  pytest.importorskip('onnxruntime_extensions')
  fx = text_fixture
  path = raw_runtimes.export_raw(
      'onnx', fx.model, fx.tft_output, fx.spec.label, fx.spec.classes,
      raw_runtimes.FLOAT32, None, output_dir=str(tmp_path / 'onnx'),
      identifiers=fx.spec.identifier_columns)
  predictor = raw_runtimes.raw_predictor('onnx', path)
  assert set(predictor.input_names) == set(fx.raw_eval)
  np.testing.assert_allclose(predictor.predict(fx.raw_eval), fx.reference,
                             atol=_FLOAT_TOLERANCE)
