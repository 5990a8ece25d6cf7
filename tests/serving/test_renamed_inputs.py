"""Requests and metadata in the columns' original names, for every runtime.

One small model of four float columns, trained under model keys
(model_builders.COLUMN_KEYS), is served as a SavedModel, a TFLite, an ONNX
and an OpenVINO version, each with a feature_names.json mapping the original
column names (a space and '%', non-ASCII, a comma and quotes) to the keys. A
real server on loopback must take REST rows and columns and gRPC requests
in the original names and answer what the model answers when called with the
keys; show the original names in its metadata; refuse the keys; leave
other signatures, and versions without the file, as they were; and refuse to
load a malformed file, naming it.
"""
import base64
import json
import os
import shutil

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import get_model_metadata_pb2
from tensorflow_serving.apis import predict_pb2
from tensorflow_serving.apis import prediction_service_pb2_grpc

from leantfx.runtimes import onnx as onnx_runtime
from leantfx.runtimes import openvino as openvino_runtime
from leantfx import serving_client as client_lib
from leantfx.serving import feature_names
from leantfx.serving import model_config
from leantfx.serving import renamed_inputs
from leantfx.serving import saved_model_servable
from leantfx.serving import server as server_lib
from leantfx.serving import server_config
from leantfx.serving import status
from tests.serving import model_builders

pytestmark = pytest.mark.e2e

MAPPING = {'alcohol (%)': 'alcohol_x1', 'größe': 'groesse_x2',
           'a,b "q"': 'a_b_q_x3', 'age': 'age'}
# Model name -> runtime; each serves the same model with a mapping file.
RUNTIMES = {'wine': 'saved_model', 'wine_lite': 'tflite',
            'wine_onnx': 'onnx', 'wine_openvino': 'openvino'}
BATCH = 3


@pytest.fixture(scope='module')
def base(tmp_path_factory):
  root = str(tmp_path_factory.mktemp('renamed'))
  keras_model = model_builders.columns_keras_model()

  def version(model):
    return os.path.join(root, model, '1')

  model_builders.columns_saved_model(version('wine_plain'), keras_model)
  shutil.copytree(version('wine_plain'), version('wine'))
  feature_names.write_feature_names(
      os.path.join(version('wine'), feature_names.SAVED_MODEL_FOLDER),
      MAPPING)
  model_builders.columns_tflite(version('wine_plain'), version('wine_lite'))
  onnx_runtime.export_onnx(keras_model, 'float32',
                          output_dir=version('wine_onnx'))
  openvino_runtime.export_openvino(keras_model, 'float32',
                                  output_dir=version('wine_openvino'))
  for model in ('wine_lite', 'wine_onnx', 'wine_openvino'):
    feature_names.write_feature_names(version(model), MAPPING)
  # A malformed file, and a well-formed one that names other inputs.
  shutil.copytree(version('wine_plain'), version('wine_bad'))
  with open(os.path.join(version('wine_bad'), 'feature_names.json'), 'w',
            encoding='utf-8') as f:
    f.write('{"format": 1, "inputs": {"alcohol (%)": "alcohol_x1", '
            '"größe": "alcohol_x1"}}')
  shutil.copytree(version('wine_plain'), version('wine_mismatch'))
  feature_names.write_feature_names(version('wine_mismatch'),
                                    {'alcohol (%)': 'alcohol_x1'})
  return root


@pytest.fixture(scope='module')
def server(base):
  config = server_config.ServerConfig(
      rest_port=0, grpc_port=0, file_system_poll_wait_seconds=-1,
      max_num_load_retries=0, request_timeout_s=20.0)
  instance = server_lib.ModelServer(model_config.models_from_base_path(base),
                                    config).start()
  yield instance
  instance.stop(grace_s=5.0)


@pytest.fixture(scope='module')
def rest(server):
  return client_lib.RestClient('127.0.0.1', server.rest_port, timeout_s=20.0)


@pytest.fixture(scope='module')
def stub(server):
  channel = grpc.insecure_channel(f'127.0.0.1:{server.grpc_port}')
  yield prediction_service_pb2_grpc.PredictionServiceStub(channel)
  channel.close()


def _columns():
  """Key -> [BATCH] float32; each column on its own scale."""
  rng = np.random.default_rng(7)
  return {key: (rng.uniform(-1, 1, BATCH) * (i + 1)).astype(np.float32)
          for i, key in enumerate(model_builders.COLUMN_KEYS)}


