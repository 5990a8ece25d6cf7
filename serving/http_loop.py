"""The REST front's connections, served by one event-loop thread.

A thread per connection (``socketserver.ThreadingMixIn``) made every request
hand the GIL between threads at each socket read, write and model call: with
8 keep-alive clients a one-process server spent about half of each request's
wall time waiting for the GIL and 1.1-1.3 ms of CPU on what the model does
in 0.01-0.3 ms (py-spy, wrk on the digits ONNX push). This loop reads,
parses and answers the ordinary keep-alive request itself, so no request
waits on another thread:

- ``GET``/``POST`` in HTTP/1.1 with a ``Content-Length`` body within the
  limit (or none) is parsed here once it has arrived whole; its answer is
  computed in this thread when its body is small (at most
  ``INLINE_BODY_BYTES``: a model call on a few thousand values at most, of
  any runtime) and ``inline(method, path)`` says so (the request cannot wait
  on a batch), otherwise in a pool thread that hands the answer back, so a
  large batch never holds up the status and small requests of the others;
- anything else (a chunked body, ``Expect: 100-continue``, a body over the
  limit, HTTP/1.0, other methods, headers over 64 KiB or malformed) is handed
  with the bytes read so far to ``handoff``, the threaded handler that knows
  every corner of HTTP, which keeps the connection from then on;
- a connection idle for ``timeout_s`` is closed, and so is one whose
  request has not arrived whole ``timeout_s`` after its first byte (408,
  ``on_late``): a slow client cannot hold a connection by sending a byte
  now and then;
- at most ``max_connections`` are open at once; more wait in the listen
  backlog;
- ``stop_accepting()`` closes the listening socket and the idle connections;
  a connection with a request in progress gets its answer with
  ``Connection: close``.
"""
import collections
import concurrent.futures
import email.utils
import http
import logging
import selectors
import socket
import threading
import time
from typing import Callable, Deque, Dict, Optional, Tuple

from leantfx.serving import json_writer
from leantfx.serving import request_limits

_log = logging.getLogger(__name__)

# (status, body, content type) for (method, path, body, arrival time).
Handler = Callable[[str, str, bytes, float], Tuple[int, bytes, str]]

_MAX_HEAD = 64 * 1024
_RECV = 256 * 1024
_SWEEP_S = 0.5
_PHRASES = {s.value: s.phrase for s in http.HTTPStatus}
# Bodies up to this size are answered in the loop's thread: a digits row is
# ~0.4 KiB, and 16 KiB of JSON numbers is at most ~8,000 values, a model
# call well under a millisecond; larger ones go to the pool.
INLINE_BODY_BYTES = 16 * 1024
# Answers that tell the client when to come back (RFC 9110 section 10.2.3).
RETRY_CODES = (429, 503)


def frame(code: int, body: bytes, content_type: str, close: bool,
          server: str, date: str) -> bytes:
  """An HTTP/1.1 response: status line, headers and body in one buffer."""
  head = (f'HTTP/1.1 {code} {_PHRASES.get(code, "")}\r\n'
          f'Server: {server}\r\nDate: {date}\r\n'
          f'Content-Type: {content_type}\r\n'
          f'Content-Length: {len(body)}\r\n')
  if code in RETRY_CODES:
    head += f'Retry-After: {request_limits.RETRY_AFTER_S}\r\n'
  if close:
    head += 'Connection: close\r\n'
  return head.encode('latin-1') + b'\r\n' + body


def date_header() -> str:
  """The ``Date`` header's value now."""
  return email.utils.formatdate(time.time(), usegmt=True)


class _Conn:
  """One client connection's buffers and state."""

  __slots__ = ('sock', 'inbuf', 'outbuf', 'busy', 'wants_close',
               'close_after', 'last', 'request_started')

  def __init__(self, sock: socket.socket):
    self.sock = sock
    self.inbuf = bytearray()
    self.outbuf = bytearray()
    self.busy = False  # A pool thread is answering its request.
    self.wants_close = False  # The request in the pool said Connection: close.
    self.close_after = False  # An answer saying Connection: close is queued.
    self.last = time.monotonic()
    # When the first byte of the request being read arrived.
    self.request_started = self.last


class _Date:
  """The ``Date`` header, formatted once a second."""

  def __init__(self):
    self._second = -1
    self._text = ''

  def __call__(self) -> str:
    now = int(time.time())
    if now != self._second:
      self._second, self._text = now, email.utils.formatdate(now, usegmt=True)
    return self._text


