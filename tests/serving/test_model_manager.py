"""Version lifecycle with an injected loader: swap, retries, in-flight, labels."""
import os
import shutil
import time

import pytest

from leantfx.serving import model_config
from leantfx.serving import model_manager
from leantfx.serving import servable as servable_lib
from leantfx.serving import status

pytestmark = pytest.mark.unit


class _Fake(servable_lib.Servable):

  def __init__(self, name, version, path):
    super().__init__(name, version, path)
    self.closed = False

  @property
  def signatures(self):
    return {}

  @property
  def signature_defs(self):
    return {}

  def run(self, signature_name, inputs, output_aliases):
    return {}

  def close(self):
    self.closed = True


class _Loader:
  """Loads a version unless its directory holds a file named BROKEN."""

  def __init__(self):
    self.attempts = []

  def __call__(self, name, version, path, platform):
    self.attempts.append(version)
    if os.path.exists(os.path.join(path, 'BROKEN')):
      raise servable_lib.LoadError('variables are truncated',
                                   status.Code.DATA_LOSS)
    return _Fake(name, version, path)


def _manager(tmp_path, policy=model_config.VersionPolicy(), labels=(),
             retries=1):
  loader = _Loader()
  config = model_config.ModelConfig('m', str(tmp_path), version_policy=policy,
                                    version_labels=tuple(labels))
  manager = model_manager.ModelManager(lambda: [config],
                                       max_num_load_retries=retries,
                                       enable_warmup=False, loader=loader)
  return manager, loader


def _push(tmp_path, version, broken=False):
  path = tmp_path / str(version)
  path.mkdir()
  if broken:
    (path / 'BROKEN').write_text('')
  return path


def _wait_closed(servable, timeout_s=5.0):
  deadline = time.monotonic() + timeout_s
  while not servable.closed and time.monotonic() < deadline:
    time.sleep(0.01)
  return servable.closed


def test_new_version_replaces_old_after_in_flight_request(tmp_path):
  manager, _ = _manager(tmp_path)
  _push(tmp_path, 1)
  manager.poll_once()
  held = manager.acquire('m')
  assert held.servable.version == 1
  _push(tmp_path, 2)
  manager.poll_once()
  with manager.acquire('m') as servable:
    assert servable.version == 2
  # Version 1 is out of the map but still running a request: not closed.
  time.sleep(0.1)
  assert not held.servable.closed
  assert manager.version_states('m')[1].state == 'UNLOADING'
  held.release()
  assert _wait_closed(held.servable)
  assert manager.version_states('m')[1].state == 'END'


def test_broken_version_is_retried_then_given_up_and_never_serves(tmp_path):
  manager, loader = _manager(tmp_path, retries=2)
  _push(tmp_path, 1)
  manager.poll_once()
  broken = _push(tmp_path, 2, broken=True)
  for _ in range(5):
    manager.poll_once()
    with manager.acquire('m') as servable:
      assert servable.version == 1
  assert loader.attempts == [1, 2, 2, 2]  # First try + 2 retries, then no more.
  state = manager.version_states('m')[2]
  assert (state.state, state.error_code) == ('END', status.Code.DATA_LOSS)
  assert state.error_message == 'variables are truncated'
  # A fixed copy renamed into place is a new directory: tried again.
  os.rename(broken, tmp_path / 'old-2')
  _push(tmp_path, 2)
  manager.poll_once()
  with manager.acquire('m') as servable:
    assert servable.version == 2


def test_status_lists_versions_newest_first(tmp_path):
  manager, _ = _manager(tmp_path, retries=0)
  _push(tmp_path, 1)
  _push(tmp_path, 3, broken=True)
  manager.poll_once()
  states = manager.model_status('m')
  assert [(s.version, s.state) for s in states] == [(3, 'END'),
                                                    (1, 'AVAILABLE')]
  with pytest.raises(status.ServingError, match='Could not find version 2 of '
                     'model m'):
    manager.model_status('m', version=2)
  with pytest.raises(status.ServingError, match='Could not find any versions'):
    manager.model_status('other')


