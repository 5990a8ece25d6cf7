"""versioned_push: the one versioning rule and atomic write both pushers use.

Every push test runs twice: on a local folder (staging + rename) and on TF's
in-memory ram:// filesystem, an object-store stand-in (it goes through the
same tf.io.gfile layer as gs:// and s3://, and is not a POSIX folder tree),
and with both commit files: a SavedModel's saved_model.pb (a copied folder)
and a TFLite push's manifest.json (written with the claimed version).
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from tfx.dsl.io import fileio

from leantfx import versioned_push

pytestmark = pytest.mark.unit

NOW = 1_700_000_000


def _base(tmp_path, where):
  if where == 'local':
    return str(tmp_path / 'base')
  return f'ram://{tmp_path.name}/base'


def _read(path):
  with fileio.open(path, 'rb') as f:
    return f.read()


def _saved_model_source(tmp_path):
  source = tmp_path / 'saved_model'
  (source / 'variables').mkdir(parents=True, exist_ok=True)
  (source / 'saved_model.pb').write_bytes(b'graph')
  (source / 'variables' / 'variables.index').write_bytes(b'index')
  return str(source)


def _saved_model_payload(tmp_path):
  return versioned_push.directory_payload(
      _saved_model_source(tmp_path), ('saved_model.pb', 'saved_model.pbtxt'))


def _manifest_payload(tmp_path):
  """A TFLite-like payload: model.tflite, then manifest.json naming the version."""
  source = tmp_path / 'm.tflite'
  source.write_bytes(b'TFL3 model')

  def write_body(folder):
    fileio.copy(str(source), os.path.join(folder, 'model.tflite'),
                overwrite=True)

  def write_commit(folder, version):
    with fileio.open(os.path.join(folder, 'manifest.json'), 'w') as f:
      f.write(json.dumps({'version': version}))

  return versioned_push.Payload(write_body, write_commit, ('manifest.json',))


PAYLOADS = {
    'saved_model.pb': (_saved_model_payload, ['saved_model.pb',
                                              'variables/variables.index']),
    'manifest.json': (_manifest_payload, ['manifest.json', 'model.tflite']),
}


def _spy_writes(monkeypatch):
  """Records the base names of every file copied or opened for writing."""
  written = []
  real_copy, real_open = fileio.copy, fileio.open

  def copy(src, dst, overwrite=False):
    written.append(os.path.basename(dst))
    return real_copy(src, dst, overwrite)

  def open_(path, mode='r'):
    if 'w' in mode:
      written.append(os.path.basename(path))
    return real_open(path, mode)

  monkeypatch.setattr(versioned_push.fileio, 'copy', copy)
  monkeypatch.setattr(versioned_push.fileio, 'open', open_)
  return written


def test_is_local():
  assert versioned_push.is_local('/srv/models')
  assert versioned_push.is_local('relative/models')
  assert not versioned_push.is_local('gs://bucket/models')
  assert not versioned_push.is_local('ram://x/models')


def test_next_version_is_the_largest_of_clock_versions_and_record(tmp_path):
  base = str(tmp_path / 'base')
  assert versioned_push.next_version(base, now=NOW) == NOW
  os.makedirs(os.path.join(base, str(NOW + 5)))
  assert versioned_push.next_version(base, now=NOW) == NOW + 6
  # A caller's listing is used as given.
  assert versioned_push.next_version(base, existing=[], now=NOW) == NOW
  versioned_push.record_last_version(base, NOW + 9)
  assert versioned_push.next_version(base, now=NOW) == NOW + 10
  # The record is never lowered, and the clock leads once it is later.
  versioned_push.record_last_version(base, 3)
  assert versioned_push.last_recorded_version(base) == NOW + 9
  assert versioned_push.next_version(base, now=NOW + 3600) == NOW + 3600


def test_non_numeric_names_are_not_versions(tmp_path):
  base = tmp_path / 'base'
  for name in ('.push-1-abc', '.tmp-x', 'latest', '12a'):
    (base / name).mkdir(parents=True)
  (base / '17').write_text('a file, not a version folder')
  (base / '42').mkdir()
  assert versioned_push.list_versions(str(base)) == [42]
  assert versioned_push.list_versions(str(tmp_path / 'missing')) == []


@pytest.mark.parametrize('where', ['local', 'ram'])
@pytest.mark.parametrize('commit_file', sorted(PAYLOADS))
def test_push_writes_a_whole_version_commit_file_last(tmp_path, monkeypatch,
                                                      where, commit_file):
  base = _base(tmp_path, where)
  make_payload, files = PAYLOADS[commit_file]
  payload = make_payload(tmp_path)
  written = _spy_writes(monkeypatch)
  pushed = versioned_push.push(base, payload, clock=lambda: NOW)
  assert pushed.version == NOW
  assert pushed.path == f'{base}/{NOW}'
  assert versioned_push.files_below(pushed.path) == files
  # The commit file is the last file written into the version.
  version_files = [
      w for w in written if not w.startswith(versioned_push.LAST_VERSION_FILE)
  ]
  assert version_files[-1] == commit_file
  assert sorted(set(version_files)) == sorted(os.path.basename(f)
                                              for f in files)
  if commit_file == 'manifest.json':
    assert json.loads(_read(f'{pushed.path}/manifest.json')) == {
        'version': NOW}
  # Only the version and the record: no staging folder is left.
  assert sorted(n.rstrip('/') for n in fileio.listdir(base)) == [
      versioned_push.LAST_VERSION_FILE, str(NOW)]
  assert versioned_push.last_recorded_version(base) == NOW
  # Same clock again, then the newest version deleted: still increasing.
  second = versioned_push.push(base, make_payload(tmp_path),
                               clock=lambda: NOW)
  assert second.version == NOW + 1
  fileio.rmtree(second.path)
  third = versioned_push.push(base, make_payload(tmp_path), clock=lambda: NOW)
  assert third.version == NOW + 2
  assert versioned_push.list_versions(base) == [NOW, NOW + 2]


def test_local_version_appears_in_one_rename_with_every_file(tmp_path,
                                                             monkeypatch):
  base = str(tmp_path / 'base')
  seen = []
  real_rename = os.rename

  def spying_rename(src, dst):
    seen.append((os.path.basename(src).startswith(
        versioned_push.STAGING_PREFIX), os.path.exists(dst),
                 versioned_push.files_below(src),
                 versioned_push.list_versions(base)))
    real_rename(src, dst)

  monkeypatch.setattr(versioned_push.os, 'rename', spying_rename)
  pushed = versioned_push.push(base, _manifest_payload(tmp_path),
                               clock=lambda: NOW)
  assert seen == [(True, False, ['manifest.json', 'model.tflite'], [])]
  # The version folder gets the umask's mode, not a private temp dir's 0700.
  assert os.stat(pushed.path).st_mode & 0o055 == 0o055 & ~_umask()


def _umask():
  mask = os.umask(0)
  os.umask(mask)
  return mask


def test_local_race_takes_the_next_number_and_rewrites_the_commit(
    tmp_path, monkeypatch):
  base = str(tmp_path / 'base')
  real_rename = os.rename

  def racing_rename(src, dst):
    if not os.path.exists(os.path.join(base, str(NOW))):
      # Another pusher claims this number between listing and renaming.
      os.makedirs(os.path.join(dst, 'theirs'))
    real_rename(src, dst)

  monkeypatch.setattr(versioned_push.os, 'rename', racing_rename)
  pushed = versioned_push.push(base, _manifest_payload(tmp_path),
                               clock=lambda: NOW)
  assert pushed.version == NOW + 1
  assert json.loads(_read(f'{pushed.path}/manifest.json')) == {
      'version': NOW + 1}
  assert os.listdir(os.path.join(base, str(NOW))) == ['theirs']


@pytest.mark.parametrize('where', ['local', 'ram'])
def test_a_given_version_that_exists_is_refused(tmp_path, where):
  base = _base(tmp_path, where)
  versioned_push.push(base, _saved_model_payload(tmp_path), version=7)
  with pytest.raises(versioned_push.VersionExistsError, match='already exists'):
    versioned_push.push(base, _manifest_payload(tmp_path), version=7)
  assert versioned_push.files_below(f'{base}/7') == [
      'saved_model.pb', 'variables/variables.index']
  assert issubclass(versioned_push.VersionExistsError, FileExistsError)


@pytest.mark.parametrize('commit_file', sorted(PAYLOADS))
def test_object_store_never_writes_into_a_version_that_appeared(
    tmp_path, commit_file):
  base = _base(tmp_path, 'ram')
  theirs = f'{base}/{NOW}/theirs'
  fileio.makedirs(os.path.dirname(theirs))
  with fileio.open(theirs, 'wb') as f:
    f.write(b'the other pusher')
  # The listing was taken before the other pusher's version appeared.
  with pytest.raises(versioned_push.VersionExistsError,
                     match='appeared while pushing'):
    versioned_push.push(base, PAYLOADS[commit_file][0](tmp_path), existing=[],
                        clock=lambda: NOW)
  assert versioned_push.files_below(f'{base}/{NOW}') == ['theirs']
  assert _read(theirs) == b'the other pusher'


@pytest.mark.parametrize('where', ['local', 'ram'])
@pytest.mark.parametrize('commit_file', sorted(PAYLOADS))
def test_a_failed_commit_leaves_no_version(tmp_path, monkeypatch, where,
                                           commit_file):
  base = _base(tmp_path, where)
  real_copy, real_open = fileio.copy, fileio.open

  def failing_copy(src, dst, overwrite=False):
    if dst.endswith(commit_file):
      raise OSError('bucket quota exceeded')
    return real_copy(src, dst, overwrite)

  def failing_open(path, mode='r'):
    if 'w' in mode and path.endswith(commit_file):
      raise OSError('bucket quota exceeded')
    return real_open(path, mode)

  monkeypatch.setattr(versioned_push.fileio, 'copy', failing_copy)
  monkeypatch.setattr(versioned_push.fileio, 'open', failing_open)
  with pytest.raises(OSError, match='bucket quota exceeded'):
    versioned_push.push(base, PAYLOADS[commit_file][0](tmp_path),
                        clock=lambda: NOW)
  monkeypatch.undo()
  assert versioned_push.list_versions(base) == []
  # Nothing at all is left: no partial version, no staging, no record.
  assert fileio.listdir(base) == []


def test_a_push_killed_before_its_rename_is_cleaned_up_by_the_next(tmp_path):
  base = str(tmp_path / 'base')
  ready_read, ready_write = os.pipe()
  child = os.fork()
  if child == 0:  # The push to kill: it stops inside its staging folder.
    os.close(ready_read)

    def write_body(folder):
      with open(os.path.join(folder, 'model.tflite'), 'wb') as f:
        f.write(b'half a model')
      os.write(ready_write, b'x')
      time.sleep(600)

    try:
      versioned_push.push(base, versioned_push.Payload(
          write_body, lambda folder, version: None, ('manifest.json',)))
    finally:
      os._exit(1)
  os.close(ready_write)
  assert os.read(ready_read, 1) == b'x'
  os.close(ready_read)
  os.kill(child, signal.SIGKILL)
  os.waitpid(child, 0)
  (left,) = [n for n in os.listdir(base)
             if n.startswith(versioned_push.STAGING_PREFIX)]
  assert left.startswith(f'{versioned_push.STAGING_PREFIX}{child}-')
  assert versioned_push.list_versions(base) == []  # Never taken for one.
  pushed = versioned_push.push(base, _manifest_payload(tmp_path),
                               clock=lambda: NOW)
  assert sorted(os.listdir(base)) == ['.last_version', str(pushed.version)]


def test_staging_folders_of_live_or_other_hosts_pushes_are_kept(tmp_path):
  base = tmp_path / 'base'
  dead = subprocess.Popen([sys.executable, '-c', 'pass'])
  dead.wait()
  here = socket.gethostname()
  hex_part = '0123456789abcdef0123456789abcdef'
  kept = [f'.push-{os.getpid()}-{hex_part}-{here}',   # Alive: this test.
          f'.push-{dead.pid}-{hex_part}-another-host',  # Not this host's.
          '.push-x']                                    # Not a staging name.
  removed = [f'.push-{dead.pid}-{hex_part}-{here}',
             f'.push-{dead.pid}-{hex_part}']  # Named before hosts were.
  for name in kept + removed:
    (base / name).mkdir(parents=True)
  assert sorted(os.path.basename(p) for p in
                versioned_push.remove_stale_staging(str(base))) == sorted(
                    removed)
  assert sorted(os.listdir(base)) == sorted(kept)
