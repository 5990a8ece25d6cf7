"""A real server's versions follow the disk, as TF Serving's file-system source.

Each test starts a ModelServer on loopback (REST, polling every POLL_S) over
real SavedModels that answer their own version number
(model_builders.versioned_model), changes the disk as an operator would and
asks the server over HTTP:

* the newest version deleted: the one below serves, the deleted one goes;
* a version copied slowly (saved_model.pb and an empty variables/ first,
  the variables' files seconds later, past every quick retry): it loads
  once the copy is complete;
* a restart whose newest version is broken: the ports open with the one
  below serving, and the status says why the newest does not;
* a push's staging folder (``.push-<pid>-<hex>``, left by a killed push)
  holding a whole model is never served.
"""
import http.client
import json
import os
import shutil
import time

import pytest

from tests.serving import model_builders

pytestmark = pytest.mark.e2e

POLL_S = 0.2
# A swap is one poll plus one SavedModel load (about a second here, more on
# a shared machine); the bound only keeps a broken swap from hanging.
SWAP_TIMEOUT_S = 30.0


def _server(model_dir: str, retries: int = 1):
  from leantfx.serving import model_config  # pylint: disable=g-import-not-at-top
  from leantfx.serving import server as server_lib  # pylint: disable=g-import-not-at-top
  from leantfx.serving import server_config  # pylint: disable=g-import-not-at-top
  config = server_config.ServerConfig(
      rest_port=0, grpc_port=None, file_system_poll_wait_seconds=POLL_S,
      max_num_load_retries=retries, request_timeout_s=20.0)
  return server_lib.ModelServer(
      [model_config.ModelConfig('swap', model_dir)], config).start()


def _request(port: int, method: str, path: str, body=None):
  connection = http.client.HTTPConnection('127.0.0.1', port, timeout=20)
  try:
    connection.request(method, path, body)
    response = connection.getresponse()
    return response.status, json.loads(response.read() or b'null')
  finally:
    connection.close()


def _answering_version(port: int):
  code, body = _request(port, 'POST', '/v1/models/swap:predict',
                        json.dumps({'instances': [[1.0, 2.0, 3.0, 4.0]]}))
  return int(body['predictions'][0]['version']) if code == 200 else code


def _states(port: int):
  code, body = _request(port, 'GET', '/v1/models/swap')
  assert code == 200, body
  return {int(s['version']): s for s in body['model_version_status']}


def _wait_for(predicate, timeout_s=SWAP_TIMEOUT_S):
  deadline = time.monotonic() + timeout_s
  while time.monotonic() < deadline:
    if predicate():
      return True
    time.sleep(POLL_S / 2)
  return False


def test_deleting_the_newest_version_serves_the_previous(tmp_path):
  model_dir = str(tmp_path / 'swap')
  model_builders.versioned_model(os.path.join(model_dir, '1'), 1)
  server = _server(model_dir)
  try:
    port = server.rest_port
    assert _answering_version(port) == 1
    # Version 2 replaces 1 (1 is unloaded), then is deleted.
    model_builders.push_atomically(model_builders.versioned_model, model_dir,
                                   2, 2)
    assert _wait_for(lambda: _answering_version(port) == 2)
    assert _wait_for(lambda: _states(port)[1]['state'] == 'END')
    shutil.rmtree(os.path.join(model_dir, '2'))
    assert _wait_for(lambda: _answering_version(port) == 1), (
        _states(port))
    assert _wait_for(lambda: _states(port)[2]['state'] == 'END')
    assert _states(port)[1]['state'] == 'AVAILABLE'
    code, _ = _request(port, 'POST', '/v1/models/swap/versions/2:predict',
                       json.dumps({'instances': [[1.0, 2.0, 3.0, 4.0]]}))
    assert code == 404
  finally:
    server.stop(grace_s=5.0)


def test_a_version_copied_slowly_loads_once_complete(tmp_path):
  model_dir = str(tmp_path / 'swap')
  model_builders.versioned_model(os.path.join(model_dir, '1'), 1)
  whole = model_builders.versioned_model(str(tmp_path / 'whole-2'), 2)
  server = _server(model_dir, retries=1)
  try:
    port = server.rest_port
    # saved_model.pb and an empty variables/ arrive first (cp -r, rsync);
    # the files inside variables/ after every quick retry.
    target = os.path.join(model_dir, '2')
    os.makedirs(os.path.join(target, 'variables'))
    shutil.copy(os.path.join(whole, 'saved_model.pb'), target)
    assert _wait_for(lambda: 2 in _states(port) and
                     _states(port)[2]['state'] == 'END' and
                     server.manager.version_states('swap')[2].attempts == 2)
    time.sleep(10 * POLL_S)  # Ten polls: under the old rule, given up.
    assert _answering_version(port) == 1
    for name in sorted(os.listdir(os.path.join(whole, 'variables'))):
      shutil.copy(os.path.join(whole, 'variables', name),
                  os.path.join(target, 'variables'))
    assert _wait_for(lambda: _answering_version(port) == 2), _states(port)
    assert _states(port)[2]['status']['error_code'] == 'OK'
  finally:
    server.stop(grace_s=5.0)


def test_a_restart_with_a_broken_newest_version_opens_on_the_previous(
    tmp_path):
  model_dir = str(tmp_path / 'swap')
  model_builders.versioned_model(os.path.join(model_dir, '1'), 1)
  broken = model_builders.versioned_model(os.path.join(model_dir, '2'), 2)
  model_builders.truncate_variables(broken)
  server = _server(model_dir, retries=5)  # TF Serving's default retries.
  try:
    port = server.rest_port
    # The first request after start() returned: no 404 window.
    assert _answering_version(port) == 1
    state = _states(port)[2]
    assert state['state'] == 'END'
    assert state['status']['error_code'] != 'OK'
    assert state['status']['error_message']
  finally:
    server.stop(grace_s=5.0)


def test_a_push_staging_folder_is_never_served(tmp_path):
  model_dir = str(tmp_path / 'swap')
  model_builders.versioned_model(os.path.join(model_dir, '1'), 1)
  # What a push killed before its rename leaves: a whole model under a
  # hidden, non-numeric name (leantfx/versioned_push.py's staging).
  model_builders.versioned_model(
      os.path.join(model_dir, '.push-4242-0123456789abcdef0123456789abcdef'),
      9)
  server = _server(model_dir)
  try:
    port = server.rest_port
    time.sleep(3 * POLL_S)
    assert _answering_version(port) == 1
    assert sorted(_states(port)) == [1]
  finally:
    server.stop(grace_s=5.0)
