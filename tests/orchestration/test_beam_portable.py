"""The local parts of Beam's portability framework, run for real.

`leantfx beam worker-pool` and `leantfx beam job-server` are started as the
console script; the preflight of `leantfx run` is called in-process against
them, against Beam's own worker_pool_main started from interpreters that lack
apache_beam or leantfx, and against ports where nothing listens. Each test
takes seconds (a probe is one Beam job with one SDK worker), so they stay in
the default test run; the pipeline runs are in tests/e2e/test_portable_e2e.py.
"""
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from leantfx.cli import main
from leantfx.errors import BeamEnvironmentError
from leantfx.pipeline import beam_preflight
from leantfx.pipeline import beam_presets
from tests.helpers import BeamServer, child_pids, pid_alive

pytestmark = pytest.mark.e2e

# A pool's StartWorker answers at once; a worker connects back within a few
# seconds on an idle machine (Beam's import), this bound covers a loaded one.
CONNECT_TIMEOUT_S = 90


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def _args(environment: str, job_endpoint: str = 'embed', workers: int = 1):
  return beam_presets.beam_pipeline_args(
      'portable', workers=workers, job_endpoint=job_endpoint,
      environment=beam_presets.parse_environment(environment))


@pytest.fixture
def pool(tmp_path):
  server = BeamServer(['worker-pool', '--port', '0', '--workers', '2'],
                      str(tmp_path / 'pool.log'))
  yield server
  server.stop()


def test_the_pool_binds_127_0_0_1_and_its_workers_run_leantfx(pool, tmp_path):
  assert pool.address.startswith('127.0.0.1:'), pool.address
  reports = beam_preflight.check(_args(f'external:{pool.address}'),
                                 str(tmp_path))
  assert reports and {r['python'] for r in reports} == {sys.executable}
  assert all(r['keras2'] for r in reports), reports
  assert 'started SDK worker' in pool.log()
  assert not (tmp_path / '.beam-preflight').exists()  # The probe cleaned up.


def test_the_job_server_runs_the_sdk_workers_the_pipeline_asks_for(
    pool, tmp_path):
  """--beam-workers 2 through `leantfx beam job-server`: two StartWorker calls.

  Beam's embedded job service would start one whatever the option says.
  """
  job_server = BeamServer(['job-server', '--port', '0'],
                          str(tmp_path / 'job.log'))
  try:
    reports = beam_preflight.check(
        _args(f'external:{pool.address}', job_server.address, workers=2),
        str(tmp_path))
  finally:
    assert job_server.stop() == 0
  assert {r['python'] for r in reports} == {sys.executable}
  assert pool.log().count('started SDK worker') == 2, pool.log()[-2000:]


def _hold_control_server():
  """A Fn API control endpoint that accepts workers and keeps them waiting."""
  # pylint: disable=g-import-not-at-top
  from concurrent import futures
  import grpc
  from apache_beam.portability.api import beam_fn_api_pb2_grpc
  # pylint: enable=g-import-not-at-top
  connected = threading.Semaphore(0)
  release = threading.Event()

  class Hold(beam_fn_api_pb2_grpc.BeamFnControlServicer):

    def Control(self, request_iterator, context):  # pylint: disable=invalid-name
      connected.release()
      release.wait(120)
      return
      yield  # pylint: disable=unreachable

  server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
  beam_fn_api_pb2_grpc.add_BeamFnControlServicer_to_server(Hold(), server)
  port = server.add_insecure_port('127.0.0.1:0')
  server.start()
  return server, f'127.0.0.1:{port}', connected, release


def _start_worker(address, control, worker_id):
  # pylint: disable=g-import-not-at-top
  import grpc
  from apache_beam.portability.api import beam_fn_api_pb2
  from apache_beam.portability.api import beam_fn_api_pb2_grpc
  from apache_beam.portability.api import endpoints_pb2
  # pylint: enable=g-import-not-at-top
  with grpc.insecure_channel(address) as channel:
    stub = beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolStub(channel)
    return stub.StartWorker(beam_fn_api_pb2.StartWorkerRequest(
        worker_id=worker_id,
        control_endpoint=endpoints_pb2.ApiServiceDescriptor(url=control)),
                            timeout=30).error


