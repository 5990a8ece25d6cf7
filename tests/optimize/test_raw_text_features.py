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
from leantfx.errors import ConfigError
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


def test_raw_openvino_takes_text_and_dates_within_float_error(text_fixture,
                                                              tmp_path):
  """openvino-tokenizers' string ops (openvino_strings.py), run as leantfx
  serve's OpenVINO session runs it; the eval rows hold an empty, a 10 kB
  and a Chinese text, an unparseable and a missing date."""
  pytest.importorskip('openvino_tokenizers')
  fx = text_fixture
  path = raw_runtimes.export_raw(
      'openvino', fx.model, fx.tft_output, fx.spec.label, fx.spec.classes,
      raw_runtimes.FLOAT32, None, output_dir=str(tmp_path / 'openvino'),
      identifiers=fx.spec.identifier_columns)
  predictor = raw_runtimes.raw_predictor('openvino', path)
  assert set(predictor.input_names) == set(fx.raw_eval)
  np.testing.assert_allclose(predictor.predict(fx.raw_eval), fx.reference,
                             atol=_FLOAT_TOLERANCE)


def _instances(raw, rows):
  """REST instances of the first ``rows`` raw eval rows, as a client sends
  them (strings as text, numbers as JSON numbers)."""
  out = []
  for i in range(rows):
    out.append({c: (v[i].decode('utf-8') if isinstance(v[i], bytes) else
                    float(v[i])) for c, v in raw.items()})
  return out


@pytest.mark.parametrize('runtime', ['tflite', 'onnx', 'openvino'])
def test_leantfx_serve_answers_raw_text_over_rest(text_fixture, tmp_path,
                                                  runtime):
  """The push as `leantfx serve` loads it, one REST request of raw rows."""
  if runtime == 'onnx':
    pytest.importorskip('onnxruntime_extensions')
  if runtime == 'openvino':
    pytest.importorskip('openvino_tokenizers')
  from leantfx import serving_client as client_lib  # pylint: disable=g-import-not-at-top
  from leantfx.serving import model_config  # pylint: disable=g-import-not-at-top
  from leantfx.serving import server as server_lib  # pylint: disable=g-import-not-at-top
  from leantfx.serving import server_config  # pylint: disable=g-import-not-at-top
  fx = text_fixture
  version_dir = tmp_path / 'base' / 'tickets' / '1'
  if runtime == 'tflite':
    version_dir.mkdir(parents=True)
    raw_features.export_raw_tflite(
        fx.model, fx.tft_output, fx.spec.label, fx.spec.classes,
        tflite_export.FLOAT32, identifiers=fx.spec.identifier_columns,
        output_path=str(version_dir / 'model.tflite'))
  else:
    raw_runtimes.export_raw(
        runtime, fx.model, fx.tft_output, fx.spec.label, fx.spec.classes,
        raw_runtimes.FLOAT32, None, output_dir=str(version_dir),
        identifiers=fx.spec.identifier_columns)
  config = server_config.ServerConfig(
      rest_port=0, grpc_port=0, file_system_poll_wait_seconds=-1,
      max_num_load_retries=0, request_timeout_s=60.0)
  server = server_lib.ModelServer(
      model_config.models_from_base_path(str(tmp_path / 'base')),
      config).start()
  rows = 16
  try:
    rest = client_lib.RestClient('127.0.0.1', server.rest_port,
                                 timeout_s=60.0)
    answer = rest.predict('tickets', instances=_instances(fx.raw_eval, rows))
  finally:
    server.stop(grace_s=5.0)
  probabilities = np.array([p['probabilities'] for p in
                            answer['predictions']])
  np.testing.assert_allclose(probabilities, fx.reference[:rows],
                             atol=_FLOAT_TOLERANCE)


def test_onnx_int8_of_text_is_refused_with_the_reason(text_fixture, tmp_path):
  """ONNX Runtime's int8 calibrator opens the model without
  onnxruntime-extensions; the export says so instead of failing inside it
  (the optimizer then pushes the transformed-input file and reports why)."""
  pytest.importorskip('onnxruntime_extensions')
  fx = text_fixture
  with pytest.raises(ConfigError, match='calibrator'):
    raw_runtimes.export_raw(
        'onnx', fx.model, fx.tft_output, fx.spec.label, fx.spec.classes,
        raw_runtimes.INT8, fx.raw_train, output_dir=str(tmp_path / 'onnx'),
        identifiers=fx.spec.identifier_columns)
