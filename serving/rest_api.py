"""TF Serving's REST API v1 on a threaded stdlib HTTP server.

Routes (TF Serving's regular expressions, matched case-insensitively on the
path before percent-decoding, as ``http_rest_api_util.cc`` does)::

  GET  /v1/models/{name}[/versions/{v}|/labels/{l}]             model status
  GET  /v1/models/{name}[/versions/{v}|/labels/{l}]/metadata    signature defs
  POST /v1/models/{name}[/versions/{v}|/labels/{l}]:predict|:classify|:regress
  GET  /monitoring/prometheus/metrics                           metrics

Errors are ``{"error": "..."}`` with TF Serving's HTTP status for each code.
Beyond TF Serving (docs/serving.md, "Limits"):

- a body over ``max_body_bytes`` gets 413 as soon as the headers arrive, or
  before the body is sent under ``Expect: 100-continue``; the body is then
  read and discarded up to ``_DRAIN_BYTES`` (a lingering close, as nginx's),
  so a client that sends its whole body before reading still reads the 413;
- model names are checked (no ``..``, ``/`` or other percent-decoded tricks);
- a request takes one of ``max_concurrent_requests`` slots once it has
  arrived whole (429 with ``Retry-After`` beyond), and reserves its working
  memory in the server's budget (``request_limits``; 503 with
  ``Retry-After`` when it does not fit);
- a request must arrive whole within ``request_timeout_s`` (a slow client
  is dropped with 408, whatever the pace of its bytes), which is also the
  deadline of a queued request; an idle connection closes after it;
- a client's malformed input is a 400, never a 500.
"""
import http.server
import io
import logging
import re
import socket
import socketserver
import threading
import time
import urllib.parse
from typing import Optional, Tuple

from leantfx.serving import http_loop
from leantfx.serving import json_tensor
from leantfx.serving import json_writer
from leantfx.serving import metrics as metrics_lib
from leantfx.serving import model_config
from leantfx.serving import prediction_service
from leantfx.serving import proto_json
from leantfx.serving import renamed_inputs
from leantfx.serving import request_limits
from leantfx.serving import status

_log = logging.getLogger(__name__)

_API_PATH_RE = re.compile(r'/v1/.*', re.IGNORECASE)
_PREDICTION_RE = re.compile(
    r'/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?'
    r':(classify|regress|predict)', re.IGNORECASE)
_STATUS_RE = re.compile(
    r'/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?'
    r'(?:/(metadata))?', re.IGNORECASE)
METRICS_PATH = '/monitoring/prometheus/metrics'
_JSON = 'application/json'
_INT64_MAX = 2**63 - 1
_CHUNK = 64 * 1024
# After a 413, read and discard at most this much of the unread body (or for
# at most _DRAIN_S, or until the client pauses _DRAIN_PAUSE_S) before closing:
# a client that writes its whole body before it reads (Python's http.client
# and requests do) then reads the 413 instead of a reset. 64 MiB covers a
# body four times the default limit; loopback reads it in well under 1 s.
_DRAIN_BYTES = 64 * 1024 * 1024
_DRAIN_S = 10.0
_DRAIN_PAUSE_S = 0.5
# A watchdog's period: how late past its deadline a slow client is dropped.
_WATCH_S = 0.5

Response = Tuple[int, bytes, str]


class BodyTooLarge(Exception):
  """The request body is over the configured limit."""


def _error(e: status.ServingError) -> Response:
  return e.http_status, json_writer.error_body(e.message), _JSON


def _parse_version(text: Optional[str]) -> Optional[int]:
  if not text:
    return None
  value = int(text)
  if value > _INT64_MAX:
    raise status.invalid_argument(
        f'Failed to convert version: {text} to numeric.')
  return value


def _decode_name(raw: Optional[str], what: str) -> Optional[str]:
  if raw is None or raw == '':
    return raw
  name = urllib.parse.unquote(raw, errors='strict') if '%' in raw else raw
  if not model_config.is_valid_model_name(name):
    raise status.invalid_argument(
        f'Invalid {what}: {name!r}. Names use letters, digits, "_", "-" and '
        '"." only (no "..", "/" or percent-encoded characters).')
  return name


