"""Worker processes that serve on the same ports: ``leantfx serve --workers N``.

One Python process decodes JSON, builds tensors and frames HTTP for one request
at a time (the GIL), so a single server process uses about one core however
many it has. The pool runs N complete servers instead:

- the supervisor (this module, in the ``serve`` process) binds the ports
  first, so a port in use fails early and clearly and port 0 becomes one port
  for every worker: it listens on the REST port and hands the listening socket
  to every worker (they all accept on it, so an idle worker takes the next
  connection: the pre-fork model of gunicorn and nginx), and reserves the
  gRPC port with SO_REUSEPORT (gRPC binds its own sockets; the kernel spreads
  gRPC connections over the workers by their address hash);
- it starts N worker processes (``spawn``: TensorFlow is not fork-safe), each
  building and starting a whole ``ModelServer`` on those ports;
- each worker loads the models, polls for new versions (hot swap happens in
  every worker) and batches its own requests; ``max_concurrent_requests``
  and the batching limits apply per worker;
- the workers share their counters through a directory
  (``metrics.SharedSnapshots``): any worker's ``/monitoring`` answer covers all;
- SIGTERM/SIGINT stop every worker gracefully; a worker also stops when the
  supervisor dies, however it dies (``stopping.die_with_parent``). A worker
  that dies is not restarted: the supervisor stops the others and exits 3,
  so that the process manager (Kubernetes, systemd) restarts the whole
  server instead of it running at part capacity unnoticed.
"""
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
from multiprocessing import connection
from typing import Any, Callable, Dict, List, Optional

from leantfx import stopping
from leantfx.errors import LeantfxError

_log = logging.getLogger(__name__)

# A factory(**config_overrides) -> ModelServer (not started); it is pickled
# into each worker, so it must be a module-level function or a partial of one.
ServerFactory = Callable[..., Any]


class WorkerError(LeantfxError):
  """A worker failed to start or died while serving."""

  exit_code = 3


def bind_port(host: str, port: int, listen: bool) -> socket.socket:
  """Binds (host, port) and returns the socket.

  Args:
    host: the address.
    port: the port (0: a free one).
    listen: listen on it (the REST socket the workers accept on); otherwise
      bind with SO_REUSEPORT and never listen, which holds the port for the
      workers' gRPC servers (they bind it with SO_REUSEPORT too) and takes no
      connection itself.

  Raises:
    OSError: the port is taken (by a process that does not share it).
  """
  family = socket.AF_INET6 if ':' in host else socket.AF_INET
  sock = socket.socket(family, socket.SOCK_STREAM)
  sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
  if not listen:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
  try:
    sock.bind((host, port))
    if listen:
      sock.listen(1024)
  except OSError as e:
    sock.close()
    raise OSError(e.errno, f'Cannot bind {host}:{port}: {e.strerror}') from e
  return sock


def _worker(factory: ServerFactory, overrides: Dict[str, Any], conn,
            supervisor_pid: int) -> None:
  """A worker process: build, start, report, serve until SIGTERM/SIGINT.

  It gets SIGTERM (a graceful stop) when the supervisor dies, even by
  SIGKILL: a worker left behind would keep serving a stale pool's ports.
  """
  stopping.die_with_parent(supervisor_pid, signal.SIGTERM)
  try:
    server = factory(**overrides)
    server.start()
  except (LeantfxError, OSError) as e:
    conn.send(('error', str(e), getattr(e, 'exit_code', 2)))
    conn.close()
    raise SystemExit(getattr(e, 'exit_code', 2))
  server.install_signal_handlers()
  conn.send(('ready', server.manager.serving_versions()))
  conn.close()
  while not server.wait(1.0):
    pass


