"""Contract test of `leantfx kfp upload|submit|schedule` against KFP's REST API.

No Kubeflow Pipelines cluster exists here, so this is a contract test: a
small HTTP server on 127.0.0.1 implements the KFP v2beta1 endpoints that
kfp.Client 2.5 calls for these commands (read from kfp/client/client.py and
kfp_server_api/api/*: healthz, experiments list/create, pipelines list,
pipelines/upload, pipelines/upload_version, runs, recurringruns), answers the
way the KFP API server does, records every request, and the tests assert the
request bodies the real client sent through our commands.
"""
import email.parser
import http.server
import json
import socket
import threading
import urllib.parse

from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2
import pytest

from leantfx.kubeflow import compiler
from tests.helpers import run_cli

pytestmark = pytest.mark.unit


class _KfpApi(http.server.BaseHTTPRequestHandler):
  """The few KFP v2beta1 endpoints kfp.Client uses; state on the server."""

  def log_message(self, *args):  # Quiet test output.
    del args

  def _reply(self, status, payload):
    data = json.dumps(payload).encode()
    self.send_response(status)
    self.send_header('Content-Type', 'application/json')
    self.send_header('Content-Length', str(len(data)))
    self.end_headers()
    self.wfile.write(data)

  def _record(self, body):
    parsed = urllib.parse.urlparse(self.path)
    entry = {
        'method': self.command,
        'path': parsed.path,
        'query': urllib.parse.parse_qs(parsed.query),
        'content_type': self.headers.get('Content-Type', ''),
        'body': body,
    }
    self.server.requests.append(entry)
    return entry

  def do_GET(self):  # pylint: disable=invalid-name
    entry = self._record(None)
    path, srv = entry['path'], self.server
    if path == '/apis/v2beta1/healthz':
      return self._reply(200, {'multi_user': False})
    if path == '/apis/v2beta1/experiments':
      pred = json.loads(entry['query']['filter'][0])['predicates'][0]
      assert pred['key'] == 'display_name', pred
      wanted = pred['stringValue']
      found = [e for e in srv.experiments if e['display_name'] == wanted]
      return self._reply(200, {'experiments': found} if found else {})
    if path == '/apis/v2beta1/pipelines':
      pred = json.loads(entry['query']['filter'][0])['predicates'][0]
      found = [p for p in srv.pipelines
               if p['display_name'] == pred['stringValue']]
      return self._reply(200, {'pipelines': found} if found else {})
    return self._reply(404, {'error': f'no route {path}'})

  def do_POST(self):  # pylint: disable=invalid-name
    raw = self.rfile.read(int(self.headers.get('Content-Length', 0)))
    content_type = self.headers.get('Content-Type', '')
    if content_type.startswith('multipart/form-data'):
      message = email.parser.BytesParser().parsebytes(
          b'Content-Type: ' + content_type.encode() + b'\r\n\r\n' + raw)
      body = {part.get_param('name', header='content-disposition'):
              part.get_payload(decode=True).decode()
              for part in message.get_payload()}
    else:
      body = json.loads(raw or b'{}')
    entry = self._record(body)
    path, srv = entry['path'], self.server
    if path == '/apis/v2beta1/experiments':
      experiment = dict(body, experiment_id=f'exp-{len(srv.experiments) + 1}')
      srv.experiments.append(experiment)
      return self._reply(200, experiment)
    if path == '/apis/v2beta1/pipelines/upload':
      pipeline = {'pipeline_id': 'pipe-1',
                  'display_name': entry['query']['name'][0]}
      srv.pipelines.append(pipeline)
      return self._reply(200, pipeline)
    if path == '/apis/v2beta1/pipelines/upload_version':
      return self._reply(200, {
          'pipeline_id': entry['query']['pipelineid'][0],
          'pipeline_version_id': 'version-2',
          'display_name': entry['query']['name'][0]})
    if path == '/apis/v2beta1/runs':
      return self._reply(200, dict(body, run_id='run-42', state='PENDING'))
    if path == '/apis/v2beta1/recurringruns':
      return self._reply(200, dict(body, recurring_run_id='recurring-7',
                                   status='ENABLED'))
    return self._reply(404, {'error': f'no route {path}'})


@pytest.fixture()
def kfp_api():
  server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), _KfpApi)
  server.requests, server.experiments, server.pipelines = [], [], []
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  yield server, f'http://127.0.0.1:{server.server_address[1]}'
  server.shutdown()
  server.server_close()
  thread.join(timeout=10)


def _posts(server, path):
  return [r for r in server.requests
          if r['method'] == 'POST' and r['path'] == path]