class Request:
  """A parsed ordinary request."""

  __slots__ = ('method', 'path', 'body', 'close', 'started')

  def __init__(self, method, path, body, close, started):
    self.method, self.path, self.body = method, path, body
    self.close, self.started = close, started


def parse(buf: bytearray, max_body: int):
  """Parses the request at the start of buf.

  Returns:
    (Request, bytes used) for an ordinary complete request; (None, 0) when
    more bytes are needed; ('handoff', 0) for a request the threaded handler
    must take.
  """
  end = buf.find(b'\r\n\r\n', 0, _MAX_HEAD + 4)
  if end < 0:
    return ('handoff', 0) if len(buf) > _MAX_HEAD else (None, 0)
  lines = bytes(buf[:end]).split(b'\r\n')
  parts = lines[0].split(b' ')
  if len(parts) != 3 or parts[2] != b'HTTP/1.1' or parts[0] not in (
      b'GET', b'POST'):
    return 'handoff', 0
  length, close = 0, False
  seen_length = False
  for line in lines[1:]:
    name, sep, value = line.partition(b':')
    if not sep or not name or name[-1:] in (b' ', b'\t') or line[:1] in (
        b' ', b'\t'):
      return 'handoff', 0
    name = name.lower()
    if name == b'content-length':
      value = value.strip()
      if seen_length or not value.isdigit():
        return 'handoff', 0
      seen_length, length = True, int(value)
      if length > max_body:
        return 'handoff', 0
    elif name in (b'transfer-encoding', b'expect'):
      return 'handoff', 0
    elif name == b'connection':
      close = b'close' in value.lower()
  used = end + 4 + length
  if len(buf) < used:
    return None, 0
  body = bytes(buf[end + 4:used]) if parts[0] == b'POST' else b''
  return Request(parts[0].decode('ascii'), parts[1].decode('latin-1'), body,
                 close, time.monotonic()), used


