"""A Beam SDK worker pool that starts its workers with leantfx's interpreter.

A portable runner with ``--environment_type=EXTERNAL`` asks a worker pool
(Beam's ``BeamFnExternalWorkerPool`` gRPC service) to start one SDK worker
per ``StartWorker`` call; the worker then connects back to the runner's
control endpoint and runs the pipeline's Python code. Beam's own
``worker_pool_main`` starts each worker as ``python -c ...``, the ``python``
found on PATH: started outside leantfx's environment, every worker dies
with ``No module named 'apache_beam'`` and the runner waits for it forever.

This pool differs from it in what a cluster and a laptop need:

* workers run ``sys.executable`` (the pool's own interpreter), so they import
  apache_beam, TFX and leantfx (and, through leantfx's .pth, Keras 2) exactly
  as the pool does;
* it binds 127.0.0.1 unless told otherwise (a pool runs whatever code a
  caller sends it; a cluster sidecar binds 0.0.0.0 inside its pod);
* at most ``max_workers`` workers run at once. A request while every slot is
  taken waits up to ``slot_wait_s`` for one to free (Beam asks for the next
  stage's workers while the last stage's may still be exiting: a run failed
  on exactly that, "2 SDK workers already run", when the pool answered at
  once), then is refused with a message, not queued behind a busy machine;
* workers die with the pool: on SIGTERM it stops them, and each worker asks
  the kernel (PR_SET_PDEATHSIG) to kill it when the pool's serving thread
  dies, so a killed pool leaves no worker that a runner waits on;
* a worker's output goes to the pool's stderr, not to a pipe nobody reads.
"""
import dataclasses
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, Optional

from leantfx.errors import ConfigError

_LOGGER = logging.getLogger(__name__)
# How long a stopped worker gets to exit before SIGKILL (Beam's pool: 10 s).
STOP_GRACE_S = 10.0
# How long a StartWorker request waits for a free slot before it is refused.
SLOT_WAIT_S = 30.0
_SLOT_POLL_S = 0.1
# The pool is "ready" when its port accepts a TCP connection; binding is
# immediate, so a few seconds only cover a loaded machine.
READY_TIMEOUT_S = 30.0

# Run by each worker: first ask to be killed when the pool's serving thread
# dies, and exit at once if the pool died before that (leantfx.stopping); then
# Beam's SDK harness, as Beam's own pool starts it.
_WORKER_CODE = '''
from leantfx import stopping
stopping.die_with_parent({pool_pid})
from apache_beam.runners.worker.sdk_worker import SdkHarness
SdkHarness({control!r}, worker_id={worker_id!r},
           state_cache_size={state_cache_size},
           data_buffer_time_limit_ms=0).run()
'''


def worker_command(control_url: str, worker_id: str, state_cache_size: int,
                   pool_pid: int) -> list:
  """The command line of one SDK worker (this interpreter, never `python`)."""
  return [sys.executable, '-c', _WORKER_CODE.format(
      pool_pid=pool_pid, control=control_url, worker_id=worker_id,
      state_cache_size=state_cache_size)]


class _Spawner:
  """Starts worker processes from one long-lived thread.

  PR_SET_PDEATHSIG fires when the *thread* that forked the child ends, and
  gRPC serves calls on a pool of threads that come and go; so every worker is
  forked by the thread that runs ``serve`` and lives as long as the pool.
  """

  def __init__(self):
    self._requests: 'queue.Queue' = queue.Queue()

  def spawn(self, command: list, timeout: float = 60.0) -> subprocess.Popen:
    done: 'queue.Queue' = queue.Queue(maxsize=1)
    self._requests.put((command, done))
    result = done.get(timeout=timeout)
    if isinstance(result, BaseException):
      raise result
    return result

  def serve_one(self, timeout: float) -> None:
    try:
      command, done = self._requests.get(timeout=timeout)
    except queue.Empty:
      return
    try:
      done.put(subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                stdout=sys.stderr.fileno(), close_fds=True))
    except OSError as e:
      done.put(e)


class WorkerPoolServicer:
  """BeamFnExternalWorkerPool: StartWorker and StopWorker over gRPC."""

  def __init__(self, max_workers: int, spawner: _Spawner,
               state_cache_size: int, slot_wait_s: float = SLOT_WAIT_S):
    self._max_workers = max_workers
    self._slot_wait_s = slot_wait_s
    self._spawner = spawner
    self._state_cache_size = state_cache_size
    self._lock = threading.Lock()
    self._workers: Dict[str, subprocess.Popen] = {}

  def running(self) -> Dict[str, subprocess.Popen]:
    """The workers still running (exited ones are forgotten)."""
    with self._lock:
      for worker_id, process in list(self._workers.items()):
        if process.poll() is not None:
          if process.returncode:
            _LOGGER.warning('SDK worker %s exited with code %s', worker_id,
                            process.returncode)
          del self._workers[worker_id]
      return dict(self._workers)

  def StartWorker(self, request, context):  # pylint: disable=invalid-name
    """Starts one SDK worker for the runner that asks."""
    del context
    from apache_beam.portability.api import beam_fn_api_pb2  # pylint: disable=g-import-not-at-top
    deadline = time.monotonic() + self._slot_wait_s
    running = self.running()
    while len(running) >= self._max_workers and time.monotonic() < deadline:
      time.sleep(_SLOT_POLL_S)  # A worker of an earlier stage may be exiting.
      running = self.running()
    if len(running) >= self._max_workers:
      return beam_fn_api_pb2.StartWorkerResponse(error=(
          f'leantfx worker pool: {len(running)} SDK workers already run '
          f'(--workers {self._max_workers}) and none exited within '
          f'{self._slot_wait_s:g}s; start the pool with more --workers or '
          'lower the pipeline\'s --beam-workers.'))
    command = worker_command(request.control_endpoint.url, request.worker_id,
                             self._state_cache_size, os.getpid())
    try:
      process = self._spawner.spawn(command)
    except (OSError, queue.Empty) as e:
      return beam_fn_api_pb2.StartWorkerResponse(
          error=f'leantfx worker pool could not start {sys.executable}: {e}')
    with self._lock:
      self._workers[request.worker_id] = process
    _LOGGER.info('started SDK worker %s (pid %d) for %s', request.worker_id,
                 process.pid, request.control_endpoint.url)
    return beam_fn_api_pb2.StartWorkerResponse()

  def StopWorker(self, request, context):  # pylint: disable=invalid-name
    """Stops a worker the runner no longer needs."""
    del context
    from apache_beam.portability.api import beam_fn_api_pb2  # pylint: disable=g-import-not-at-top
    with self._lock:
      process = self._workers.pop(request.worker_id, None)
    if process is not None:
      _stop_process(process)
    return beam_fn_api_pb2.StopWorkerResponse()

  def stop_all(self) -> None:
    with self._lock:
      processes = list(self._workers.values())
      self._workers.clear()
    for process in processes:
      _stop_process(process)


