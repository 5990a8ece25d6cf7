"""The model server: models, batching, REST and gRPC put together.

``ModelServer(models, config).start()`` loads the initial versions (so the
ports open on a ready server, as ``tensorflow_model_server`` does: each
model serves, falling back to an older version when the newest fails, or
the log says why it does not), starts
polling for new ones and opens both APIs. ``stop()`` is graceful: stop
accepting, let in-flight requests finish (up to ``shutdown_grace_s``), then
unload. ``install_signal_handlers()`` makes SIGTERM/SIGINT do that.
"""
import logging
import signal
import sys
import threading
from typing import Callable, Optional, Sequence, Union

from leantfx.serving import batch_scheduler
from leantfx.serving import grpc_api
from leantfx.serving import loading
from leantfx.serving import metrics as metrics_lib
from leantfx.serving import model_config
from leantfx.serving import model_manager
from leantfx.serving import prediction_service
from leantfx.serving import request_limits
from leantfx.serving import rest_api
from leantfx.serving import saved_model_servable
from leantfx.serving import server_config as server_config_lib

_log = logging.getLogger(__name__)

ModelSource = Union[Sequence[model_config.ModelConfig],
                    Callable[[], Sequence[model_config.ModelConfig]]]


class ModelServer:
  """A TF Serving-compatible server for SavedModel and TFLite versions."""

  def __init__(self, models: ModelSource,
               config: server_config_lib.ServerConfig = (
                   server_config_lib.ServerConfig()),
               loader: model_manager.Loader = loading.load_servable):
    """Creates the server; nothing loads or listens before start().

    Args:
      models: the models to serve, or a function returning them at each poll
        (a base directory scanned for new model directories).
      config: listening, polling, limits and batching.
      loader: version loader (tests inject failures through it).
    """
    self.config = config
    # Small requests hop between threads (the loop, the pool, a batch
    # thread); each hop waits for the interpreter lock at most this long
    # while a large request's Python holds it.
    sys.setswitchinterval(config.gil_switch_interval_s)
    saved_model_servable.set_tensorflow_threads(
        config.tensorflow_intra_op_parallelism,
        config.tensorflow_inter_op_parallelism)
    source = models if callable(models) else (lambda: list(models))
    self.manager = model_manager.ModelManager(
        source, max_num_load_retries=config.max_num_load_retries,
        enable_warmup=config.enable_warmup, loader=loader)
    self.batcher: Optional[batch_scheduler.BatchScheduler] = None
    self._shared: Optional[metrics_lib.SharedSnapshots] = None
    peers = list
    if config.metrics_dir:
      self._shared = metrics_lib.SharedSnapshots(config.metrics_dir)
      peers = self._shared.peers
    self.metrics = metrics_lib.Metrics(self.manager.serving_versions,
                                       self._counters, peers)
    # Shared by both fronts: one budget for the process's requests.
    self.limits = request_limits.RequestLimits(config.max_body_bytes,
                                               config.max_in_flight_bytes)
    self._rest: Optional[rest_api.RestServer] = None
    self._grpc: Optional[grpc_api.GrpcServer] = None
    self._stopped = threading.Event()
    self._stop_lock = threading.Lock()
    self._stopping = False

  def _counters(self):
    counters = {'leantfx_serving_model_load_failures_total':
                    self.manager.load_failures,
                'leantfx_serving_model_files_rejected_total':
                    self.manager.files_rejected}
    if self.batcher is not None:
      counters['leantfx_serving_batches_total'] = self.batcher.batches_run
      counters['leantfx_serving_batched_rows_total'] = self.batcher.rows_run
    return counters

  def start(self) -> 'ModelServer':
    """Loads the initial versions, starts polling and opens the ports.

    Returns:
      self, for chaining.

    Raises:
      OSError: a port cannot be bound.
    """
    config = self.config
    self.manager.poll_once()
    for name in self.manager.model_names():
      if not self.manager.serving_versions().get(name):
        _log.warning('Model %s is not ready: %s', name,
                     self.manager.why_not_serving(name))
    if config.file_system_poll_wait_seconds > 0:
      self.manager.start(config.file_system_poll_wait_seconds)
    if config.enable_batching or config.auto_batching:
      self.batcher = batch_scheduler.BatchScheduler(config.batching)
    service = prediction_service.PredictionService(
        self.manager, self.batcher, batch_all=config.enable_batching,
        max_rows_per_call=config.max_rows_per_call)
    if self._shared is not None:
      self._shared.start(self.metrics.snapshot)
    try:
      if config.grpc_port is not None:
        self._grpc = grpc_api.GrpcServer(
            service, self.metrics, config.host, config.grpc_port,
            config.max_body_bytes, config.request_timeout_s,
            config.grpc_max_workers, config.reuse_port, self.limits)
        self._grpc.start()
      if config.rest_port is not None:
        api = rest_api.RestApi(service, self.metrics, config.request_timeout_s,
                               self.limits)
        self._rest = rest_api.RestServer(
            api, config.host, config.rest_port, config.max_body_bytes,
            config.request_timeout_s, config.max_concurrent_requests,
            config.rest_listener, max_connections=config.max_connections)
        self._rest.start()
    except OSError:
      self.stop()
      raise
    _log.info('Serving %s; REST on %s:%s, gRPC on %s:%s', ', '.join(
        f'{n} {v}' for n, v in self.manager.serving_versions().items()),
              config.host, self.rest_port, config.host, self.grpc_port)
    return self

  @property
  def rest_port(self) -> Optional[int]:
    return self._rest.port if self._rest is not None else None

  @property
  def grpc_port(self) -> Optional[int]:
    return self._grpc.port if self._grpc is not None else None

  def stop(self, grace_s: Optional[float] = None) -> None:
    """Stops gracefully: no new requests, in-flight ones finish, then unload.

    Args:
      grace_s: seconds to wait for in-flight requests (default: the config's
        shutdown_grace_s).
    """
    with self._stop_lock:
      if self._stopping:
        return
      self._stopping = True
    grace_s = self.config.shutdown_grace_s if grace_s is None else grace_s
    if self._rest is not None:
      self._rest.stop_accepting()
    grpc_stopper = None
    if self._grpc is not None:
      grpc_stopper = threading.Thread(target=self._grpc.stop, args=(grace_s,))
      grpc_stopper.start()
    if self._rest is not None and not self._rest.wait_idle(grace_s):
      _log.warning('REST requests still in flight after %.0fs; stopping.',
                   grace_s)
    if grpc_stopper is not None:
      grpc_stopper.join(grace_s + 2)
    if self.batcher is not None:
      self.batcher.stop()
    if self._shared is not None:
      self._shared.stop()
    self.manager.stop()
    self._stopped.set()
    _log.info('Server stopped.')

  def wait(self, timeout_s: Optional[float] = None) -> bool:
    """Blocks until stop() finished; False on timeout."""
    return self._stopped.wait(timeout_s)

  def install_signal_handlers(self) -> None:
    """SIGTERM and SIGINT stop the server gracefully (main thread only)."""

    def on_signal(signum, _frame):
      _log.info('Received signal %d; shutting down gracefully.', signum)
      threading.Thread(target=self.stop, name='leantfx-shutdown',
                       daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

  def __enter__(self) -> 'ModelServer':
    return self.start()

  def __exit__(self, *exc):
    self.stop(grace_s=5.0)
