"""Runs create_pipeline() on this machine with LocalDagRunner or BeamDagRunner.

The runner is thin: it takes a resolved PipelineConfig, sends the pipeline's
verbose logs (Python, absl, TensorFlow's C++ and Beam worker processes) to a
log file, prints one progress line per component as it starts and finishes,
and returns the run's summary read back from ML Metadata.
"""
import contextlib
import logging
import os
import re
import sys
import time
from typing import Callable, Dict, Iterator, Optional, TextIO

from leantfx import config as config_lib
from leantfx import stopping
from leantfx.errors import BeamEnvironmentError, ConfigError, PipelineRunError
from leantfx.pipeline import beam_preflight

RUNNERS = ('local', 'beam')
# LocalDagRunner logs 'Component X is running.'; BeamDagRunner 'node X is ...'.
_PROGRESS_RE = re.compile(
    r'^(?:Component|node) (?P<node>\S+) is (?P<what>running|finished)\.$')


class ProgressHandler(logging.Handler):
  """Turns the runners' per-component log lines into progress callbacks."""

  def __init__(self, on_event: Callable[[str, str, float], None]):
    super().__init__(level=logging.INFO)
    self._on_event = on_event
    self._started: Dict[str, float] = {}
    self.last_started: Optional[str] = None
    self.running: Optional[str] = None  # last_started, until it finishes

  def emit(self, record: logging.LogRecord) -> None:
    try:
      match = _PROGRESS_RE.match(record.getMessage())
    except Exception:  # pylint: disable=broad-except
      return  # A malformed log record of someone else's is not our failure.
    if not match:
      return
    node, what = match.group('node'), match.group('what')
    now = time.monotonic()
    if what == 'running':
      self._started[node] = now
      self.last_started = self.running = node
      self._on_event(node, 'started', 0.0)
    else:
      if node == self.running:
        self.running = None
      self._on_event(node, 'finished', now - self._started.get(node, now))


@contextlib.contextmanager
def _console_to_log(log_path: str) -> Iterator[TextIO]:
  """Redirects fds 1 and 2 (children included) to log_path.

  Yields:
    A text stream on the original stdout, for progress lines.
  """
  sys.stdout.flush()
  sys.stderr.flush()
  saved_out, saved_err = os.dup(1), os.dup(2)
  console = os.fdopen(os.dup(saved_out), 'w', buffering=1)
  log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
  try:
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    yield console
  finally:
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(saved_out, 1)
    os.dup2(saved_err, 2)
    for fd in (saved_out, saved_err, log_fd):
      os.close(fd)
    console.close()


def _configure_logging(log_path: str, progress: ProgressHandler) -> None:
  """Sends all Python logging to the log file, progress to the handler."""
  from absl import logging as absl_logging  # pylint: disable=g-import-not-at-top
  root = logging.getLogger()
  for handler in list(root.handlers):
    if not isinstance(handler, (logging.FileHandler, ProgressHandler)):
      root.removeHandler(handler)
  file_handler = logging.FileHandler(log_path)
  file_handler.setFormatter(
      logging.Formatter('%(asctime)s %(levelname)s %(name)s: %(message)s'))
  root.addHandler(file_handler)
  root.addHandler(progress)
  root.setLevel(logging.INFO)
  absl_logging.set_verbosity(absl_logging.INFO)
  logging.getLogger('absl').setLevel(logging.INFO)
  logging.captureWarnings(True)


def _cause_of_kind(error: BaseException, kind: type) -> Optional[BaseException]:
  """error, or the first exception of kind it was raised from, or None."""
  seen = set()
  while error is not None and id(error) not in seen:
    if isinstance(error, kind):
      return error
    seen.add(id(error))
    error = error.__cause__ or error.__context__
  return None


