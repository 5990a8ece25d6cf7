"""Checks that a portable run's job service and SDK workers answer, before and while it runs.

Beam's FnApiRunner waits without a timeout for an SDK worker that never
connects, or that died mid-bundle: a pool whose workers cannot import
apache_beam hangs the run at its first component with no error shown.
``leantfx run`` therefore checks, before any component runs:

1. a job server (``--job-endpoint HOST:PORT``) answers its gRPC port
   (the channel becomes ready within ENDPOINT_TIMEOUT_S);
2. an external worker pool this machine contacts (the job service runs
   here: ``embed`` or a local job server) answers its gRPC port;
3. for every environment but LOOPBACK, a probe pipeline (one element,
   ``Create -> Map -> WriteToText`` into the pipeline root) runs through
   the same job endpoint and environment, in a subprocess killed after
   PROBE_TIMEOUT_S; its one DoFn imports leantfx in the SDK worker and
   reports the worker's interpreter and leantfx version, which must be
   this run's. This is the handshake: it proves what the pipeline needs
   (workers start, unpickle leantfx code, write to the pipeline root)
   rather than that some port is open.

While the run goes on, ``watch_worker_pool`` polls a pool this machine
contacts; when it stops answering (killed, its machine gone), the run is
interrupted with BeamEnvironmentError instead of waiting for ever on the
workers the pool took with it. When the run fails first (Beam noticed the
lost workers before the polls did: "Pipeline job-... failed"), the pool is
checked once more and, if it does not answer, the failure is reported as
the lost pool, which is what the user can act on.

Any failure raises ``BeamEnvironmentError`` (exit 3, nothing pushed), with
the address and what to start.
"""
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Iterator, List, Optional, Sequence

import leantfx
from leantfx.errors import BeamEnvironmentError
from leantfx.pipeline import beam_presets
from leantfx.pipeline import beam_worker_pool

_LOGGER = logging.getLogger(__name__)
# A local gRPC port answers in milliseconds; a cluster's job server behind a
# Service and a load balancer within seconds.
ENDPOINT_TIMEOUT_S = 10.0
# The probe is a Python start-up, Beam's import, a job and one SDK worker's
# start-up (Beam + leantfx imports): measured 9 s on this 2-core machine
# while idle and 20-30 s while the test suite ran beside it; a cluster job
# server adds its own scheduling. Workers that never come up hit this.
PROBE_TIMEOUT_S = 120.0
# The pool is polled this often while a run goes on, and given up after
# this many consecutive misses (a busy machine can delay one accept).
WATCH_INTERVAL_S = 2.0
WATCH_MISSES = 3
# After a failed run, the pool is asked WATCH_MISSES times this far apart.
FAILURE_RECHECK_S = 0.5
_PROBE_MARK = 'LEANTFX_PROBE '


KERAS2_PTH = 'leantfx-keras2.pth'


def keras2_at_start() -> bool:
  """Whether this interpreter's start-up picks Keras 2 for TensorFlow.

  leantfx sets TF_USE_LEGACY_KERAS when it is imported, which is too late
  when a worker imports TensorFlow first (TFMA's code does, in the
  Evaluator). What makes it hold in every process is the installed
  ``leantfx-keras2.pth``, which Python runs at start-up: the worker must have
  it in a site directory it reads (not ``-S``), or the variable set already
  in its environment.
  """
  import site  # pylint: disable=g-import-not-at-top
  try:  # The environment the process started with (Linux), not os.environ.
    with open('/proc/self/environ', 'rb') as f:
      if b'TF_USE_LEGACY_KERAS=1' in f.read().split(b'\0'):
        return True
  except OSError:
    pass
  if sys.flags.no_site:
    return False
  directories = list(site.getsitepackages())
  if site.ENABLE_USER_SITE:
    directories.append(site.getusersitepackages())
  return any(os.path.exists(os.path.join(d, KERAS2_PTH))
             for d in directories)


def _describe_worker(element):
  """Runs in the SDK worker: what interpreter and leantfx it has."""
  del element
  return json.dumps({'python': sys.executable, 'pid': os.getpid(),
                     'leantfx': leantfx.__version__,
                     'leantfx_path': os.path.dirname(leantfx.__file__),
                     'keras2': keras2_at_start()})