def _status_json(states) -> bytes:
  return proto_json.dumps({
      'model_version_status': [{
          'version': str(s.version),
          'state': s.state,
          'status': {
              'error_code': s.error_code.name,
              'error_message': s.error_message,
          },
      } for s in states]
  }).encode('utf-8')


def _metadata_json(name: str, version: int, signature_defs) -> bytes:
  """``ToJsonString(GetModelMetadataResponse)``: two printed protos, glued."""
  model_spec = proto_json.dumps(
      {'name': name, 'signature_name': '', 'version': str(version)})
  signature_def_map = proto_json.dumps({
      'signature_def': {
          key: proto_json.to_dict(signature_defs[key])
          for key in sorted(signature_defs)
      }
  })
  return (f'{{\n"model_spec":{model_spec},\n"metadata": '
          f'{{"signature_def": {signature_def_map}}}\n}}\n').encode('utf-8')


class _Route:
  """What a request turned out to be, for the metrics of failed ones too."""

  def __init__(self):
    self.api = 'Unknown'
    self.model = ''


class RestApi:
  """Maps (method, path, body) to a response; no sockets involved."""

  def __init__(self, service: prediction_service.PredictionService,
               metrics: metrics_lib.Metrics,
               request_timeout_s: Optional[float] = None,
               limits: Optional[request_limits.RequestLimits] = None):
    self._service = service
    self._metrics = metrics
    self._timeout_s = request_timeout_s
    self._limits = limits or request_limits.RequestLimits()

  def count_refusal(self, http_code: int) -> None:
    """Counts a request refused at a limit (413, 429, 503, 408)."""
    self._metrics.record_refusal('REST', str(http_code))

  def _model_label(self, name: str) -> str:
    if name and self._service.manager.is_known_model(name):
      return name
    return metrics_lib.UNKNOWN_MODEL

  def inline(self, method: str, path: str) -> bool:
    """Whether a request can be answered without waiting on other requests.

    A predict call that goes through the batch scheduler waits for its batch:
    it must not hold the thread that reads every connection.
    """
    service = self._service
    if method != 'POST' or service.batcher is None:
      return True
    if service.batch_all:
      return False
    match = _PREDICTION_RE.fullmatch(path.split('?', 1)[0])
    if match is None or match.group(4).lower() != 'predict':
      return True
    raw_name, raw_version, raw_label, _ = match.groups()
    try:
      spec = prediction_service.ModelSpec(
          _decode_name(raw_name, 'model name') or '',
          _parse_version(raw_version),
          _decode_name(raw_label, 'model version label'))
      with service.acquire(spec) as servable:
        return not servable.batching_pays
    except status.ServingError:
      return True  # The answer is an error, at once.

  def handle(self, method: str, path: str, body: bytes,
             started: Optional[float] = None) -> Response:
    """Handles one request.

    Args:
      method: HTTP method.
      path: request path (query string allowed, ignored).
      body: the request body.
      started: ``time.monotonic()`` when the request arrived.

    Returns:
      (HTTP status, body, content type).
    """
    started = time.monotonic() if started is None else started
    path = path.split('?', 1)[0]
    if path == METRICS_PATH and method == 'GET':
      return 200, self._metrics.render().encode('utf-8'), (
          'text/plain; version=0.0.4')
    if not _API_PATH_RE.fullmatch(path):
      return 404, json_writer.error_body(
          f'Not found: {method} {path}. The API is under /v1/models/ and '
          f'metrics at {METRICS_PATH}.'), _JSON
    route = _Route()
    try:
      with self._limits.reserve(
          len(body) * request_limits.REST_WORKING_FACTOR):
        response = self._dispatch(method, path, body, started, route)
      code = status.Code.OK
    except status.ServingError as e:
      response, code = _error(e), e.code
    except RecursionError:
      # Input nested deeper than a parser's stack: the client's mistake.
      error = status.invalid_argument(
          'The request is nested too deeply to parse.')
      response, code = _error(error), error.code
    except Exception as e:  # pylint: disable=broad-except
      _log.exception('Internal error on %s %s', method, path)
      error = status.internal(f'Internal error: {type(e).__name__}: {e}')
      response, code = _error(error), error.code
    self._metrics.record_request(self._model_label(route.model), route.api,
                                 'REST', code.name,
                                 time.monotonic() - started)
    if response[0] in (429, 503):
      self.count_refusal(response[0])
    return response

  def _dispatch(self, method: str, path: str, body: bytes, started: float,
                route: '_Route') -> Response:
    match = None
    if method == 'POST':
      match = _PREDICTION_RE.fullmatch(path)
    elif method == 'GET':
      match = _STATUS_RE.fullmatch(path)
    if match is None:
      raise status.invalid_argument(f'Malformed request: {method} {path}')
    raw_name, raw_version, raw_label, verb = match.groups()
    if method == 'GET':
      route.api = 'GetModelMetadata' if verb else 'GetModelStatus'
    else:
      verb = verb.lower()
      route.api = verb.capitalize()
    version = _parse_version(raw_version)
    name = _decode_name(raw_name, 'model name')
    route.model = name or ''
    label = _decode_name(raw_label, 'model version label')
    spec = prediction_service.ModelSpec(name or '', version, label)
    if method == 'GET':
      if not name:
        raise status.invalid_argument('Missing model name in request.')
      if verb:
        return self._metadata(spec)
      states = self._service.model_status(spec)
      return 200, _status_json(states), _JSON
    deadline = started + self._timeout_s if self._timeout_s else None
    doc = json_tensor.parse_json_object(body)
    signature_name = json_tensor.signature_name_of(doc)
    if verb == 'predict':
      return self._predict(spec, doc, signature_name, deadline)
    examples = json_tensor.examples_from_json(doc)
    with self._service.acquire(spec) as servable:
      if verb == 'classify':
        _, results = self._service.classify(servable, signature_name,
                                            examples)
        return 200, json_tensor.classification_to_json(results), _JSON
      _, values = self._service.regress(servable, signature_name, examples)
      return 200, json_tensor.regression_to_json(values), _JSON

  def _predict(self, spec, doc, signature_name, deadline) -> Response:
    with self._service.acquire(spec) as servable:
      try:
        inputs, request_format = json_tensor.predict_inputs_from_json(
            doc, signature_name,
            lambda sig: self._service.input_dtypes(servable, sig))
      except status.ServingError as e:
        raise renamed_inputs.with_key_hint(
            e, servable, signature_name,
            json_tensor.input_names_of(doc)) from None
      _, outputs = self._service.predict(servable, signature_name, inputs,
                                         deadline=deadline)
    return 200, json_tensor.predict_outputs_to_json(outputs,
                                                    request_format), _JSON

  def _metadata(self, spec) -> Response:
    with self._service.acquire(spec) as servable:
      body = _metadata_json(servable.name, servable.version,
                            servable.signature_defs)
    return 200, body, _JSON


