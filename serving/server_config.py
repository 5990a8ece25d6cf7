"""The server's settings, one frozen object built by the CLI or a test."""
import dataclasses
from typing import Any, Optional

from leantfx.errors import ConfigError
from leantfx.serving import batching_parameters
from leantfx.serving import request_limits

DEFAULT_MAX_BODY_BYTES = request_limits.DEFAULT_MAX_BODY_BYTES


@dataclasses.dataclass(frozen=True)
class ServerConfig:
  """How the model server listens, polls and protects itself.

  Attributes:
    host: address both APIs bind (127.0.0.1 unless told otherwise).
    rest_port: REST port; 0 picks a free one, None disables REST.
    grpc_port: gRPC port; 0 picks a free one, None disables gRPC.
    max_body_bytes: largest REST body (and gRPC message); 16 MiB fits a batch
      of a few hundred small images as JSON.
    request_timeout_s: the whole-request deadline: a REST request must
      arrive whole within it (a slow client is dropped, not waited for), an
      idle connection is closed after it, and a request queued for a batch
      gives up at it; None for no limit. 30 s is TF Serving's REST default.
    file_system_poll_wait_seconds: seconds between polls for new versions
      (TF Serving's flag of the same name, default 1); 0 polls once at start,
      a negative value never polls.
    max_num_load_retries: retries of a failing version at the next polls
      (TF Serving's default: 5); after them it is retried on a backoff
      (model_manager.RETRY_BACKOFF_S) until it loads or is removed.
    enable_warmup: warm a version up before it serves.
    max_concurrent_requests: REST requests handled at once (counted once a
      request has arrived whole); beyond it, 429 with Retry-After.
    max_in_flight_bytes: the working memory the requests in flight may
      reserve together (request_limits); beyond it, 503 with Retry-After
      (gRPC UNAVAILABLE).
    max_rows_per_call: a predict request with more rows runs as model calls
      of this many rows, one after another.
    max_connections: REST connections open at once; more wait in the
      listen backlog, which is as long.
    grpc_max_workers: gRPC handler threads.
    shutdown_grace_s: how long a graceful stop waits for in-flight requests.
    tensorflow_intra_op_parallelism: threads a SavedModel's op may use
      (0: TensorFlow's default); set once per process, before TensorFlow
      runs its first op.
    tensorflow_inter_op_parallelism: a SavedModel's ops run at once (0:
      TensorFlow's default).
    gil_switch_interval_s: how long a thread running Python may keep the
      interpreter lock while another waits for it (``sys.setswitchinterval``,
      process-wide, set when the server is made). Python's 5 ms made each
      hand-off of a small request (socket, pool, batch thread) wait up to
      5 ms behind a large request's parsing or formatting.
    enable_batching: merge concurrent predict requests, for every model.
    auto_batching: merge them only for the models whose kind gains from it
      (``Servable.batching_pays``: SavedModels); the others run each
      request at once. Exclusive with enable_batching.
    batching: the batching knobs (used when either is on).
    reuse_port: bind the gRPC port with SO_REUSEPORT so that several worker
      processes share it (set by serving.workers, never by hand: a lone
      server must fail on a port in use).
    rest_listener: a listening socket that REST accepts on instead of binding
      rest_port (serving.workers passes each worker the one it listens on).
    metrics_dir: with worker processes, the directory where each publishes
      its counters so that any worker's /monitoring answer covers them all.
  """
  host: str = '127.0.0.1'
  rest_port: Optional[int] = 8501
  grpc_port: Optional[int] = 8500
  max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
  request_timeout_s: Optional[float] = 30.0
  file_system_poll_wait_seconds: float = 1.0
  max_num_load_retries: int = 5
  enable_warmup: bool = True
  max_concurrent_requests: int = 128
  max_in_flight_bytes: int = request_limits.DEFAULT_MAX_IN_FLIGHT_BYTES
  max_rows_per_call: int = request_limits.DEFAULT_MAX_ROWS_PER_CALL
  max_connections: int = 1024
  grpc_max_workers: int = 16
  shutdown_grace_s: float = 30.0
  tensorflow_intra_op_parallelism: int = 1
  tensorflow_inter_op_parallelism: int = 1
  gil_switch_interval_s: float = 0.0005
  enable_batching: bool = False
  auto_batching: bool = False
  batching: batching_parameters.BatchingConfig = (
      batching_parameters.BatchingConfig())
  reuse_port: bool = False
  rest_listener: Optional[Any] = None
  metrics_dir: Optional[str] = None

  def __post_init__(self):
    for name in ('rest_port', 'grpc_port'):
      port = getattr(self, name)
      if port is not None and not 0 <= port <= 65535:
        raise ConfigError(f'{name} must be in 0..65535, got {port}.')
    if self.enable_batching and self.auto_batching:
      raise ConfigError('enable_batching batches every model and '
                        'auto_batching only some: set one of them.')
    if self.rest_port is None and self.grpc_port is None:
      raise ConfigError('At least one of the REST and gRPC ports must be on.')
    if self.rest_port and self.rest_port == self.grpc_port:
      raise ConfigError(f'REST and gRPC cannot share port {self.rest_port}.')
    if self.max_body_bytes < 1:
      raise ConfigError(
          f'max_body_bytes must be >= 1, got {self.max_body_bytes}.')
    if self.request_timeout_s is not None and self.request_timeout_s <= 0:
      raise ConfigError('request_timeout_s must be > 0 (or None for no '
                        f'limit), got {self.request_timeout_s}.')
    if not 0 < self.gil_switch_interval_s <= 1:
      raise ConfigError('gil_switch_interval_s must be in (0, 1], got '
                        f'{self.gil_switch_interval_s}.')
    if self.max_num_load_retries < 0:
      raise ConfigError('max_num_load_retries must be >= 0.')
    for name in ('max_concurrent_requests', 'grpc_max_workers',
                 'max_in_flight_bytes', 'max_rows_per_call',
                 'max_connections'):
      if getattr(self, name) < 1:
        raise ConfigError(f'{name} must be >= 1, got {getattr(self, name)}.')
