"""Pushes a selected .tflite file to a versioned directory, atomically.

Layout (TF Serving's: one integer directory per version):

  <base>/<model_name>/<version>/model.tflite
  <base>/<model_name>/<version>/manifest.json

The versioning rule and the atomic write are leantfx/versioned_push.py's,
shared with VersionedPusher's SavedModel push: the version is the largest of
the current Unix time, ``max(existing) + 1`` and the last version this base
ever handed out + 1 (kept in a hidden ``.last_version`` file), so versions
only increase and a deleted version's number is not handed out again. Locally
the files are written into a hidden staging directory beside the versions
and the directory is renamed into place, so a reader listing versions (or TF
Serving, which only takes integer names) never sees a half-written one.

On an object store (``gs://``, ``s3://``, any ``scheme://`` tf.io.gfile
knows, as the pipeline root and push base are on Kubeflow), a folder rename
is neither atomic nor supported by every filesystem plugin: the version
folder is written in place instead, model.tflite first and manifest.json
(with the file's sha256: the commit file) last, so a reader that waits for
the manifest, or checks the sha256 it names, never takes a half-written
model. A version folder that appeared after the listing is never written
into.

This module keeps what is TFLite's own: the manifest (sha256, size, source
model, technique chain, mode, metrics) and the check of the copied bytes.
"""
import dataclasses
import datetime
import hashlib
import json
import os
import re
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from tfx.dsl.io import fileio

from leantfx import feature_names
from leantfx import versioned_push
from leantfx.errors import ConfigError
from leantfx.runtimes import registry

MODEL_FILE = registry.get(registry.TFLITE).model_file
MANIFEST_FILE = 'manifest.json'
_NAME_RE = re.compile(r'^[A-Za-z][A-Za-z0-9_-]{0,62}$')
is_local = versioned_push.is_local


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
  return versioned_push.list_versions(os.path.join(base_dir, model_name))