def test_specific_policy_and_labels(tmp_path):
  manager, _ = _manager(
      tmp_path, model_config.VersionPolicy('specific', versions=(1, 2)),
      labels=[('stable', 1), ('canary', 2), ('gone', 7)])
  for version in (1, 2, 3):
    _push(tmp_path, version)
  manager.poll_once()
  assert manager.serving_versions() == {'m': [1, 2]}
  with manager.acquire('m', label='stable') as servable:
    assert servable.version == 1
  with manager.acquire('m') as servable:
    assert servable.version == 2
  with pytest.raises(status.ServingError) as raised:
    manager.acquire('m', label='nightly')
  assert raised.value.code == status.Code.INVALID_ARGUMENT
  with pytest.raises(status.ServingError) as raised:
    manager.acquire('m', label='gone')
  assert raised.value.code == status.Code.NOT_FOUND
  assert raised.value.message == 'Servable not found for request: ' \
      'Specific(m, 7)'


def test_deleted_newest_version_is_unloaded_and_the_previous_serves(
    tmp_path):
  manager, loader = _manager(tmp_path)
  _push(tmp_path, 1)
  newest = _push(tmp_path, 2)
  manager.poll_once()
  with manager.acquire('m') as servable:
    deleted = servable
    assert servable.version == 2
  shutil.rmtree(newest)
  manager.poll_once()
  with manager.acquire('m') as servable:
    assert servable.version == 1
  assert loader.attempts == [2, 1]  # Version 1 loaded once 2 was gone.
  assert _wait_closed(deleted)
  assert manager.version_states('m')[2].state == 'END'
  assert manager.serving_versions() == {'m': [1]}


def test_deleted_version_goes_on_serving_while_the_one_below_fails(tmp_path):
  # TF Serving's AvailabilityPreservingPolicy: a version left the disk is
  # unloaded once a version on disk serves, not before.
  manager, _ = _manager(tmp_path, retries=0)
  _push(tmp_path, 1, broken=True)
  newest = _push(tmp_path, 2)
  manager.poll_once()
  shutil.rmtree(newest)
  manager.poll_once()
  with manager.acquire('m') as servable:
    assert servable.version == 2
  assert manager.version_states('m')[1].error_code == status.Code.DATA_LOSS


def test_no_version_left_on_disk_serves_none(tmp_path):
  manager, _ = _manager(tmp_path)
  only = _push(tmp_path, 1)
  manager.poll_once()
  with manager.acquire('m') as servable:
    held = servable
  os.rename(only, tmp_path / 'archived')
  manager.poll_once()
  with pytest.raises(status.ServingError) as raised:
    manager.acquire('m')
  assert raised.value.code == status.Code.NOT_FOUND
  assert _wait_closed(held)


def test_a_base_path_that_is_gone_keeps_serving(tmp_path):
  base = tmp_path / 'm'
  base.mkdir()
  manager, _ = _manager(base)
  _push(base, 1)
  manager.poll_once()
  os.rename(base, tmp_path / 'unmounted')
  manager.poll_once()
  with manager.acquire('m') as servable:
    assert servable.version == 1


class _Clock:

  def __init__(self):
    self.now = 1000.0

  def __call__(self):
    return self.now


