"""Tests of push.py: versions, atomic renames and the manifest."""
import hashlib
import json
import os

import pytest

from leantfx.runtimes import push
from leantfx.errors import ConfigError

pytestmark = pytest.mark.unit

NOW = 1_700_000_000.0  # a fixed clock: 2023-11-14T22:13:20Z


@pytest.fixture
def tflite_file(tmp_path):
  path = tmp_path / 'selected.tflite'
  path.write_bytes(b'TFL3' + bytes(range(256)) * 10)
  return str(path)


def _push(tflite_file, base, clock=lambda: NOW, **overrides):
  kwargs = dict(source_model_uri='/pipeline/Trainer/model/7',
                technique_chain=['pruning', 'qat'], tflite_mode='int8',
                metrics={'accuracy': 0.96, 'size_bytes': 2564}, clock=clock)
  kwargs.update(overrides)
  return push.push_tflite(tflite_file, str(base), 'digits', **kwargs)


def test_push_writes_model_and_manifest_with_matching_sha256(
    tflite_file, tmp_path):
  result = _push(tflite_file, tmp_path / 'serving')
  assert result.directory == str(tmp_path / 'serving' / 'digits' /
                                 str(int(NOW)))
  assert sorted(os.listdir(result.directory)) == ['manifest.json',
                                                  'model.tflite']
  manifest = push.read_manifest(result.directory)
  with open(result.model_path, 'rb') as f:
    assert manifest['sha256'] == hashlib.sha256(f.read()).hexdigest()
  with open(tflite_file, 'rb') as f:
    assert manifest['sha256'] == hashlib.sha256(f.read()).hexdigest()
  assert manifest == result.manifest
  assert manifest['version'] == result.version == int(NOW)
  assert manifest['technique_chain'] == ['pruning', 'qat']
  assert manifest['tflite_mode'] == 'int8'
  assert manifest['source_model_uri'] == '/pipeline/Trainer/model/7'
  assert manifest['metrics']['accuracy'] == 0.96
  assert manifest['created_at'] == '2023-11-14T22:13:20+00:00'


def test_versions_increase_and_are_never_reused(tflite_file, tmp_path):
  base = tmp_path / 'serving'
  # Same clock reading three times: the version still increases.
  versions = [_push(tflite_file, base).version for _ in range(3)]
  assert versions == [int(NOW), int(NOW) + 1, int(NOW) + 2]
  # A deleted (e.g. rolled back) version's number is not handed out again.
  os.rename(base / 'digits' / str(versions[-1]), tmp_path / 'rolled_back')
  assert _push(tflite_file, base).version == int(NOW) + 3
  # Once the clock passes the versions, the clock leads.
  later = _push(tflite_file, base, clock=lambda: NOW + 3600).version
  assert later == int(NOW) + 3600
  assert push.list_versions(str(base), 'digits') == [
      int(NOW), int(NOW) + 1, int(NOW) + 3, later]


def test_a_half_written_temp_dir_is_never_listed(tflite_file, tmp_path):
  base = tmp_path / 'serving'
  first = _push(tflite_file, base).version
  # A pusher that died mid-write leaves only its hidden temp directory.
  crashed = base / 'digits' / '.tmp-crashed'
  crashed.mkdir()
  (crashed / 'model.tflite').write_bytes(b'TFL3 half')
  assert push.list_versions(str(base), 'digits') == [first]
  # ...and the next version still goes past everything listed.
  assert _push(tflite_file, base).version == first + 1


def test_the_version_dir_appears_complete_in_one_rename(
    tflite_file, tmp_path, monkeypatch):
  base = tmp_path / 'serving'
  seen = []
  real_rename = os.rename

  def spying_rename(src, dst):
    # Just before the rename: the version does not exist yet, the temp dir
    # is hidden and already holds both files.
    seen.append((os.path.exists(dst), os.path.basename(src).startswith('.'),
                 sorted(os.listdir(src)),
                 push.list_versions(str(base), 'digits')))
    real_rename(src, dst)

  monkeypatch.setattr(push.os, 'rename', spying_rename)
  result = _push(tflite_file, base)
  assert seen == [(False, True, ['manifest.json', 'model.tflite'], [])]
  assert push.list_versions(str(base), 'digits') == [result.version]


def test_a_failed_rename_leaves_no_version_and_no_temp_dir(
    tflite_file, tmp_path, monkeypatch):
  base = tmp_path / 'serving'

  def failing_rename(src, dst):
    raise PermissionError(f'cannot rename {src}')

  monkeypatch.setattr(push.os, 'rename', failing_rename)
  with pytest.raises(PermissionError):
    _push(tflite_file, base)
  assert os.listdir(base / 'digits') == []  # no version, no temp dir


def test_losing_a_race_takes_the_next_version(tflite_file, tmp_path,
                                              monkeypatch):
  base = tmp_path / 'serving'
  real_rename = os.rename
  raced = []

  def racing_rename(src, dst):
    if not raced:
      # Another pusher claims this version between listing and renaming.
      os.makedirs(os.path.join(dst, 'x'))
      raced.append(dst)
    real_rename(src, dst)

  monkeypatch.setattr(push.os, 'rename', racing_rename)
  result = _push(tflite_file, base)
  assert result.version == int(NOW) + 1
  assert push.read_manifest(result.directory)['version'] == int(NOW) + 1


def test_bad_arguments_are_config_errors(tflite_file, tmp_path):
  with pytest.raises(ConfigError, match='no such file'):
    _push(str(tmp_path / 'missing.tflite'), tmp_path)
  with pytest.raises(ConfigError, match='not usable as a directory'):
    push.push_tflite(tflite_file, str(tmp_path), '../escape',
                     source_model_uri='', technique_chain=[],
                     tflite_mode='int8', metrics={})


def test_manifest_is_plain_json(tflite_file, tmp_path):
  result = _push(tflite_file, tmp_path)
  with open(os.path.join(result.directory, 'manifest.json')) as f:
    assert json.load(f)['model_name'] == 'digits'


def test_object_store_push_never_writes_into_a_version_it_did_not_create(
    tmp_path, monkeypatch):
  """A version that appears after the listing (a racing pusher) is left alone."""
  from tfx.dsl.io import fileio  # pylint: disable=g-import-not-at-top
  base = f'ram://{tmp_path.name}/tflite'
  theirs = f'{base}/digits/1000/model.tflite'
  fileio.makedirs(os.path.dirname(theirs))
  with fileio.open(theirs, 'wb') as f:
    f.write(b'the other pusher')
  source = tmp_path / 'm.tflite'
  source.write_bytes(b'ours')
  # The listing happened before the other pusher's version appeared.
  monkeypatch.setattr(push, 'list_versions', lambda *_: [])
  with pytest.raises(OSError, match='appeared while pushing'):
    push.push_tflite(str(source), base, 'digits', source_model_uri='m',
                     technique_chain=[], tflite_mode='int8', metrics={},
                     clock=lambda: 1000.0)
  with fileio.open(theirs, 'rb') as f:
    assert f.read() == b'the other pusher'
