"""REST API v1 end to end: formats, status codes and every bad input.

Each bad request is followed by a good one (``_assert_still_serving``): the
server must answer correctly after it. Expected messages are TF Serving's
(``json_tensor.cc``, ``http_rest_api_handler.cc``, ``server_core.cc``).
"""
import json
import math
import socket
import time

import numpy as np
import pytest

pytestmark = pytest.mark.e2e

PENGUIN = {'bill_length_mm': 39.1, 'flipper_length_mm': 181.0,
           'island': 'Torgersen'}
DIGIT = [0.5] * 64


def _post(rest, path, body):
  return rest.request('POST', path, body if isinstance(body, bytes)
                      else json.dumps(body).encode('utf-8'))


def _error(raw: bytes) -> str:
  return json.loads(raw)['error']


def _assert_still_serving(rest):
  code, raw = _post(rest, '/v1/models/digits:predict', {'instances': [DIGIT]})
  assert code == 200, raw
  assert len(json.loads(raw)['predictions'][0]) == 10


# --- Happy paths -----------------------------------------------------------


def test_status_json_matches_tf_serving_bytes(rest):
  code, raw = rest.request('GET', '/v1/models/penguins')
  assert code == 200
  # GetModelStatusResponse through protobuf's C++ printer (1-space indent).
  assert raw == (b'{\n "model_version_status": [\n  {\n   "version": "1",\n'
                 b'   "state": "AVAILABLE",\n   "status": {\n'
                 b'    "error_code": "OK",\n    "error_message": ""\n   }\n'
                 b'  }\n ]\n}\n')


def test_status_of_version_and_label(rest):
  by_version = rest.status('digits', version=1)['model_version_status']
  assert [s['version'] for s in by_version] == ['1']
  by_label = rest.status('digits', label='canary')['model_version_status']
  assert [s['version'] for s in by_label] == ['2']
  every = rest.status('digits')['model_version_status']
  assert [s['version'] for s in every] == ['2', '1']  # newest first


def test_failed_warmup_version_reports_end_with_error(rest):
  status = rest.status('bad_warmup')['model_version_status'][0]
  assert status['state'] == 'END'
  assert status['status']['error_code'] == 'INVALID_ARGUMENT'
  assert 'not_an_input' in status['status']['error_message']


def test_metadata_matches_tf_serving_layout(rest):
  code, raw = rest.request('GET', '/v1/models/penguins/metadata')
  assert code == 200
  text = raw.decode()
  # The two protos are printed separately and glued, as ToJsonString does.
  assert text.startswith('{\n"model_spec":{\n "name": "penguins",\n'
                         ' "signature_name": "",\n "version": "1"\n}\n,\n'
                         '"metadata": {"signature_def": {\n')
  meta = json.loads(text)
  signature = meta['metadata']['signature_def']['signature_def'][
      'serving_default']
  assert signature['method_name'] == 'tensorflow/serving/predict'
  island = signature['inputs']['island']
  assert list(island) == ['dtype', 'tensor_shape', 'name']
  assert island['dtype'] == 'DT_STRING'
  assert island['tensor_shape'] == {'dim': [{'size': '-1', 'name': ''}],
                                    'unknown_rank': False}
  assert signature['outputs']['probabilities']['tensor_shape']['dim'][1][
      'size'] == '3'
  assert '__saved_model_init_op' in meta['metadata']['signature_def'][
      'signature_def']


def test_predict_row_format_bytes(rest):
  code, raw = _post(rest, '/v1/models/half_plus_two:predict',
                    {'instances': [[1.0], [2.0], [5.0]]})
  assert code == 200
  # rapidjson PrettyWriter with single-line rows, as TF Serving writes it.
  assert raw == b'{\n    "predictions": [[2.5], [3.0], [4.5]\n    ]\n}'


