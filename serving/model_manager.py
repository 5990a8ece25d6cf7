"""Loading, hot-swapping and unloading model versions; finding the one to serve.

The manager polls each model's base path (``--file-system-poll-wait-seconds``),
works out which versions the policy wants, and for each new one: loads it, warms
it up, and only then publishes it. Publishing replaces the model's serving map
in one step under a lock, so a request sees either the old set of versions or
the new one. A version leaving the map is unloaded in the background once the
requests that started on it have finished.

Versions follow the disk, as TF Serving's file-system source and its
``AvailabilityPreservingPolicy`` have them:

* A version that fails to load (no ``saved_model.pb``, truncated variables,
  a graph that does not parse, a model file refused by
  :mod:`model_file_check`, a failing warmup record) is logged, counted and
  left in state END with its error; it never replaces a working version.
  It is retried at the next polls up to ``max_num_load_retries`` times, then
  on a backoff (``RETRY_BACKOFF_S``, doubling up to ``MAX_RETRY_BACKOFF_S``)
  until it loads or leaves the disk, and at once whenever a file below it
  changes (a slow copy finishing, a fixed copy renamed into place).
* With the latest-version policy a failed version does not count while it
  waits: the newest loadable one below it serves, in the same poll (so a
  restart whose newest version is broken opens its ports on the one before).
* A version deleted from disk is unpublished and unloaded once the versions
  the policy now wants are serving; if none of them can load, the deleted
  one goes on serving (availability first), and when no version at all is
  left on disk, the model serves none (NOT_FOUND). A base path that is gone
  (an unmounted volume) keeps what serves and is logged, as TF Serving's
  poll then emits nothing.

A version whose ``feature_names.json`` maps its columns' original names to
the model's input keys is published wrapped so that it takes and shows the
original names (:mod:`renamed_inputs`); a malformed file fails its load.
"""
import dataclasses
import logging
import os
import threading
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence

from leantfx.serving import feature_names
from leantfx.serving import loading
from leantfx.serving import model_config as model_config_lib
from leantfx.serving import model_file_check
from leantfx.serving import renamed_inputs
from leantfx.serving import servable as servable_lib
from leantfx.serving import status
from leantfx.serving import warmup as warmup_lib

_log = logging.getLogger(__name__)

# ModelVersionStatus.State names.
START = 'START'
LOADING = 'LOADING'
AVAILABLE = 'AVAILABLE'
UNLOADING = 'UNLOADING'
END = 'END'

# How long an unload waits for in-flight requests before it closes anyway
# (TF servables stay valid for requests that hold them; this bounds the wait).
_UNLOAD_WAIT_S = 60.0
# Finished (END) versions kept per model for the status API.
_MAX_ENDED_VERSIONS = 10
# A failed version, once its quick retries are spent, is tried again after
# 30 s, then 60 s, ... up to 5 min: a fix nobody can see on disk (a runtime
# installed, a mount back) is picked up, at a load's cost every few minutes.
RETRY_BACKOFF_S = 30.0
MAX_RETRY_BACKOFF_S = 300.0
# Entries of a version directory walked for its signature (a SavedModel has
# about five; this bounds the walk of a directory that is not a model).
_MAX_SIGNATURE_ENTRIES = 10000

Loader = Callable[[str, int, str, str], servable_lib.Servable]


@dataclasses.dataclass
class VersionState:
  """What the manager knows about one version directory.

  Attributes:
    version: the version number.
    path: its directory.
    state: START, LOADING, AVAILABLE, UNLOADING or END.
    error_code: OK, or why the last load failed.
    error_message: '' or the last load error.
    attempts: load attempts since its files last changed.
    dir_signature: a digest of the names, inodes, sizes and mtimes of the
      files below it when last tried (a change retries it at once).
    retry_at: monotonic time a failed version is tried again.
    detected_at: monotonic time the poll first saw it.
    available_at: monotonic time it started serving, if it did.
    load_seconds: load + warm-up time of the successful attempt.
  """
  version: int
  path: str
  state: str = START
  error_code: status.Code = status.Code.OK
  error_message: str = ''
  attempts: int = 0
  dir_signature: int = 0
  retry_at: float = 0.0
  detected_at: float = 0.0
  available_at: Optional[float] = None
  load_seconds: Optional[float] = None
  servable: Optional[servable_lib.Servable] = None


