"""VersionedPusher's executor: atomic pushes, increasing versions, no duplicates."""
import os

import pytest
from tfx.types import standard_artifacts
from tfx.utils import proto_utils
from tfx.proto import pusher_pb2

from leantfx import versioned_push
from leantfx.components.versioned_pusher import executor as pusher_executor

pytestmark = pytest.mark.unit


def _model(tmp_path, name, content):
  model = standard_artifacts.Model()
  model.uri = str(tmp_path / name)
  serving = tmp_path / name / 'Format-Serving'
  (serving / 'variables').mkdir(parents=True)
  (serving / 'saved_model.pb').write_bytes(content)
  (serving / 'variables' / 'variables.index').write_bytes(b'index')
  return model


def _blessing(tmp_path, blessed):
  blessing = standard_artifacts.ModelBlessing()
  blessing.uri = str(tmp_path / f'blessing-{blessed}')
  blessing.set_int_custom_property('blessed', int(blessed))
  return blessing


def _push(tmp_path, model, blessed, base):
  pushed = standard_artifacts.PushedModel()
  pushed.uri = str(tmp_path / f'pushed-{len(os.listdir(tmp_path))}')
  destination = pusher_pb2.PushDestination(
      filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=base))
  pusher_executor.Executor().Do(
      {'model': [model], 'model_blessing': [_blessing(tmp_path, blessed)]},
      {'pushed_model': [pushed]},
      {'push_destination': proto_utils.proto_to_json(destination)})
  return pushed


def test_blessed_model_is_pushed_as_a_complete_version(tmp_path):
  base = str(tmp_path / 'serving')
  pushed = _push(tmp_path, _model(tmp_path, 'm1', b'graph-1'), True, base)
  assert pushed.get_int_custom_property('pushed') == 1
  versions = versioned_push.list_versions(base)
  assert len(versions) == 1
  version_dir = os.path.join(base, str(versions[0]))
  assert pushed.get_string_custom_property('pushed_destination') == version_dir
  with open(os.path.join(version_dir, 'saved_model.pb'), 'rb') as f:
    assert f.read() == b'graph-1'
  # No staging folder left; only the version and the last-version record.
  assert sorted(os.listdir(base)) == [versioned_push.LAST_VERSION_FILE,
                                      str(versions[0])]


def test_unblessed_model_is_not_pushed(tmp_path):
  base = str(tmp_path / 'serving')
  pushed = _push(tmp_path, _model(tmp_path, 'm1', b'graph-1'), False, base)
  assert pushed.get_int_custom_property('pushed') == 0
  assert not os.path.exists(base)


def test_identical_model_is_not_pushed_twice(tmp_path):
  base = str(tmp_path / 'serving')
  first = _push(tmp_path, _model(tmp_path, 'm1', b'graph-1'), True, base)
  again = _push(tmp_path, _model(tmp_path, 'm1-copy', b'graph-1'), True, base)
  assert len(versioned_push.list_versions(base)) == 1
  assert again.get_int_custom_property('pushed') == 1
  assert again.get_int_custom_property(
      pusher_executor.REUSED_VERSION_KEY) == 1
  assert (again.get_string_custom_property('pushed_destination') ==
          first.get_string_custom_property('pushed_destination'))


def test_new_model_gets_a_strictly_newer_version(tmp_path):
  base = str(tmp_path / 'serving')
  # A version from the future (clock skew, another writer) must not be reused.
  future = 10**10
  os.makedirs(os.path.join(base, str(future)))
  _push(tmp_path, _model(tmp_path, 'm2', b'graph-2'), True, base)
  assert versioned_push.list_versions(base) == [future, future + 1]


def test_leftover_staging_folder_is_not_a_version(tmp_path):
  base = tmp_path / 'serving'
  (base / '.push-123-1').mkdir(parents=True)
  assert versioned_push.list_versions(str(base)) == []
  assert versioned_push.next_version(str(base), now=5) == 5


