"""gRPC end to end with the official tensorflow_serving stubs, unchanged."""
import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import classification_pb2
from tensorflow_serving.apis import get_model_metadata_pb2
from tensorflow_serving.apis import get_model_status_pb2
from tensorflow_serving.apis import model_service_pb2_grpc
from tensorflow_serving.apis import predict_pb2
from tensorflow_serving.apis import prediction_service_pb2_grpc
from tensorflow_serving.apis import regression_pb2

pytestmark = pytest.mark.e2e


@pytest.fixture(scope='module')
def stubs(server):
  channel = grpc.insecure_channel(f'127.0.0.1:{server.grpc_port}')
  yield (prediction_service_pb2_grpc.PredictionServiceStub(channel),
         model_service_pb2_grpc.ModelServiceStub(channel))
  channel.close()


def _digits_request(rows=1, **spec):
  request = predict_pb2.PredictRequest()
  request.model_spec.name = spec.pop('name', 'digits')
  if 'version' in spec:
    request.model_spec.version.value = spec.pop('version')
  if 'label' in spec:
    request.model_spec.version_label = spec.pop('label')
  request.inputs['image_xf'].CopyFrom(
      tf.make_tensor_proto(np.full((rows, 64), 0.5, np.float32)))
  return request


def _assert_still_serving(stubs):
  response = stubs[0].Predict(_digits_request(), timeout=20)
  assert response.outputs['probabilities'].tensor_shape.dim[1].size == 10


def test_predict_with_official_stub(stubs):
  response = stubs[0].Predict(_digits_request(rows=3), timeout=20)
  assert response.model_spec.name == 'digits'
  assert response.model_spec.version.value == 2
  assert response.model_spec.signature_name == 'serving_default'
  probabilities = tf.make_ndarray(response.outputs['probabilities'])
  assert probabilities.shape == (3, 10)
  np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
  # Values travel in the typed field, as TF Serving's AsProtoField writes.
  assert len(response.outputs['probabilities'].float_val) == 30


def test_predict_matches_rest(stubs, rest):
  grpc_out = tf.make_ndarray(stubs[0].Predict(
      _digits_request(version=1), timeout=20).outputs['probabilities'])
  rest_out = rest.predict('digits', instances=[[0.5] * 64], version=1)
  np.testing.assert_allclose(grpc_out, rest_out['predictions'], rtol=1e-6)


def test_predict_by_label_and_output_filter(stubs):
  request = predict_pb2.PredictRequest()
  request.model_spec.name = 'penguins'
  request.inputs['bill_length_mm'].CopyFrom(tf.make_tensor_proto([40.0]))
  request.inputs['flipper_length_mm'].CopyFrom(tf.make_tensor_proto([190.0]))
  request.inputs['island'].CopyFrom(tf.make_tensor_proto([b'Dream']))
  request.output_filter.append('classes')
  response = stubs[0].Predict(request, timeout=20)
  assert list(response.outputs) == ['classes']
  assert response.outputs['classes'].string_val[0] in (
      b'Adelie', b'Chinstrap', b'Gentoo')
  labelled = stubs[0].Predict(_digits_request(label='stable'), timeout=20)
  assert labelled.model_spec.version.value == 1


@pytest.mark.parametrize('mutate,code,message', [
    (lambda r: r.ClearField('model_spec'), grpc.StatusCode.INVALID_ARGUMENT,
     'Missing ModelSpec'),
    (lambda r: setattr(r.model_spec, 'name', ''),
     grpc.StatusCode.INVALID_ARGUMENT, 'ModelSpec has no name specified.'),
    (lambda r: r.inputs['image_xf'].CopyFrom(
        tf.make_tensor_proto([['a'] * 64])), grpc.StatusCode.INVALID_ARGUMENT,
     'Expects arg[0] to be float but string is provided'),
    (lambda r: r.inputs['image_xf'].CopyFrom(
        tf.make_tensor_proto(np.zeros((1, 64), np.int64))),
     grpc.StatusCode.INVALID_ARGUMENT,
     'Expects arg[0] to be float but int64 is provided'),
    (lambda r: setattr(r.model_spec, 'name', 'unknown'),
     grpc.StatusCode.NOT_FOUND,
     'Servable not found for request: Latest(unknown)'),
    (lambda r: r.model_spec.version.__setattr__('value', 99),
     grpc.StatusCode.NOT_FOUND,
     'Servable not found for request: Specific(digits, 99)'),
    (lambda r: setattr(r.model_spec, 'version_label', 'nightly'),
     grpc.StatusCode.INVALID_ARGUMENT,
     'Unrecognized servable version label: nightly'),
    (lambda r: setattr(r.model_spec, 'signature_name', 'nope'),
     grpc.StatusCode.FAILED_PRECONDITION,
     'Serving signature key "nope" not found.'),
    (lambda r: r.inputs['extra'].CopyFrom(tf.make_tensor_proto([1.0])),
     grpc.StatusCode.INVALID_ARGUMENT,
     'input size does not match signature: 2!=1 len({extra,image_xf}) != '
     'len({image_xf}). Sent extra: {extra}. Missing but required: {}.'),
    (lambda r: r.output_filter.append('logits'),
     grpc.StatusCode.INVALID_ARGUMENT,
     'output tensor alias not found in signature: logits'),
    (lambda r: r.inputs['image_xf'].CopyFrom(
        tf.make_tensor_proto(np.zeros((1, 63), np.float32))),
     grpc.StatusCode.INVALID_ARGUMENT, 'has shape [1,63]'),
])
def test_predict_errors(stubs, mutate, code, message):
  request = _digits_request()
  mutate(request)
  with pytest.raises(grpc.RpcError) as raised:
    stubs[0].Predict(request, timeout=20)
  assert raised.value.code() == code
  assert message in raised.value.details()
  _assert_still_serving(stubs)