def check_reports(reports: Sequence[dict], where: str) -> None:
  """The workers' reports against this run: same leantfx, Keras 2 at start.

  Raises:
    BeamEnvironmentError: naming the workers and what to do.
  """
  for report in reports:
    if report.get('leantfx') != leantfx.__version__:
      raise BeamEnvironmentError(
          f'The SDK workers of {where} run leantfx {report.get("leantfx")} '
          f'({report.get("python")}), this run leantfx '
          f'{leantfx.__version__}: rebuild the workers\' image or restart '
          'the pool from this environment. Nothing ran.')
    if not report.get('keras2'):
      raise BeamEnvironmentError(
          f'The SDK workers of {where} ({report.get("python")}) do not start '
          f'with Keras 2: {KERAS2_PTH} is not in their site-packages (or '
          'they run with -S) and TF_USE_LEGACY_KERAS=1 is not in their '
          "environment, so the Evaluator would load the model with Keras 3 "
          "and fail. Install leantfx into the workers' environment with pip "
          '(the file comes with it) or set TF_USE_LEGACY_KERAS=1 there. '
          'Nothing ran.')


def probe_main(argv: Sequence[str]) -> int:
  """The probe subprocess: runs the probe pipeline, prints what it found.

  Args:
    argv: the output prefix, then the beam_pipeline_args.

  Returns:
    0 when the pipeline ran (the report is on stdout).
  """
  # pylint: disable=g-import-not-at-top
  import apache_beam as beam
  from apache_beam.io import filesystems
  from apache_beam.options.pipeline_options import PipelineOptions
  # pylint: enable=g-import-not-at-top
  prefix, beam_args = argv[0], list(argv[1:])
  with beam.Pipeline(options=PipelineOptions(beam_args)) as p:
    _ = (p | beam.Create(['probe']) | beam.Map(_describe_worker)
         | beam.io.WriteToText(prefix))
  reports = []
  for match in filesystems.FileSystems.match([prefix + '*'])[0].metadata_list:
    with filesystems.FileSystems.open(match.path) as f:
      reports += [json.loads(line) for line in f.read().decode().splitlines()
                  if line.strip()]
  filesystems.FileSystems.delete([m.path for m in filesystems.FileSystems.match(
      [prefix + '*'])[0].metadata_list])
  print(_PROBE_MARK + json.dumps(reports), flush=True)
  return 0


def _grpc_ready(host: str, port: int, timeout: float) -> bool:
  """Whether a gRPC channel to host:port becomes ready within timeout."""
  import grpc  # pylint: disable=g-import-not-at-top
  channel = grpc.insecure_channel(f'{host}:{port}')
  try:
    grpc.channel_ready_future(channel).result(timeout=timeout)
    return True
  except grpc.FutureTimeoutError:
    return False
  finally:
    channel.close()


def _start_pool_hint(port: int) -> str:
  return (f'start one with `leantfx beam worker-pool --port {port}` (it starts '
          "the SDK workers with leantfx's interpreter)")


def check_endpoints(target: beam_presets.PortableTarget,
                    timeout: float = ENDPOINT_TIMEOUT_S) -> None:
  """Checks 1 and 2: the job server and the worker pool answer.

  Raises:
    BeamEnvironmentError: naming the address that does not answer.
  """
  if target.job_endpoint != beam_presets.EMBED:
    host, port = beam_presets.parse_host_port(target.job_endpoint,
                                              '--job-endpoint')
    if not _grpc_ready(host, port, timeout):
      where = ('start it with `leantfx beam job-server --port '
               f'{port}`' if target.runs_here else
               "check the cluster's job server (its Deployment and Service, "
               'docs/beam.md) and that this machine reaches it')
      raise BeamEnvironmentError(
          f'No Beam job server answers at {target.job_endpoint} '
          f'(--job-endpoint; waited {timeout:.0f}s): {where}. Nothing ran.')
  if target.pool_address is not None:
    host, port = target.pool_address
    if not _grpc_ready(host, port, timeout):
      raise BeamEnvironmentError(
          f'No Beam worker pool answers at {host}:{port} (--environment '
          f'external:{host}:{port}; waited {timeout:.0f}s): '
          f'{_start_pool_hint(port)}. Nothing ran.')