def test_predict_columnar_format_bytes(rest):
  code, raw = _post(rest, '/v1/models/half_plus_two:predict',
                    {'inputs': [[1.0], [2.0]]})
  assert code == 200
  assert raw == (b'{\n    "outputs": [\n        [\n            2.5\n        ],'
                 b'\n        [\n            3.0\n        ]\n    ]\n}')


def test_predict_named_inputs_row_and_columnar_agree(rest):
  rows = rest.predict('penguins', instances=[PENGUIN, PENGUIN])
  assert len(rows['predictions']) == 2
  first = rows['predictions'][0]
  assert set(first) == {'probabilities', 'class_ids', 'classes'}
  assert math.isclose(sum(first['probabilities']), 1.0, rel_tol=1e-5)
  assert first['classes'] in ('Adelie', 'Chinstrap', 'Gentoo')
  columns = rest.predict('penguins', inputs={
      k: [v, v] for k, v in PENGUIN.items()})
  assert columns['outputs']['class_ids'] == [first['class_ids']] * 2
  np.testing.assert_allclose(columns['outputs']['probabilities'][0],
                             first['probabilities'], rtol=1e-6)


def test_predict_by_version_and_label(rest):
  v1 = rest.predict('digits', instances=[DIGIT], version=1)['predictions']
  v2 = rest.predict('digits', instances=[DIGIT], version=2)['predictions']
  stable = rest.predict('digits', instances=[DIGIT], label='stable')
  latest = rest.predict('digits', instances=[DIGIT])
  assert v1 != v2
  assert stable['predictions'] == v1
  assert latest['predictions'] == v2


def test_predict_signature_name(rest):
  result = rest.predict('half_plus_two', instances=[[4.0]],
                        signature_name='serving_default')
  assert result == {'predictions': [[4.0]]}
  code, raw = _post(rest, '/v1/models/half_plus_two:predict',
                    {'signature_name': 'nope', 'instances': [[4.0]]})
  assert code == 400
  assert _error(raw) == ('Serving signature name: "nope" not found in '
                         'signature def')


def test_b64_string_input(rest):
  penguin = dict(PENGUIN, island={'b64': 'VG9yZ2Vyc2Vu'})  # "Torgersen"
  assert (rest.predict('penguins', instances=[penguin]) ==
          rest.predict('penguins', instances=[PENGUIN]))


def test_nan_and_infinity_tokens_are_accepted(rest):
  body = ('{"instances": [[NaN], [Infinity], [-Infinity], [1.0]]}').encode()
  code, raw = _post(rest, '/v1/models/half_plus_two:predict', body)
  assert code == 200, raw
  assert raw == (b'{\n    "predictions": [[NaN], [Infinity], [-Infinity], '
                 b'[2.5]\n    ]\n}')
  _assert_still_serving(rest)


def test_classify_and_regress(rest):
  classified = rest.classify('half_plus_two', [{'x': 0.0}, {'x': 2.0}],
                             signature_name='classify_x')
  assert classified['results'][0] == [['positive', 0.5], ['negative', 0.5]]
  assert classified['results'][1][0][0] == 'positive'
  regressed = rest.regress('half_plus_two', [{'x': 1.0}, {'x': 3.0}],
                           signature_name='regress_x')
  assert regressed == {'results': [2.5, 3.5]}
  code, raw = _post(rest, '/v1/models/half_plus_two:regress',
                    {'signature_name': 'regress_x',
                     'context': {'x': 5.0}, 'examples': [{}]})
  assert code == 200 and json.loads(raw) == {'results': [4.5]}


def test_classify_on_a_predict_signature_is_invalid(rest):
  code, raw = _post(rest, '/v1/models/half_plus_two:classify',
                    {'examples': [{'x': 1.0}]})
  assert code == 400
  assert _error(raw) == ('Expected classification signature method_name to '
                         'be tensorflow/serving/classify. Was: '
                         'tensorflow/serving/predict')