def _read_chunked(rfile, limit: int) -> bytes:
  """Reads a ``Transfer-Encoding: chunked`` body, refusing more than `limit`."""
  parts, total = [], 0
  while True:
    line = rfile.readline(1024)
    if not line:
      raise ValueError('connection closed inside a chunked body')
    size = int(line.split(b';', 1)[0].strip() or b'0', 16)
    if size == 0:
      while rfile.readline(1024) not in (b'\r\n', b'\n', b''):
        pass
      return b''.join(parts)
    total += size
    if total > limit:
      raise BodyTooLarge(total)
    parts.append(rfile.read(size))
    rfile.readline(1024)


class _Handler(http.server.BaseHTTPRequestHandler):
  """One connection; requests are answered by the server's RestApi."""

  protocol_version = 'HTTP/1.1'
  server_version = 'leantfx-serving'
  sys_version = ''
  server: '_HttpServer'

  def setup(self):
    self.timeout = self.server.request_timeout_s
    super().setup()
    prefix = self.server.take_prefix(self.connection)
    if prefix:
      # The raw socket stream (a buffered one would wait to fill its
      # buffer), detached so that the dropped reader does not close it.
      self.rfile = io.BufferedReader(_Prefixed(prefix, self.rfile.detach()),
                                     self.rbufsize if self.rbufsize > 0
                                     else io.DEFAULT_BUFFER_SIZE)
    # Responses go out in one write; without Nagle it leaves at once instead
    # of waiting for the client's delayed ACK (40 ms on Linux).
    try:
      self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
      pass

  def log_message(self, format, *args):  # pylint: disable=redefined-builtin
    _log.debug('%s %s', self.address_string(), format % args)

  def _send(self, code: int, body: bytes, content_type: str = _JSON,
            close: bool = False):
    """Writes status line, headers and body with a single write."""
    self.log_request(code)
    phrase = self.responses.get(code, ('',))[0]
    head = [f'{self.protocol_version} {code} {phrase}',
            f'Server: {self.version_string()}',
            f'Date: {self.date_time_string()}',
            f'Content-Type: {content_type}',
            f'Content-Length: {len(body)}']
    if code in http_loop.RETRY_CODES:
      head.append(f'Retry-After: {request_limits.RETRY_AFTER_S}')
    if close or self.server.draining:
      head.append('Connection: close')
      self.close_connection = True
    self.wfile.write(('\r\n'.join(head) + '\r\n\r\n').encode('latin-1') +
                     (body if self.command != 'HEAD' else b''))

  def _too_large(self, size_text: str):
    limit = self.server.max_body_bytes
    body = json_writer.error_body(
        f'Request body of {size_text} bytes exceeds the limit of {limit} '
        'bytes (--max-body-bytes).')
    self.server.api.count_refusal(413)
    self._send(413, body, close=True)
    self.wfile.flush()
    self._drain()

  def _drain(self):
    """Discards the unread body, up to a bound, so the client sees the 413.

    Closing a socket with unread bytes sends a reset, and a client still
    writing its body then never reads the answer waiting for it.
    """
    sock = self.connection
    self.server.unwatch(sock)  # The drain has its own bounds.
    try:
      sock.shutdown(socket.SHUT_WR)
      sock.settimeout(_DRAIN_PAUSE_S)
      deadline = time.monotonic() + _DRAIN_S
      discarded = 0
      while discarded < _DRAIN_BYTES and time.monotonic() < deadline:
        chunk = sock.recv(_CHUNK)
        if not chunk:
          break
        discarded += len(chunk)
    except OSError:
      pass

  def handle_expect_100(self):
    length = self.headers.get('Content-Length')
    if length and length.isdigit() and \
        int(length) > self.server.max_body_bytes:
      self._too_large(length)
      return False
    return super().handle_expect_100()

  def _read_body(self) -> Optional[bytes]:
    limit = self.server.max_body_bytes
    encoding = (self.headers.get('Transfer-Encoding') or '').lower()
    if 'chunked' in encoding:
      try:
        return _read_chunked(self.rfile, limit)
      except BodyTooLarge:
        self._too_large('more than the limit of')
        return None
      except ValueError:
        self._send(400, json_writer.error_body('Malformed chunked body.'),
                   close=True)
        return None
    length = self.headers.get('Content-Length')
    if not length:
      return b''
    if not length.strip().isdigit():
      self._send(400, json_writer.error_body(
          f'Invalid Content-Length: {length!r}'), close=True)
      return None
    size = int(length)
    if size > limit:
      self._too_large(str(size))
      return None
    body = self.rfile.read(size)
    if len(body) < size:
      self.close_connection = True
      return None
    return body

  def handle_one_request(self):
    """Waits for a request's first byte, then gives it a whole-request deadline.

    The socket timeout bounds each read; a client sending a byte just
    inside it would hold the connection for ever. The server's watchdog
    shuts the socket down once the request has taken request_timeout_s
    to arrive (``watch``), whatever the pace of its bytes.
    """
    try:
      first = self.rfile.peek(1)
    except OSError:
      first = b''
    if not first:
      self.close_connection = True
      return
    self.server.watch(self.connection)
    try:
      super().handle_one_request()
    finally:
      self.server.unwatch(self.connection)

  def _handle(self, method: str):
    server = self.server
    # ``in_flight`` (what a graceful stop waits for) covers the read, the
    # work and the write; a request slot only the work: a client slow to
    # send holds none, and a client that has read its answer and sends the
    # next request finds its slot free.
    slot_held = False
    with server.in_flight_lock:
      server.in_flight += 1
    try:
      # Read (and for GET ignore) any body, so keep-alive stays in sync.
      body = self._read_body()
      if body is None:
        return
      server.unwatch(self.connection)
      started = time.monotonic()
      refused = server.too_many()
      if refused is not None:
        self._send(429, refused, close=True)
        return
      slot_held = True
      if method != 'POST':
        body = b''
      code, payload, content_type = server.api.handle(method, self.path, body,
                                                      started)
      server.slots.release()
      slot_held = False
      self._send(code, payload, content_type)
    except (socket.timeout, ConnectionError) as e:
      _log.debug('Connection %s dropped: %s', self.address_string(), e)
      self.close_connection = True
    finally:
      if slot_held:
        server.slots.release()
      with server.in_flight_lock:
        server.in_flight -= 1
        server.in_flight_lock.notify_all()

  def do_GET(self):  # pylint: disable=invalid-name
    self._handle('GET')

  def do_POST(self):  # pylint: disable=invalid-name
    self._handle('POST')

  def do_PUT(self):  # pylint: disable=invalid-name
    self._handle('PUT')

  def do_DELETE(self):  # pylint: disable=invalid-name
    self._handle('DELETE')