def test_contract_upload_then_new_version(kfp_api, compiled, cli):
  server, host = kfp_api
  result = cli(['kfp', 'upload', '--host', host, '--package',
                compiled['yaml'], '--name', 'leantfx-penguins'])
  assert result.returncode == 0, result.stdout + result.stderr
  assert 'pipeline_id pipe-1' in result.stdout
  (upload,) = _posts(server, '/apis/v2beta1/pipelines/upload')
  assert upload['query']['name'] == ['leantfx-penguins']
  with open(compiled['yaml']) as f:
    assert upload['body']['uploadfile'] == f.read()  # The compiled bytes.
  # A second upload of the same name needs --version, then uploads one.
  result = cli(['kfp', 'upload', '--host', host, '--package',
                compiled['yaml'], '--name', 'leantfx-penguins'])
  assert result.returncode == 2 and '--version' in result.stderr
  result = cli(['kfp', 'upload', '--host', host, '--package',
                compiled['yaml'], '--name', 'leantfx-penguins',
                '--version', 'v2'])
  assert result.returncode == 0, result.stdout + result.stderr
  (version,) = _posts(server, '/apis/v2beta1/pipelines/upload_version')
  assert version['query'] == {'name': ['v2'], 'pipelineid': ['pipe-1']}


def test_contract_submit_run_sends_spec_and_parameters(kfp_api, compiled, cli):
  server, host = kfp_api
  result = cli(['kfp', 'submit', '--host', host, '--package',
                compiled['yaml'], '--experiment', 'retraining',
                '--run-name', 'penguins-span-3', '--data-root',
                'gs://bucket/other', '--span', '3', '--train-steps',
                '250', '--span-window', '2'])
  assert result.returncode == 0, result.stdout + result.stderr
  assert 'run created: run-42' in result.stdout
  (experiment,) = _posts(server, '/apis/v2beta1/experiments')
  assert experiment['body']['display_name'] == 'retraining'
  (run,) = _posts(server, '/apis/v2beta1/runs')
  body = run['body']
  assert body['experiment_id'] == 'exp-1'
  assert body['display_name'] == 'penguins-span-3'
  # The whole compiled spec (compared as protos: the client re-serialises
  # it, dropping false/empty fields such as enableCache: false).
  sent = json_format.ParseDict(body['pipeline_spec'],
                               pipeline_spec_pb2.PipelineSpec())
  assert sent == compiler.load_spec(compiled['yaml'])
  assert body['runtime_config']['parameters'] == {
      'data_root': 'gs://bucket/other',
      'range_config': json.dumps({'static_range': {
          'end_span_number': 3, 'start_span_number': 3}}, sort_keys=True),
      'span_window': 2,  # A number: the compiled parameter is an integer.
      'train_args': '{"num_steps": 250}',
  }


def test_contract_span_window_param_is_sent_as_a_number(kfp_api, compiled, cli):
  server, host = kfp_api
  result = cli(['kfp', 'submit', '--host', host, '--package',
                compiled['yaml'], '--param', 'span_window=4'])
  assert result.returncode == 0, result.stdout + result.stderr
  (run,) = _posts(server, '/apis/v2beta1/runs')
  assert run['body']['runtime_config']['parameters'] == {'span_window': 4}


def test_bad_span_window_param_is_refused_before_sending(
    kfp_api, compiled, cli):
  server, host = kfp_api
  result = cli(['kfp', 'submit', '--host', host, '--package',
                compiled['yaml'], '--param', 'span_window=three'])
  assert result.returncode == 2, result.stdout + result.stderr
  assert 'span_window must be a whole number >= 1' in result.stderr
  assert 'Traceback' not in result.stderr
  assert not _posts(server, '/apis/v2beta1/runs')


def test_contract_schedule_cron_is_one_at_a_time_without_catchup(
    kfp_api, compiled, cli):
  server, host = kfp_api
  result = cli(['kfp', 'schedule', '--host', host, '--package',
                compiled['yaml'], '--cron', '0 30 3 * * *',
                '--run-name', 'nightly'])
  assert result.returncode == 0, result.stdout + result.stderr
  assert 'recurring run created: recurring-7' in result.stdout
  (recurring,) = _posts(server, '/apis/v2beta1/recurringruns')
  body = recurring['body']
  assert body['max_concurrency'] == 1
  assert body['no_catchup'] is True
  assert body['mode'] == 'ENABLE'
  assert body['trigger'] == {'cron_schedule': {'cron': '0 30 3 * * *'}}
  assert body['display_name'] == 'nightly'
  assert body['experiment_id'] == 'exp-1'
  assert body['pipeline_spec']['pipelineInfo']['name'] == 'leantfx-penguins'


def test_contract_schedule_interval(kfp_api, compiled, cli):
  server, host = kfp_api
  result = cli(['kfp', 'schedule', '--host', host, '--package',
                compiled['yaml'], '--interval', '3600'])
  assert result.returncode == 0, result.stdout + result.stderr
  (recurring,) = _posts(server, '/apis/v2beta1/recurringruns')
  assert recurring['body']['trigger'] == {
      'periodic_schedule': {'interval_second': 3600}}
  assert recurring['body']['max_concurrency'] == 1
  assert recurring['body']['no_catchup'] is True


