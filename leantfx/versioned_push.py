"""Versioned, atomic pushes into ``<directory>/<version>/``: one rule for all.

Both pushers of the pipeline use this module: VersionedPusher (a SavedModel,
``saved_model.pb`` is its commit file) and the ModelOptimizer's TFLite push
(``model.tflite`` and ``manifest.json``, the manifest being the commit file).

Layout: one integer folder per version below ``directory`` (TF Serving's
layout; it ignores every non-numeric name, as ``list_versions`` does).

Versions (``next_version``): the largest of the current Unix time, one more
than every existing version and one more than the last version this
directory ever handed out (recorded in a hidden ``.last_version`` file after
each push). So versions strictly increase, even with a clock behind an
existing version, and a deleted (rolled back) version's number is never
handed out again.

Writing a version:
  * on a local filesystem, every file goes into a hidden staging folder
    (``.push-<pid>-<random>-<host>``) beside the versions, is fsynced, and
    the folder is renamed into place: one rename(2), so a reader listing
    versions never sees a half-written one. If another pusher claims the same number first
    (the target exists, or the rename fails because it does), the next number
    is taken, up to ``MAX_ATTEMPTS`` times. A push killed before its rename
    (SIGKILL, a power cut) leaves its staging folder behind: no reader takes
    it (not a number), and the next push into the directory removes it once
    the process that made it is gone (``remove_stale_staging``; its pid and
    host are in its name);
  * on an object store (``gs://``, ``s3://``, any ``scheme://`` tf.io.gfile
    knows), renaming a folder is neither atomic nor supported by every
    filesystem plugin: the files are written in place, the payload's commit
    file last, so a reader that waits for it (TF Serving cannot load a
    SavedModel without saved_model.pb; a TFLite reader takes the manifest)
    never takes a half-written version. A version folder that exists when
    writing starts (another pusher created it after the listing) is never
    written into: ``VersionExistsError``. A write that fails removes the
    partial version folder and re-raises.

All file access goes through tfx.dsl.io.fileio (tf.io.gfile), except the
local staging's rename and fsync, so the same code pushes to a local folder
and to a bucket on Kubeflow.
"""
import dataclasses
import logging
import os
import re
import shutil
import socket
import tempfile
import time
import uuid
from typing import Callable, List, Optional, Sequence, Tuple

from tfx.dsl.io import fileio

LAST_VERSION_FILE = '.last_version'
STAGING_PREFIX = '.push-'
# .push-<pid>-<32 hex>[-<host>]: the pusher's pid, a random part, and its
# host (staging folders written before the host was named have none).
_STAGING_RE = re.compile(
    r'^' + re.escape(STAGING_PREFIX) + r'(\d+)-[0-9a-f]+(?:-(.+))?$')
_log = logging.getLogger(__name__)
# Two pushers racing for the same number (local): the loser takes the next.
MAX_ATTEMPTS = 5
_VERSION_RE = re.compile(r'^[0-9]+$')


class VersionExistsError(FileExistsError):
  """The version folder to write already exists (another pusher's)."""


def is_local(path: str) -> bool:
  """True for a plain local path (os.rename and fsync work on it)."""
  return '://' not in path


def files_below(path: str) -> List[str]:
  """Relative paths of every file below path, sorted.

  Computed by prefix, not os.path.relpath, which would normalize the '//'
  of a scheme:// path.
  """
  top = path.rstrip('/')
  found = []
  for root, _, files in fileio.walk(top):
    relative_root = root.rstrip('/')[len(top):].lstrip('/')
    for name in files:
      found.append(os.path.join(relative_root, name) if relative_root else name)
  return sorted(found)


def list_versions(directory: str) -> List[int]:
  """Integer version folders below directory, ascending ([] if none).

  Staging folders, the last-version record and any other non-numeric name
  are not versions.
  """
  if not fileio.isdir(directory):
    return []
  names = [n.rstrip('/') for n in fileio.listdir(directory)]  # 'name/' on GCS
  return sorted(
      int(name) for name in names
      if _VERSION_RE.match(name) and
      fileio.isdir(os.path.join(directory, name)))


def last_recorded_version(directory: str) -> int:
  """The last version a push into directory claimed (0: none recorded)."""
  path = os.path.join(directory, LAST_VERSION_FILE)
  if not fileio.exists(path):
    return 0
  try:
    with fileio.open(path, 'r') as f:
      return int(f.read().strip() or 0)
  except ValueError:
    return 0