def test_failed_version_is_retried_on_a_backoff_until_it_loads(tmp_path):
  clock = _Clock()
  failing = {2}

  def loader(name, version, path, platform):
    attempts.append(version)
    if version in failing:
      raise servable_lib.LoadError('runtime not installed',
                                   status.Code.FAILED_PRECONDITION)
    return _Fake(name, version, path)

  attempts = []
  config = model_config.ModelConfig('m', str(tmp_path))
  manager = model_manager.ModelManager(lambda: [config],
                                       max_num_load_retries=1,
                                       enable_warmup=False, loader=loader,
                                       clock=clock)
  _push(tmp_path, 1)
  _push(tmp_path, 2)
  manager.poll_once()  # 2 fails; 1 serves in the same poll.
  assert manager.serving_versions() == {'m': [1]}
  manager.poll_once()  # The one quick retry.
  assert attempts == [2, 1, 2]
  backoff = model_manager.RETRY_BACKOFF_S
  for advance, expected in ((backoff - 1, [2, 1, 2]),
                            (2, [2, 1, 2, 2]),       # After 30 s.
                            (2 * backoff - 2, [2, 1, 2, 2]),
                            (3, [2, 1, 2, 2, 2])):   # After 60 s more.
    clock.now += advance
    manager.poll_once()
    assert attempts == expected, advance
  assert manager.version_states('m')[2].state == 'END'
  failing.clear()
  clock.now += 4 * backoff + 1
  manager.poll_once()
  assert manager.serving_versions() == {'m': [2]}


def test_a_slow_copy_is_retried_as_its_files_arrive(tmp_path):
  # Loads once <version>/variables/variables.index is there: a copy whose
  # variables arrive late.
  attempts = []

  def loader(name, version, path, platform):
    attempts.append(version)
    if not os.path.exists(os.path.join(path, 'variables',
                                       'variables.index')):
      raise servable_lib.LoadError('no variables yet', status.Code.NOT_FOUND)
    return _Fake(name, version, path)

  config = model_config.ModelConfig('m', str(tmp_path))
  manager = model_manager.ModelManager(lambda: [config],
                                       max_num_load_retries=0,
                                       enable_warmup=False, loader=loader,
                                       clock=_Clock())
  path = _push(tmp_path, 1)
  manager.poll_once()
  for _ in range(10):  # Nothing changes: no retry before the backoff.
    manager.poll_once()
  assert attempts == [1]
  (path / 'variables').mkdir()
  manager.poll_once()
  assert attempts == [1, 1]
  (path / 'variables' / 'variables.index').write_text('index')
  manager.poll_once()
  assert manager.serving_versions() == {'m': [1]}


def test_a_restart_with_a_broken_newest_serves_the_previous_at_once(
    tmp_path):
  manager, _ = _manager(tmp_path, retries=5)
  _push(tmp_path, 1)
  _push(tmp_path, 2, broken=True)
  manager.poll_once()  # What ModelServer.start() runs before the ports open.
  with manager.acquire('m') as servable:
    assert servable.version == 1
  state = manager.version_states('m')[2]
  assert (state.state, state.error_code) == ('END', status.Code.DATA_LOSS)
  assert 'version 2 failed: variables are truncated' in (
      manager.why_not_serving('m'))


def test_a_removed_failed_version_is_not_retried(tmp_path):
  manager, loader = _manager(tmp_path, retries=3)
  _push(tmp_path, 1)
  broken = _push(tmp_path, 2, broken=True)
  manager.poll_once()
  shutil.rmtree(broken)
  for _ in range(3):
    manager.poll_once()
  assert loader.attempts == [2, 1]
  assert 2 not in manager.version_states('m')


def test_failing_warmup_fails_the_load(tmp_path, monkeypatch):
  manager, _ = _manager(tmp_path, retries=0)
  manager._enable_warmup = True  # pylint: disable=protected-access

  def failing_warm_up(servable, num_iterations=1):
    raise status.invalid_argument('warmup record 0 failed')

  monkeypatch.setattr(model_manager.warmup_lib, 'warm_up', failing_warm_up)
  _push(tmp_path, 1)
  manager.poll_once()
  with pytest.raises(status.ServingError) as raised:
    manager.acquire('m')
  assert raised.value.code == status.Code.NOT_FOUND
  assert manager.version_states('m')[1].error_message == \
      'warmup record 0 failed'
