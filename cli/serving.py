"""The ``serve``, ``deploy tf-serving`` and ``predict`` commands (``deploy flink|spark``: cli/beam.py).

Each command sets ``func`` to a handler that takes the parsed args and
returns the process exit code. Importing this module is cheap: the serving
modules (which import TensorFlow) load only when a command runs.
"""
import argparse
import functools
import json
import os
import logging
import signal
import sys
import threading
from typing import Optional

from leantfx.cli import argtypes
from leantfx.cli import beam as beam_commands
from leantfx.cli import console
from leantfx.errors import ConfigError, LeantfxError

BATCHING_MODES = ('auto', 'on', 'off')


def add_commands(subparsers) -> None:
  """Registers ``serve``, ``deploy`` (``tf-serving``) and ``predict``.

  Args:
    subparsers: the main parser's ``add_subparsers()`` result.
  """
  serve_parser = subparsers.add_parser(
      'serve', help='Serve pushed models over TF Serving\'s REST and gRPC '
      'APIs.', description=(
          'Serves <base>/<model>/<version>/ (SavedModel or model.tflite) with '
          "TF Serving's REST API v1 and gRPC PredictionService/ModelService. "
          'New versions are picked up by polling; SIGTERM stops gracefully.'))
  serve_parser.add_argument(
      '--model-base-path', help='The pushed base directory '
      '(<base>/<model>/<version>/); with --model-name, that model\'s '
      'directory or its parent.')
  serve_parser.add_argument('--model-name',
                            help='Serve only this model.')
  serve_parser.add_argument(
      '--model-config-file',
      help='A TF Serving models.config (ModelServerConfig text proto) '
      'listing several models; replaces --model-base-path.')
  serve_parser.add_argument('--rest-port', type=argtypes.port, default=8501,
                            help='REST port (0 = any free port).')
  serve_parser.add_argument('--grpc-port', type=argtypes.port, default=8500,
                            help='gRPC port (0 = any free port).')
  serve_parser.add_argument('--host', default='127.0.0.1',
                            help='Address to bind (default 127.0.0.1).')
  serve_parser.add_argument(
      '--batching', choices=BATCHING_MODES, default='auto',
      help='Merge concurrent predict requests into one model call. auto '
      '(default): for SavedModel versions in a one-process server, where '
      'it was measured to pay; never for the TFLite, OpenVINO and ONNX '
      'Runtime pushes or with --workers > 1, where it did not reliably '
      'pay (docs/measurements.md). on: for every model; off: never.')
  serve_parser.add_argument(
      '--enable-batching', dest='batching', action='store_const', const='on',
      help="TF Serving's flag: the same as --batching on.")
  serve_parser.add_argument(
      '--batching-parameters-file',
      help='A BatchingParameters text proto (TF Serving\'s format).')
  serve_parser.add_argument(
      '--monitoring-config-file',
      help="TF Serving's MonitoringConfig text proto; leantfx serve always "
      'serves Prometheus metrics at /monitoring/prometheus/metrics, and '
      'refuses a file that asks for anything else.')
  serve_parser.add_argument(
      '--file-system-poll-wait-seconds', type=float, default=1.0,
      help='Seconds between polls for new versions (0 = once at start).')
  serve_parser.add_argument(
      '--max-body-bytes', type=argtypes.size_bytes, default='16MiB',
      help='Largest REST body and gRPC message (default 16MiB; beyond: 413 '
      'or RESOURCE_EXHAUSTED). A request\'s tensors may decode to 4x it.')
  serve_parser.add_argument(
      '--request-timeout-s', type=float, default=30.0,
      help='Whole-request deadline (default 30): a REST request must arrive '
      'whole within it (a slower client gets 408 and is dropped), an idle '
      'connection closes after it, a queued request gives up at it.')
  serve_parser.add_argument(
      '--max-in-flight-bytes', type=argtypes.size_bytes, default='1GiB',
      help='Working memory the requests in flight may reserve together '
      '(default 1GiB; REST: 16x the body, gRPC: the message and twice its '
      'tensors). What does not fit gets 503 with Retry-After (gRPC '
      'UNAVAILABLE).')
  serve_parser.add_argument(
      '--max-concurrent-requests', type=argtypes.positive_int, default=128,
      help='REST requests handled at once, counted once a request has '
      'arrived whole (default 128); beyond: 429 with Retry-After.')
  serve_parser.add_argument(
      '--max-rows-per-call', type=argtypes.positive_int, default=8192,
      help='A predict request with more rows runs as model calls of this '
      'many rows, one after another (default 8192).')
  serve_parser.add_argument(
      '--max-connections', type=argtypes.positive_int, default=1024,
      help='REST connections open at once, and the listen backlog '
      '(default 1024).')
  serve_parser.add_argument(
      '--max-num-load-retries', type=int, default=5,
      help='Retries of a failing version at the next polls (default 5); '
      'then it is retried every 30 s, doubling up to 5 min, or at once '
      'when its files change, until it loads or is removed.')
  serve_parser.add_argument(
      '--tensorflow-intra-op-parallelism', type=argtypes.non_negative_int,
      default=1, metavar='N',
      help="Threads one TensorFlow op of a SavedModel may use (TF Serving's "
      '--tensorflow_intra_op_parallelism; 0: TensorFlow picks, one per '
      'core). Default 1, as every runtime is served: a batch-1 request ran '
      'its digits SavedModel call in about half the time on one thread as '
      'on the default pools (docs/serving.md); raise it for large batches.')
  serve_parser.add_argument(
      '--tensorflow-inter-op-parallelism', type=argtypes.non_negative_int,
      default=1, metavar='N',
      help="Ops of a SavedModel run at once (TF Serving's "
      '--tensorflow_inter_op_parallelism; 0: TensorFlow picks). Default 1.')
  serve_parser.add_argument(
      '--workers', type=argtypes.positive_int, default=1,
      help='Server processes sharing the ports; one Python process uses '
      'about one core, so give it the cores you have. Each loads the '
      'models; limits and batching apply per worker (default 1).')
  serve_parser.set_defaults(func=serve)

  deploy_parser = subparsers.add_parser(
      'deploy', help='Write deployment files for a model server.')
  targets = deploy_parser.add_subparsers(dest='deploy_target', metavar='TARGET')
  targets.required = True
  tf_serving = targets.add_parser(
      'tf-serving', help='models.config, batching parameters, docker run and '
      'Kubernetes YAML for tensorflow/serving.')
  tf_serving.add_argument('--model-base-path', required=True,
                          help='The pushed base directory.')
  tf_serving.add_argument('--out', required=True,
                          help='Directory to write the files to.')
  tf_serving.add_argument('--model-name', action='append', default=[],
                          help='Deploy only this model (repeatable).')
  tf_serving.add_argument('--no-batching', action='store_true',
                          help='Leave --enable_batching off.')
  tf_serving.add_argument('--max-batch-size', type=int, default=32)
  tf_serving.add_argument('--batch-timeout-micros', type=int, default=0)
  tf_serving.add_argument('--num-batch-threads', type=int, default=2)
  tf_serving.add_argument('--replicas', type=int, default=1)
  tf_serving.add_argument(
      '--pvc', help='Mount this PersistentVolumeClaim instead of a hostPath '
      'of --model-base-path.')
  tf_serving.set_defaults(func=deploy_tf_serving)
  ovms = targets.add_parser(
      'ovms', help="OpenVINO Model Server's config.json for the optimizer's "
      'OpenVINO pushes (<output>/openvino).')
  ovms.add_argument('--model-base-path', required=True,
                    help='The OpenVINO push base (<output>/openvino).')
  ovms.add_argument('--out', required=True,
                    help='Directory to write config.json to.')
  ovms.add_argument('--num-threads', type=argtypes.positive_int, default=1,
                    help='INFERENCE_NUM_THREADS per model (default 1).')
  ovms.set_defaults(func=deploy_ovms)
  triton = targets.add_parser(
      'triton', help="Triton's config.pbtxt in each model of the optimizer's "
      'ONNX push base (<output>/onnx, the model repository).')
  triton.add_argument('--model-repository', required=True,
                      help='The ONNX push base (<output>/onnx).')
  triton.add_argument('--model-name', action='append', default=[],
                      help='Only this model (repeatable).')
  triton.set_defaults(func=deploy_triton)
  beam_commands.add_deploy_targets(targets)

  predict_parser = subparsers.add_parser(
      'predict', help='Send a predict request to a model server.')
  predict_parser.add_argument('--host', default='127.0.0.1')
  predict_parser.add_argument('--rest-port', type=argtypes.port, default=8501)
  predict_parser.add_argument('--grpc-port', type=argtypes.port, default=8500)
  predict_parser.add_argument('--model', required=True)
  predict_parser.add_argument('--version', type=int)
  predict_parser.add_argument('--label')
  predict_parser.add_argument(
      '--json', required=True, dest='json_file', metavar='FILE',
      help='A TF Serving REST predict body: {"instances": ...} or '
      '{"inputs": ...}, optional "signature_name". "-" reads stdin.')
  predict_parser.add_argument('--grpc', action='store_true',
                              help='Use gRPC instead of REST.')
  predict_parser.add_argument('--timeout-s', type=float, default=30.0)
  predict_parser.set_defaults(func=predict)