def test_tflite_int8_matches_float_model(rest):
  rng = np.random.default_rng(3)
  rows = rng.uniform(0, 1, size=(4, 64)).round(3).tolist()
  float_model = rest.predict('digits', instances=rows, version=2)
  float_lite = rest.predict('digits_float_lite', instances=rows)
  int8_lite = rest.predict('digits_int8', instances=rows)
  expected = np.array(float_model['predictions'])
  np.testing.assert_allclose(float_lite['predictions'], expected, atol=1e-5)
  # int8 output step is 1/256; a few steps of error from quantized matmul.
  np.testing.assert_allclose(int8_lite['predictions'], expected, atol=0.05)
  meta = rest.metadata('digits_int8')['metadata']['signature_def'][
      'signature_def']['serving_default']
  assert meta['inputs']['image_xf']['dtype'] == 'DT_FLOAT'


def test_warmup_file_replayed(rest, server):
  states = server.manager.version_states('warm')
  assert states[1].state == 'AVAILABLE'
  assert rest.predict('warm', instances=[DIGIT])['predictions']


def test_metrics_endpoint(rest):
  rest.predict('digits', instances=[DIGIT])
  _post(rest, '/v1/models/no_such_model:predict', {'instances': [1]})
  code, raw = rest.request('GET', '/monitoring/prometheus/metrics')
  assert code == 200
  text = raw.decode()
  assert ('leantfx_serving_requests_total{model_name="digits",api="Predict",'
          'entrypoint="REST",status="OK"}') in text
  assert ('leantfx_serving_requests_total{model_name="_unknown_",'
          'api="Predict",entrypoint="REST",status="NOT_FOUND"}') in text
  assert ':tensorflow:serving:request_count{model_name="digits",status="OK"}' \
      in text
  assert 'leantfx_serving_request_latency_seconds_bucket{model_name="digits"' \
      in text
  assert ('leantfx_serving_model_version_serving{model_name="digits",'
          'version="2"} 1') in text


# --- Bad inputs: each one is a 4xx with TF Serving's message ----------------

BAD_BODIES = [
    ('malformed_json', b'{"instances": [1.0 2.0]}',
     "JSON Parse error: Missing a comma or ']' after an array element. at "
     'offset: 19'),
    ('not_json', b'instances = [1, 2]',
     'JSON Parse error: Invalid value. at offset: 0'),
    ('empty_body', b'', 'JSON Parse error: The document is empty'),
    ('not_an_object', b'[1, 2]', 'JSON Value: [\n    1,\n    2\n] Is not '
     'object'),
    ('missing_instances_and_inputs', b'{"signature_name": "serving_default"}',
     "Missing 'inputs' or 'instances' key"),
    ('both_instances_and_inputs', b'{"instances": [[1.0]], "inputs": [[1.0]]}',
     "Not formatted correctly expecting only one of 'inputs' or 'instances' "
     'keys to exist '),
    ('instances_not_a_list', b'{"instances": 5}',
     "Excepting 'instances' to be an list/array"),
    ('instances_empty', b'{"instances": []}', "No values in 'instances' array"),
    ('wrong_dtype_string_for_float', b'{"instances": [["a"]]}',
     "Failed to process element: 0 of 'instances' list. Error: "
     'INVALID_ARGUMENT: JSON Value: "a" Type: String is not of expected '
     'type: float'),
    ('wrong_dtype_bool_for_float', b'{"inputs": [[true]]}',
     'JSON Value: true Type: True is not of expected type: float'),
    ('ragged_rows', b'{"instances": [[1.0], [2.0, 3.0]]}',
     "Failed to process element: 1 of 'instances' list. Error: "
     'INVALID_ARGUMENT: Expecting tensor size: 1 but got: 2'),
    ('ragged_columnar', b'{"inputs": [[1.0], [2.0, 3.0]]}',
     'Encountered list at unexpected size: 2 at level: 1 expected size: 1'),
    ('scalar_at_list_level', b'{"inputs": [[1.0], 2.0]}',
     'JSON Value: 2.0 found at incorrect level: 2 in the JSON DOM. Expected '
     'at level: 2'),
    ('lossy_float', b'{"instances": [[16777217]]}',
     'Cannot convert JSON value: 16777217 to float without loss of '
     'precision.'),
    ('signature_name_not_a_string', b'{"signature_name": 100}',
     "'signature_name' key must be a string value."),
    ('bad_base64', b'{"instances": [{"b64": "%%%"}]}',
     'JSON Value: {\n    "b64": "%%%"\n} Type: Object is not of expected '
     'type: float'),
]


