"""Thin clients for TF Serving's REST (urllib) and gRPC (official stubs) APIs.

They work the same against ``leantfx serve`` and ``tensorflow_model_server``:

  # Every push (SavedModel, TFLite, ONNX, OpenVINO) takes the raw columns.
  row = {f'pixel_{i:02d}': 0.0 for i in range(64)}
  rest = RestClient('127.0.0.1', 8501)
  rest.predict('digits', instances=[row])               # {'predictions': ...}
  with GrpcClient('127.0.0.1', 8500) as grpc_client:
    result = grpc_client.predict(
        'digits', {k: np.array([v], np.float32) for k, v in row.items()})
    result.outputs['probabilities'], result.version

They live below the components (which check a candidate in a real server
before pushing it) and the server's own CLI; ``leantfx.serving`` re-exports
them.
"""
import dataclasses
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np


class RestError(Exception):
  """The server answered with an error status.

  Attributes:
    status: the HTTP status.
    message: the ``error`` text of the response (or its raw body).
  """

  def __init__(self, status: int, message: str):
    super().__init__(f'HTTP {status}: {message}')
    self.status = status
    self.message = message


def _model_path(model: str, version: Optional[int], label: Optional[str]
                ) -> str:
  if version is not None and label is not None:
    raise ValueError('Pass a version or a label, not both.')
  path = f'/v1/models/{urllib.parse.quote(model, safe="")}'
  if version is not None:
    path += f'/versions/{int(version)}'
  elif label is not None:
    path += f'/labels/{urllib.parse.quote(label, safe="")}'
  return path