def record_last_version(directory: str, version: int) -> None:
  """Raises the recorded last version to version (never lowers it)."""
  version = max(version, last_recorded_version(directory))
  path = os.path.join(directory, LAST_VERSION_FILE)
  if not is_local(directory):
    # A new object replacing the old one whole: writing over an existing
    # file is not a truncation on every filesystem plugin (ram:// appends).
    tmp = f'{path}.tmp-{uuid.uuid4().hex}'
    try:
      with fileio.open(tmp, 'w') as f:
        f.write(str(version))
      fileio.rename(tmp, path, overwrite=True)
    finally:
      if fileio.exists(tmp):
        fileio.remove(tmp)
    return
  fd, tmp = tempfile.mkstemp(prefix='.tmp-last-', dir=directory)
  try:
    with os.fdopen(fd, 'w', encoding='utf-8') as f:
      f.write(str(version))
      f.flush()
      os.fsync(f.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.remove(tmp)


def next_version(directory: str,
                 existing: Optional[Sequence[int]] = None,
                 now: Optional[float] = None) -> int:
  """The version the next push into directory takes (see the module doc).

  Args:
    directory: the versions' parent folder.
    existing: the versions already listed (default: listed here).
    now: the current Unix time (default: time.time()).

  Returns:
    max(now, max(existing) + 1, last recorded version + 1).
  """
  now = time.time() if now is None else now
  if existing is None:
    existing = list_versions(directory)
  return max([int(now), last_recorded_version(directory) + 1] +
             [v + 1 for v in existing])


@dataclasses.dataclass(frozen=True)
class Payload:
  """What one push writes into a version folder.

  Attributes:
    write_body: writes every file but the commit file(s) into the folder it
      is given (which exists).
    write_commit: (folder, version) -> writes the commit file(s); may be
      called again on the same folder with another version (a local push
      that lost a race for the number), and must then overwrite.
    commit_files: the names write_commit writes, for messages and checks.
  """
  write_body: Callable[[str], None]
  write_commit: Callable[[str, int], None]
  commit_files: Tuple[str, ...]


def directory_payload(source: str, commit_files: Sequence[str]) -> Payload:
  """Copies every file below source, those named in commit_files last.

  Args:
    source: the folder to push (any filesystem tf.io.gfile knows).
    commit_files: relative paths written last when present in source, e.g.
      ('saved_model.pb', 'saved_model.pbtxt') for a SavedModel.
  """
  files = files_below(source)
  last = [f for f in files if f in commit_files]
  body = [f for f in files if f not in last]

  def copy(relatives: Sequence[str], destination: str) -> None:
    for relative in relatives:
      target = os.path.join(destination, relative)
      fileio.makedirs(os.path.dirname(target))
      fileio.copy(os.path.join(source, relative), target, overwrite=False)

  def write_commit(destination: str, version: int) -> None:
    del version  # A copied folder does not name its version.
    for relative in last:
      target = os.path.join(destination, relative)
      if fileio.exists(target):  # Written by an earlier attempt.
        continue
      copy([relative], destination)

  return Payload(write_body=lambda destination: copy(body, destination),
                 write_commit=write_commit, commit_files=tuple(commit_files))


@dataclasses.dataclass(frozen=True)
class Pushed:
  """Where a push landed: the version and its folder."""
  version: int
  path: str


def push(directory: str,
         payload: Payload,
         *,
         version: Optional[int] = None,
         existing: Optional[Sequence[int]] = None,
         clock: Callable[[], float] = time.time,
         max_attempts: int = MAX_ATTEMPTS) -> Pushed:
  """Writes payload into a new version folder below directory, atomically.

  Args:
    directory: the versions' parent folder (created if missing).
    payload: what to write.
    version: the version to create; None = next_version(). A given version
      is never retried under another number.
    existing: the versions the caller already listed (e.g. to compare with
      the newest one); None = listed here. Retries list again.
    clock: the current Unix time (tests pass a fixed one).
    max_attempts: local pushes: numbers tried before giving up.

  Returns:
    The Pushed version and folder.

  Raises:
    VersionExistsError: the given version exists, or (object store) the
      version folder appeared after the listing.
    OSError: the filesystem refused a write; no version and no staging
      folder is left behind.
  """
  if not is_local(directory):
    return _push_in_place(directory, payload, version, existing, clock)
  os.makedirs(directory, exist_ok=True)
  remove_stale_staging(directory)
  if version is not None:
    _refuse_existing(os.path.join(directory, str(version)), listed=False)
  # Hidden and non-numeric: out of list_versions and of TF Serving's scan.
  # os.mkdir (not mkdtemp's 0700) so the version gets the umask's mode.
  staging = os.path.join(
      directory,
      f'{STAGING_PREFIX}{os.getpid()}-{uuid.uuid4().hex}-{_host()}')
  os.mkdir(staging)
  try:
    payload.write_body(staging)
    for _ in range(max_attempts):
      if version is None:
        claimed = next_version(directory, existing, clock())
        existing = None  # A retry lists again.
      else:
        claimed = version
      target = os.path.join(directory, str(claimed))
      payload.write_commit(staging, claimed)
      _fsync_tree(staging)
      if os.path.exists(target):
        if version is not None:
          _refuse_existing(target, listed=False)
        continue
      try:
        os.rename(staging, target)
      except OSError:
        # rename onto a non-empty folder fails: another pusher won it.
        if not os.path.exists(target):
          raise
        if version is not None:
          _refuse_existing(target, listed=False)
        continue
      record_last_version(directory, claimed)
      _fsync_dir(directory)
      return Pushed(version=claimed, path=target)
    raise OSError(f'Could not claim a new version under {directory} after '
                  f'{max_attempts} attempts; another pusher keeps racing.')
  finally:
    if os.path.exists(staging):
      shutil.rmtree(staging, ignore_errors=True)


def _push_in_place(directory: str, payload: Payload, version: Optional[int],
                   existing: Optional[Sequence[int]],
                   clock: Callable[[], float]) -> Pushed:
  """The object-store push: the body, then the commit file(s), in place."""
  fileio.makedirs(directory)
  claimed = (next_version(directory, existing, clock())
             if version is None else version)
  target = os.path.join(directory, str(claimed))
  # Another pusher's version (or an old one): never touch its files.
  _refuse_existing(target, listed=version is None)
  try:
    fileio.makedirs(target)
    payload.write_body(target)
    payload.write_commit(target, claimed)
  except Exception:
    # A partial version must not stay behind for a reader to find.
    if fileio.exists(target):
      fileio.rmtree(target)
    raise
  record_last_version(directory, claimed)
  return Pushed(version=claimed, path=target)


def _process_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True  # Another user's process.
  return True


def _host() -> str:
  """This host's name as a staging folder carries it (no '/')."""
  return socket.gethostname().replace('/', '_') or 'localhost'


def remove_stale_staging(directory: str) -> List[str]:
  """Removes the staging folders of pushes into directory that were killed.

  A staging folder is stale when it was made on this host by a process that
  no longer runs. One made on another host (a shared volume) is left to
  that host's next push; one whose pid runs again (reused) is left too.

  Args:
    directory: the versions' parent folder (local).

  Returns:
    The folders removed.
  """
  removed = []
  try:
    names = os.listdir(directory)
  except OSError:
    return removed
  for name in names:
    match = _STAGING_RE.match(name)
    if match is None:
      continue
    pid, host = int(match.group(1)), match.group(2)
    if (host is not None and host != _host()) or _process_alive(pid):
      continue
    path = os.path.join(directory, name)
    shutil.rmtree(path, ignore_errors=True)
    if not os.path.exists(path):
      _log.info('Removed %s, the staging folder of a push that was killed '
                '(process %d is gone).', path, pid)
      removed.append(path)
  return removed


def _refuse_existing(target: str, listed: bool) -> None:
  if not fileio.exists(target):
    return
  if listed:
    raise VersionExistsError(
        f'{target} appeared while pushing (another pusher?); refusing to '
        'write into it. Push again.')
  raise VersionExistsError(f'{target} already exists; refusing to overwrite '
                           'a pushed version.')


def _fsync_tree(path: str) -> None:
  """fsyncs every file and folder below path (a local staging folder)."""
  for root, _, files in os.walk(path):
    for name in files:
      with open(os.path.join(root, name), 'rb') as f:
        os.fsync(f.fileno())
    _fsync_dir(root)


def _fsync_dir(path: str) -> None:
  fd = os.open(path, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)