class _Prefixed(io.RawIOBase):
  """Bytes already read from a connection, then the connection itself."""

  def __init__(self, prefix: bytes, rest):
    super().__init__()
    self._prefix = memoryview(prefix)
    self._rest = rest

  def readable(self) -> bool:
    return True

  def readinto(self, buffer) -> int:
    if self._prefix:
      n = min(len(buffer), len(self._prefix))
      buffer[:n] = self._prefix[:n]
      self._prefix = self._prefix[n:]
      return n
    return self._rest.readinto(buffer)


def drop_late_client(sock: socket.socket, timeout_s: float) -> None:
  """Says 408 if the socket takes it at once, then shuts the connection."""
  body = json_writer.error_body(
      f'The request did not arrive whole within {timeout_s:g} s '
      '(--request-timeout-s); the connection is closed.')
  try:
    sock.send(http_loop.frame(408, body, _JSON, True, _Handler.server_version,
                              http_loop.date_header()),
              socket.MSG_DONTWAIT)
  except OSError:
    pass
  try:
    sock.shutdown(socket.SHUT_RDWR)
  except OSError:
    pass


class _HttpServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
  daemon_threads = True
  block_on_close = False
  allow_reuse_address = True

  def __init__(self, address, api: RestApi, max_body_bytes: int,
               request_timeout_s: Optional[float], max_concurrent: int,
               listener: Optional[socket.socket] = None,
               max_connections: int = 1024):
    # The listen backlog: connections beyond those served wait in it rather
    # than in SYN retries (socketserver's default is 5).
    self.request_queue_size = max_connections
    self.api = api
    self.max_body_bytes = max_body_bytes
    self.request_timeout_s = request_timeout_s
    self.max_concurrent = max_concurrent
    self.slots = threading.BoundedSemaphore(max_concurrent)
    self.in_flight = 0
    self.in_flight_lock = threading.Condition()
    self.draining = False
    self._prefixes = {}
    self._prefixes_lock = threading.Lock()
    self._deadlines = {}  # socket -> when its request must have arrived.
    self._started = {}  # id(socket) -> when the loop saw its first byte.
    self._watch_stop = threading.Event()
    super().__init__(address, _Handler, bind_and_activate=listener is None)
    if listener is not None:
      # Worker processes accept on the listening socket of the process that
      # started them: an idle worker takes the next connection.
      self.socket.close()
      self.socket = listener
      self.server_address = listener.getsockname()
      self.server_name, self.server_port = self.server_address[:2]

  def adopt(self, sock: socket.socket, prefix: bytes,
            started: Optional[float] = None) -> None:
    """Serves a connection in its own thread, `prefix` read from it already.

    Args:
      sock: the connection.
      prefix: the bytes read from it so far.
      started: when its request's first byte arrived (its deadline runs
        from then).
    """
    with self._prefixes_lock:
      if prefix:
        self._prefixes[id(sock)] = prefix
      if started is not None:
        self._started[id(sock)] = started
    try:
      address = sock.getpeername()
    except OSError:
      address = ('', 0)
    self.process_request(sock, address)

  def take_prefix(self, sock: socket.socket) -> bytes:
    with self._prefixes_lock:
      return self._prefixes.pop(id(sock), b'')

  def watch(self, sock: socket.socket) -> None:
    """Starts the deadline of the request arriving on sock."""
    if self.request_timeout_s is None:
      return
    with self._prefixes_lock:
      started = self._started.pop(id(sock), None)
      self._deadlines[sock] = ((started or time.monotonic()) +
                               self.request_timeout_s)

  def unwatch(self, sock: socket.socket) -> None:
    """The request on sock has arrived whole (or the connection ends)."""
    with self._prefixes_lock:
      self._deadlines.pop(sock, None)

  def watch_deadlines(self) -> None:
    """Drops the connections whose request is late, until stop_watching()."""
    while not self._watch_stop.wait(_WATCH_S):
      now = time.monotonic()
      with self._prefixes_lock:
        late = [sock for sock, deadline in self._deadlines.items()
                if deadline < now]
        for sock in late:
          del self._deadlines[sock]
      for sock in late:
        drop_late_client(sock, self.request_timeout_s)
        self.api.count_refusal(408)

  def stop_watching(self) -> None:
    self._watch_stop.set()

  def too_many(self) -> Optional[bytes]:
    """Takes a request slot; None, or the 429 body when none is free."""
    if self.slots.acquire(blocking=False):
      return None
    self.api.count_refusal(429)
    return json_writer.error_body(
        f'Too many requests in flight (limit {self.max_concurrent}); '
        'retry later.')


