"""TF Serving's gRPC API: PredictionService and ModelService on grpcio.

The servicers implement the official ``tensorflow_serving.apis`` stubs, so
``prediction_service_pb2_grpc.PredictionServiceStub`` talks to leantfx as to
``tensorflow_model_server``: Predict, Classify, Regress, GetModelMetadata and
ModelService.GetModelStatus, with the same status codes (INVALID_ARGUMENT for
a missing model spec or a wrong dtype, NOT_FOUND for an unknown model or
version, FAILED_PRECONDITION for an unknown signature).
"""
import time
from concurrent import futures
from typing import Callable, Optional, TypeVar

import grpc

from leantfx.serving import inference
from leantfx.serving import metrics as metrics_lib
from leantfx.serving import prediction_service
from leantfx.serving import request_limits
from leantfx.serving import status
from leantfx.serving import tensor_proto

_GRPC_CODES = {code.value[0]: code for code in grpc.StatusCode}
_SIGNATURE_DEF = 'signature_def'

T = TypeVar('T')


def _spec_from_proto(request) -> prediction_service.ModelSpec:
  if not request.HasField('model_spec'):
    raise status.invalid_argument('Missing ModelSpec')
  proto = request.model_spec
  choice = proto.WhichOneof('version_choice')
  return prediction_service.ModelSpec(
      name=proto.name,
      version=proto.version.value if choice == 'version' else None,
      label=proto.version_label if choice == 'version_label' else None,
      signature_name=proto.signature_name)


def _fill_spec(target, served: prediction_service.ServedBy) -> None:
  target.name = served.name
  target.version.value = served.version
  target.signature_name = served.signature_name


class _Servicer:
  """Runs a call, counts it, and turns ServingError into a gRPC status."""

  def __init__(self, service: prediction_service.PredictionService,
               metrics: metrics_lib.Metrics,
               request_timeout_s: Optional[float],
               limits: Optional[request_limits.RequestLimits] = None):
    self._service = service
    self._metrics = metrics
    self._timeout_s = request_timeout_s
    self._limits = limits or request_limits.RequestLimits()

  def _deadline(self, context) -> Optional[float]:
    remaining = context.time_remaining()
    if self._timeout_s:
      remaining = (self._timeout_s if remaining is None
                   else min(remaining, self._timeout_s))
    return None if remaining is None else time.monotonic() + remaining

  def _call(self, api: str, request, context, fn: Callable[[], T]) -> T:
    started = time.monotonic()
    name = request.model_spec.name if request.HasField('model_spec') else ''
    model = (name if name and self._service.manager.is_known_model(name)
             else metrics_lib.UNKNOWN_MODEL)
    try:
      result = fn()
      self._metrics.record_request(model, api, 'GRPC', 'OK',
                                   time.monotonic() - started)
      return result
    except status.ServingError as e:
      error = e
    except RecursionError:
      # A request nested deeper than the parser's stack (a message of
      # nested protos): the client's doing, not the server's.
      error = status.invalid_argument('The request is nested too deeply.')
    except Exception as e:  # pylint: disable=broad-except
      error = status.internal(f'Internal error: {type(e).__name__}: {e}')
    self._metrics.record_request(model, api, 'GRPC', error.code.name,
                                 time.monotonic() - started)
    if error.code in (status.Code.RESOURCE_EXHAUSTED,
                      status.Code.UNAVAILABLE):
      self._metrics.record_refusal('GRPC', error.code.name)
    context.abort(_GRPC_CODES[int(error.code)], error.message)
    raise AssertionError('context.abort returned')  # pragma: no cover


