"""Pushes a selected .tflite file to a versioned directory, atomically.

Layout (TF Serving's: one integer directory per version):

  <base>/<model_name>/<version>/model.tflite
  <base>/<model_name>/<version>/manifest.json

The version is the largest of the current Unix time, ``max(existing) + 1``
and the last version this base ever handed out + 1 (kept in a hidden
``.last_version`` file), so versions only increase and a deleted version's
number is not handed out again. Files are written into a hidden ``.tmp-*``
directory beside the versions and the directory is renamed into place, so a
reader listing versions (or TF Serving, which only takes integer names) never
sees a half-written one.

On an object store (``gs://``, ``s3://``, any ``scheme://`` tf.io.gfile
knows, as the pipeline root and push base are on Kubeflow), a folder rename
is neither atomic nor supported by every filesystem plugin: the version
folder is written in place instead, model.tflite first and manifest.json
(with the file's sha256) last, so a reader that waits for the manifest, or
checks the sha256 it names, never takes a half-written model.
"""
import dataclasses
import datetime
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from typing import Any, Callable, Dict, List, Mapping, Sequence

from tfx.dsl.io import fileio

from leantfx.errors import ConfigError

MODEL_FILE = 'model.tflite'
MANIFEST_FILE = 'manifest.json'
_LAST_VERSION_FILE = '.last_version'
_VERSION_RE = re.compile(r'^[0-9]+$')
_NAME_RE = re.compile(r'^[A-Za-z][A-Za-z0-9_-]{0,62}$')
# Two pushers racing for the same number: the loser takes the next one.
_MAX_ATTEMPTS = 5


@dataclasses.dataclass(frozen=True)
class PushResult:
  """Where a push landed.

  Attributes:
    version: the integer version.
    directory: <base>/<model_name>/<version>.
    model_path: the pushed .tflite file.
    manifest: the manifest written beside it.
  """
  version: int
  directory: str
  model_path: str
  manifest: Dict[str, Any]


def is_local(path: str) -> bool:
  """True for a plain local path (os.rename and fsync work on it)."""
  return '://' not in path


def sha256_of(path: str) -> str:
  """Hex SHA-256 of a file's bytes (any filesystem tf.io.gfile knows)."""
  digest = hashlib.sha256()
  with fileio.open(path, 'rb') as f:
    for chunk in iter(lambda: f.read(1 << 20), b''):
      digest.update(chunk)
  return digest.hexdigest()


def list_versions(base_dir: str, model_name: str) -> List[int]:
  """The pushed versions of a model, ascending (temp directories excluded).

  Args:
    base_dir: the push base.
    model_name: the model's directory name under it.

  Returns:
    Integer versions; [] when nothing was pushed yet.
  """
  model_dir = os.path.join(base_dir, model_name)
  if not fileio.isdir(model_dir):
    return []
  names = [n.rstrip('/') for n in fileio.listdir(model_dir)]  # 'name/' on GCS
  return sorted(
      int(name) for name in names
      if _VERSION_RE.match(name) and
      fileio.isdir(os.path.join(model_dir, name)))


def _last_version(model_dir: str) -> int:
  path = os.path.join(model_dir, _LAST_VERSION_FILE)
  if not fileio.exists(path):
    return 0
  try:
    with fileio.open(path, 'r') as f:
      return int(f.read().strip() or 0)
  except ValueError:
    return 0


def _record_last_version(model_dir: str, version: int) -> None:
  """Raises the high-water mark to version (never lowers it), atomically."""
  version = max(version, _last_version(model_dir))
  fd, tmp = tempfile.mkstemp(prefix='.tmp-last-', dir=model_dir)
  with os.fdopen(fd, 'w', encoding='utf-8') as f:
    f.write(str(version))
  os.replace(tmp, os.path.join(model_dir, _LAST_VERSION_FILE))


def _next_version(model_dir: str, existing: Sequence[int], now: float) -> int:
  return max([int(now), _last_version(model_dir) + 1] +
             [v + 1 for v in existing])