def test_classify_and_regress(stubs):
  example = tf.train.Example(features=tf.train.Features(feature={
      'x': tf.train.Feature(float_list=tf.train.FloatList(value=[0.0]))}))
  request = classification_pb2.ClassificationRequest()
  request.model_spec.name = 'half_plus_two'
  request.model_spec.signature_name = 'classify_x'
  request.input.example_list.examples.add().CopyFrom(example)
  response = stubs[0].Classify(request, timeout=20)
  classes = response.result.classifications[0].classes
  assert [(c.label, round(c.score, 4)) for c in classes] == [
      ('positive', 0.5), ('negative', 0.5)]
  regress = regression_pb2.RegressionRequest()
  regress.model_spec.name = 'half_plus_two'
  regress.model_spec.signature_name = 'regress_x'
  regress.input.example_list.examples.add().CopyFrom(example)
  assert stubs[0].Regress(regress, timeout=20).result.regressions[0].value \
      == 2.0
  regress.model_spec.signature_name = 'classify_x'
  with pytest.raises(grpc.RpcError) as raised:
    stubs[0].Regress(regress, timeout=20)
  assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
  assert 'Expected regression signature method_name' in \
      raised.value.details()
  regress.ClearField('input')
  regress.model_spec.signature_name = 'regress_x'
  with pytest.raises(grpc.RpcError) as raised:
    stubs[0].Regress(regress, timeout=20)
  assert raised.value.details() == 'Input is empty.'


def test_get_model_metadata(stubs):
  request = get_model_metadata_pb2.GetModelMetadataRequest(
      metadata_field=['signature_def'])
  request.model_spec.name = 'half_plus_two'
  response = stubs[0].GetModelMetadata(request, timeout=20)
  assert response.model_spec.version.value == 1
  signatures = get_model_metadata_pb2.SignatureDefMap()
  response.metadata['signature_def'].Unpack(signatures)
  methods = {k: v.method_name for k, v in signatures.signature_def.items()}
  assert methods['classify_x'] == 'tensorflow/serving/classify'
  assert methods['regress_x'] == 'tensorflow/serving/regress'
  request.ClearField('metadata_field')
  with pytest.raises(grpc.RpcError) as raised:
    stubs[0].GetModelMetadata(request, timeout=20)
  assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_get_model_status(stubs):
  request = get_model_status_pb2.GetModelStatusRequest()
  request.model_spec.name = 'digits'
  response = stubs[1].GetModelStatus(request, timeout=20)
  assert [(s.version, s.state) for s in response.model_version_status] == [
      (2, get_model_status_pb2.ModelVersionStatus.AVAILABLE),
      (1, get_model_status_pb2.ModelVersionStatus.AVAILABLE)]
  request.model_spec.name = 'unknown'
  with pytest.raises(grpc.RpcError) as raised:
    stubs[1].GetModelStatus(request, timeout=20)
  assert raised.value.code() == grpc.StatusCode.NOT_FOUND
  with pytest.raises(grpc.RpcError) as raised:
    stubs[1].GetModelStatus(get_model_status_pb2.GetModelStatusRequest(),
                            timeout=20)
  assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_grpc_client_wrapper(grpc_client):
  result = grpc_client.predict('digits_int8',
                               {'image_xf': np.zeros((2, 64), np.float32)})
  assert result.outputs['probabilities'].shape == (2, 10)
  assert result.version == 1
  _, signatures = grpc_client.metadata('digits')
  assert 'serving_default' in signatures