class PredictionServicer(_Servicer):
  """``tensorflow.serving.PredictionService``."""

  def Predict(self, request, context):  # pylint: disable=invalid-name
    from tensorflow_serving.apis import predict_pb2  # pylint: disable=g-import-not-at-top

    def run():
      spec = _spec_from_proto(request)
      deadline = self._deadline(context)
      # Sizes first, from the shapes and payloads: nothing is allocated for
      # a request refused here.
      decoded = tensor_proto.check_request_size(request.inputs,
                                                self._limits.max_decoded_bytes)
      with self._limits.reserve(
          request.ByteSize() +
          request_limits.GRPC_DECODED_FACTOR * decoded), \
          self._service.acquire(spec) as servable:
        inputs = {alias: tensor_proto.to_ndarray(proto, alias)
                  for alias, proto in request.inputs.items()}
        served, outputs = self._service.predict(
            servable, spec.signature_name, inputs,
            list(request.output_filter), deadline)
        del inputs
        response = predict_pb2.PredictResponse()
        _fill_spec(response.model_spec, served)
        for alias, array in outputs.items():
          response.outputs[alias].CopyFrom(tensor_proto.from_ndarray(array))
      return response

    return self._call('Predict', request, context, run)

  def Classify(self, request, context):  # pylint: disable=invalid-name
    from tensorflow_serving.apis import classification_pb2  # pylint: disable=g-import-not-at-top

    def run():
      spec = _spec_from_proto(request)
      examples = inference.serialized_examples(request.input)
      with self._service.acquire(spec) as servable:
        served, results = self._service.classify(
            servable, spec.signature_name, examples)
      response = classification_pb2.ClassificationResponse()
      _fill_spec(response.model_spec, served)
      for row in results:
        classifications = response.result.classifications.add()
        for label, score in row:
          classifications.classes.add(label=label.decode('utf-8', 'replace'),
                                      score=score)
      return response

    return self._call('Classify', request, context, run)

  def Regress(self, request, context):  # pylint: disable=invalid-name
    from tensorflow_serving.apis import regression_pb2  # pylint: disable=g-import-not-at-top

    def run():
      spec = _spec_from_proto(request)
      examples = inference.serialized_examples(request.input)
      with self._service.acquire(spec) as servable:
        served, values = self._service.regress(servable, spec.signature_name,
                                               examples)
      response = regression_pb2.RegressionResponse()
      _fill_spec(response.model_spec, served)
      for value in values:
        response.result.regressions.add(value=value)
      return response

    return self._call('Regress', request, context, run)

  def GetModelMetadata(self, request, context):  # pylint: disable=invalid-name
    from tensorflow_serving.apis import get_model_metadata_pb2  # pylint: disable=g-import-not-at-top

    def run():
      spec = _spec_from_proto(request)
      fields = list(request.metadata_field)
      if not fields:
        raise status.invalid_argument(
            'GetModelMetadataRequest must specify at least one metadata_field')
      for field in fields:
        if field != _SIGNATURE_DEF:
          raise status.invalid_argument(
              f'Metadata field {field} is not supported')
      with self._service.acquire(spec) as servable:
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        for key, signature_def in servable.signature_defs.items():
          signature_map.signature_def[key].CopyFrom(signature_def)
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        response.model_spec.name = servable.name
        response.model_spec.version.value = servable.version
      response.metadata[_SIGNATURE_DEF].Pack(signature_map)
      return response

    return self._call('GetModelMetadata', request, context, run)

  def MultiInference(self, request, context):  # pylint: disable=invalid-name
    def run():
      raise status.unimplemented('MultiInference is not implemented by '
                                 'leantfx; call Classify/Regress/Predict.')

    return self._call('MultiInference', request, context, run)


class ModelServicer(_Servicer):
  """``tensorflow.serving.ModelService`` (status; config reload unsupported)."""

  def GetModelStatus(self, request, context):  # pylint: disable=invalid-name
    from tensorflow_serving.apis import get_model_status_pb2  # pylint: disable=g-import-not-at-top

    def run():
      spec = _spec_from_proto(request)
      states = self._service.model_status(spec)
      response = get_model_status_pb2.GetModelStatusResponse()
      for state in states:
        entry = response.model_version_status.add(
            version=state.version,
            state=get_model_status_pb2.ModelVersionStatus.State.Value(
                state.state))
        entry.status.error_code = int(state.error_code)
        entry.status.error_message = state.error_message
      return response

    return self._call('GetModelStatus', request, context, run)

  def HandleReloadConfigRequest(self, request, context):  # pylint: disable=invalid-name
    def run():
      raise status.unimplemented(
          'HandleReloadConfigRequest is not implemented by leantfx; edit the '
          'model directories (versions are polled) or restart with a new '
          '--model-config-file.')

    return self._call('HandleReloadConfigRequest', request, context, run)


class GrpcServer:
  """Both gRPC services on one port."""

  def __init__(self, service: prediction_service.PredictionService,
               metrics: metrics_lib.Metrics, host: str, port: int,
               max_message_bytes: int, request_timeout_s: Optional[float],
               max_workers: int, reuse_port: bool = False,
               limits: Optional[request_limits.RequestLimits] = None):
    from tensorflow_serving.apis import model_service_pb2_grpc  # pylint: disable=g-import-not-at-top
    from tensorflow_serving.apis import prediction_service_pb2_grpc  # pylint: disable=g-import-not-at-top
    self._server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers,
                                   thread_name_prefix='leantfx-grpc'),
        options=[('grpc.max_receive_message_length', max_message_bytes),
                 ('grpc.max_send_message_length', max_message_bytes),
                 ('grpc.so_reuseport', 1 if reuse_port else 0)])
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionServicer(service, metrics, request_timeout_s, limits),
        self._server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(
        ModelServicer(service, metrics, request_timeout_s, limits),
        self._server)
    address = f'[{host}]:{port}' if ':' in host else f'{host}:{port}'
    self._port = self._server.add_insecure_port(address)
    if not self._port:
      raise OSError(f'Cannot bind the gRPC port at {address}.')

  @property
  def port(self) -> int:
    return self._port

  def start(self) -> None:
    self._server.start()

  def stop(self, grace_s: float) -> None:
    """Stops accepting calls; running calls get `grace_s` seconds to finish."""
    self._server.stop(grace_s).wait(grace_s + 1)