def push_tflite(tflite_path: str,
                base_dir: str,
                model_name: str,
                *,
                source_model_uri: str,
                technique_chain: Sequence[str],
                tflite_mode: str,
                metrics: Mapping[str, Any],
                feature_names_file: Optional[str] = None,
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
    feature_names_file: the model's leantfx/feature_names.py file, pushed
      beside it (listed and hashed in the manifest), for a model that takes
      the raw columns; None for none.
    clock: returns the current Unix time (tests pass a fixed one).

  Returns:
    The PushResult.

  Raises:
    ConfigError: missing file or unusable model name.
    versioned_push.VersionExistsError: (object store) the version folder
      appeared after the listing; nothing was written into it.
    OSError: the filesystem refused the write; nothing is left behind.
  """
  if not fileio.exists(tflite_path) or fileio.isdir(tflite_path):
    raise ConfigError(f'Cannot push {tflite_path}: no such file.')
  _check_name(model_name)
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
  sources = {MODEL_FILE: tflite_path}
  if feature_names_file:
    sources[feature_names.FILE_NAME] = feature_names_file
    manifest['files'] = {name: {'sha256': sha256_of(path),
                                'size_bytes': fileio.stat(path).length}
                         for name, path in sources.items()}
  return _push_files(
      {name: (path, sha256_of(path)) for name, path in sources.items()},
      base_dir, model_name, manifest, clock)


def read_manifest(version_dir: str) -> Dict[str, Any]:
  """The manifest.json of a pushed version."""
  with fileio.open(os.path.join(version_dir, MANIFEST_FILE), 'r') as f:
    return json.load(f)


# The file(s) each server runtime's model server reads in a version folder
# (its Runtime's ``files``, which push_runtime_model reads from the
# registry): OpenVINO Model Server reads model.xml + model.bin; Triton's and
# OVMS's ONNX backends read model.onnx. TFLite, the runtime every run
# builds, is pushed by push_tflite.
RUNTIME_FILES = {name: registry.get(name).files
                 for name in registry.SERVER_RUNTIMES}


def push_runtime_model(runtime: str,
                       source_dir: str,
                       base_dir: str,
                       model_name: str,
                       *,
                       source_model_uri: str,
                       technique_chain: Sequence[str],
                       mode: str,
                       metrics: Mapping[str, Any],
                       feature_names_file: Optional[str] = None,
                       clock: Callable[[], float] = time.time) -> PushResult:
  """Pushes a server runtime's model files into a new version directory.

  The same versioning, atomic write and manifest as ``push_tflite``: the
  runtime's ``files`` are copied from `source_dir` and checked
  against their sha256, then manifest.json (naming every file's sha256 and
  size) is written last, as the commit file.

  Layout: <base_dir>/<model_name>/<version>/{model.xml,model.bin | model.onnx,
  manifest.json}, and the runtime's ``optional_files`` found in
  source_dir (an OpenVINO model that takes vocabulary ids carries the
  vocabularies that map a request's strings to them).

  Args:
    runtime: a server runtime's name (one with an Exporter, registry.py).
    source_dir: the folder holding the runtime's files.
    base_dir: the runtime's push base (e.g. <output>/openvino).
    model_name: the model's directory name.
    source_model_uri: the trained model the variant was made from.
    technique_chain: techniques in the order they ran.
    mode: 'float32' or 'int8'.
    metrics: the variant's measured metrics.
    feature_names_file: as push_tflite's.
    clock: returns the current Unix time.

  Returns:
    The PushResult (model_path: the first file, model.xml or model.onnx).

  Raises:
    ConfigError: unknown runtime, a missing file, or an unusable name.
  """
  found = registry.get(runtime) if runtime in registry.BY_NAME else None
  if found is None or found.exporter is None:
    servers = sorted(n for n, r in registry.BY_NAME.items() if r.exporter)
    raise ConfigError(f'No push layout for runtime {runtime!r}; use one of '
                      f'{servers}.')
  names = found.files
  for name in names:
    path = os.path.join(source_dir, name)
    if not fileio.exists(path) or fileio.isdir(path):
      raise ConfigError(f'Cannot push the {runtime} model in {source_dir}: '
                        f'{name} is missing.')
  names = tuple(names) + tuple(
      name for name in found.optional_files
      if fileio.exists(os.path.join(source_dir, name)))
  _check_name(model_name)
  sources = {name: os.path.join(source_dir, name) for name in names}
  if feature_names_file:
    sources[feature_names.FILE_NAME] = feature_names_file
  files = {name: {'sha256': sha256_of(path),
                  'size_bytes': fileio.stat(path).length}
           for name, path in sources.items()}
  manifest = {
      'model_name': model_name,
      'version': None,
      'runtime': runtime,
      'source_model_uri': source_model_uri,
      'technique_chain': list(technique_chain),
      'mode': mode,
      'metrics': dict(metrics),
      'files': files,
      'sha256': files[names[0]]['sha256'],
      'size_bytes': sum(f['size_bytes'] for f in files.values()),
      'created_at': datetime.datetime.fromtimestamp(
          clock(), datetime.timezone.utc).isoformat(timespec='seconds'),
  }
  return _push_files(
      {name: (path, files[name]['sha256']) for name, path in sources.items()},
      base_dir, model_name, manifest, clock)


def _check_name(model_name: str) -> None:
  if not _NAME_RE.match(model_name):
    raise ConfigError(
        f'Model name {model_name!r} is not usable as a directory: use '
        'letters, digits, "_" or "-", starting with a letter (at most 63).')


def _push_files(files: Mapping[str, Tuple[str, str]], base_dir: str,
                model_name: str, manifest: Mapping[str, Any],
                clock: Callable[[], float]) -> PushResult:
  """The one versioned push of push_tflite and push_runtime_model.

  Copies each file into a new version folder of <base_dir>/<model_name>,
  checks each copy against its sha256, then writes manifest.json (with the
  version) last, as the commit file (leantfx/versioned_push).

  Args:
    files: name in the version folder -> (source path, its sha256), in
      order; the first is PushResult.model_path.
    base_dir: the push base.
    model_name: the model's directory name (already checked).
    manifest: the manifest without its version.
    clock: returns the current Unix time.

  Returns:
    The PushResult.
  """
  pushed_manifest = {}

  def write_body(folder: str) -> None:
    for name, (source, sha256) in files.items():
      target = os.path.join(folder, name)
      fileio.copy(source, target, overwrite=True)
      if sha256_of(target) != sha256:
        raise OSError(f'The copy of {source} in {folder} differs from it.')

  def write_commit(folder: str, version: int) -> None:
    pushed_manifest.update(manifest, version=version)
    with fileio.open(os.path.join(folder, MANIFEST_FILE), 'w') as f:
      f.write(json.dumps(pushed_manifest, indent=2, sort_keys=True))

  pushed = versioned_push.push(
      os.path.join(base_dir, model_name),
      versioned_push.Payload(write_body=write_body, write_commit=write_commit,
                             commit_files=(MANIFEST_FILE,)),
      existing=list_versions(base_dir, model_name),
      clock=clock)
  return PushResult(version=pushed.version, directory=pushed.path,
                    model_path=os.path.join(pushed.path, next(iter(files))),
                    manifest=pushed_manifest)


def check_version(version_dir: str) -> Dict[str, Any]:
  """The manifest of a pushed version whose files all match it.

  A server calls it before loading a version: a version folder missing its
  manifest (a push cut short on an object store) or with a file whose size
  or sha256 differs from the manifest's (a truncated copy) is refused.

  Returns:
    The manifest.

  Raises:
    ConfigError: no manifest, or a missing, truncated or altered file.
  """
  manifest_path = os.path.join(version_dir, MANIFEST_FILE)
  if not fileio.exists(manifest_path):
    raise ConfigError(f'{version_dir} has no {MANIFEST_FILE}: the push did '
                      'not finish; this version is not served.')
  manifest = read_manifest(version_dir)
  files = manifest.get('files') or {MODEL_FILE: {
      'sha256': manifest.get('sha256'), 'size_bytes': manifest.get(
          'size_bytes')}}
  for name, facts in files.items():
    path = os.path.join(version_dir, name)
    if not fileio.exists(path):
      raise ConfigError(f'{path} is missing (named in {manifest_path}); this '
                        'version is not served.')
    size = fileio.stat(path).length
    if size != facts.get('size_bytes') or sha256_of(path) != facts.get(
        'sha256'):
      raise ConfigError(
          f'{path} is {size} bytes and does not match its manifest '
          f"({MANIFEST_FILE} says {facts.get('size_bytes')} bytes, sha256 "
          f"{facts.get('sha256')}): a truncated or altered copy; this "
          'version is not served.')
  return manifest