@pytest.mark.parametrize('name,body,message', BAD_BODIES,
                         ids=[b[0] for b in BAD_BODIES])
def test_bad_predict_body(rest, name, body, message):
  del name
  code, raw = _post(rest, '/v1/models/half_plus_two:predict', body)
  assert code == 400, raw
  assert message in _error(raw)
  assert raw.startswith(b'{\n    "error": "')
  _assert_still_serving(rest)


def test_wrong_shape_against_signature(rest):
  code, raw = _post(rest, '/v1/models/digits:predict',
                    {'instances': [[0.5] * 63]})
  assert code == 400
  assert _error(raw) == ('input tensor image_xf has shape [1,63] but the '
                         'signature serving_default expects [-1,64] (-1 is '
                         'any size).')
  _assert_still_serving(rest)


def test_missing_named_input(rest):
  partial = {k: v for k, v in PENGUIN.items() if k != 'island'}
  code, raw = _post(rest, '/v1/models/penguins:predict',
                    {'instances': [partial]})
  assert code == 400
  assert _error(raw) == (
      "Failed to process element: 0 of 'instances' list. JSON object: {\n"
      '    "bill_length_mm": 39.1,\n    "flipper_length_mm": 181.0\n} must '
      'only have keys: bill_length_mm,flipper_length_mm,island')
  code, raw = _post(rest, '/v1/models/penguins:predict',
                    {'inputs': {'bill_length_mm': [1.0]}})
  assert code == 400
  assert _error(raw) == "Missing named input: flipper_length_mm in 'inputs' " \
      'object.'
  _assert_still_serving(rest)


def test_string_for_b64_bytes_dtype_mismatch(rest):
  code, raw = _post(rest, '/v1/models/penguins:predict', {
      'instances': [dict(PENGUIN, island={'b64': '!!not base64!!'})]})
  assert code == 400
  assert 'Unable to base64 decode' in _error(raw)
  _assert_still_serving(rest)


@pytest.mark.parametrize('path,code,message', [
    ('/v1/models/unknown:predict', 404,
     'Servable not found for request: Latest(unknown)'),
    ('/v1/models/digits/versions/7:predict', 404,
     'Servable not found for request: Specific(digits, 7)'),
    ('/v1/models/digits/labels/nightly:predict', 400,
     'Unrecognized servable version label: nightly'),
    ('/v1/models/digits/versions/18446744073709551615:predict', 400,
     'Failed to convert version: 18446744073709551615 to numeric.'),
    ('/v1/models/digits/versions/18446744073709551616:predict', 400,
     'Failed to convert version: 18446744073709551616 to numeric.'),
    ('/v1/models/digits/versions/9223372036854775808:predict', 400,
     'Failed to convert version: 9223372036854775808 to numeric.'),
    ('/v1/models/../digits:predict', 400,
     'Malformed request: POST /v1/models/../digits:predict'),
    ('/v1/models/%2e%2e%2fdigits:predict', 400,
     "Invalid model name: '../digits'."),
    ('/v1/models/%2E%2E:predict', 400, "Invalid model name: '..'."),
    ('/v1/models/digits%2f..%2f..:predict', 400,
     "Invalid model name: 'digits/../..'."),
    ('/v1/models/digits/version/1:predict', 400,
     'Malformed request: POST /v1/models/digits/version/1:predict'),
    ('/v1/models/digits:explode', 400,
     'Malformed request: POST /v1/models/digits:explode'),
])
def test_bad_model_paths(rest, path, code, message):
  status, raw = _post(rest, path, {'instances': [DIGIT]})
  assert status == code, raw
  assert message in _error(raw)
  _assert_still_serving(rest)


