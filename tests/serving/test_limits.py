"""429 when too many requests are in flight, 504 when a request's deadline
passes while it waits for a batch; the server keeps serving after both."""
import json
import os
import socket
import threading
import time

import pytest

pytestmark = pytest.mark.e2e

DIGIT = [0.5] * 64


def _server(model_base, **overrides):
  from leantfx.serving import batching_parameters
  from leantfx.serving import model_config
  from leantfx.serving import server as server_lib
  from leantfx.serving import server_config
  # A 1.5 s batch timeout with a large max batch holds a lone request in the
  # queue long enough to overlap a second one.
  settings = dict(
      rest_port=0, grpc_port=None, file_system_poll_wait_seconds=-1,
      enable_batching=True,
      batching=batching_parameters.BatchingConfig(
          max_batch_size=64, batch_timeout_micros=1_500_000))
  settings.update(overrides)
  models = [model_config.ModelConfig(
      'digits', os.path.join(model_base, 'digits'))]
  return server_lib.ModelServer(models,
                                server_config.ServerConfig(**settings)).start()


def _predict(port):
  from leantfx import serving_client as client
  return client.RestClient('127.0.0.1', port, timeout_s=20).request(
      'POST', '/v1/models/digits:predict',
      json.dumps({'instances': [DIGIT]}).encode())


def test_too_many_requests_in_flight_is_429(model_base):
  server = _server(model_base, max_concurrent_requests=1)
  try:
    first = {}
    thread = threading.Thread(
        target=lambda: first.update(result=_predict(server.rest_port)))
    thread.start()
    time.sleep(0.5)  # The first request now holds the only slot.
    code, raw = _predict(server.rest_port)
    assert code == 429, raw
    assert 'Too many requests in flight (limit 1)' in json.loads(raw)['error']
    thread.join(20)
    assert first['result'][0] == 200
    assert _predict(server.rest_port)[0] == 200
  finally:
    server.stop(grace_s=5)


@pytest.mark.parametrize('batching', [False, True])
def test_a_client_that_has_its_answer_finds_the_slot_free(model_base,
                                                          batching):
  # The slot is released before the answer is queued, on the event loop's
  # own path (batching off) and on the pool's (batching on): a client sending
  # its next request as soon as it has read an answer never gets a 429.
  server = _server(model_base, max_concurrent_requests=1,
                   enable_batching=batching,
                   batching=batching_parameters_for_tests())
  try:
    codes = [_predict(server.rest_port)[0] for _ in range(5)]
    assert codes == [200] * 5
  finally:
    server.stop(grace_s=5)


def test_a_handed_off_connection_frees_its_slot_before_writing(model_base,
                                                               monkeypatch):
  # A chunked request is answered by the threaded handler. The pause after
  # each write stands for a server thread descheduled right after it (what a
  # loaded machine does), which made this race show in CI.
  from leantfx.serving import rest_api
  original = rest_api._Handler._send

  def send_then_pause(self, *args, **kwargs):
    original(self, *args, **kwargs)
    self.wfile.flush()
    time.sleep(0.2)

  monkeypatch.setattr(rest_api._Handler, '_send', send_then_pause)
  server = _server(model_base, max_concurrent_requests=1,
                   enable_batching=False)
  body = json.dumps({'instances': [DIGIT]}).encode()
  head = (b'POST /v1/models/digits:predict HTTP/1.1\r\nHost: x\r\n'
          b'Transfer-Encoding: chunked\r\n\r\n')
  chunked = head + b'%x\r\n' % len(body) + body + b'\r\n0\r\n\r\n'
  try:
    codes = []
    for _ in range(3):
      with socket.create_connection(('127.0.0.1', server.rest_port),
                                    timeout=10) as sock:
        sock.sendall(chunked)
        codes.append(sock.recv(65536)[:12])
      codes.append(_predict(server.rest_port)[0])
    assert codes == [b'HTTP/1.1 200', 200] * 3
  finally:
    server.stop(grace_s=5)


def batching_parameters_for_tests():
  from leantfx.serving import batching_parameters
  return batching_parameters.BatchingConfig(max_batch_size=64,
                                            batch_timeout_micros=0)


def test_an_overloaded_queue_answers_503_at_once(model_base):
  # One batch may queue: the first request holds it open for 5 s, so the
  # second finds the queue full and is refused at once, not after a wait.
  from leantfx.serving import batching_parameters
  server = _server(model_base, batching=batching_parameters.BatchingConfig(
      max_batch_size=64, batch_timeout_micros=5_000_000,
      max_enqueued_batches=1))
  try:
    first = {}
    thread = threading.Thread(
        target=lambda: first.update(result=_predict(server.rest_port)))
    thread.start()
    time.sleep(0.3)
    started = time.monotonic()
    code, raw = _predict(server.rest_port)
    elapsed = time.monotonic() - started
    assert code == 503, raw
    assert 'queue to which this task was submitted is full' in raw.decode()
    assert elapsed < 3.0, elapsed  # Well before the first batch's 5 s.
    thread.join(20)
    assert first['result'][0] == 200
  finally:
    server.stop(grace_s=5)


def test_deadline_while_queued_is_504(model_base):
  server = _server(model_base, request_timeout_s=0.5)
  try:
    code, raw = _predict(server.rest_port)
    assert code == 504, raw
    assert 'timed out waiting for a batch' in json.loads(raw)['error']
    from leantfx import serving_client as client
    status = client.RestClient('127.0.0.1', server.rest_port).status('digits')
    assert status['model_version_status'][0]['state'] == 'AVAILABLE'
  finally:
    server.stop(grace_s=5)