def _wait(condition, timeout):
  deadline = time.monotonic() + timeout
  while not condition():
    if time.monotonic() > deadline:
      return False
    time.sleep(0.2)
  return True


def test_the_pool_caps_its_workers_and_takes_them_down_with_it(tmp_path):
  server, control, connected, release = _hold_control_server()
  try:
    # SIGTERM: the pool stops its workers, then exits 0.
    pool = BeamServer(['worker-pool', '--port', '0', '--workers', '2',
                       '--slot-wait', '1'], str(tmp_path / 'pool.log'))
    assert _start_worker(pool.address, control, 'w1') == ''
    assert _start_worker(pool.address, control, 'w2') == ''
    asked = time.monotonic()
    error = _start_worker(pool.address, control, 'w3')
    # Refused after waiting --slot-wait for one of the two to exit.
    assert time.monotonic() - asked >= 1.0
    assert ('2 SDK workers already run (--workers 2) and none exited within '
            '1s') in error, error
    for _ in range(2):
      assert connected.acquire(timeout=CONNECT_TIMEOUT_S), pool.log()
    workers = child_pids(pool.process.pid)
    assert len(workers) == 2, workers
    assert pool.stop(signal.SIGTERM) == 0
    assert _wait(lambda: not any(map(pid_alive, workers)), 30), workers
    # SIGKILL gives the pool no chance to clean up: the kernel ends its
    # workers (PR_SET_PDEATHSIG), so none is left for a runner to wait on.
    pool = BeamServer(['worker-pool', '--port', '0', '--workers', '1'],
                      str(tmp_path / 'pool2.log'))
    assert _start_worker(pool.address, control, 'w4') == ''
    assert connected.acquire(timeout=CONNECT_TIMEOUT_S), pool.log()
    workers = child_pids(pool.process.pid)
    assert len(workers) == 1, workers
    pool.stop(signal.SIGKILL)
    assert _wait(lambda: not any(map(pid_alive, workers)), 10), workers
  finally:
    release.set()
    server.stop(0)


def test_a_busy_port_is_refused_with_a_message(pool, tmp_path):
  result = subprocess.run(
      [os.path.join(os.path.dirname(sys.executable), 'leantfx'), 'beam',
       'worker-pool', '--port', str(pool.port)], capture_output=True,
      text=True, timeout=120, check=False)
  assert result.returncode == 2, result.stderr
  assert f'cannot listen on 127.0.0.1:{pool.port}' in result.stderr


def _run_in_process(tmp_path, capsys, beam_options):
  """`leantfx run` in this process; returns (exit code, error line)."""
  output = tmp_path / 'out'
  code = main.main(['run', '--dataset', 'penguins', '--output', str(output),
                    '--no-optimize', '--verbose', '--beam-runner', 'portable']
                   + beam_options)
  err = capsys.readouterr().err
  lines = [l for l in err.splitlines() if 'leantfx: error:' in l]
  assert lines, err[-3000:]
  assert not (output / 'serving').exists()
  assert not (output / 'tfx').exists()  # No component ran.
  return code, lines[-1]


def test_run_refuses_an_external_environment_nobody_answers(tmp_path, capsys):
  port = _free_port()
  started = time.monotonic()
  code, error = _run_in_process(tmp_path, capsys, [
      '--job-endpoint', 'embed', '--environment', f'external:127.0.0.1:{port}'])
  assert code == 3, error
  assert f'No Beam worker pool answers at 127.0.0.1:{port}' in error
  assert f'leantfx beam worker-pool --port {port}' in error
  # ENDPOINT_TIMEOUT_S, plus the data checks and imports before it.
  assert time.monotonic() - started < 120