def _fail(error: Exception) -> int:
  print(f'leantfx: {error}', file=console.terminal())
  return getattr(error, 'exit_code', 2)


def _configure_logging() -> None:
  """The server's own log lines (loads, version changes) on the terminal."""
  if not logging.getLogger().handlers:
    logging.basicConfig(level=logging.INFO, stream=console.terminal(),
                        format='%(asctime)s %(levelname)s %(name)s: '
                        '%(message)s')


def batching_mode(args: argparse.Namespace) -> str:
  """'on', 'auto' or 'off': what ``serve``'s batching options come to.

  A parameters file turns auto into on (TF Serving batches every model
  when given one). auto with several workers is off: there batching did
  not reliably pay in the measured runs (a SavedModel lost 13-23% on
  digits and gained 1-19% on penguins; the runtimes mostly lost).
  """
  if args.batching == 'auto' and args.batching_parameters_file:
    return 'on'
  if args.batching == 'auto' and args.workers > 1:
    return 'off'
  return args.batching


def build_server(args: argparse.Namespace, **overrides):
  """Returns the ModelServer that ``serve`` args describe (not started).

  Args:
    args: the ``serve`` arguments.
    **overrides: ServerConfig fields set by the worker pool (shared ports).

  Raises:
    LeantfxError: the options are inconsistent or a file is invalid.
  """
  from leantfx.serving import batching_parameters  # pylint: disable=g-import-not-at-top
  from leantfx.serving import model_config  # pylint: disable=g-import-not-at-top
  from leantfx.serving import server as server_lib  # pylint: disable=g-import-not-at-top
  from leantfx.serving import server_config  # pylint: disable=g-import-not-at-top
  batching = batching_parameters.BatchingConfig()
  if args.batching_parameters_file:
    if args.batching == 'off':
      raise ConfigError(
          '--batching off with --batching-parameters-file: the parameters '
          'would be ignored. Drop one of them.')
    batching = batching_parameters.read_batching_parameters_file(
        args.batching_parameters_file)
  if args.monitoring_config_file:
    from leantfx.serving import monitoring_config  # pylint: disable=g-import-not-at-top
    monitoring_config.read_monitoring_config_file(args.monitoring_config_file)
  mode = batching_mode(args)
  if args.model_config_file:
    if args.model_base_path or args.model_name:
      raise ConfigError('Pass --model-config-file or --model-base-path '
                        '(with --model-name), not both.')
    models = model_config.read_model_config_file(args.model_config_file)
    source = models
  elif args.model_base_path:
    base, name = args.model_base_path, args.model_name
    model_config.models_from_base_path(base, name)  # Fails early if empty.
    if name:
      source = model_config.models_from_base_path(base, name)
    else:
      # Re-scanned at every poll: new model directories start serving.
      source = lambda: model_config.models_from_base_path(base)
  else:
    raise ConfigError('serve needs --model-base-path or --model-config-file.')
  settings = dict(
      host=args.host, rest_port=args.rest_port, grpc_port=args.grpc_port,
      max_body_bytes=args.max_body_bytes,
      request_timeout_s=args.request_timeout_s,
      max_in_flight_bytes=args.max_in_flight_bytes,
      max_concurrent_requests=args.max_concurrent_requests,
      max_rows_per_call=args.max_rows_per_call,
      max_connections=args.max_connections,
      file_system_poll_wait_seconds=args.file_system_poll_wait_seconds,
      max_num_load_retries=args.max_num_load_retries,
      tensorflow_intra_op_parallelism=args.tensorflow_intra_op_parallelism,
      tensorflow_inter_op_parallelism=args.tensorflow_inter_op_parallelism,
      enable_batching=mode == 'on', auto_batching=mode == 'auto',
      batching=batching)
  settings.update(overrides)
  config = server_config.ServerConfig(**settings)
  return server_lib.ModelServer(source, config)