@dataclasses.dataclass
class _Model:
  config: model_config_lib.ModelConfig
  versions: Dict[int, VersionState] = dataclasses.field(default_factory=dict)
  serving: Mapping[int, servable_lib.Servable] = dataclasses.field(
      default_factory=dict)
  base_path_gone: bool = False


class ServableHandle:
  """A servable held for one request; release it with ``with`` or release()."""

  def __init__(self, servable: servable_lib.Servable):
    self.servable = servable
    self._released = False

  def release(self):
    if not self._released:
      self._released = True
      self.servable.release()

  def __enter__(self) -> servable_lib.Servable:
    return self.servable

  def __exit__(self, *exc):
    self.release()


def _dir_signature(path: str) -> int:
  """A digest of what is below a version directory, to see it change.

  Every entry's relative name, inode, size and mtime: a file copied in
  late (variables/ arriving after saved_model.pb), rewritten or replaced
  changes it; 0 when the directory cannot be read.
  """
  entries = []
  try:
    info = os.stat(path)
  except OSError:
    return 0
  entries.append(('.', info.st_ino, info.st_mtime_ns))
  for root, dirs, files in os.walk(path):
    dirs.sort()
    for name in sorted(dirs) + sorted(files):
      full = os.path.join(root, name)
      try:
        info = os.lstat(full)
      except OSError:
        continue  # Removed while walking: the next poll sees the change.
      entries.append((os.path.relpath(full, path), info.st_ino, info.st_size,
                      info.st_mtime_ns))
      if len(entries) >= _MAX_SIGNATURE_ENTRIES:
        return hash(tuple(entries))
  return hash(tuple(entries))


def _failed(state: Optional[VersionState]) -> bool:
  """Whether a version's last load attempt failed (it is not serving)."""
  return (state is not None and state.state == END and
          state.servable is None and state.error_code != status.Code.OK)


def _request_text(name: str, version: Optional[int]) -> str:
  """``ServableRequest::DebugString``."""
  if version is None:
    return f'Latest({name})'
  return f'Specific({name}, {version})'