_EXCEPTION_LINE = re.compile(r'^[\w.]*(Error|Exception)\w*: ')


def _last_error(stderr: str) -> str:
  """The most telling line of a failed probe's stderr.

  The last exception line that is not Beam's own summary ("Pipeline ... failed
  in state FAILED"), which names no cause.
  """
  lines = [l.strip() for l in stderr.splitlines() if l.strip()]
  causes = [l for l in lines if _EXCEPTION_LINE.match(l) and
            not l.startswith('RuntimeError: Pipeline ')]
  for needle in ('ModuleNotFoundError', 'ImportError', 'Error starting worker'):
    hits = [l for l in causes if needle in l]
    if hits:
      return hits[-1][:400]
  if causes:
    return causes[-1][:400]
  return (lines[-1] if lines else 'no output')[:400]


def probe_workers(target: beam_presets.PortableTarget,
                  beam_args: Sequence[str], scratch: str,
                  timeout: float = PROBE_TIMEOUT_S) -> List[dict]:
  """Check 3: runs the probe pipeline on the run's job service and workers.

  Args:
    target: the portable target of beam_args.
    beam_args: the run's beam_pipeline_args.
    scratch: a folder the SDK workers can write to (the pipeline root).
    timeout: seconds before the probe is killed.

  Returns:
    One report per worker that ran the probe's DoFn.

  Raises:
    BeamEnvironmentError: when the probe fails, times out, or finds workers
      without leantfx or with another leantfx version than this one.
  """
  probe_dir = os.path.join(scratch, '.beam-preflight', uuid.uuid4().hex)
  try:
    return _probe(target, beam_args, os.path.join(probe_dir, 'probe'),
                  timeout)
  finally:
    # A local pipeline root keeps nothing of the probe (on an object store
    # probe_main deleted its files, and there are no folders).
    shutil.rmtree(probe_dir, ignore_errors=True)
    with contextlib.suppress(OSError):
      os.rmdir(os.path.dirname(probe_dir))


def _probe(target: beam_presets.PortableTarget, beam_args: Sequence[str],
           prefix: str, timeout: float) -> List[dict]:
  """probe_workers' work; the probe writes below prefix."""
  command = [sys.executable, '-c',
             'import sys; from leantfx.pipeline import beam_preflight as m; '
             'sys.exit(m.probe_main(sys.argv[1:]))', prefix, *beam_args]
  where = f'--environment {target.environment}'
  if target.job_endpoint != beam_presets.EMBED:
    where += f' via the job server at {target.job_endpoint}'
  started = time.monotonic()
  with tempfile.TemporaryFile('w+') as err:
    # Its own session, so a timeout kills the probe and whatever it started.
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err,
                             text=True, start_new_session=True)
    try:
      out, _ = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
      with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
      child.wait()
      hint = ''
      if target.environment.kind == 'external':
        port = target.environment.address[1]
        hint = (' A pool started with Beam\'s own worker_pool_main starts '
                'each worker with the `python` on its PATH; when that '
                'interpreter lacks apache_beam or leantfx, the workers die '
                "at start (their error is on the pool's terminal). Stop it "
                f'and {_start_pool_hint(port)} from leantfx\'s environment.')
      raise BeamEnvironmentError(
          f'No SDK worker of {where} ran the preflight probe within '
          f'{timeout:.0f}s: the workers did not start or did not connect '
          f'back.{hint} Nothing ran.') from None
    err.seek(0)
    stderr = err.read()
  reports = None
  for line in (out or '').splitlines():
    if line.startswith(_PROBE_MARK):
      reports = json.loads(line[len(_PROBE_MARK):])
  if child.returncode or not reports:
    error = _last_error(stderr)
    cause = ''
    if "No module named 'leantfx" in stderr:
      cause = (' The SDK workers cannot import leantfx: they run an '
               'interpreter without it. Start them from leantfx\'s '
               'environment (`leantfx beam worker-pool`; on a cluster the '
               'leantfx image built from kubeflow/Dockerfile).')
    raise BeamEnvironmentError(
        f'The preflight probe failed on {where} (exit code '
        f'{child.returncode}): {error}.{cause} Nothing ran.')
  check_reports(reports, where)
  _LOGGER.info('preflight: %s answered in %.1fs: %s', where,
               time.monotonic() - started, reports)
  return reports


