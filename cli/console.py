"""The terminal, kept for leantfx's own lines while libraries log to a file.

Importing TensorFlow prints C++ start-up noise ("Unable to register cuDNN
factory", absl's pre-init warning) straight to file descriptor 2, and
libraries warn through Python's ``warnings``; neither is something a user of
a command can act on. ``divert_stderr`` points fd 2 (and so ``sys.stderr``,
child processes included) at a log file; leantfx's own messages go to
``terminal()``, a stream on the original stderr. ``--verbose`` leaves fd 2
alone.
"""
import os
import sys
import time
from typing import Optional, TextIO

_terminal: Optional[TextIO] = None
_saved_fd: Optional[int] = None  # fd 2 as it was before divert_stderr.
_log_path: Optional[str] = None
# A command without an output folder of its own logs here.
_MAX_SHARED_LOG_BYTES = 10 * 1024 * 1024


def terminal() -> TextIO:
  """The stream leantfx's own messages (errors, notes) are written to."""
  return _terminal or sys.stderr


def log_path() -> Optional[str]:
  """Where fd 2 goes now (None: to the terminal)."""
  return _log_path


def default_log_path(command: str) -> str:
  """The log of a command that has no output folder: in the user's cache.

  Raises:
    OSError: when the folder cannot be created.
  """
  folder = os.path.join(
      os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache'),
      'leantfx', 'logs')
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, f'{command}.log')
  try:
    if os.path.getsize(path) > _MAX_SHARED_LOG_BYTES:
      os.replace(path, path + '.1')
  except OSError:
    pass
  return path


def divert_stderr(path: str) -> None:
  """Sends fd 2 to path (appending); the terminal stays reachable.

  Raises:
    OSError: when path cannot be opened.
  """
  global _terminal, _saved_fd, _log_path
  fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
  sys.stderr.flush()
  if _terminal is None:
    _saved_fd = os.dup(2)
    _terminal = os.fdopen(os.dup(_saved_fd), 'w', buffering=1)
  os.dup2(fd, 2)
  os.close(fd)
  _log_path = path
  os.write(2, time.strftime('\n=== leantfx %Y-%m-%d %H:%M:%S: ').encode() +
           ' '.join(sys.argv[1:]).encode(errors='replace') + b'\n')


def restore_stderr() -> None:
  """Points fd 2 back at the terminal (main() calls it when a command ends,
  so a caller that runs main in-process, a test, keeps its own stderr)."""
  global _terminal, _saved_fd, _log_path
  if _saved_fd is None:
    return
  sys.stderr.flush()
  os.dup2(_saved_fd, 2)
  os.close(_saved_fd)
  _terminal.close()
  _terminal = _saved_fd = _log_path = None