class ModelManager:
  """Keeps the right versions of every model loaded and hands them out."""

  def __init__(self,
               model_source: Callable[[], Sequence[model_config_lib.ModelConfig]],
               max_num_load_retries: int = 5,
               enable_warmup: bool = True,
               loader: Loader = loading.load_servable,
               clock: Callable[[], float] = time.monotonic):
    """Creates a manager; nothing loads until poll_once() or start().

    Args:
      model_source: returns the models to serve (called at every poll, so a
        directory source picks up new model directories).
      max_num_load_retries: load attempts at the next polls after the first
        before a failed version is retried on a backoff instead (TF
        Serving's ``--max_num_load_retries``, default 5).
      enable_warmup: run warmup before a version serves.
      loader: (name, version, path, platform) -> Servable; tests inject one.
      clock: monotonic seconds (tests pass a fake one to skip a backoff).
    """
    self._source = model_source
    self._max_retries = max(0, max_num_load_retries)
    self._enable_warmup = enable_warmup
    self._loader = loader
    self._clock = clock
    self._models: Dict[str, _Model] = {}
    self._lock = threading.Lock()
    self._poll_lock = threading.Lock()
    self._stop = threading.Event()
    self._thread: Optional[threading.Thread] = None
    self._unload_threads: List[threading.Thread] = []
    self.load_failures = 0
    # Load attempts whose files model_file_check refused, before any loader.
    self.files_rejected = 0

  # Polling.
  def start(self, poll_wait_s: float) -> None:
    """Polls in a background thread every `poll_wait_s` seconds (> 0)."""
    if poll_wait_s <= 0 or self._thread is not None:
      return
    self._thread = threading.Thread(target=self._poll_loop, args=(poll_wait_s,),
                                    name='leantfx-model-poll', daemon=True)
    self._thread.start()

  def _poll_loop(self, poll_wait_s: float) -> None:
    while not self._stop.wait(poll_wait_s):
      self.poll_once()

  def stop(self, timeout_s: float = 10.0) -> None:
    """Stops polling and unloads every version."""
    self._stop.set()
    if self._thread is not None:
      self._thread.join(timeout_s)
    for thread in self._unload_threads:
      thread.join(timeout_s)
    with self._lock:
      models = list(self._models.values())
      for model in models:
        model.serving = {}
    for model in models:
      for state in model.versions.values():
        if state.servable is not None:
          state.servable.close()
          state.servable = None
          state.state = END

  def poll_once(self) -> None:
    """Reconciles every model with its base path once (loads block here)."""
    with self._poll_lock:
      try:
        configs = list(self._source())
      except Exception as e:  # pylint: disable=broad-except
        _log.error('Listing models failed (keeping the current ones): %s', e)
        configs = [m.config for m in self._models.values()]
      for config in configs:
        model = self._models.get(config.name)
        if model is None:
          with self._lock:
            self._models = dict(self._models, **{config.name: _Model(config)})
        else:
          model.config = config
      for model in list(self._models.values()):
        if self._stop.is_set():
          return
        try:
          self._reconcile(model)
        except Exception:  # pylint: disable=broad-except
          _log.exception('Polling model %s failed; it keeps its versions.',
                         model.config.name)

  def _waiting(self, state: Optional[VersionState], signature: int,
               now: float) -> bool:
    """A failed version whose retry is not due: its files did not change
    and its backoff has not passed."""
    return (_failed(state) and state.dir_signature == signature and
            now < state.retry_at)

  def _desired(self, model: _Model, on_disk: Mapping[int, str],
               resting: Callable[[int], bool]) -> set:
    policy = model.config.version_policy
    if policy.kind != model_config_lib.POLICY_LATEST:
      return set(policy.select(sorted(on_disk)))
    # The newest versions that are not resting after a failure: when the
    # newest is broken, the next one down is wanted instead (availability
    # first).
    desired = set()
    for version in sorted(on_disk, reverse=True):
      if not resting(version):
        desired.add(version)
        if len(desired) == policy.num_versions:
          break
    return desired

  def _reconcile(self, model: _Model) -> None:
    config = model.config
    gone = not os.path.isdir(config.base_path) and bool(model.serving)
    if gone != model.base_path_gone:
      model.base_path_gone = gone
      if gone:
        _log.warning('Base path %s of model %s is gone (unmounted?); it '
                     'keeps serving version(s) %s until the path is back.',
                     config.base_path, config.name, sorted(model.serving))
      else:
        _log.info('Base path %s of model %s is back.', config.base_path,
                  config.name)
    if gone:
      return
    on_disk = model_config_lib.list_versions(config.base_path)
    signatures: Dict[int, int] = {}

    def signature(version: int) -> int:
      # Walked only for versions whose retry is in question.
      if version not in signatures:
        signatures[version] = _dir_signature(on_disk[version])
      return signatures[version]

    self._forget_removed_failures(model, on_disk)
    attempted = set()

    def resting(version: int) -> bool:
      """Failed, and tried in this poll already or not due for a retry."""
      state = model.versions.get(version)
      # _failed first: the signature walks the directory.
      return _failed(state) and (
          version in attempted or
          self._waiting(state, signature(version), self._clock()))

    while True:
      now = self._clock()
      desired = self._desired(model, on_disk, resting)
      todo = []
      for version in sorted(desired - attempted, reverse=True):
        state = model.versions.get(version)
        if state is None or (state.state == END and state.servable is None
                             and state.error_code == status.Code.OK):
          # New, or unloaded before and wanted again (the version below a
          # deleted one): a fresh load.
          _log.info('Found model %s version %d at %s', config.name,
                    version, on_disk[version])
          state = VersionState(version, on_disk[version], detected_at=now)
          model.versions[version] = state
        elif _failed(state) and not self._waiting(state, signature(version),
                                                  now):
          if state.dir_signature != signature(version):
            state.attempts = 0  # New files: the quick retries again.
          state.state = START
        if state.state in (START, LOADING):
          todo.append(state)
      if not todo:
        break
      for state in todo:
        attempted.add(state.version)
        state.dir_signature = signature(state.version)
        self._try_load(model, state)
    self._publish(model, desired,
                  bool(config.version_policy.select(sorted(on_disk))))

  def _publish(self, model: _Model, desired: set, aspired: bool) -> None:
    """Serves the wanted versions that loaded; unloads the others.

    Args:
      model: the model.
      desired: the versions that should serve.
      aspired: whether the policy selects any version on disk at all,
        failed ones included (none: the model serves nothing).
    """
    available = {v for v, s in model.versions.items()
                 if s.state == AVAILABLE and s.servable is not None}
    keep = desired & available
    if not keep and aspired and available:
      # None of the versions on disk can serve (they failed): the newest
      # that served before goes on, deleted from disk or not, rather than
      # none (TF Serving's AvailabilityPreservingPolicy).
      keep = {max(available)}
    changed = set(model.serving) != keep
    if changed:
      new_serving = {v: model.versions[v].servable for v in sorted(keep)}
      with self._lock:
        model.serving = new_serving
      _log.info('Model %s now serves version(s) %s', model.config.name,
                sorted(keep) or 'none')
    # Unpublished first (above), then unloaded once idle.
    for version in sorted(available - keep):
      self._unload(model, model.versions[version])
    self._forget_old(model)

  def _forget_removed_failures(self, model: _Model,
                               on_disk: Mapping[int, str]) -> None:
    """A failed version whose directory is gone is no longer retried."""
    for version in [v for v, s in model.versions.items()
                    if v not in on_disk and _failed(s)]:
      _log.info('Model %s version %d left the disk; no more retries.',
                model.config.name, version)
      del model.versions[version]

  def _try_load(self, model: _Model, state: VersionState) -> None:
    config = model.config
    state.state = LOADING
    state.attempts += 1
    started = time.monotonic()
    try:
      column_keys = feature_names.read_feature_names(state.path)
    except feature_names.FeatureNamesError as e:
      self._load_failed(model, state, status.Code.INVALID_ARGUMENT, str(e))
      return
    try:
      loaded = self._loader(config.name, state.version, state.path,
                            config.platform)
    except model_file_check.ModelFileError as e:
      self.files_rejected += 1
      self._load_failed(model, state, e.code,
                        f'Model files refused ({e.reason}): {e}')
      return
    except servable_lib.LoadError as e:
      self._load_failed(model, state, e.code, str(e))
      return
    except Exception as e:  # pylint: disable=broad-except
      self._load_failed(model, state, status.Code.UNKNOWN,
                        f'{type(e).__name__}: {e}')
      return
    try:
      servable = renamed_inputs.in_original_names(loaded, column_keys)
    except servable_lib.LoadError as e:
      loaded.close()
      self._load_failed(model, state, e.code, str(e))
      return
    if self._enable_warmup:
      try:
        # The warm-up file is TF Serving's, which serves the same directory
        # by the model's own input names: it is replayed on those.
        summary = warmup_lib.warm_up(loaded)
      except status.ServingError as e:
        servable.close()
        self._load_failed(model, state, e.code, e.message)
        return
      except Exception as e:  # pylint: disable=broad-except
        servable.close()
        self._load_failed(model, state, status.Code.UNKNOWN,
                          f'Warmup failed: {type(e).__name__}: {e}')
        return
    else:
      summary = 'warm-up disabled'
    state.servable = servable
    state.state = AVAILABLE
    state.error_code, state.error_message = status.Code.OK, ''
    state.available_at = time.monotonic()
    state.load_seconds = state.available_at - started
    _log.info('Loaded model %s version %d (%s) in %.2fs; %s', config.name,
              state.version, servable.platform, state.load_seconds, summary)

  def _load_failed(self, model: _Model, state: VersionState,
                   code: status.Code, message: str) -> None:
    self.load_failures += 1
    state.error_code, state.error_message = code, message
    state.state = END
    quick_left = self._max_retries + 1 - state.attempts
    now = self._clock()
    if quick_left > 0:
      state.retry_at = now
      _log.warning(
          'Loading model %s version %d failed (attempt %d; retried at the '
          'next poll, %d more time(s)): %s', model.config.name,
          state.version, state.attempts, quick_left, message)
      return
    delay = min(MAX_RETRY_BACKOFF_S,
                RETRY_BACKOFF_S * 2 ** min(-quick_left, 16))
    state.retry_at = now + delay
    _log.error(
        'Loading model %s version %d failed (attempt %d; it does not serve, '
        'and is retried in %.0fs, or as soon as a file below it changes, '
        'until it loads or is removed): %s', model.config.name,
        state.version, state.attempts, delay, message)

  def _unload(self, model: _Model, state: VersionState) -> None:
    servable = state.servable
    state.state = UNLOADING

    def finish():
      if servable is not None:
        if not servable.wait_idle(_UNLOAD_WAIT_S):
          _log.warning('%s still has %d request(s) in flight after %.0fs; '
                       'closing it anyway.', servable, servable.in_flight,
                       _UNLOAD_WAIT_S)
        servable.close()
      state.servable = None
      state.state = END
      _log.info('Unloaded model %s version %d', model.config.name,
                state.version)

    thread = threading.Thread(target=finish, daemon=True,
                              name=f'leantfx-unload-{model.config.name}')
    self._unload_threads = [t for t in self._unload_threads if t.is_alive()]
    self._unload_threads.append(thread)
    thread.start()

  def _forget_old(self, model: _Model) -> None:
    ended = sorted(v for v, s in model.versions.items()
                   if s.state == END and s.error_code == status.Code.OK)
    for version in ended[:-_MAX_ENDED_VERSIONS]:
      del model.versions[version]

  # Request path.
  def acquire(self, name: str, version: Optional[int] = None,
              label: Optional[str] = None) -> ServableHandle:
    """Returns a handle on the version a request asks for.

    Args:
      name: model name.
      version: a specific version, or None.
      label: a version label, or None (not both).

    Returns:
      A handle; the version is not unloaded while it is held.

    Raises:
      ServingError: NOT_FOUND for an unknown model or version, INVALID_ARGUMENT
        for an unknown label.
    """
    if not name:
      raise status.invalid_argument('ModelSpec has no name specified.')
    with self._lock:
      model = self._models.get(name)
      if model is not None and label is not None:
        labels = model.config.labels
        if label not in labels:
          raise status.invalid_argument(
              f'Unrecognized servable version label: {label}')
        version = labels[label]
      elif model is None and label is not None:
        raise status.invalid_argument(
            f'Unrecognized servable version label: {label}')
      serving = model.serving if model is not None else {}
      if version is None:
        servable = serving[max(serving)] if serving else None
      else:
        servable = serving.get(version)
      if servable is None:
        raise status.not_found(
            f'Servable not found for request: {_request_text(name, version)}')
      servable.acquire()
    return ServableHandle(servable)

  def why_not_serving(self, name: str) -> str:
    """Why a model serves no version (what start() logs for it).

    Args:
      name: the model.

    Returns:
      Each failed version's last error, newest first; or that no version
      is on disk yet.
    """
    model = self._models.get(name)
    if model is None:
      return f'no model {name} is configured.'
    failed = [s for s in model.versions.values() if _failed(s)]
    if not failed:
      return (f'no version under {model.config.base_path} yet; requests get '
              'NOT_FOUND until one is pushed.')
    return '; '.join(f'version {s.version} failed: {s.error_message}'
                     for s in sorted(failed, key=lambda s: -s.version))

  def is_known_model(self, name: str) -> bool:
    return name in self._models

  def model_names(self) -> List[str]:
    return sorted(self._models)

  def serving_versions(self) -> Dict[str, List[int]]:
    """Model -> versions currently serving."""
    return {name: sorted(model.serving)
            for name, model in sorted(self._models.items())}

  def version_states(self, name: str) -> Dict[int, VersionState]:
    """A copy of the states of a model's versions (for status and tests)."""
    model = self._models.get(name)
    if model is None:
      return {}
    return {v: dataclasses.replace(s) for v, s in model.versions.items()}

  def model_status(self, name: str, version: Optional[int] = None,
                   label: Optional[str] = None) -> List[VersionState]:
    """Returns version states, newest first, as GetModelStatus reports them.

    Raises:
      ServingError: NOT_FOUND for an unknown model or version,
        INVALID_ARGUMENT for an unknown label.
    """
    model = self._models.get(name)
    if label is not None:
      labels = model.config.labels if model is not None else {}
      if label not in labels:
        raise status.invalid_argument(
            f'Unrecognized servable version label: {label}')
      version = labels[label]
    states = dict(model.versions) if model is not None else {}
    if version is not None:
      if version not in states:
        raise status.not_found(
            f'Could not find version {version} of model {name}')
      return [states[version]]
    if not states:
      raise status.not_found(f'Could not find any versions of model {name}')
    return [states[v] for v in sorted(states, reverse=True)]