def check(beam_args: Sequence[str], scratch: str,
          probe_timeout: float = PROBE_TIMEOUT_S) -> Optional[List[dict]]:
  """Every preflight check a run's beam_pipeline_args call for.

  Args:
    beam_args: the run's beam_pipeline_args.
    scratch: a folder the SDK workers can write to (the pipeline root).
    probe_timeout: seconds the probe pipeline may take.

  Returns:
    The workers' reports, or None when nothing needed probing (not a
    portable run, or LOOPBACK: the workers are this process).

  Raises:
    BeamEnvironmentError: naming what does not answer and what to start.
  """
  target = beam_presets.portable_target(beam_args)
  if target is None:
    return None
  check_endpoints(target)
  if target.environment.kind == 'loopback':
    return None
  return probe_workers(target, beam_args, scratch, probe_timeout)


class WorkerPoolLost(BeamEnvironmentError):
  """Raised in the main thread when the pool stopped answering mid-run."""


@contextlib.contextmanager
def watch_worker_pool(beam_args: Sequence[str]) -> Iterator[None]:
  """Interrupts the run in this (main) thread when its worker pool is lost.

  A no-op unless the run uses an external pool this machine contacts, and
  unless called from the main thread (only there can a signal interrupt the
  wait inside Beam).

  Raises:
    WorkerPoolLost: inside the with-block, once the pool missed
      WATCH_MISSES polls in a row.
  """
  target = beam_presets.portable_target(beam_args)
  address = target.pool_address if target else None
  if address is None or threading.current_thread() is not (
      threading.main_thread()):
    yield
    return
  host, port = address
  done = threading.Event()
  lost = []

  def lost_message(misses: int, interval_s: float) -> str:
    return (f'The Beam worker pool at {host}:{port} stopped answering during '
            f'the run (missed {misses} polls, {interval_s:g}s apart); '
            'its SDK workers are gone, so this run cannot finish. Start the '
            f'pool again (`leantfx beam worker-pool --port {port}`) and '
            're-run: components that finished come from the cache.')

  def on_signal(signum, frame):
    del signum, frame
    if lost:
      raise WorkerPoolLost(lost[0])

  def poll():
    misses = 0
    while not done.wait(WATCH_INTERVAL_S):
      misses = 0 if beam_worker_pool.port_answers(host, port) else misses + 1
      if misses >= WATCH_MISSES:
        lost.append(lost_message(misses, WATCH_INTERVAL_S))
        _LOGGER.error(lost[0])
        # A real signal: it interrupts the main thread's wait inside Beam
        # (gRPC and lock waits return to Python on EINTR), where on_signal
        # raises.
        signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)
        return

  previous = signal.signal(signal.SIGUSR1, on_signal)
  watcher = threading.Thread(target=poll, name='leantfx-pool-watch',
                             daemon=True)
  watcher.start()
  try:
    yield
  except WorkerPoolLost:
    raise
  except Exception as e:  # pylint: disable=broad-except
    # The run failed before the polls counted WATCH_MISSES: if the pool is
    # gone now too, that is the cause to report.
    done.set()
    if not lost:
      misses = 0
      for _ in range(WATCH_MISSES):
        if beam_worker_pool.port_answers(host, port):
          raise
        misses += 1
        time.sleep(FAILURE_RECHECK_S)
      lost.append(lost_message(misses, FAILURE_RECHECK_S))
      _LOGGER.error(lost[0])
    raise WorkerPoolLost(lost[0]) from e
  finally:
    done.set()
    watcher.join()
    signal.signal(signal.SIGUSR1, previous)
