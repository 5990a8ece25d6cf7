"""JSON <-> tensor rules and TF Serving's messages, without a server.

Expected strings are TF Serving's (util/json_tensor.cc and its tests); byte
layouts follow rapidjson's PrettyWriter as TF Serving configures it.
"""
import json

import numpy as np
import pytest

from leantfx.serving import dtypes
from leantfx.serving import json_tensor
from leantfx.serving import json_writer
from leantfx.serving import status

pytestmark = pytest.mark.unit

FLOAT_X = {'x': dtypes.DT_FLOAT}


def _inputs(doc, input_dtypes=None):
  return json_tensor.predict_inputs_from_json(
      doc, '', lambda _: input_dtypes or FLOAT_X)


def _error(fn, *args) -> status.ServingError:
  with pytest.raises(status.ServingError) as raised:
    fn(*args)
  return raised.value


@pytest.mark.parametrize('body,message', [
    (b'', 'JSON Parse error: The document is empty'),
    (b'  ', 'JSON Parse error: The document is empty. at offset: 2'),
    (b'{"a": 1', "JSON Parse error: Missing a comma or '}' after an object "
     'member. at offset: 7'),
    (b'{a: 1}', 'JSON Parse error: Missing a name for object member. at '
     'offset: 1'),
    (b'{"a" 1}', 'JSON Parse error: Missing a colon after a name of object '
     'member. at offset: 5'),
    (b'{} []', 'JSON Parse error: The document root must not be followed by '
     'other values. at offset: 3'),
    (b'"text"', 'JSON Value: "text" Is not object'),
    (b'\xff{}', 'JSON Parse error: Invalid encoding in string. at offset: 0'),
])
def test_parse_errors(body, message):
  error = _error(json_tensor.parse_json_object, body)
  assert error.code == status.Code.INVALID_ARGUMENT
  assert error.message == message


def test_nan_infinity_tokens():
  doc = json_tensor.parse_json_object(
      b'{"inputs": [NaN, Infinity, -Infinity, 1]}')
  arrays, request_format = _inputs(doc)
  assert request_format == json_tensor.RequestFormat.COLUMNAR
  x = arrays['x']
  assert x.dtype == np.float32
  assert np.isnan(x[0]) and x[1] == np.inf and x[2] == -np.inf and x[3] == 1


def test_row_format_stacks_instances():
  arrays, request_format = _inputs({'instances': [[1, 2], [3, 4]]})
  assert request_format == json_tensor.RequestFormat.ROW
  np.testing.assert_array_equal(arrays['x'], [[1, 2], [3, 4]])
  assert arrays['x'].dtype == np.float32


def test_named_row_format_and_b64():
  input_dtypes = {'a': dtypes.DT_INT64, 'b': dtypes.DT_STRING}
  arrays, _ = _inputs({'instances': [
      {'a': 1, 'b': {'b64': 'aGVsbG8='}}, {'a': 2, 'b': 'plain'}]},
                      input_dtypes)
  np.testing.assert_array_equal(arrays['a'], [1, 2])
  assert list(arrays['b']) == [b'hello', b'plain']


def test_scalar_columns_of_the_row_format_match_one_by_one_conversion():
  """Scalar columns are built together (one array per dtype); each column
  must still hold its own values, dtype and shape, as value_to_array gives."""
  input_dtypes = {f'f{i}': dtypes.DT_FLOAT for i in range(5)}
  input_dtypes.update({'n0': dtypes.DT_INT64, 'n1': dtypes.DT_INT64,
                       'd': dtypes.DT_DOUBLE, 's': dtypes.DT_STRING,
                       'v': dtypes.DT_FLOAT, 'one': dtypes.DT_INT32})
  rows = []
  for r in range(3):
    row = {f'f{i}': (float(10 * r + i) if i % 2 else 10 * r + i)
           for i in range(5)}
    row.update({'n0': -r, 'n1': 2**40 + r, 'd': 1e300 * r, 's': f'é{r}',
                'v': [float(r), 0.5], 'one': r})
    rows.append(row)
  rows[1]['f0'] = float('nan')
  arrays, _ = _inputs({'instances': rows}, input_dtypes)
  assert sorted(arrays) == sorted(input_dtypes)
  for name, dtype in input_dtypes.items():
    expected = json_tensor.value_to_array([row[name] for row in rows], dtype)
    got = arrays[name]
    assert got.dtype == expected.dtype and got.shape == expected.shape, name
    if dtype == dtypes.DT_STRING:
      assert list(got) == list(expected)
    else:
      np.testing.assert_array_equal(got, expected)
  assert np.isnan(arrays['f0'][1])
  assert list(arrays['s']) == ['é0'.encode(), 'é1'.encode(), 'é2'.encode()]


def test_unpadded_b64_is_accepted():
  arrays, _ = _inputs({'inputs': {'b64': 'aGVsbG8'}},
                      {'s': dtypes.DT_STRING})
  assert arrays['s'][()] == b'hello'