def push_tflite(tflite_path: str,
                base_dir: str,
                model_name: str,
                *,
                source_model_uri: str,
                technique_chain: Sequence[str],
                tflite_mode: str,
                metrics: Mapping[str, Any],
                clock: Callable[[], float] = time.time) -> PushResult:
  """Copies a .tflite file and its manifest into a new version directory.

  Args:
    tflite_path: the selected .tflite file.
    base_dir: the push base directory (created if missing).
    model_name: the model's directory name.
    source_model_uri: the trained model the variant was made from.
    technique_chain: techniques in the order they ran ([] for none).
    tflite_mode: the TFLite conversion mode.
    metrics: the variant's measured metrics (JSON-serialisable).
    clock: returns the current Unix time (tests pass a fixed one).

  Returns:
    The PushResult.

  Raises:
    ConfigError: missing file or unusable model name.
    OSError: the filesystem refused the write; nothing is left behind.
  """
  if not fileio.exists(tflite_path) or fileio.isdir(tflite_path):
    raise ConfigError(f'Cannot push {tflite_path}: no such file.')
  if not _NAME_RE.match(model_name):
    raise ConfigError(
        f'Model name {model_name!r} is not usable as a directory: use '
        'letters, digits, "_" or "-", starting with a letter (at most 63).')
  manifest = {
      'model_name': model_name,
      'version': None,
      'source_model_uri': source_model_uri,
      'technique_chain': list(technique_chain),
      'tflite_mode': tflite_mode,
      'metrics': dict(metrics),
      'sha256': sha256_of(tflite_path),
      'size_bytes': fileio.stat(tflite_path).length,
      'created_at': datetime.datetime.fromtimestamp(
          clock(), datetime.timezone.utc).isoformat(timespec='seconds'),
  }
  if not is_local(base_dir):
    return _push_in_place(tflite_path, base_dir, model_name, manifest, clock)
  model_dir = os.path.join(base_dir, model_name)
  os.makedirs(model_dir, exist_ok=True)
  # The hidden prefix keeps it out of list_versions and out of TF Serving's
  # version scan (which also only takes integer names).
  tmp_dir = tempfile.mkdtemp(prefix='.tmp-', dir=model_dir)
  try:
    model_path = os.path.join(tmp_dir, MODEL_FILE)
    fileio.copy(tflite_path, model_path, overwrite=True)
    _fsync_file(model_path)
    if sha256_of(model_path) != manifest['sha256']:
      raise OSError(f'The copy of {tflite_path} in {tmp_dir} differs from it.')
    for _ in range(_MAX_ATTEMPTS):
      version = _next_version(model_dir, list_versions(base_dir, model_name),
                              clock())
      manifest['version'] = version
      _write_json(os.path.join(tmp_dir, MANIFEST_FILE), manifest)
      target = os.path.join(model_dir, str(version))
      if os.path.exists(target):
        continue
      try:
        os.rename(tmp_dir, target)
      except OSError:
        # rename onto a non-empty directory fails: another pusher won it.
        if os.path.exists(target):
          continue
        raise
      _record_last_version(model_dir, version)
      _fsync_dir(model_dir)
      return PushResult(version=version, directory=target,
                        model_path=os.path.join(target, MODEL_FILE),
                        manifest=manifest)
    raise OSError(f'Could not claim a new version under {model_dir} after '
                  f'{_MAX_ATTEMPTS} attempts; another pusher keeps racing.')
  finally:
    if os.path.exists(tmp_dir):
      shutil.rmtree(tmp_dir, ignore_errors=True)


def _push_in_place(tflite_path: str, base_dir: str, model_name: str,
                   manifest: Dict[str, Any],
                   clock: Callable[[], float]) -> PushResult:
  """The object-store push: model.tflite, then manifest.json, in place.

  Raises:
    OSError: the store refused a write; the partial version is removed.
  """
  model_dir = os.path.join(base_dir, model_name)
  fileio.makedirs(model_dir)
  version = _next_version(model_dir, list_versions(base_dir, model_name),
                          clock())
  target = os.path.join(model_dir, str(version))
  manifest = dict(manifest, version=version)
  if fileio.exists(target):
    # Another pusher claimed it after the listing: never touch its files.
    raise OSError(f'{target} appeared while pushing (another pusher?); '
                  'refusing to write into it. Push again.')
  try:
    fileio.makedirs(target)
    fileio.copy(tflite_path, os.path.join(target, MODEL_FILE))
    with fileio.open(os.path.join(target, MANIFEST_FILE), 'w') as f:
      f.write(json.dumps(manifest, indent=2, sort_keys=True))
  except Exception:
    if fileio.exists(target):
      fileio.rmtree(target)
    raise
  with fileio.open(os.path.join(model_dir, _LAST_VERSION_FILE), 'w') as f:
    f.write(str(max(version, _last_version(model_dir))))
  return PushResult(version=version, directory=target,
                    model_path=os.path.join(target, MODEL_FILE),
                    manifest=manifest)


def read_manifest(version_dir: str) -> Dict[str, Any]:
  """The manifest.json of a pushed version."""
  with fileio.open(os.path.join(version_dir, MANIFEST_FILE), 'r') as f:
    return json.load(f)


def _write_json(path: str, value: Mapping[str, Any]) -> None:
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(value, f, indent=2, sort_keys=True)
    f.flush()
    os.fsync(f.fileno())


def _fsync_file(path: str) -> None:
  with open(path, 'rb') as f:
    os.fsync(f.fileno())


def _fsync_dir(path: str) -> None:
  fd = os.open(path, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)