class RestServer:
  """The REST API listening on (host, port), served by an event loop.

  Ordinary keep-alive requests are read and answered by one thread
  (``http_loop.HttpLoop``); a connection whose request needs more of HTTP
  (a chunked or oversized body, ``Expect``, HTTP/1.0, ...) is handed to a
  thread of its own (``_Handler``).
  """

  def __init__(self, api: RestApi, host: str, port: int, max_body_bytes: int,
               request_timeout_s: Optional[float], max_concurrent: int,
               listener: Optional[socket.socket] = None,
               max_connections: int = 1024):
    self._server = _HttpServer((host, port), api, max_body_bytes,
                               request_timeout_s, max_concurrent, listener,
                               max_connections)
    server = self._server
    self._loop = http_loop.HttpLoop(
        server.socket, api.handle, api.inline, server.adopt, max_body_bytes,
        request_timeout_s, server.too_many, server.slots.release, server,
        server_header=_Handler.server_version,
        max_connections=max_connections,
        on_late=lambda: api.count_refusal(408))
    self._watchdog = threading.Thread(target=server.watch_deadlines,
                                      name='leantfx-rest-deadlines',
                                      daemon=True)

  @property
  def port(self) -> int:
    return self._server.server_address[1]

  def start(self) -> None:
    self._loop.start()
    self._watchdog.start()

  def stop_accepting(self) -> None:
    """Closes the listening socket; open connections finish their request."""
    self._server.draining = True
    self._loop.stop_accepting()

  def wait_idle(self, timeout_s: float) -> bool:
    """Waits for in-flight requests to finish; False on timeout."""
    server = self._server
    with server.in_flight_lock:
      idle = server.in_flight_lock.wait_for(lambda: server.in_flight == 0,
                                            timeout=timeout_s)
    self._loop.join(1.0)
    self._server.stop_watching()
    return idle