def _stop_process(process: subprocess.Popen) -> None:
  if process.poll() is not None:
    return
  process.terminate()
  try:
    process.wait(timeout=STOP_GRACE_S)
  except subprocess.TimeoutExpired:
    process.kill()
    process.wait()


def port_answers(host: str, port: int, timeout: float = 2.0) -> bool:
  """Whether a TCP connection to host:port is accepted within timeout."""
  try:
    with socket.create_connection((host.strip('[]'), port), timeout=timeout):
      return True
  except OSError:
    return False


@dataclasses.dataclass(frozen=True)
class PoolOptions:
  """What ``leantfx beam worker-pool`` serves.

  Attributes:
    host: the address to bind (127.0.0.1: this machine only).
    port: the port (0: any free one).
    max_workers: SDK workers that may run at once.
    slot_wait_s: how long a request for a worker waits for a free slot.
  """
  host: str = '127.0.0.1'
  port: int = 50000
  max_workers: int = os.cpu_count() or 1
  slot_wait_s: float = SLOT_WAIT_S

  def __post_init__(self):
    if self.max_workers < 1:
      raise ConfigError(f'--workers must be >= 1, got {self.max_workers}.')
    if self.slot_wait_s < 0:
      raise ConfigError(f'--slot-wait must be >= 0, got {self.slot_wait_s}.')
    if not 0 <= self.port <= 65535:
      raise ConfigError(f'--port {self.port} is not in 0..65535.')


def serve(options: PoolOptions, stop: threading.Event,
          on_ready: Callable[[str], None]) -> None:
  """Serves the worker pool until stop is set, then stops every worker.

  Args:
    options: where to listen and how many workers.
    stop: set it (e.g. from a SIGTERM handler) to shut the pool down.
    on_ready: called with HOST:PORT once the port accepts connections.

  Raises:
    ConfigError: when the address cannot be bound (in use, or not this
      machine's), or the port does not answer within READY_TIMEOUT_S.
  """
  # pylint: disable=g-import-not-at-top
  # Lazy: gRPC and Beam load only when a pool runs.
  import grpc
  from apache_beam.options import pipeline_options
  from apache_beam.portability.api import beam_fn_api_pb2_grpc
  # pylint: enable=g-import-not-at-top
  from concurrent import futures  # pylint: disable=g-import-not-at-top
  # The workers get no pipeline options (neither do Beam's pool's), so they
  # use the default state cache a LOOPBACK worker would.
  cache_bytes = pipeline_options.PipelineOptions([]).view_as(
      pipeline_options.WorkerOptions).max_cache_memory_usage_mb << 20
  spawner = _Spawner()
  servicer = WorkerPoolServicer(options.max_workers, spawner, cache_bytes,
                                options.slot_wait_s)
  server = grpc.server(
      futures.ThreadPoolExecutor(max_workers=4 * options.max_workers + 4),
      options=[('grpc.so_reuseport', 0)])
  beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(
      servicer, server)
  bind = f'{options.host}:{options.port}'
  try:
    port = server.add_insecure_port(bind)
  except RuntimeError as e:
    raise ConfigError(f'The worker pool cannot listen on {bind}: {e}. Pick '
                      'another --port, or free this one.') from e
  if not port:  # Older gRPC returns 0 instead of raising.
    raise ConfigError(f'The worker pool cannot listen on {bind} (in use?). '
                      'Pick another --port, or free this one.')
  server.start()
  address = f'{options.host}:{port}'
  probe_host = '127.0.0.1' if options.host in ('0.0.0.0', '') else options.host
  deadline = time.monotonic() + READY_TIMEOUT_S
  while not port_answers(probe_host, port):
    if time.monotonic() > deadline:
      server.stop(0)
      raise ConfigError(f'The worker pool bound {address} but the port did '
                        f'not accept a connection within {READY_TIMEOUT_S}s.')
    time.sleep(0.1)
  _LOGGER.info('worker pool ready at %s (%d workers max, %s)', address,
               options.max_workers, sys.executable)
  on_ready(address)
  try:
    while not stop.is_set():
      spawner.serve_one(timeout=0.2)
      servicer.running()  # Reaps exited workers and logs failures.
  finally:
    server.stop(grace=1)
    servicer.stop_all()


def wait_until_ready(host: str, port: int, timeout: float,
                     process: Optional[subprocess.Popen] = None) -> bool:
  """Waits for a pool's port to answer; False on timeout or pool exit."""
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    if process is not None and process.poll() is not None:
      return False
    if port_answers(host, port, timeout=1.0):
      return True
    time.sleep(0.2)
  return False