def test_push_atomically_refuses_to_overwrite(tmp_path):
  source = tmp_path / 'src'
  source.mkdir()
  (source / 'f').write_text('x')
  pusher_executor.push_atomically(str(source), str(tmp_path / 'b'), 7)
  with pytest.raises(FileExistsError):
    pusher_executor.push_atomically(str(source), str(tmp_path / 'b'), 7)


def test_non_filesystem_destination_is_refused(tmp_path):
  pushed = standard_artifacts.PushedModel()
  pushed.uri = str(tmp_path / 'pushed')
  with pytest.raises(ValueError, match='filesystem'):
    pusher_executor.Executor().Do(
        {'model': [_model(tmp_path, 'm', b'g')],
         'model_blessing': [_blessing(tmp_path, True)]},
        {'pushed_model': [pushed]},
        {'push_destination': '{}'})


def _ram_base(tmp_path):
  """A serving base on TF's in-memory filesystem: an object-store stand-in.

  ram:// goes through the same tf.io.gfile layer as gs:// and s3://, and like
  them it is not a POSIX folder tree (renaming a folder there does not move
  its files), so a push that works here uses no os-level file call.
  """
  return f'ram://{tmp_path.name}/serving'


def test_push_to_an_object_store_path(tmp_path):
  from tfx.dsl.io import fileio  # pylint: disable=g-import-not-at-top
  base = _ram_base(tmp_path)
  first = _push(tmp_path, _model(tmp_path, 'm1', b'graph-1'), True, base)
  (version,) = versioned_push.list_versions(base)
  version_dir = f'{base}/{version}'
  assert first.get_string_custom_property('pushed_destination') == version_dir
  with fileio.open(f'{version_dir}/saved_model.pb', 'rb') as f:
    assert f.read() == b'graph-1'
  with fileio.open(f'{version_dir}/variables/variables.index', 'rb') as f:
    assert f.read() == b'index'
  # The same model is not pushed again; a new one gets a newer version.
  again = _push(tmp_path, _model(tmp_path, 'm2', b'graph-1'), True, base)
  assert again.get_int_custom_property(
      pusher_executor.REUSED_VERSION_KEY) == 1
  _push(tmp_path, _model(tmp_path, 'm3', b'graph-3'), True, base)
  versions = versioned_push.list_versions(base)
  assert len(versions) == 2 and versions[0] == version < versions[1]
  assert sorted(fileio.listdir(base)) == sorted(
      [str(v) for v in versions] + [versioned_push.LAST_VERSION_FILE])


def test_object_store_push_writes_saved_model_pb_last(tmp_path, monkeypatch):
  from tfx.dsl.io import fileio  # pylint: disable=g-import-not-at-top
  copied = []
  real_copy = fileio.copy

  def recording_copy(src, dst, overwrite=False):
    if dst.startswith('ram://'):  # Not the lineage copy into the artifact.
      copied.append(os.path.basename(dst))
    return real_copy(src, dst, overwrite)

  monkeypatch.setattr(pusher_executor.fileio, 'copy', recording_copy)
  _push(tmp_path, _model(tmp_path, 'm1', b'graph-1'), True,
        _ram_base(tmp_path))
  assert copied == ['variables.index', 'saved_model.pb']


def test_failed_object_store_push_leaves_no_version(tmp_path, monkeypatch):
  base = _ram_base(tmp_path)

  def failing_copy(src, dst, overwrite=False):
    del src, overwrite
    if dst.endswith('saved_model.pb'):
      raise OSError('bucket quota exceeded')
    from tfx.dsl.io import fileio  # pylint: disable=g-import-not-at-top
    with fileio.open(dst, 'wb') as f:
      f.write(b'partial')

  monkeypatch.setattr(pusher_executor.fileio, 'copy', failing_copy)
  with pytest.raises(OSError, match='bucket quota exceeded'):
    _push(tmp_path, _model(tmp_path, 'm1', b'graph-1'), True, base)
  assert versioned_push.list_versions(base) == []