def _banner(host: str, rest_port, grpc_port, versions, workers: int) -> str:
  return (f'leantfx serve: REST http://{host}:{rest_port} gRPC '
          f'{host}:{grpc_port} models {json.dumps(versions)}' +
          (f' workers {workers}' if workers > 1 else ''))


def _worker_server(args: argparse.Namespace, **overrides):
  """One worker's server, its stderr and log lines set up as ``serve``'s."""
  if not getattr(args, 'verbose', False):
    try:
      console.divert_stderr(console.default_log_path('serve'))
    except OSError:
      pass
  _configure_logging()
  return build_server(args, **overrides)


def _serve_workers(args: argparse.Namespace) -> int:
  """``serve --workers N``: N server processes on the same ports."""
  from leantfx.serving import workers as workers_lib  # pylint: disable=g-import-not-at-top
  # The workers inherit fd 2: give them the terminal, and each diverts the
  # libraries' noise to the log itself (this process loads no library).
  console.restore_stderr()
  where = 'its log lines above'
  if not getattr(args, 'verbose', False):
    try:
      where = console.default_log_path('serve')
    except OSError:
      pass
  pool = workers_lib.WorkerPool(functools.partial(_worker_server, args),
                                args.workers, args.host, args.rest_port,
                                args.grpc_port, log=where)
  stop = threading.Event()
  previous = {sig: signal.signal(sig, lambda *_: stop.set())
              for sig in (signal.SIGTERM, signal.SIGINT)}
  try:
    try:
      pool.start()
    except (LeantfxError, OSError) as e:
      return _fail(e)
    print(_banner(args.host, pool.rest_port, pool.grpc_port,
                  pool.serving_versions, args.workers), flush=True)
    while not stop.is_set():
      pool.wait_any(0.5)
      dead = pool.dead()
      if dead and not stop.is_set():
        pool.stop()
        return _fail(workers_lib.WorkerError(
            f'{"; ".join(dead)}; stopped the other workers. See {where}; '
            'restart the server.'))
    pool.stop()
    return 0
  finally:
    for sig, handler in previous.items():
      signal.signal(sig, handler)