class HttpLoop:
  """Serves connections accepted on `listener` from one thread."""

  def __init__(self, listener: socket.socket, handle: Handler,
               inline: Callable[[str, str], bool],
               handoff: Callable[[socket.socket, bytes, float], None],
               max_body_bytes: int, timeout_s: Optional[float],
               admit: Callable[[], Optional[bytes]],
               release: Callable[[], None], tracker,
               server_header: str = 'leantfx-serving', pool_threads: int = 64,
               max_connections: int = 1024,
               on_late: Callable[[], None] = lambda: None):
    """Creates the loop; nothing runs before start().

    Args:
      listener: a listening socket (shared with other worker processes).
      handle: computes a response.
      inline: whether a request is answered in the loop's thread.
      handoff: takes over a connection, given the bytes read from it so far
        and when its request's first byte arrived.
      max_body_bytes: bodies above it are handed off (the handler's 413).
      timeout_s: idle timeout and whole-request deadline (None: none).
      admit: takes a request slot; returns None, or the 429 body.
      release: gives the slot back.
      tracker: holds ``in_flight`` and its ``in_flight_lock`` (a Condition),
        shared with the threaded handler: what a graceful stop waits for.
      server_header: the ``Server`` header.
      pool_threads: threads answering requests not answered inline.
      max_connections: connections open at once; accepting pauses beyond.
      on_late: called for each connection dropped at the request deadline.
    """
    self._listener = listener
    listener.setblocking(False)
    self._handle = handle
    self._inline = inline
    self._handoff = handoff
    self._max_body = max_body_bytes
    self._timeout_s = timeout_s
    self._admit = admit
    self._release = release
    self._server = server_header
    self._date = _Date()
    self._selector = selectors.DefaultSelector()
    self._conns: Dict[int, _Conn] = {}
    self._done: Deque[Tuple[_Conn, bytes]] = collections.deque()
    self._wake_r, self._wake_w = socket.socketpair()
    self._wake_r.setblocking(False)
    self._wake_w.setblocking(False)
    self._pool = concurrent.futures.ThreadPoolExecutor(
        pool_threads, thread_name_prefix='leantfx-rest')
    self._draining = False
    self._stopped = threading.Event()
    self._thread: Optional[threading.Thread] = None
    self._tracker = tracker
    self._max_connections = max_connections
    self._accepting = True
    self._on_late = on_late

  # ------------------------------------------------------------ control ---

  def start(self) -> None:
    self._selector.register(self._listener, selectors.EVENT_READ, 'accept')
    self._selector.register(self._wake_r, selectors.EVENT_READ, 'wake')
    self._thread = threading.Thread(target=self._run, name='leantfx-rest-loop',
                                    daemon=True)
    self._thread.start()

  def stop_accepting(self) -> None:
    """No new connections; idle ones close, busy ones after their answer."""
    self._draining = True
    self._wake()

  def join(self, timeout_s: float) -> bool:
    """Waits for the loop to end after stop_accepting(); False on timeout."""
    ended = self._stopped.wait(timeout_s) if self._thread else True
    self._pool.shutdown(wait=False)
    return ended

  def _wake(self) -> None:
    try:
      self._wake_w.send(b'\0')
    except OSError:
      pass

  # --------------------------------------------------------------- loop ---

  def _run(self) -> None:
    try:
      self._loop()
    except Exception:  # pylint: disable=broad-except
      _log.exception('The REST loop failed; closing its connections.')
    finally:
      for conn in list(self._conns.values()):
        self._close(conn)
      try:
        self._selector.unregister(self._listener)
      except (KeyError, ValueError):
        pass
      self._listener.close()
      self._stopped.set()

  def _loop(self) -> None:
    next_sweep = time.monotonic() + _SWEEP_S
    while True:
      if self._draining:
        if not self._drain_step():
          return
      for key, events in self._selector.select(_SWEEP_S):
        if key.data == 'accept':
          self._accept()
        elif key.data == 'wake':
          self._drain_wake()
        else:
          conn = key.data
          if events & selectors.EVENT_WRITE:
            self._flush(conn)
            self._serve(conn)
          if events & selectors.EVENT_READ and conn.sock.fileno() >= 0:
            self._read(conn)
      self._finish_done()
      now = time.monotonic()
      if now >= next_sweep:
        next_sweep = now + _SWEEP_S
        self._sweep(now)

  def _drain_step(self) -> bool:
    """While draining: stop accepting, close idle connections.

    Returns:
      whether connections remain in progress.
    """
    try:
      self._selector.unregister(self._listener)
    except (KeyError, ValueError):
      pass  # Already, or paused at max_connections.
    self._listener.close()
    for conn in list(self._conns.values()):
      if conn.busy or conn.outbuf:
        conn.close_after = True  # Closes once its answer is written.
        continue
      self._serve(conn)  # A complete request read before the stop.
      if not conn.busy and not conn.outbuf and conn.sock.fileno() >= 0:
        self._close(conn)
    return bool(self._conns) or bool(self._done)

  def _accept(self) -> None:
    # One connection per readiness: a worker busy answering leaves the next
    # connection to an idle worker accepting on the same socket.
    try:
      sock, _ = self._listener.accept()
    except (BlockingIOError, InterruptedError):
      return
    except OSError as e:
      _log.debug('accept failed: %s', e)
      return
    sock.setblocking(False)
    try:
      sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except OSError:
      pass
    conn = _Conn(sock)
    self._conns[sock.fileno()] = conn
    self._selector.register(sock, selectors.EVENT_READ, conn)
    if len(self._conns) >= self._max_connections and self._accepting:
      # Full: the next connections wait in the backlog until one closes.
      self._selector.unregister(self._listener)
      self._accepting = False

  def _drain_wake(self) -> None:
    try:
      while self._wake_r.recv(4096):
        pass
    except (BlockingIOError, InterruptedError):
      pass

  def _read(self, conn: _Conn) -> None:
    try:
      data = conn.sock.recv(_RECV)
    except (BlockingIOError, InterruptedError):
      return
    except OSError:
      data = b''
    if not data:
      self._close(conn)
      return
    conn.last = time.monotonic()
    if not conn.inbuf:
      conn.request_started = conn.last
    conn.inbuf += data
    self._serve(conn)

  def _serve(self, conn: _Conn) -> None:
    """Answers the complete requests buffered on conn, in order."""
    while conn.inbuf and not conn.busy and not conn.outbuf and \
        not conn.close_after and conn.sock.fileno() >= 0:
      request, used = parse(conn.inbuf, self._max_body)
      if request is None:
        break
      if request == 'handoff':
        self._give_away(conn)
        return
      del conn.inbuf[:used]
      conn.request_started = time.monotonic()  # A pipelined next request's.
      refused = self._admit()
      if refused is not None:
        self._respond(conn, 429, refused, 'application/json', True)
        return
      with self._tracker.in_flight_lock:
        self._tracker.in_flight += 1
      if len(request.body) <= INLINE_BODY_BYTES and self._inline(
          request.method, request.path):
        try:
          code, body, content_type = self._handle(
              request.method, request.path, request.body, request.started)
        finally:
          self._release()
        self._respond(conn, code, body, content_type, request.close)
        self._done_one()
      else:
        conn.busy = True
        conn.wants_close = request.close
        self._interest(conn)
        self._pool.submit(self._answer_in_pool, conn, request)

  def _answer_in_pool(self, conn: _Conn, request: Request) -> None:
    try:
      code, body, content_type = self._handle(
          request.method, request.path, request.body, request.started)
    except Exception as e:  # pylint: disable=broad-except  # handle() catches.
      code, body, content_type = 500, str(e).encode(), 'text/plain'
    finally:
      self._release()
    self._done.append((conn, (code, body, content_type)))
    self._wake()

  def _finish_done(self) -> None:
    while self._done:
      conn, (code, body, content_type) = self._done.popleft()
      conn.busy = False
      if conn.sock.fileno() < 0:
        self._done_one()
        continue
      self._respond(conn, code, body, content_type, conn.wants_close)
      self._done_one()
      self._serve(conn)

  def _done_one(self) -> None:
    with self._tracker.in_flight_lock:
      self._tracker.in_flight -= 1
      self._tracker.in_flight_lock.notify_all()

  def _frame(self, code: int, body: bytes, content_type: str,
             close: bool) -> bytes:
    return frame(code, body, content_type, close, self._server, self._date())

  def _respond(self, conn: _Conn, code: int, body: bytes, content_type: str,
               close: bool) -> None:
    close = close or self._draining
    conn.close_after = conn.close_after or close
    conn.outbuf += self._frame(code, body, content_type, close)
    self._flush(conn)

  def _flush(self, conn: _Conn) -> None:
    while conn.outbuf:
      try:
        sent = conn.sock.send(conn.outbuf)
      except (BlockingIOError, InterruptedError):
        break
      except OSError:
        self._close(conn)
        return
      del conn.outbuf[:sent]
    conn.last = time.monotonic()
    if not conn.outbuf and conn.close_after and not conn.busy:
      self._close(conn)
      return
    self._interest(conn)

  def _interest(self, conn: _Conn) -> None:
    if conn.sock.fileno() < 0:
      return
    events = 0
    if not conn.busy and not conn.close_after:
      events |= selectors.EVENT_READ
    if conn.outbuf:
      events |= selectors.EVENT_WRITE
    key = self._selector.get_map().get(conn.sock.fileno())
    if events == 0:
      if key is not None:
        self._selector.unregister(conn.sock)
    elif key is None:
      self._selector.register(conn.sock, events, conn)
    elif key.events != events:
      self._selector.modify(conn.sock, events, conn)

  def _sweep(self, now: float) -> None:
    if self._timeout_s is None:
      return
    for conn in list(self._conns.values()):
      if conn.busy:
        continue
      if conn.inbuf and now - conn.request_started > self._timeout_s:
        # A request still arriving after the whole deadline: 408, if the
        # socket takes it, and the connection closes.
        self._on_late()
        try:
          conn.sock.send(self._frame(408, json_writer.error_body(
              'The request did not arrive whole within '
              f'{self._timeout_s:g} s (--request-timeout-s); the connection '
              'is closed.'), 'application/json', True))
        except OSError:
          pass
        self._close(conn)
      elif now - conn.last > self._timeout_s:
        self._close(conn)

  def _give_away(self, conn: _Conn) -> None:
    """Hands conn, with what was read from it, to the threaded handler."""
    self._forget(conn)
    conn.sock.setblocking(True)
    try:
      self._handoff(conn.sock, bytes(conn.inbuf), conn.request_started)
    except Exception:  # pylint: disable=broad-except
      _log.exception('Handing a connection to a thread failed.')
      conn.sock.close()

  def _forget(self, conn: _Conn) -> None:
    fileno = conn.sock.fileno()
    if fileno >= 0 and self._selector.get_map().get(fileno) is not None:
      self._selector.unregister(conn.sock)
    self._conns.pop(fileno, None)
    if (not self._accepting and not self._draining and
        len(self._conns) < self._max_connections):
      self._selector.register(self._listener, selectors.EVENT_READ, 'accept')
      self._accepting = True

  def _close(self, conn: _Conn) -> None:
    self._forget(conn)
    try:
      conn.sock.close()
    except OSError:
      pass