class WorkerPool:
  """N server processes on shared ports, started and stopped together."""

  def __init__(self, factory: ServerFactory, workers: int, host: str,
               rest_port: Optional[int], grpc_port: Optional[int],
               start_timeout_s: float = 600.0, grace_s: float = 30.0,
               log: str = 'its log lines above'):
    """Creates the pool; nothing starts before start().

    Args:
      factory: builds one worker's ModelServer from config overrides.
      workers: how many processes (>= 1).
      host: the address both APIs bind.
      rest_port: REST port (0 = one free port for all workers; None = off).
      grpc_port: gRPC port (same rules).
      start_timeout_s: how long the workers may take to load the models.
      grace_s: how long a graceful stop waits for each worker.
      log: where the workers' log lines are, for messages.
    """
    if workers < 1:
      raise ValueError(f'workers must be >= 1, got {workers}')
    self._factory = factory
    self._workers = workers
    self._host = host
    self._ports = {'rest_port': rest_port, 'grpc_port': grpc_port}
    self._start_timeout_s = start_timeout_s
    self._grace_s = grace_s
    self._log = log
    self._reserved: List[socket.socket] = []
    self._processes: List[multiprocessing.Process] = []
    self._metrics_dir: Optional[str] = None
    self.rest_port: Optional[int] = None
    self.grpc_port: Optional[int] = None
    self.serving_versions: Dict[str, List[int]] = {}

  def start(self) -> 'WorkerPool':
    """Reserves the ports, starts the workers and waits until all serve.

    Raises:
      OSError: a port cannot be bound.
      WorkerError: a worker failed to start (its message), or did not report
        within start_timeout_s.
    """
    overrides: Dict[str, Any] = {'reuse_port': True}
    try:
      for name, port in self._ports.items():
        if port is None:
          overrides[name] = None
          continue
        sock = bind_port(self._host, port, listen=name == 'rest_port')
        self._reserved.append(sock)
        overrides[name] = sock.getsockname()[1]
        if name == 'rest_port':
          overrides['rest_listener'] = sock
      self.rest_port = overrides['rest_port']
      self.grpc_port = overrides['grpc_port']
      self._metrics_dir = tempfile.mkdtemp(prefix='leantfx-serve-metrics-')
      overrides['metrics_dir'] = self._metrics_dir
      context = multiprocessing.get_context('spawn')
      pipes = []
      for index in range(self._workers):
        receiver, sender = context.Pipe(duplex=False)
        process = context.Process(
            target=_worker,
            args=(self._factory, overrides, sender, os.getpid()),
            name=f'leantfx-serve-worker-{index}')
        process.start()
        sender.close()
        self._processes.append(process)
        pipes.append(receiver)
      for index, receiver in enumerate(pipes):
        self.serving_versions = self._await_ready(index, receiver)
    except BaseException:
      self.stop()
      raise
    return self

  def _await_ready(self, index: int, receiver) -> Dict[str, List[int]]:
    if not receiver.poll(self._start_timeout_s):
      raise WorkerError(
          f'Serving worker {index} did not start within '
          f'{self._start_timeout_s:.0f}s (loading the models); see '
          f'{self._log}.')
    try:
      message = receiver.recv()
    except EOFError:
      process = self._processes[index]
      process.join(5)
      raise WorkerError(f'Serving worker {index} exited (code '
                        f'{process.exitcode}) before it served; see '
                        f'{self._log}.') from None
    if message[0] == 'error':
      error = WorkerError(message[1])
      error.exit_code = message[2]
      raise error
    return message[1]

  def dead(self) -> List[str]:
    """Descriptions of workers that have exited (empty while all serve)."""
    return [f'worker {i} (pid {p.pid}) exited with code {p.exitcode}'
            for i, p in enumerate(self._processes) if not p.is_alive()]

  def wait_any(self, timeout_s: float) -> None:
    """Blocks until a worker exits or timeout_s passes."""
    connection.wait([p.sentinel for p in self._processes], timeout_s)

  def stop(self) -> None:
    """SIGTERM to every worker (graceful), then SIGKILL after the grace."""
    for sock in self._reserved:  # The workers' copies close as they stop.
      sock.close()
    self._reserved = []
    for process in self._processes:
      if process.is_alive():
        try:
          os.kill(process.pid, signal.SIGTERM)
        except ProcessLookupError:
          pass
    for process in self._processes:
      process.join(self._grace_s + 10)
      if process.is_alive():
        _log.warning('Worker pid %d did not stop within %.0fs; killing it.',
                     process.pid, self._grace_s + 10)
        process.kill()
        process.join(10)
    if self._metrics_dir is not None:
      shutil.rmtree(self._metrics_dir, ignore_errors=True)
      self._metrics_dir = None
