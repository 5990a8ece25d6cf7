"""``leantfx beam worker-pool``, ``leantfx beam job-server`` and ``leantfx deploy flink|spark``.

The two servers are what a portable run (``--beam-runner portable``) needs
on this machine, and what a cluster runs beside Flink or Spark:

* ``beam worker-pool``: SDK workers for ``--environment external:HOST:PORT``,
  started with this environment's interpreter (pipeline/beam_worker_pool.py);
* ``beam job-server``: the Job API for ``--job-endpoint HOST:PORT``, honouring
  ``--beam-workers`` (pipeline/beam_job_server.py).

Each binds 127.0.0.1 by default, prints one ``ready at HOST:PORT`` line once
its port accepts connections, and stops on SIGTERM or Ctrl-C (the pool stops
its workers too). ``deploy flink|spark`` writes the Kubernetes YAML of such a
cluster (kubeflow/beam_cluster.py).
"""
import argparse
import logging
import signal
import sys
import threading

from leantfx.cli import argtypes
from leantfx.cli import console
from leantfx.pipeline import beam_presets

DEFAULT_JOB_PORT = 8099


def _log_to_stderr() -> None:
  # Into the command's log (or the terminal with --verbose): each worker
  # started and stopped, and a worker's exit code when it fails.
  logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                      format='%(asctime)s %(name)s %(levelname)s %(message)s')


def _stop_on_signals() -> threading.Event:
  stop = threading.Event()

  def handler(signum, frame):
    del signum, frame
    stop.set()

  signal.signal(signal.SIGTERM, handler)
  signal.signal(signal.SIGINT, handler)
  return stop


def _ready(what: str):

  def on_ready(address: str) -> None:
    # The terminal, not the log: scripts and tests wait for this line.
    log = console.log_path()
    print(f'leantfx beam {what}: ready at {address}'
          + (f' (log: {log})' if log else ''), file=console.terminal(),
          flush=True)

  return on_ready


def cmd_worker_pool(args: argparse.Namespace) -> int:
  """Handler of ``leantfx beam worker-pool``."""
  from leantfx.pipeline import beam_worker_pool  # pylint: disable=g-import-not-at-top  # Lazy: gRPC, Beam.
  _log_to_stderr()
  options = beam_worker_pool.PoolOptions(
      host=args.host, port=args.port,
      max_workers=args.workers or beam_worker_pool.PoolOptions().max_workers,
      slot_wait_s=(beam_worker_pool.SLOT_WAIT_S if args.slot_wait is None
                   else args.slot_wait))
  beam_worker_pool.serve(options, _stop_on_signals(),
                         _ready(f'worker-pool ({options.max_workers} '
                                'workers max)'))
  return 0


def cmd_job_server(args: argparse.Namespace) -> int:
  """Handler of ``leantfx beam job-server``."""
  from leantfx.pipeline import beam_job_server  # pylint: disable=g-import-not-at-top  # Lazy: gRPC, Beam.
  _log_to_stderr()
  beam_job_server.serve(args.host, args.port, _stop_on_signals(),
                        _ready('job-server'))
  return 0


def cmd_deploy_cluster(args: argparse.Namespace) -> int:
  """Handler of ``leantfx deploy flink|spark``."""
  from leantfx.kubeflow import beam_cluster  # pylint: disable=g-import-not-at-top  # Lazy: yaml.
  config = beam_cluster.ClusterConfig(
      engine=args.deploy_target, image=args.image, namespace=args.namespace,
      workers=args.workers, sdk_workers=args.sdk_workers,
      pvc_name=args.pvc, engine_image=args.engine_image,
      job_server_image=args.job_server_image)
  written = beam_cluster.write_cluster(config, args.out)
  for path in written:
    print(f'wrote {path}')
  print(f'apply: kubectl apply -f {written[0]}')
  print('then run the pipeline from a pod of the cluster with: '
        + ' '.join(beam_cluster.run_options(config)))
  return 0