def _reason(error: BaseException) -> str:
  """One line on why error happened, for the terminal."""
  code, details = getattr(error, 'code', None), getattr(error, 'details', None)
  if callable(code) and callable(details):
    # A gRPC error (e.g. from a job server): its str() is a multi-line dump
    # that ends in '>'.
    return f'{code()}: {details()}'[:500]
  lines = [l.strip() for l in str(error).splitlines() if len(l.strip()) > 1]
  return (lines or [''])[-1][:500]


def _format_progress(node: str, what: str, seconds: float,
                     since_start: float) -> str:
  if what == 'started':
    return f'[{since_start:7.1f}s] {node:<32} running'
  return f'[{since_start:7.1f}s] {node:<32} done in {seconds:.1f}s'


def _where(progress: 'ProgressHandler') -> str:
  """Where a stop found the run: 'during Trainer', 'after Pusher'."""
  if progress.running:
    return f'during {progress.running}'
  if progress.last_started:
    return f'after {progress.last_started}'
  return 'before any component ran'


def run_pipeline(config: config_lib.PipelineConfig,
                 runner: str,
                 log_path: str,
                 quiet_console: bool = True) -> None:
  """Runs the pipeline once, printing a line as each component starts/ends.

  Args:
    config: the resolved pipeline configuration.
    runner: 'local' (LocalDagRunner) or 'beam' (BeamDagRunner).
    log_path: where the full logs go.
    quiet_console: send everything but the progress lines to log_path.

  Raises:
    ConfigError: for an unknown runner.
    PipelineRunError: when a component fails; names the component and the
      log file.
    stopping.StopRequested: a stop signal came (see stopping.stop_on_signals);
      its ``during`` says where: 'during Trainer', 'after Pusher'.
  """
  if runner not in RUNNERS:
    raise ConfigError(
        f'Unknown runner {runner!r}; use one of {RUNNERS}.')
  start = time.monotonic()
  redirect = (_console_to_log(log_path)
              if quiet_console else contextlib.nullcontext(sys.stdout))
  with redirect as console:

    def on_event(node: str, what: str, seconds: float) -> None:
      console.write(
          _format_progress(node, what, seconds, time.monotonic() - start) +
          '\n')
      console.flush()

    progress = ProgressHandler(on_event)
    _configure_logging(log_path, progress)
    try:
      from tfx import v1 as tfx  # pylint: disable=g-import-not-at-top
      from leantfx.pipeline import beam_staging  # pylint: disable=g-import-not-at-top
      from leantfx.pipeline import pipeline as pipeline_lib  # pylint: disable=g-import-not-at-top
      beam_staging.install()
      tfx_pipeline = pipeline_lib.create_pipeline(config)
      if runner == 'local':
        dag_runner = tfx.orchestration.LocalDagRunner()
      else:
        from tfx.orchestration.beam import beam_dag_runner  # pylint: disable=g-import-not-at-top
        dag_runner = beam_dag_runner.BeamDagRunner()
      with beam_preflight.watch_worker_pool(config.beam_pipeline_args), \
          stopping.describing_activity(lambda: _where(progress)):
        dag_runner.run(tfx_pipeline)
    except stopping.StopRequested as e:
      e.during = e.during or _where(progress)
      logging.warning('The run was %s %s.', e, e.during)
      raise
    except Exception as e:  # pylint: disable=broad-except
      logging.exception('The pipeline failed.')
      where = (f'in component {progress.last_started}'
               if progress.last_started else 'before any component ran')
      lost = _cause_of_kind(e, BeamEnvironmentError)
      # Beam wraps what happens while it applies or runs a transform ("Failed
      # to apply ..."); the lost worker pool is what the user can act on.
      cause = e if lost is None else lost
      reason = str(lost) if lost is not None else _reason(e)
      raise PipelineRunError(
          f'The pipeline failed {where}: {type(cause).__name__}: {reason} '
          'Nothing was pushed by this run. The full log, with the '
          f'traceback, is {log_path}.') from e
    finally:
      logging.getLogger().removeHandler(progress)