@pytest.mark.parametrize('doc,input_dtypes,message', [
    ({'instances': [1.0], 'inputs': [1.0]}, None,
     "Not formatted correctly expecting only one of 'inputs' or 'instances' "
     'keys to exist '),
    ({}, None, "Missing 'inputs' or 'instances' key"),
    ({'instances': []}, None, "No values in 'instances' array"),
    ({'instances': [[1.0], [[2.0]]]}, None,
     "Failed to process element: 1 of 'instances' list. Error: "
     'INVALID_ARGUMENT: Expecting shape [1] but got: [1,1]'),
    ({'instances': [1.0]}, {'a': dtypes.DT_FLOAT, 'b': dtypes.DT_FLOAT},
     'instances is a plain list, but expecting list of objects as multiple '
     'input tensors required as per tensorinfo_map'),
    ({'inputs': [1.0]}, {'a': dtypes.DT_FLOAT, 'b': dtypes.DT_FLOAT},
     'inputs is a plain value/list, but expecting an object as multiple input '
     'tensors required as per tensorinfo_map'),
    ({'instances': [{'x': 1.0}, {'x': [2.0]}]}, None,
     "Failed to process element: 1 key: x of 'instances' list. Error: "
     'INVALID_ARGUMENT: Expecting shape [] but got: [1]'),
    ({'instances': [{'x': [1.0]}, {'x': 2.0}]}, None,
     "Failed to process element: 1 key: x of 'instances' list. Error: "
     'INVALID_ARGUMENT: Expecting shape [1] but got: []'),
    ({'instances': [{'x': [1.0, 2.0]}, {'x': 2.0}]}, None,
     "Failed to process element: 1 key: x of 'instances' list. Error: "
     'INVALID_ARGUMENT: Expecting tensor size: 2 but got: 1'),
    ({'instances': [{'x': 2**24}]}, None,
     'Cannot convert JSON value: 16777216 to float without loss of '
     'precision.'),
    ({'instances': [{'x': 3.5e38}]}, None,
     'Cannot convert JSON value: 3.5e+38 to float without loss of '
     'precision.'),
    ({'instances': [{'x': True}]}, None,
     'JSON Value: true Type: True is not of expected type: float'),
    ({'instances': [{'x': 1}]}, {'x': dtypes.DT_STRING},
     'JSON Value: 1 Type: Number is not of expected type: string'),
    ({'instances': [{'x': 1.0}]}, {'x': dtypes.DT_INT64},
     'JSON Value: 1.0 Type: Number is not of expected type: int64'),
    ({'instances': [{'x': 1.0}, [2.0]]}, None,
     'Expecting object but got list at item 1 of input list'),
    ({'instances': [{'y': 1.0}]}, None,
     "Failed to process element: 0 key: y of 'instances' list. Error: "
     'INVALID_ARGUMENT: JSON object: does not have named input: y'),
    ({'inputs': 'x'}, None,
     'JSON Value: "x" Type: String is not of expected type: float'),
    ({'inputs': [1]}, {'x': dtypes.DT_INT32}, None),
    ({'inputs': [1.5]}, {'x': dtypes.DT_INT32},
     'JSON Value: 1.5 Type: Number is not of expected type: int32'),
    ({'inputs': [2**40]}, {'x': dtypes.DT_INT32},
     'is not of expected type: int32'),
    ({'inputs': [2**63]}, {'x': dtypes.DT_INT64},
     'is not of expected type: int64'),
    ({'inputs': [1]}, {'x': dtypes.DT_BOOL},
     'JSON Value: 1 Type: Number is not of expected type: bool'),
    ({'inputs': [10**400]}, None, 'without loss of precision.'),
    ({'inputs': [10**20]}, None, None),  # A double to rapidjson: in range.
    ({'inputs': [3.5e38]}, None,
     'Cannot convert JSON value: 3.5e+38 to float without loss of precision.'),
    ({'inputs': [1]}, {'x': dtypes.from_enum(8)},
     'Conversion of JSON Value: 1 to type: complex64'),
    ({'inputs': [[1.0], [2.0, 3.0]]}, None,
     'Encountered list at unexpected size: 2 at level: 1 expected size: 1'),
    ({'inputs': [[[1.0]], [1.0]]}, None,
     # TF Serving reports level + 1 here.
     'JSON Value: 1.0 found at incorrect level: 3 in the JSON DOM. Expected '
     'at level: 3'),
])
def test_predict_request_errors(doc, input_dtypes, message):
  if message is None:
    _inputs(doc, input_dtypes)
    return
  error = _error(_inputs, doc, input_dtypes)
  assert message in error.message, error.message
  assert error.code in (status.Code.INVALID_ARGUMENT,
                        status.Code.UNIMPLEMENTED)