def test_run_refuses_a_job_endpoint_nobody_answers(tmp_path, capsys):
  port = _free_port()
  code, error = _run_in_process(tmp_path, capsys,
                                ['--job-endpoint', f'127.0.0.1:{port}'])
  assert code == 3, error
  assert f'No Beam job server answers at 127.0.0.1:{port}' in error
  assert f'leantfx beam job-server --port {port}' in error


def _beam_pool_with_python(tmp_path, script: str) -> subprocess.Popen:
  """Beam's own worker_pool_main, whose workers run a `python` we choose.

  worker_pool_main starts each worker as `python -c ...` from PATH; a folder
  holding a `python` script that runs this interpreter with less of its
  environment stands for a pool started outside leantfx's.
  """
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir()
  python = bin_dir / 'python'
  python.write_text('#!/bin/sh\n' + script.format(python=sys.executable))
  python.chmod(0o755)
  port = _free_port()
  env = dict(os.environ, PATH=f'{bin_dir}{os.pathsep}{os.environ["PATH"]}')
  pool = subprocess.Popen(
      [sys.executable, '-m', 'apache_beam.runners.worker.worker_pool_main',
       '--service_port', str(port)], env=env, stdout=subprocess.DEVNULL,
      # Not the repository: there `python -c` would import its leantfx/.
      stderr=subprocess.DEVNULL, start_new_session=True, cwd=tmp_path)
  assert _wait(lambda: _port_open(port), 60)
  return pool, port


def _port_open(port):
  with socket.socket() as s:
    return s.connect_ex(('127.0.0.1', port)) == 0


def _stop(process):
  os.killpg(process.pid, signal.SIGKILL)
  process.wait()


def test_preflight_names_workers_that_cannot_import_leantfx(tmp_path):
  site_packages = next(p for p in sys.path if p.endswith('site-packages'))
  # -S skips the .pth files, among them the one that makes leantfx
  # importable; PYTHONPATH keeps apache_beam.
  pool, port = _beam_pool_with_python(
      tmp_path, f'PYTHONPATH={site_packages} exec {{python}} -S "$@"\n')
  try:
    with pytest.raises(BeamEnvironmentError) as raised:
      beam_preflight.check(_args(f'external:127.0.0.1:{port}'),
                           str(tmp_path), probe_timeout=90)
  finally:
    _stop(pool)
  message = str(raised.value)
  assert not (tmp_path / '.beam-preflight').exists()
  assert "No module named 'leantfx'" in message, message
  assert 'The SDK workers cannot import leantfx' in message
  assert raised.value.exit_code == 3


def test_preflight_names_a_pool_whose_workers_never_start(tmp_path):
  """The reported failure: workers die with No module named 'apache_beam'."""
  pool, port = _beam_pool_with_python(tmp_path, 'exec {python} -S -E "$@"\n')
  try:
    started = time.monotonic()
    with pytest.raises(BeamEnvironmentError) as raised:
      beam_preflight.check(_args(f'external:127.0.0.1:{port}'),
                           str(tmp_path), probe_timeout=30)
    assert time.monotonic() - started < 30 + 15
  finally:
    _stop(pool)
  message = str(raised.value)
  assert f'external:127.0.0.1:{port} ran the preflight probe within 30s' in (
      message), message
  assert f'leantfx beam worker-pool --port {port}' in message


def test_preflight_names_a_docker_environment_without_docker(tmp_path):
  """The embedded service starts DOCKER workers with `docker run`."""
  env_path = os.environ['PATH']
  os.environ['PATH'] = str(tmp_path)  # No docker executable on it.
  try:
    with pytest.raises(BeamEnvironmentError) as raised:
      beam_preflight.check(_args('docker:registry.example.com/leantfx:1.0'),
                           str(tmp_path), probe_timeout=90)
  finally:
    os.environ['PATH'] = env_path
  message = str(raised.value)
  assert ('The preflight probe failed on --environment '
          'docker:registry.example.com/leantfx:1.0') in message, message
  assert 'docker' in message.split(':', 2)[-1]