def serve(args: argparse.Namespace) -> int:
  """Runs the model server until SIGTERM/SIGINT. Returns the exit code."""
  _configure_logging()
  if args.workers > 1:
    return _serve_workers(args)
  try:
    server = build_server(args)
    server.start()
  except (LeantfxError, OSError) as e:
    return _fail(e)
  server.install_signal_handlers()
  print(_banner(args.host, server.rest_port, server.grpc_port,
                server.manager.serving_versions(), 1), flush=True)
  while not server.wait(1.0):
    pass
  return 0


def deploy_tf_serving(args: argparse.Namespace) -> int:
  """Writes TF Serving deployment files. Returns the exit code."""
  from leantfx.serving import batching_parameters  # pylint: disable=g-import-not-at-top
  from leantfx.serving import deploy  # pylint: disable=g-import-not-at-top
  try:
    config = deploy.TfServingDeployConfig(
        model_base_path=args.model_base_path, out_dir=args.out,
        model_names=tuple(args.model_name),
        enable_batching=not args.no_batching,
        batching=batching_parameters.BatchingConfig(
            max_batch_size=args.max_batch_size,
            batch_timeout_micros=args.batch_timeout_micros,
            num_batch_threads=args.num_batch_threads),
        replicas=args.replicas, pvc_name=args.pvc)
    written = deploy.write_tf_serving_deploy(config)
  except LeantfxError as e:
    return _fail(e)
  for name, path in written.items():
    print(f'wrote {path}')
  print(f'run: sh {written[deploy.DOCKER_RUN]}   or   kubectl apply -f '
        f'{written[deploy.KUBERNETES_YAML]}')
  return 0