def test_row_response_bytes_single_and_named():
  single = json_tensor.predict_outputs_to_json(
      {'y': np.array([[0.1, 0.2], [1.0, 3.0]], np.float32)},
      json_tensor.RequestFormat.ROW)
  assert single == (b'{\n    "predictions": [[0.1, 0.2], [1.0, 3.0]\n    ]\n}')
  named = json_tensor.predict_outputs_to_json(
      {'class_ids': np.array([2], np.int64),
       'classes': np.array([b'Gentoo'], object),
       'image_bytes': np.array([b'\x00\xff'], object)},
      json_tensor.RequestFormat.ROW)
  assert named == (b'{\n    "predictions": [\n        {\n'
                   b'            "class_ids": 2,\n'
                   b'            "classes": "Gentoo",\n'
                   # Objects are never single-line in rapidjson.
                   b'            "image_bytes": {\n'
                   b'                "b64": "AP8="\n'
                   b'            }\n'
                   b'        }\n    ]\n}')


def test_row_response_needs_a_common_batch_dimension():
  error = _error(json_tensor.predict_outputs_to_json,
                 {'a': np.zeros((2,)), 'b': np.zeros((3,))},
                 json_tensor.RequestFormat.ROW)
  assert error.message == ('Tensor name: b has inconsistent batch size: 3 '
                           'expecting: 2')
  error = _error(json_tensor.predict_outputs_to_json,
                 {'a': np.float32(1.0)}, json_tensor.RequestFormat.ROW)
  assert error.message == 'Tensor name: a has no shape information '


def test_columnar_response_bytes():
  body = json_tensor.predict_outputs_to_json(
      {'a': np.array([1, 2], np.int32), 'b': np.float64(0.5)},
      json_tensor.RequestFormat.COLUMNAR)
  assert body == (b'{\n    "outputs": {\n        "a": [\n            1,\n'
                  b'            2\n        ],\n        "b": 0.5\n    }\n}')


def test_examples_from_json_with_context():
  from tensorflow.core.example import example_pb2
  serialized = json_tensor.examples_from_json({
      'context': {'query': 'pizza'},
      'examples': [{'ratings': [8.0, 9.0], 'age': 20, 'flag': True,
                    'img': {'b64': 'aGVsbG8='}}]})
  example = example_pb2.Example.FromString(serialized[0])
  feature = example.features.feature
  assert feature['query'].bytes_list.value == [b'pizza']
  assert list(feature['ratings'].float_list.value) == [8.0, 9.0]
  assert list(feature['age'].int64_list.value) == [20]
  assert list(feature['flag'].int64_list.value) == [1]
  assert feature['img'].bytes_list.value == [b'hello']


@pytest.mark.parametrize('doc,message', [
    ({'examples': [{'names': [10, None]}]},
     'names has element with unexpected JSON type: Null'),
    ({'examples': [{'names': [10, 10.0]}]},
     'feature: names expecting type: int64'),
    ({'examples': [{'names': [[10], 20]}]},
     'names has element with unexpected JSON type: Array'),
    ({'examples': [{'names': [20, 18446744073709551603]}]},
     'Only int64 is supported'),
    ({'examples': {'names': 1}}, 'list/array'),
    ({'examples': []}, "'examples' value is an empty array"),
    ({'context': [1]}, 'Example must be JSON object'),
    ({}, "key 'examples' is expected and was not found"),
])
def test_examples_errors(doc, message):
  assert message in _error(json_tensor.examples_from_json, doc).message


def test_classification_and_regression_bytes():
  classified = json_tensor.classification_to_json(
      [[(b'car', 0.2), (b'bike', 0.7)]])
  assert classified == (b'{\n    "results": [[["car", 0.2], ["bike", 0.7]]\n'
                        b'    ]\n}')
  assert json_tensor.regression_to_json([3.5, float('nan')]) == \
      b'{\n    "results": [3.5, NaN]\n}'
  assert json.loads(classified)['results'][0][1] == ['bike', 0.7]


@pytest.mark.parametrize('value,single,text', [
    (0.2, True, '0.2'),
    (1.0, True, '1.0'),
    (9000000.0, True, '9e+06'),
    (0.00003, True, '3e-05'),
    (1.0 / 3.0, True, '0.333333343'),
    (1.0 / 3.0, False, '0.33333333333333331'),
    (-0.0, True, '-0.0'),
    (float('inf'), True, 'Infinity'),
    (float('-inf'), False, '-Infinity'),
    (float('nan'), True, 'NaN'),
])
def test_write_decimal(value, single, text):
  # The single-precision cases are float32 values, as tensors hold them.
  if single:
    value = float(np.float32(value))
  assert json_writer.format_decimal(value, single) == text


def test_error_body_escapes_like_rapidjson():
  assert json_writer.error_body('a "b"\n\x01') == (
      b'{\n    "error": "a \\"b\\"\\n\\u0001"\n}')
