"""Hot swap under load: a new version takes over, broken ones never serve.

A bounded client loop (2 threads, keep-alive connections, at most 20 s) calls
the model while (1) version 2 is pushed the way leantfx's pusher does it
(written to a hidden temp directory, renamed into place) and (2) three broken
versions are pushed: truncated variables, no saved_model.pb, and a
saved_model.pb that does not parse, each the newest in turn. Every request must
succeed; version 2 must answer within one poll interval plus its own load
time; 3-5 must never answer.
"""
import http.client
import json
import os
import threading
import time

import pytest

from tests.serving import model_builders

pytestmark = pytest.mark.e2e

POLL_S = 0.5
# Client loop bounds: 2 threads, each at most 4000 requests or 20 s.
CLIENT_THREADS = 2
MAX_REQUESTS_PER_THREAD = 4000
MAX_LOOP_S = 20.0


def _broken_missing_graph(path):
  model_builders.versioned_model(path, 4)
  os.remove(os.path.join(path, 'saved_model.pb'))


def _broken_bad_graph(path):
  model_builders.versioned_model(path, 5)
  with open(os.path.join(path, 'saved_model.pb'), 'wb') as f:
    f.write(b'\x0a\xff\xff\xff\xff garbage, not a SavedModel proto')


def _broken_truncated(path):
  model_builders.versioned_model(path, 3)
  model_builders.truncate_variables(path)


def _wait_for(predicate, timeout_s):
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    if predicate():
      return True
    time.sleep(0.05)
  return False


def test_hot_swap_under_load(tmp_path):
  from leantfx.serving import model_config
  from leantfx.serving import server as server_lib
  from leantfx.serving import server_config

  model_dir = str(tmp_path / 'swap')
  os.makedirs(model_dir)
  model_builders.versioned_model(os.path.join(model_dir, '1'), 1)
  config = server_config.ServerConfig(
      rest_port=0, grpc_port=None, file_system_poll_wait_seconds=POLL_S,
      max_num_load_retries=1)
  server = server_lib.ModelServer(
      [model_config.ModelConfig('swap', model_dir)], config).start()

  results = []  # (start, end, version or None, error text)
  results_lock = threading.Lock()
  stop = threading.Event()
  body = json.dumps({'instances': [[1.0, 2.0, 3.0, 4.0]]})

  def client_loop():
    connection = http.client.HTTPConnection('127.0.0.1', server.rest_port,
                                            timeout=10)
    started_loop = time.monotonic()
    for _ in range(MAX_REQUESTS_PER_THREAD):
      if stop.is_set() or time.monotonic() - started_loop > MAX_LOOP_S:
        break
      start = time.monotonic()
      try:
        connection.request('POST', '/v1/models/swap:predict', body)
        response = connection.getresponse()
        payload = response.read()
        end = time.monotonic()
        if response.status == 200:
          version = json.loads(payload)['predictions'][0]['version']
          record = (start, end, int(version), '')
        else:
          record = (start, end, None, f'{response.status} {payload[:200]}')
      except (OSError, http.client.HTTPException) as e:
        record = (start, time.monotonic(), None, repr(e))
        connection.close()
        connection = http.client.HTTPConnection('127.0.0.1', server.rest_port,
                                                timeout=10)
      with results_lock:
        results.append(record)
    connection.close()

  threads = [threading.Thread(target=client_loop)
             for _ in range(CLIENT_THREADS)]
  try:
    for thread in threads:
      thread.start()
    time.sleep(1.0)  # Traffic on version 1 first.

    model_builders.push_atomically(model_builders.versioned_model, model_dir,
                                   2, 2)
    pushed_2 = time.monotonic()
    assert _wait_for(lambda: any(r[2] == 2 for r in list(results)), 15), \
        'version 2 never answered'

    # One at a time: with the latest-version policy only the newest version
    # is wanted, so each broken kind must be the newest while it is tried.
    for version, build in ((3, _broken_truncated), (4, _broken_missing_graph),
                           (5, _broken_bad_graph)):
      model_builders.push_atomically(build, model_dir, version)

      def given_up(version=version):
        state = server.manager.version_states('swap').get(version)
        return state is not None and state.state == 'END'

      assert _wait_for(given_up, 15), server.manager.version_states('swap')
    time.sleep(2 * POLL_S)  # More traffic after the failures settled.
  finally:
    stop.set()
    for thread in threads:
      thread.join(30)
    states = server.manager.version_states('swap')
    server.stop(grace_s=5.0)

  failures = [r for r in results if r[2] is None]
  assert not failures, failures[:5]
  assert len(results) > 100, len(results)
  assert {r[2] for r in results} == {1, 2}

  first_v2 = min(r[1] for r in results if r[2] == 2)
  swap_delay = first_v2 - pushed_2
  state_2 = states[2]
  # Seen by the poll within one interval (+ scheduling slack on a busy box).
  assert state_2.detected_at - pushed_2 <= POLL_S + 0.5, (
      state_2.detected_at - pushed_2)
  # Answering within one poll interval + its own load/warm-up time.
  assert swap_delay <= POLL_S + state_2.load_seconds + 1.0, (
      swap_delay, state_2.load_seconds)
  # Once version 2 answered, requests that started later never see 1.
  assert all(r[2] == 2 for r in results if r[0] > first_v2)

  assert states[2].state == 'AVAILABLE'
  assert states[1].state == 'END' and states[1].error_code.name == 'OK'
  for version in (3, 4, 5):
    assert states[version].state == 'END'
    assert states[version].error_code.name != 'OK'
    assert states[version].attempts == 2  # First try + max_num_load_retries.
  assert states[4].error_code.name == 'NOT_FOUND'
  assert 'SavedModel file does not exist' in states[4].error_message