def add_deploy_targets(targets) -> None:
  """Adds ``flink`` and ``spark`` to the ``deploy`` command's targets."""
  # pylint: disable=g-import-not-at-top
  from leantfx.kubeflow import beam_cluster  # Cheap: constants only at import.
  for engine in beam_cluster.ENGINES:
    parser = targets.add_parser(
        engine, help=f'Kubernetes YAML of a {engine.title()} cluster with '
        'a Beam job server and leantfx worker-pool sidecars.',
        description=f'Writes DIR/{engine}.yaml: the {engine.title()} '
        'master and workers, a Beam job server submitting to them, and on '
        'every worker a sidecar running `leantfx beam worker-pool` in the '
        'leantfx image (kubeflow/Dockerfile), plus DIR/run-job.yaml, a '
        'Kubernetes Job running `leantfx run` against that job server. See '
        'docs/beam.md.')
    parser.add_argument('--image', required=True,
                        help='the leantfx image (docker build -f '
                        'kubeflow/Dockerfile -t IMAGE .)')
    parser.add_argument('--out', required=True, metavar='DIR')
    parser.add_argument('--namespace', default='leantfx')
    parser.add_argument('--workers', type=argtypes.positive_int, default=2,
                        help='task managers / Spark workers (default 2)')
    parser.add_argument('--sdk-workers', type=argtypes.positive_int,
                        default=2, help='SDK worker processes per worker '
                        'pool sidecar (default 2)')
    parser.add_argument('--pvc', help='a ReadWriteMany PersistentVolumeClaim '
                        'mounted at /mnt/leantfx in the sidecars and the run '
                        'Job (the pipeline root and data); default: none, '
                        'use object-store paths')
    parser.add_argument('--engine-image',
                        help=f'the {engine.title()} image (default '
                        f'{beam_cluster.ENGINE_IMAGES[engine]})')
    parser.add_argument('--job-server-image',
                        help='the Beam job server image (default '
                        f'{beam_cluster.JOB_SERVER_IMAGES[engine]})')
    parser.set_defaults(func=cmd_deploy_cluster)


def add_commands(subparsers) -> None:
  """Registers ``leantfx beam worker-pool`` and ``leantfx beam job-server``."""
  beam = subparsers.add_parser(
      'beam', help="local parts of Beam's portability framework: SDK "
      'worker pool, job server').add_subparsers(
          dest='beam_command', metavar='ACTION', required=True)
  pool = beam.add_parser(
      'worker-pool', help='serve SDK workers for --environment external:',
      description='Serves a Beam SDK worker pool (BeamFnExternalWorkerPool) '
      "for --environment external:HOST:PORT. Workers run this environment's "
      'interpreter, so they import apache_beam and leantfx. Prints "ready '
      'at HOST:PORT" once the port answers; SIGTERM stops it and its '
      'workers.')
  pool.add_argument('--host', default='127.0.0.1',
                    help='address to bind (default 127.0.0.1; 0.0.0.0 in a '
                    "cluster pod's sidecar)")
  pool.add_argument('--port', type=argtypes.port,
                    default=beam_presets.WORKER_POOL_PORT,
                    help=f'port (default {beam_presets.WORKER_POOL_PORT}; 0: '
                    'any free port)')
  pool.add_argument('--workers', type=argtypes.positive_int,
                    help='SDK worker processes that may run at once '
                    '(default: the CPU count)')
  pool.add_argument('--slot-wait', type=argtypes.non_negative_float,
                    metavar='SECONDS',
                    help='how long a request for a worker waits for a '
                    "running one to exit when all are busy (an earlier "
                    "stage's workers may still be exiting); then it is "
                    'refused (default 30)')
  pool.set_defaults(func=cmd_worker_pool)
  job = beam.add_parser(
      'job-server', help='serve the Beam Job API for --job-endpoint HOST:PORT',
      description='Serves the Beam Job API and artifact staging, running '
      "each job on Beam's FnApiRunner with --beam-workers SDK workers (the "
      'embedded job service runs one). Prints "ready at HOST:PORT"; SIGTERM '
      'stops it.')
  job.add_argument('--host', default='127.0.0.1',
                   help='address to bind (default 127.0.0.1)')
  job.add_argument('--port', type=argtypes.port, default=DEFAULT_JOB_PORT,
                   help=f'port (default {DEFAULT_JOB_PORT}; 0: any free port)')
  job.set_defaults(func=cmd_job_server)