@pytest.mark.parametrize('path,code,message', [
    ('/v1/models/unknown', 404, 'Could not find any versions of model unknown'),
    ('/v1/models/digits/versions/9', 404,
     'Could not find version 9 of model digits'),
    ('/v1/models/digits/labels/nightly', 400,
     'Unrecognized servable version label: nightly'),
    ('/v1/models', 400, 'Missing model name in request.'),
    ('/v1/models/digits/versions/18446744073709551615/metadata', 400,
     'Failed to convert version: 18446744073709551615 to numeric.'),
    ('/v1/models/%2e%2e%2f/metadata', 400, "Invalid model name: '../'."),
    ('/v1/models/unknown/metadata', 404,
     'Servable not found for request: Latest(unknown)'),
])
def test_bad_status_and_metadata_paths(rest, path, code, message):
  status, raw = rest.request('GET', path)
  assert status == code, raw
  assert message in _error(raw)
  _assert_still_serving(rest)


def test_get_on_predict_path_is_malformed(rest):
  status, raw = rest.request('GET', '/v1/models/digits:predict')
  assert status == 400
  assert _error(raw) == 'Malformed request: GET /v1/models/digits:predict'


def _raw_http(port: int, head: bytes, body_chunks=(), read_timeout=10.0):
  """Sends raw bytes on one connection and returns the response bytes."""
  with socket.create_connection(('127.0.0.1', port), timeout=read_timeout) \
      as sock:
    sock.sendall(head)
    try:
      for chunk in body_chunks:
        sock.sendall(chunk)
    except OSError:
      pass  # The server may close first; its answer is still readable.
    data = b''
    deadline = time.monotonic() + read_timeout
    while time.monotonic() < deadline:
      try:
        part = sock.recv(65536)
      except (ConnectionResetError, socket.timeout):
        break
      if not part:
        break
      data += part
      if b'\r\n\r\n' in data:
        head_end = data.index(b'\r\n\r\n') + 4
        length = [l for l in data[:head_end].split(b'\r\n')
                  if l.lower().startswith(b'content-length:')]
        if length and len(data) >= head_end + int(length[0].split(b':')[1]):
          break
    return data


def test_100mb_body_is_rejected_without_reading_it(rest, server):
  size = 100 * 1024 * 1024
  head = (f'POST /v1/models/digits:predict HTTP/1.1\r\nHost: x\r\n'
          f'Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n'
          ).encode()
  # Only 256 KiB of the announced 100 MiB are ever sent: the 413 must come
  # from the Content-Length alone.
  response = _raw_http(server.rest_port, head, [b' ' * 65536] * 4)
  assert response.startswith(b'HTTP/1.1 413'), response[:200]
  body = response.split(b'\r\n\r\n', 1)[1]
  assert json.loads(body)['error'] == (
      f'Request body of {size} bytes exceeds the limit of 16777216 bytes '
      '(--max-body-bytes).')
  _assert_still_serving(rest)


def test_100mb_body_with_expect_continue_is_rejected_before_upload(rest,
                                                                   server):
  head = (b'POST /v1/models/digits:predict HTTP/1.1\r\nHost: x\r\n'
          b'Content-Length: 104857600\r\nExpect: 100-continue\r\n\r\n')
  response = _raw_http(server.rest_port, head)
  assert response.startswith(b'HTTP/1.1 413'), response[:200]
  _assert_still_serving(rest)


