"""Canonical status codes of a serving request and how each transport shows them.

TF Serving reports every failure as a ``tensorflow::Status`` (the canonical
``absl``/gRPC code space) and maps it to HTTP in ``http_server.cc``
(``ToHTTPStatusCode``) and to gRPC one-to-one. Both of leantfx's transports
raise :class:`ServingError` and render it through these tables, so the same bad
request gets the same code and message on REST and gRPC.
"""
import enum
from typing import Optional


class Code(enum.IntEnum):
  """The canonical error space (``tensorflow/core/protobuf/error_codes.proto``)."""
  OK = 0
  CANCELLED = 1
  UNKNOWN = 2
  INVALID_ARGUMENT = 3
  DEADLINE_EXCEEDED = 4
  NOT_FOUND = 5
  ALREADY_EXISTS = 6
  PERMISSION_DENIED = 7
  RESOURCE_EXHAUSTED = 8
  FAILED_PRECONDITION = 9
  ABORTED = 10
  OUT_OF_RANGE = 11
  UNIMPLEMENTED = 12
  INTERNAL = 13
  UNAVAILABLE = 14
  DATA_LOSS = 15
  UNAUTHENTICATED = 16


# From tensorflow_serving/model_servers/http_server.cc, ToHTTPStatusCode().
# 499 is net_http's CLIENT_CLOSED_REQUEST.
_HTTP_STATUS = {
    Code.OK: 200,
    Code.CANCELLED: 499,
    Code.UNKNOWN: 500,
    Code.INVALID_ARGUMENT: 400,
    Code.DEADLINE_EXCEEDED: 504,
    Code.NOT_FOUND: 404,
    Code.ALREADY_EXISTS: 409,
    Code.PERMISSION_DENIED: 403,
    Code.RESOURCE_EXHAUSTED: 429,
    Code.FAILED_PRECONDITION: 400,
    Code.ABORTED: 409,
    Code.OUT_OF_RANGE: 400,
    Code.UNIMPLEMENTED: 501,
    Code.INTERNAL: 500,
    Code.UNAVAILABLE: 503,
    Code.DATA_LOSS: 500,
    Code.UNAUTHENTICATED: 401,
}


def http_status(code: Code) -> int:
  """Returns the HTTP status TF Serving's REST server uses for `code`."""
  return _HTTP_STATUS.get(Code(code), 500)


class ServingError(Exception):
  """A request failed with a canonical status code and a client-facing message.

  Attributes:
    code: the :class:`Code`.
    message: the text sent to the client (REST ``{"error": ...}``, gRPC details).
  """

  def __init__(self, code: Code, message: str):
    super().__init__(message)
    self.code = Code(code)
    self.message = message

  @property
  def http_status(self) -> int:
    return http_status(self.code)

  def to_string(self) -> str:
    """Returns ``CODE_NAME: message`` as ``absl::Status::ToString`` prints it."""
    return f'{self.code.name}: {self.message}'

  def __repr__(self):
    return f'ServingError({self.code.name}, {self.message!r})'


def invalid_argument(message: str) -> ServingError:
  return ServingError(Code.INVALID_ARGUMENT, message)


def not_found(message: str) -> ServingError:
  return ServingError(Code.NOT_FOUND, message)


def failed_precondition(message: str) -> ServingError:
  return ServingError(Code.FAILED_PRECONDITION, message)


def unimplemented(message: str) -> ServingError:
  return ServingError(Code.UNIMPLEMENTED, message)


def unavailable(message: str) -> ServingError:
  return ServingError(Code.UNAVAILABLE, message)


def resource_exhausted(message: str) -> ServingError:
  return ServingError(Code.RESOURCE_EXHAUSTED, message)


def deadline_exceeded(message: str) -> ServingError:
  return ServingError(Code.DEADLINE_EXCEEDED, message)


def internal(message: str) -> ServingError:
  return ServingError(Code.INTERNAL, message)


def code_from_exception(error: BaseException) -> Optional[Code]:
  """Returns the canonical code of a TensorFlow ``OpError``, else None.

  TensorFlow's ``errors.OpError`` carries ``error_code`` in the same space, so
  an ``InvalidArgumentError`` raised while running a model keeps its code.
  """
  value = getattr(error, 'error_code', None)
  if isinstance(value, int):
    try:
      return Code(value)
    except ValueError:
      return None
  return None