def test_invalid_cron_is_refused_before_any_request(kfp_api, compiled, cli):
  server, host = kfp_api
  for cron, expected in (('0 3 * * *', 'It has 5'),
                         ('0 0 25 * * *', 'outside 0-23 for the hour'),
                         ('0 0 3 * * MON-XYZ', 'day of week'),
                         ('0 0 3 ? * ?', '')):
    result = cli(['kfp', 'schedule', '--host', host, '--package',
                  compiled['yaml'], '--cron', cron])
    if cron == '0 0 3 ? * ?':  # '?' is valid for both day fields.
      assert result.returncode == 0, result.stdout + result.stderr
      continue
    assert result.returncode == 2, result.stdout + result.stderr
    assert 'Invalid cron expression' in result.stderr and expected in (
        result.stderr), result.stderr
    assert 'Traceback' not in result.stderr
  assert len(_posts(server, '/apis/v2beta1/recurringruns')) == 1


def test_unreachable_host_is_a_clear_error_not_a_hang(compiled, cli):
  with socket.socket() as s:  # A port nothing listens on.
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
  result = cli(['kfp', 'submit', '--host', f'http://127.0.0.1:{port}',
                '--package', compiled['yaml']])
  assert result.returncode == 5, result.stdout + result.stderr
  assert 'unreachable' in result.stderr and 'Nothing was submitted' in (
      result.stderr)
  assert 'Traceback' not in result.stderr


def test_bad_host_url_and_missing_package(tmp_path, compiled, cli):
  result = cli(['kfp', 'submit', '--host', 'localhost:8888',
                '--package', compiled['yaml']])
  assert result.returncode == 2 and 'http://HOST:PORT' in result.stderr
  result = cli(['kfp', 'submit', '--host', 'http://127.0.0.1:9',
                '--package', str(tmp_path / 'missing.yaml')])
  assert result.returncode == 2 and 'does not exist' in result.stderr


def test_contract_kubeflow_watcher_submits_each_span_once(
    kfp_api, compiled, tmp_path):
  """`leantfx watch --target kubeflow --once`: one KFP run per new span."""
  server, host = kfp_api
  data = tmp_path / 'data'
  for span in (1, 2):
    (data / f'span-{span}').mkdir(parents=True)
    (data / f'span-{span}' / 'p.csv').write_text('a,b\n1,2\n')
    (data / f'span-{span}' / '_SUCCESS').write_text('')
  args = ['watch', '--target', 'kubeflow', '--once', '--data-root',
          str(data), '--host', host, '--package', compiled['yaml'],
          '--state', str(tmp_path / 'state.json'), '--cluster-data-root',
          'gs://bucket/data', '--experiment', 'retraining']
  first = run_cli(args)
  assert first.returncode == 0, first.stdout + first.stderr
  again = run_cli(args)  # A repeated trigger submits nothing.
  assert again.returncode == 0 and 'run started' not in again.stdout
  runs = _posts(server, '/apis/v2beta1/runs')
  assert [r['body']['display_name'] for r in runs] == [
      'pipeline-span-1', 'pipeline-span-2']
  for span, run in zip((1, 2), runs):
    params = run['body']['runtime_config']['parameters']
    assert params['data_root'] == 'gs://bucket/data'
    assert json.loads(params['range_config']) == {'static_range': {
        'start_span_number': span, 'end_span_number': span}}
  with open(tmp_path / 'state.json') as f:
    spans = json.load(f)['spans']
  assert {k: (v['status'], v['run_id']) for k, v in spans.items()} == {
      '1': ('submitted', 'run-42'), '2': ('submitted', 'run-42')}


def test_kubeflow_watcher_with_unreachable_host_retries_then_gives_up(
    tmp_path):
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
  package = tmp_path / 'pipeline.yaml'
  package.write_text('pipelineInfo: {name: x}\n')
  data = tmp_path / 'data' / 'span-1'
  data.mkdir(parents=True)
  (data / 'p.csv').write_text('a\n1\n')
  (data / '_SUCCESS').write_text('')
  args = ['watch', '--target', 'kubeflow', '--once', '--data-root',
          str(tmp_path / 'data'), '--host', f'http://127.0.0.1:{port}',
          '--package', str(package), '--state', str(tmp_path / 's.json'),
          '--max-attempts', '2']
  first = run_cli(args)
  assert first.returncode == 0, first.stdout + first.stderr
  assert 'unreachable' in first.stdout and 'retrying' in first.stdout
  second = run_cli(args)
  assert second.returncode == 1, second.stdout + second.stderr
  assert 'gave up after 2 failed attempts' in second.stdout
  third = run_cli(args)  # Given up: no more attempts, no loop.
  assert third.returncode == 0 and 'run started' not in third.stdout
  assert 'Traceback' not in first.stdout + second.stdout + third.stdout