class RestClient:
  """Calls the REST API with urllib (one connection per call)."""

  def __init__(self, host: str = '127.0.0.1', port: int = 8501,
               timeout_s: float = 30.0):
    self.base_url = f'http://{host}:{port}'
    self.timeout_s = timeout_s

  def request(self, method: str, path: str,
              body: Optional[bytes] = None) -> Tuple[int, bytes]:
    """Sends one request and returns (HTTP status, body) without raising."""
    request = urllib.request.Request(
        self.base_url + path, data=body, method=method,
        headers={'Content-Type': 'application/json'} if body is not None
        else {})
    try:
      with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
        return response.status, response.read()
    except urllib.error.HTTPError as e:
      return e.code, e.read()

  def _json(self, method: str, path: str,
            payload: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    body = None if payload is None else json.dumps(payload).encode('utf-8')
    code, raw = self.request(method, path, body)
    try:
      parsed = json.loads(raw.decode('utf-8')) if raw else {}
    except ValueError:
      parsed = None
    if code != 200:
      message = (parsed.get('error') if isinstance(parsed, dict) else None)
      raise RestError(code, message or raw.decode('utf-8', 'replace'))
    return parsed

  def predict_raw(self, model: str, body: bytes,
                  version: Optional[int] = None,
                  label: Optional[str] = None) -> Dict[str, Any]:
    """POSTs a ready-made predict body (e.g. a file) and returns the JSON."""
    code, raw = self.request(
        'POST', _model_path(model, version, label) + ':predict', body)
    parsed = json.loads(raw.decode('utf-8')) if raw else {}
    if code != 200:
      raise RestError(code, parsed.get('error', raw.decode('utf-8',
                                                            'replace')))
    return parsed

  def predict(self, model: str, instances: Any = None, inputs: Any = None,
              signature_name: Optional[str] = None,
              version: Optional[int] = None,
              label: Optional[str] = None) -> Dict[str, Any]:
    """Calls ``:predict`` with row (`instances`) or columnar (`inputs`) data.

    Returns:
      The response JSON: ``{'predictions': ...}`` or ``{'outputs': ...}``.

    Raises:
      RestError: the server answered with an error.
    """
    payload: Dict[str, Any] = {}
    if signature_name:
      payload['signature_name'] = signature_name
    if instances is not None:
      payload['instances'] = instances
    if inputs is not None:
      payload['inputs'] = inputs
    return self._json('POST', _model_path(model, version, label) + ':predict',
                      payload)

  def classify(self, model: str, examples: Sequence[Mapping[str, Any]],
               context: Optional[Mapping[str, Any]] = None,
               signature_name: Optional[str] = None,
               version: Optional[int] = None,
               label: Optional[str] = None) -> Dict[str, Any]:
    """Calls ``:classify``; returns ``{'results': [[[label, score], ...]]}``."""
    return self._json('POST', _model_path(model, version, label) + ':classify',
                      _examples_payload(examples, context, signature_name))

  def regress(self, model: str, examples: Sequence[Mapping[str, Any]],
              context: Optional[Mapping[str, Any]] = None,
              signature_name: Optional[str] = None,
              version: Optional[int] = None,
              label: Optional[str] = None) -> Dict[str, Any]:
    """Calls ``:regress``; returns ``{'results': [value, ...]}``."""
    return self._json('POST', _model_path(model, version, label) + ':regress',
                      _examples_payload(examples, context, signature_name))

  def status(self, model: str, version: Optional[int] = None,
             label: Optional[str] = None) -> Dict[str, Any]:
    """GET model status: ``{'model_version_status': [...]}``."""
    return self._json('GET', _model_path(model, version, label))

  def metadata(self, model: str, version: Optional[int] = None,
               label: Optional[str] = None) -> Dict[str, Any]:
    """GET model metadata: ``{'model_spec': ..., 'metadata': ...}``."""
    return self._json('GET', _model_path(model, version, label) + '/metadata')


def _examples_payload(examples, context, signature_name) -> Dict[str, Any]:
  payload: Dict[str, Any] = {'examples': list(examples)}
  if context is not None:
    payload['context'] = dict(context)
  if signature_name:
    payload['signature_name'] = signature_name
  return payload


@dataclasses.dataclass(frozen=True)
class PredictResult:
  """A gRPC predict response as arrays.

  Attributes:
    outputs: alias -> array.
    model_name: the model that answered.
    version: the version that answered.
    signature_name: the signature that ran.
  """
  outputs: Dict[str, np.ndarray]
  model_name: str
  version: int
  signature_name: str


class GrpcClient:
  """Calls PredictionService/ModelService through the official stubs."""

  def __init__(self, host: str = '127.0.0.1', port: int = 8500,
               timeout_s: float = 30.0,
               max_message_bytes: int = 64 * 1024 * 1024):
    import grpc  # pylint: disable=g-import-not-at-top
    from tensorflow_serving.apis import model_service_pb2_grpc  # pylint: disable=g-import-not-at-top
    from tensorflow_serving.apis import prediction_service_pb2_grpc  # pylint: disable=g-import-not-at-top
    self.timeout_s = timeout_s
    self._channel = grpc.insecure_channel(
        f'{host}:{port}',
        options=[('grpc.max_receive_message_length', max_message_bytes),
                 ('grpc.max_send_message_length', max_message_bytes)])
    self.prediction = prediction_service_pb2_grpc.PredictionServiceStub(
        self._channel)
    self.model_service = model_service_pb2_grpc.ModelServiceStub(
        self._channel)

  @staticmethod
  def _fill_spec(spec, model: str, version: Optional[int],
                 label: Optional[str], signature_name: str = ''):
    spec.name = model
    if version is not None:
      spec.version.value = int(version)
    elif label is not None:
      spec.version_label = label
    if signature_name:
      spec.signature_name = signature_name

  def predict(self, model: str, inputs: Mapping[str, Any],
              signature_name: str = '', version: Optional[int] = None,
              label: Optional[str] = None,
              output_filter: Sequence[str] = ()) -> PredictResult:
    """Calls Predict with numpy-convertible inputs.

    Raises:
      grpc.RpcError: the call failed (``.code()``, ``.details()``).
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from tensorflow_serving.apis import predict_pb2  # pylint: disable=g-import-not-at-top
    request = predict_pb2.PredictRequest()
    self._fill_spec(request.model_spec, model, version, label, signature_name)
    for alias, value in inputs.items():
      request.inputs[alias].CopyFrom(tf.make_tensor_proto(value))
    request.output_filter.extend(output_filter)
    response = self.prediction.Predict(request, timeout=self.timeout_s)
    return PredictResult(
        outputs={k: tf.make_ndarray(v) for k, v in response.outputs.items()},
        model_name=response.model_spec.name,
        version=response.model_spec.version.value,
        signature_name=response.model_spec.signature_name)

  def metadata(self, model: str, version: Optional[int] = None,
               label: Optional[str] = None):
    """Calls GetModelMetadata; returns (response, {key: SignatureDef})."""
    from tensorflow_serving.apis import get_model_metadata_pb2  # pylint: disable=g-import-not-at-top
    request = get_model_metadata_pb2.GetModelMetadataRequest(
        metadata_field=['signature_def'])
    self._fill_spec(request.model_spec, model, version, label)
    response = self.prediction.GetModelMetadata(request,
                                                timeout=self.timeout_s)
    signature_map = get_model_metadata_pb2.SignatureDefMap()
    response.metadata['signature_def'].Unpack(signature_map)
    return response, dict(signature_map.signature_def)

  def status(self, model: str, version: Optional[int] = None,
             label: Optional[str] = None):
    """Calls ModelService.GetModelStatus; returns the response proto."""
    from tensorflow_serving.apis import get_model_status_pb2  # pylint: disable=g-import-not-at-top
    request = get_model_status_pb2.GetModelStatusRequest()
    self._fill_spec(request.model_spec, model, version, label)
    return self.model_service.GetModelStatus(request, timeout=self.timeout_s)

  def close(self) -> None:
    self._channel.close()

  def __enter__(self) -> 'GrpcClient':
    return self

  def __exit__(self, *exc):
    self.close()