def deploy_ovms(args: argparse.Namespace) -> int:
  """Writes OVMS's config.json. Returns the exit code."""
  from leantfx.runtimes import string_lookups  # pylint: disable=g-import-not-at-top
  from leantfx.serving import runtime_deploy  # pylint: disable=g-import-not-at-top
  try:
    path, config = runtime_deploy.write_ovms_config(
        args.model_base_path, args.out, args.num_threads)
    id_inputs = runtime_deploy.ovms_id_inputs(args.model_base_path)
  except LeantfxError as e:
    return _fail(e)
  print(f'wrote {path}')
  for name in runtime_deploy.reloaded_in(config):
    print(f'note: {name} has "batch_size": "auto": its push measured that '
          'OpenVINO answers batch 1 wrongly on its dynamic batch (an '
          'OpenVINO CPU int8 bug), so OVMS reshapes it to each request\'s '
          'batch size; a request whose batch size differs from the last one '
          'reloads the model')
  for name, columns in id_inputs.items():
    print(f'note: OVMS serves {name} with {columns} as int64 vocabulary ids '
          f'(OpenVINO runs no lookup table; the vocabularies are in each '
          f'version\'s {string_lookups.STRING_LOOKUPS_FILE}, which `leantfx '
          'serve` applies itself): send ids to OVMS, or the raw strings to '
          '`leantfx serve`')
  print(f'run: docker run -p 9000:9000 -p 8000:8000 -v '
        f'{os.path.abspath(args.model_base_path)}:/models:ro -v '
        f'{os.path.abspath(args.out)}:/config:ro openvino/model_server '
        '--config_path /config/config.json --port 9000 --rest_port 8000')
  return 0


def deploy_triton(args: argparse.Namespace) -> int:
  """Writes Triton's config.pbtxt files. Returns the exit code."""
  from leantfx.serving import runtime_deploy  # pylint: disable=g-import-not-at-top
  try:
    written = runtime_deploy.write_triton_configs(args.model_repository,
                                                  tuple(args.model_name))
  except LeantfxError as e:
    return _fail(e)
  for path in written:
    print(f'wrote {path}')
  print(f'run: docker run -p 8000:8000 -p 8001:8001 -v '
        f'{os.path.abspath(args.model_repository)}:/models '
        'nvcr.io/nvidia/tritonserver tritonserver --model-repository=/models')
  return 0


def _read_json_file(path: str) -> bytes:
  if path == '-':
    return sys.stdin.buffer.read()
  with open(path, 'rb') as f:
    return f.read()


def predict(args: argparse.Namespace) -> int:
  """Sends one predict request (REST or gRPC) and prints the JSON answer."""
  from leantfx import serving_client as client  # pylint: disable=g-import-not-at-top
  try:
    body = _read_json_file(args.json_file)
  except OSError as e:
    return _fail(e)
  if not args.grpc:
    rest = client.RestClient(args.host, args.rest_port, args.timeout_s)
    try:
      result = rest.predict_raw(args.model, body, args.version, args.label)
    except client.RestError as e:
      return _fail(e)
    except OSError as e:
      return _fail(OSError(f'Cannot reach {rest.base_url}: {e}'))
    print(json.dumps(result, indent=2))
    return 0
  return _predict_grpc(args, body)


def _predict_grpc(args: argparse.Namespace, body: bytes) -> Optional[int]:
  import grpc  # pylint: disable=g-import-not-at-top
  from leantfx import serving_client as client  # pylint: disable=g-import-not-at-top
  from leantfx.serving import json_tensor  # pylint: disable=g-import-not-at-top
  from leantfx.serving import signature as signature_lib  # pylint: disable=g-import-not-at-top
  from leantfx.serving import status  # pylint: disable=g-import-not-at-top
  with client.GrpcClient(args.host, args.grpc_port, args.timeout_s) as stub:
    try:
      doc = json_tensor.parse_json_object(body)
      signature_name = json_tensor.signature_name_of(doc)
      _, signature_defs = stub.metadata(args.model, args.version, args.label)

      def input_dtypes(name):
        key = name or signature_lib.DEFAULT_SIGNATURE
        if key not in signature_defs:
          raise status.invalid_argument(
              f'Serving signature name: "{key}" not found in signature def')
        return signature_lib.signature_from_def(
            key, signature_defs[key]).input_dtypes

      inputs, request_format = json_tensor.predict_inputs_from_json(
          doc, signature_name, input_dtypes)
      result = stub.predict(args.model, inputs, signature_name, args.version,
                            args.label)
    except status.ServingError as e:
      return _fail(ValueError(e.message))
    except grpc.RpcError as e:
      return _fail(ValueError(f'{e.code().name}: {e.details()}'))
  print(f'# model {result.model_name} version {result.version} signature '
        f'{result.signature_name}', file=console.terminal())
  print(json_tensor.predict_outputs_to_json(result.outputs,
                                            request_format).decode('utf-8'))
  return 0