def _call_with_keys(base, model, columns):
  """What the pushed model answers when called with its own input keys."""
  path = os.path.join(base, model, '1')
  runtime = RUNTIMES.get(model, 'saved_model')
  if runtime == 'saved_model':
    function = tf.saved_model.load(path).signatures['serving_default']
    return function(**{k: tf.constant(v) for k, v in columns.items()}
                    )['probabilities'].numpy()
  if runtime == 'tflite':
    interpreter = tf.lite.Interpreter(os.path.join(path, 'model.tflite'))
    return interpreter.get_signature_runner('serving_default')(
        **columns)['probabilities']
  if runtime == 'onnx':
    import onnxruntime  # pylint: disable=g-import-not-at-top
    session = onnxruntime.InferenceSession(os.path.join(path, 'model.onnx'))
    return session.run(['probabilities'], columns)[0]
  # In float32, as the server compiles it (OpenVINO's CPU default on this
  # machine is bfloat16).
  compiled = openvino_runtime.compile_model(os.path.join(path, 'model.xml'),
                                            num_threads=1)
  return np.array(compiled(columns)[compiled.output(0)])


def _rows(columns, names=MAPPING):
  return [{name: float(columns[key][i]) for name, key in names.items()}
          for i in range(BATCH)]


@pytest.mark.parametrize('model', sorted(RUNTIMES))
def test_rest_rows_and_columns_in_original_names_give_the_models_answer(
    base, rest, model):
  columns = _columns()
  expected = _call_with_keys(base, model, columns)
  # The test can fail: a column given to the wrong input changes the answer.
  swapped = dict(columns, alcohol_x1=columns['groesse_x2'],
                 groesse_x2=columns['alcohol_x1'])
  assert not np.allclose(_call_with_keys(base, model, swapped), expected,
                         atol=1e-3)

  rows = rest.predict(model, instances=_rows(columns))['predictions']
  np.testing.assert_allclose(rows, expected, rtol=1e-5, atol=1e-6)
  # Columnar, as raw UTF-8 (the client above sends \u escapes).
  body = json.dumps({'inputs': {name: columns[key].tolist()
                                for name, key in MAPPING.items()}},
                    ensure_ascii=False).encode('utf-8')
  assert 'größe'.encode('utf-8') in body
  outputs = rest.predict_raw(model, body)['outputs']
  np.testing.assert_allclose(outputs, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('model', sorted(RUNTIMES))
def test_grpc_predict_in_original_names_gives_the_models_answer(
    base, stub, model):
  columns = _columns()
  request = predict_pb2.PredictRequest()
  request.model_spec.name = model
  for name, key in MAPPING.items():
    request.inputs[name].CopyFrom(tf.make_tensor_proto(columns[key]))
  response = stub.Predict(request, timeout=20)
  np.testing.assert_allclose(
      tf.make_ndarray(response.outputs['probabilities']),
      _call_with_keys(base, model, columns), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('model', sorted(RUNTIMES))
def test_metadata_shows_the_original_names(rest, stub, model):
  code, raw = rest.request('GET', f'/v1/models/{model}/metadata')
  assert code == 200
  # UTF-8 as protobuf's JSON printer writes it; quotes escaped.
  assert '"größe"'.encode('utf-8') in raw
  assert b'"a,b \\"q\\""' in raw
  defs = json.loads(raw)['metadata']['signature_def']['signature_def']
  inputs = defs['serving_default']['inputs']
  assert sorted(inputs) == sorted(MAPPING)
  for name, key in MAPPING.items():
    # The TensorInfo still names the model's own tensor.
    assert key in inputs[name]['name'], (name, inputs[name])
    assert inputs[name]['dtype'] == 'DT_FLOAT'
  assert list(defs['serving_default']['outputs']) == ['probabilities']

  request = get_model_metadata_pb2.GetModelMetadataRequest(
      metadata_field=['signature_def'])
  request.model_spec.name = model
  response = stub.GetModelMetadata(request, timeout=20)
  signature_map = get_model_metadata_pb2.SignatureDefMap()
  response.metadata['signature_def'].Unpack(signature_map)
  assert sorted(signature_map.signature_def['serving_default'].inputs) == (
      sorted(MAPPING))


@pytest.mark.parametrize('model', sorted(RUNTIMES))
def test_a_key_in_place_of_its_original_name_is_an_unknown_input(
    rest, stub, model):
  columns = _columns()
  keys_as_names = dict(MAPPING, **{'alcohol_x1': 'alcohol_x1'})
  del keys_as_names['alcohol (%)']
  hint = ('This model takes its columns by their original names: send '
          '"alcohol (%)" for alcohol_x1.')
  with pytest.raises(client_lib.RestError) as error:
    rest.predict(model, instances=_rows(columns, keys_as_names))
  assert error.value.status == 400
  # TF Serving's message, and which name to send instead.
  assert error.value.message == (
      "Failed to process element: 0 key: alcohol_x1 of 'instances' list. "
      'Error: INVALID_ARGUMENT: JSON object: does not have named input: '
      f'alcohol_x1. {hint}')
  with pytest.raises(client_lib.RestError) as error:
    rest.predict(model, inputs={name: columns[key].tolist()
                                for name, key in keys_as_names.items()})
  assert error.value.status == 400
  assert error.value.message == (
      f"Missing named input: alcohol (%) in 'inputs' object. {hint}")

  request = predict_pb2.PredictRequest()
  request.model_spec.name = model
  for name, key in keys_as_names.items():
    request.inputs[name].CopyFrom(tf.make_tensor_proto(columns[key]))
  with pytest.raises(grpc.RpcError) as rpc_error:
    stub.Predict(request, timeout=20)
  assert rpc_error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
  # TF Serving's message, naming the inputs it expects: the original names.
  assert rpc_error.value.details() == (
      'input tensor alias not found in signature: alcohol_x1. Inputs '
      'expected to be in the set {a,b "q",age,alcohol (%),größe}. ' + hint)


def test_a_signature_over_other_inputs_is_unchanged(base, rest, server):
  columns = _columns()
  examples = []
  for i in range(BATCH):
    example = tf.train.Example()
    for key, values in columns.items():
      example.features.feature[key].float_list.value.append(values[i])
    examples.append(
        {'b64': base64.b64encode(example.SerializeToString()).decode()})
  got = rest.predict('wine', instances=examples,
                     signature_name='predict_examples')['predictions']
  np.testing.assert_allclose(got, _call_with_keys(base, 'wine', columns),
                             rtol=1e-5, atol=1e-6)
  defs = rest.metadata('wine')['metadata']['signature_def']['signature_def']
  assert list(defs['predict_examples']['inputs']) == ['examples']
  with server.manager.acquire('wine') as servable:
    assert isinstance(servable, renamed_inputs.RenamedInputsServable)
    assert list(servable.signatures['predict_examples'].inputs) == [
        'examples']


def test_a_version_without_the_file_is_served_as_before(base, rest, server):
  columns = _columns()
  with server.manager.acquire('wine_plain') as servable:
    assert type(servable) is saved_model_servable.SavedModelServable  # pylint: disable=unidiomatic-typecheck
  keys = {key: key for key in model_builders.COLUMN_KEYS}
  got = rest.predict('wine_plain', instances=_rows(columns, keys))
  np.testing.assert_allclose(got['predictions'],
                             _call_with_keys(base, 'wine_plain', columns),
                             rtol=1e-5, atol=1e-6)
  defs = rest.metadata('wine_plain')['metadata']['signature_def'][
      'signature_def']
  assert sorted(defs['serving_default']['inputs']) == sorted(keys)
  # TF Serving's message alone: no other names to suggest.
  with pytest.raises(client_lib.RestError) as error:
    rest.predict('wine_plain', instances=_rows(columns))
  assert error.value.message == (
      "Failed to process element: 0 key: alcohol (%) of 'instances' list. "
      'Error: INVALID_ARGUMENT: JSON object: does not have named input: '
      'alcohol (%)')


@pytest.mark.parametrize('model, message', [
    ('wine_bad', "columns 'alcohol (%)' and 'größe' both map to the model "
                 "input 'alcohol_x1'"),
    ('wine_mismatch', "maps columns to the model inputs ['alcohol_x1'], but "
                      'no signature takes exactly those'),
])
def test_a_file_that_does_not_fit_fails_the_load_naming_it(
    base, rest, server, model, message):
  state = server.manager.version_states(model)[1]
  assert state.state == 'END' and state.servable is None
  assert state.error_code == status.Code.INVALID_ARGUMENT
  assert message in state.error_message
  assert 'feature_names.json' in state.error_message
  assert os.path.join(base, model, '1') in state.error_message
  reported = rest.status(model)['model_version_status'][0]['status']
  assert reported == {'error_code': 'INVALID_ARGUMENT',
                      'error_message': state.error_message}
  with pytest.raises(client_lib.RestError) as error:
    rest.predict(model, instances=_rows(_columns()))
  assert error.value.status == 404


def test_renamed_columns_take_the_packed_call(base):
  """Renamed back to keys, many [batch] columns still travel packed."""
  path = os.path.join(base, 'wine', '1')
  model = saved_model_servable.SavedModelServable('wine', 1, path)
  servable = renamed_inputs.RenamedInputsServable(model, MAPPING)
  columns = _columns()
  got = servable.run('serving_default',
                     {name: columns[key] for name, key in MAPPING.items()},
                     ['probabilities'])['probabilities']
  # pylint: disable=protected-access
  fits = model._packed('serving_default', model._functions['serving_default'],
                       {key: columns[key] for key in MAPPING.values()})
  assert fits is not None and model._pack_plans['serving_default'][3] is fits[0]
  # pylint: enable=protected-access
  np.testing.assert_allclose(got, _call_with_keys(base, 'wine', columns),
                             rtol=1e-6)
  servable.close()
