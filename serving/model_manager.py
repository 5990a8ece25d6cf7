"""Loading, hot-swapping and unloading model versions; finding the one to serve.

The manager polls each model's base path (``--file-system-poll-wait-seconds``),
works out which versions the policy wants, and for each new one: loads it, warms
it up, and only then publishes it. Publishing replaces the model's serving map
in one step under a lock, so a request sees either the old set of versions or
the new one. A version leaving the map is unloaded in the background once the
requests that started on it have finished.

Availability comes first, as with TF Serving's ``AvailabilityPreservingPolicy``:
a version that fails to load (no ``saved_model.pb``, truncated variables, a
graph that does not parse, a failing warmup record) is logged, retried at the
next polls up to ``max_num_load_retries`` times, then left in state END with
its error; it never replaces a working version. It is tried again only if its
directory changes (a new inode or mtime, e.g. a fixed copy renamed into place).
With the latest-version policy, a version given up no longer counts: the newest
loadable one below it is served instead (TF Serving would serve nothing after
a restart whose newest version is broken; leantfx serves the one before it).

A version whose ``feature_names.json`` maps its columns' original names to
the model's input keys is published wrapped so that it takes and shows the
original names (:mod:`renamed_inputs`); a malformed file fails its load.
"""
import dataclasses
import logging
import os
import threading
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from leantfx.serving import feature_names
from leantfx.serving import loading
from leantfx.serving import model_config as model_config_lib
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
    attempts: load attempts so far.
    dir_signature: (inode, mtime_ns) of the directory when last tried.
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
  dir_signature: Tuple[int, int] = (0, 0)
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


def _dir_signature(path: str) -> Tuple[int, int]:
  try:
    info = os.stat(path)
  except OSError:
    return (0, 0)
  return (info.st_ino, info.st_mtime_ns)


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
               loader: Loader = loading.load_servable):
    """Creates a manager; nothing loads until poll_once() or start().

    Args:
      model_source: returns the models to serve (called at every poll, so a
        directory source picks up new model directories).
      max_num_load_retries: load attempts after the first before a version is
        given up (TF Serving's ``--max_num_load_retries``, default 5).
      enable_warmup: run warmup before a version serves.
      loader: (name, version, path, platform) -> Servable; tests inject one.
    """
    self._source = model_source
    self._max_retries = max(0, max_num_load_retries)
    self._enable_warmup = enable_warmup
    self._loader = loader
    self._models: Dict[str, _Model] = {}
    self._lock = threading.Lock()
    self._poll_lock = threading.Lock()
    self._stop = threading.Event()
    self._thread: Optional[threading.Thread] = None
    self._unload_threads: List[threading.Thread] = []
    self.load_failures = 0

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

  def _given_up(self, state: Optional[VersionState],
                signature: Tuple[int, int]) -> bool:
    return (state is not None and state.state == END and
            state.servable is None and state.error_code != status.Code.OK and
            state.dir_signature == signature)

  def _desired(self, model: _Model, on_disk: Mapping[int, str],
               signatures: Mapping[int, Tuple[int, int]]) -> set:
    policy = model.config.version_policy
    if policy.kind != model_config_lib.POLICY_LATEST:
      return set(policy.select(sorted(on_disk)))
    # The newest versions that have not been given up: when the newest is
    # broken, the next one down is wanted instead (availability first).
    desired = set()
    for version in sorted(on_disk, reverse=True):
      if not self._given_up(model.versions.get(version), signatures[version]):
        desired.add(version)
        if len(desired) == policy.num_versions:
          break
    return desired

  def _reconcile(self, model: _Model) -> None:
    config = model.config
    on_disk = model_config_lib.list_versions(config.base_path)
    signatures = {v: _dir_signature(p) for v, p in on_disk.items()}
    attempted = set()
    while True:
      desired = self._desired(model, on_disk, signatures)
      todo = []
      for version in sorted(desired - attempted, reverse=True):
        state = model.versions.get(version)
        if state is None or (state.state == END and state.servable is None and
                             state.error_code != status.Code.OK and
                             state.dir_signature != signatures[version]):
          if state is None:
            _log.info('Found model %s version %d at %s', config.name,
                      version, on_disk[version])
          state = VersionState(version, on_disk[version],
                               detected_at=time.monotonic())
          model.versions[version] = state
        if state.state in (START, LOADING):
          todo.append(state)
      if not todo:
        break
      for state in todo:
        attempted.add(state.version)
        state.dir_signature = signatures[state.version]
        self._try_load(model, state)

    available = {v for v, s in model.versions.items()
                 if s.state == AVAILABLE and s.servable is not None}
    keep = set(desired & available)
    policy = config.version_policy
    if policy.kind == model_config_lib.POLICY_LATEST:
      spare = sorted(available - keep, reverse=True)
      keep.update(spare[:max(0, policy.num_versions - len(keep))])
    elif not keep and available:
      keep = {max(available)}
    changed = set(model.serving) != keep
    if changed:
      new_serving = {v: model.versions[v].servable for v in sorted(keep)}
      with self._lock:
        model.serving = new_serving
      _log.info('Model %s now serves version(s) %s', config.name,
                sorted(keep) or 'none')
    # Unpublished first (above), then unloaded once idle.
    for version in sorted(available - keep):
      self._unload(model, model.versions[version])
    self._forget_old(model)

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
    if state.attempts > self._max_retries:
      state.state = END
      _log.error(
          'Loading model %s version %d failed after %d attempt(s); it will not '
          'serve until its directory changes: %s', model.config.name,
          state.version, state.attempts, message)
    else:
      state.state = LOADING
      _log.warning(
          'Loading model %s version %d failed (attempt %d of %d, retried at '
          'the next poll): %s', model.config.name, state.version,
          state.attempts, self._max_retries + 1, message)

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