def test_chunked_body_over_limit_is_rejected(rest, server):
  head = (b'POST /v1/models/digits:predict HTTP/1.1\r\nHost: x\r\n'
          b'Transfer-Encoding: chunked\r\n\r\n')
  chunk = b'%x\r\n' % (1024 * 1024) + b' ' * (1024 * 1024) + b'\r\n'
  response = _raw_http(server.rest_port, head, [chunk] * 17)
  assert response.startswith(b'HTTP/1.1 413'), response[:200]
  _assert_still_serving(rest)


def test_chunked_body_accepted(server):
  body = json.dumps({'instances': [DIGIT]}).encode()
  head = (b'POST /v1/models/digits:predict HTTP/1.1\r\nHost: x\r\n'
          b'Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n')
  chunks = [b'%x\r\n' % len(body) + body + b'\r\n', b'0\r\n\r\n']
  response = _raw_http(server.rest_port, head, chunks)
  assert response.startswith(b'HTTP/1.1 200'), response[:300]


def test_chunked_body_sent_after_its_head(server):
  # The head alone reaches the event loop, which hands the connection to a
  # thread; the thread must read the chunks as they come, not wait to fill a
  # buffer (the 10 s read timeout would pass first).
  body = json.dumps({'instances': [DIGIT]}).encode()
  with socket.create_connection(('127.0.0.1', server.rest_port),
                                timeout=10) as sock:
    sock.sendall(b'POST /v1/models/digits:predict HTTP/1.1\r\nHost: x\r\n'
                 b'Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n')
    time.sleep(0.3)
    sock.sendall(b'%x\r\n' % len(body) + body + b'\r\n')
    time.sleep(0.1)
    sock.sendall(b'0\r\n\r\n')
    started = time.monotonic()
    response = sock.recv(65536)
  assert response.startswith(b'HTTP/1.1 200'), response[:300]
  assert time.monotonic() - started < 5


def test_pipelined_and_split_requests_are_answered_in_order(server):
  # Two requests in one write, then one written a few bytes at a time: the
  # event loop answers each once it is complete, in the order sent.
  def request(path, body=b''):
    return (f'POST {path} HTTP/1.1\r\nHost: x\r\n'
            f'Content-Length: {len(body)}\r\n\r\n').encode() + body
  good = json.dumps({'instances': [DIGIT]}).encode()
  with socket.create_connection(('127.0.0.1', server.rest_port),
                                timeout=10) as sock:
    sock.sendall(request('/v1/models/digits:predict', good) +
                 request('/v1/models/nope:predict', good))
    third = request('/v1/models/digits:predict', good)
    for i in range(0, len(third), 7):
      sock.sendall(third[i:i + 7])
      time.sleep(0.001)
    data = b''
    deadline = time.monotonic() + 10
    while data.count(b'HTTP/1.1 ') < 3 and time.monotonic() < deadline:
      data += sock.recv(65536)
  answers = [part.split(b'\r\n', 1)[0] for part in
             data.split(b'HTTP/1.1 ')[1:]]
  assert answers == [b'200 OK', b'404 Not Found', b'200 OK'], data[:600]


def test_keep_alive_serves_several_requests_on_one_connection(server):
  import http.client
  connection = http.client.HTTPConnection('127.0.0.1', server.rest_port,
                                          timeout=10)
  body = json.dumps({'instances': [DIGIT]})
  for _ in range(3):
    connection.request('POST', '/v1/models/digits:predict', body)
    response = connection.getresponse()
    assert response.status == 200
    response.read()
  connection.close()


def test_get_with_a_body_keeps_the_connection_in_sync(server):
  import http.client
  connection = http.client.HTTPConnection('127.0.0.1', server.rest_port,
                                          timeout=10)
  connection.request('GET', '/v1/models/digits', body=b'{"ignored": true}')
  response = connection.getresponse()
  assert response.status == 200
  response.read()
  connection.request('POST', '/v1/models/digits:predict',
                     json.dumps({'instances': [DIGIT]}))
  response = connection.getresponse()
  assert response.status == 200, response.read()
  response.read()
  connection.close()