def _listening_socket():
  """A socket listening on 127.0.0.1, bound to its port by number.

  Bound by number (not port 0), so that ``shutdown`` stops it listening and
  keeps the port: a connection is then refused for sure, where after
  ``close`` another process (CI runs two test workers) could take the port,
  or a connect pick it as its own source port, and answer for the pool.
  """
  for _ in range(20):
    probe = socket.socket()
    probe.bind(('127.0.0.1', 0))
    port = probe.getsockname()[1]
    probe.close()
    listener = socket.socket()
    try:
      listener.bind(('127.0.0.1', port))
    except OSError:  # Taken in between: draw another.
      listener.close()
      continue
    listener.listen(8)
    return listener
  raise RuntimeError('no free port on 127.0.0.1 in 20 draws')


def _stop_listening(listener):
  """The pool is gone: connections are refused, the port stays held."""
  listener.shutdown(socket.SHUT_RDWR)


def test_a_run_that_fails_after_its_pool_died_names_the_lost_pool():
  """Beam noticed the lost workers before the polls: still the pool's error.

  (CI saw a killed pool fail Transform with "Pipeline job-... failed"
  before the watcher's WATCH_MISSES polls, and the user was told only
  that.) A real listening socket stands in for the pool's port.
  """
  listener = _listening_socket()
  port = listener.getsockname()[1]
  args = _args(f'external:127.0.0.1:{port}')
  try:
    with pytest.raises(beam_preflight.WorkerPoolLost) as raised:
      with beam_preflight.watch_worker_pool(args):
        _stop_listening(listener)  # The pool is gone...
        raise RuntimeError('Pipeline job-1 failed in state FAILED')  # ...and Beam says so.
  finally:
    listener.close()
  message = str(raised.value)
  assert f'The Beam worker pool at 127.0.0.1:{port} stopped answering' in (
      message)
  assert f'leantfx beam worker-pool --port {port}' in message
  assert isinstance(raised.value.__cause__, RuntimeError)


def test_a_run_that_fails_while_its_pool_answers_keeps_its_own_error():
  listener = _listening_socket()
  port = listener.getsockname()[1]
  try:
    with pytest.raises(RuntimeError, match='a bad DoFn'):
      with beam_preflight.watch_worker_pool(
          _args(f'external:127.0.0.1:{port}')):
        raise RuntimeError('a bad DoFn')
  finally:
    listener.close()


def test_a_worker_request_waits_for_an_exiting_worker_slot():
  """Beam asks for the next stage's workers while the last one's exit.

  A full pool whose worker exits within --slot-wait starts the new one
  instead of refusing it (CI: StatisticsGen failed with "2 SDK workers
  already run" right after CsvExampleGen's workers were told to stop).
  Real processes: `sleep 1` holds the only slot.
  """
  # pylint: disable=g-import-not-at-top
  from apache_beam.portability.api import beam_fn_api_pb2
  from apache_beam.portability.api import endpoints_pb2
  from leantfx.pipeline import beam_worker_pool
  # pylint: enable=g-import-not-at-top
  started = []

  class Spawner:

    def spawn(self, command):
      del command
      started.append(subprocess.Popen(['sleep', '0']))
      return started[-1]

  servicer = beam_worker_pool.WorkerPoolServicer(1, Spawner(), 0,
                                                 slot_wait_s=20)
  servicer._workers['earlier-stage'] = subprocess.Popen(['sleep', '1'])  # pylint: disable=protected-access
  request = beam_fn_api_pb2.StartWorkerRequest(
      worker_id='next-stage',
      control_endpoint=endpoints_pb2.ApiServiceDescriptor(url='127.0.0.1:1'))
  asked = time.monotonic()
  response = servicer.StartWorker(request, None)
  assert response.error == ''
  assert 0.5 <= time.monotonic() - asked < 20
  assert len(started) == 1 and list(servicer.running()) in (
      ['next-stage'], [])
  servicer.stop_all()
