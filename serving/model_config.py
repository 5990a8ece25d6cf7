"""Which models to serve, from where, and which of their versions.

Two sources, as with ``tensorflow_model_server``:

* a base directory: ``<base>/<model>/<numeric version>/`` (what leantfx's pusher
  writes). With a model name, ``<base>/<name>`` (or ``<base>`` itself when it
  holds the version directories, TF Serving's ``--model_base_path``) is that one
  model; without one, every model directory under ``<base>`` is served.
* a ``models.config`` file: a text ``ModelServerConfig`` proto, parsed with
  ``tensorflow_serving.config.model_server_config_pb2``: names, base paths,
  ``model_platform``, ``model_version_policy`` (latest N, all, specific) and
  ``version_labels``. Any other field set in an entry (``logging_config``,
  the deprecated ``model_type``) is refused, naming the field, the model and
  the file: leantfx would not do what it asks, and a setting must never be
  silently ignored. An unknown field fails the parse.

Version directories are named by a decimal int64; anything else (``.tmp-3``,
``3.partial``) is ignored, so writing a version to a temporary name and
renaming it into place is an atomic push.
"""
import dataclasses
import os
import re
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

from leantfx.errors import ConfigError

_MODEL_NAME_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$')
_VERSION_RE = re.compile(r'^[0-9]{1,19}$')
_INT64_MAX = 2**63 - 1

POLICY_LATEST = 'latest'
POLICY_ALL = 'all'
POLICY_SPECIFIC = 'specific'

# The ModelConfig fields leantfx serve implements; any other one set in a
# models.config entry is refused. Why each of the others is not:
# logging_config (request logging) is not implemented yet; model_type is
# deprecated in TF Serving in favour of model_platform.
IMPLEMENTED_MODEL_CONFIG_FIELDS = frozenset((
    'name', 'base_path', 'model_platform', 'model_version_policy',
    'version_labels'))


def is_valid_model_name(name: str) -> bool:
  """True for names usable in URLs and paths: no ``/``, ``..``, ``%`` or spaces."""
  return bool(_MODEL_NAME_RE.match(name)) and '..' not in name


def parse_version_dir_name(name: str) -> Optional[int]:
  """Returns the version a directory name stands for, or None if it is none."""
  if not _VERSION_RE.match(name):
    return None
  value = int(name)
  return value if value <= _INT64_MAX else None


@dataclasses.dataclass(frozen=True)
class VersionPolicy:
  """Which of the versions on disk should serve (``ServableVersionPolicy``).

  Attributes:
    kind: ``latest``, ``all`` or ``specific``.
    num_versions: how many of the highest versions ``latest`` keeps.
    versions: the versions ``specific`` serves.
  """
  kind: str = POLICY_LATEST
  num_versions: int = 1
  versions: Tuple[int, ...] = ()

  def __post_init__(self):
    if self.kind not in (POLICY_LATEST, POLICY_ALL, POLICY_SPECIFIC):
      raise ConfigError(f'Unknown version policy {self.kind!r}.')
    if self.kind == POLICY_LATEST and self.num_versions < 1:
      raise ConfigError(
          f'latest {{ num_versions: {self.num_versions} }} must be >= 1.')
    if self.kind == POLICY_SPECIFIC and not self.versions:
      raise ConfigError('A specific version policy needs at least one version.')

  def select(self, on_disk: Sequence[int]) -> FrozenSet[int]:
    """Returns the versions that should serve, given those on disk."""
    if self.kind == POLICY_ALL:
      return frozenset(on_disk)
    if self.kind == POLICY_SPECIFIC:
      return frozenset(v for v in on_disk if v in self.versions)
    return frozenset(sorted(on_disk)[-self.num_versions:])


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """One model to serve.

  Attributes:
    name: the model name in URLs and ModelSpecs.
    base_path: the directory holding its numeric version directories.
    platform: ``model_platform`` ('' or ``tensorflow`` = by directory content,
      ``tflite`` = TFLite).
    version_policy: which versions serve.
    version_labels: label -> version.
  """
  name: str
  base_path: str
  platform: str = ''
  version_policy: VersionPolicy = VersionPolicy()
  version_labels: Tuple[Tuple[str, int], ...] = ()

  def __post_init__(self):
    if not is_valid_model_name(self.name):
      raise ConfigError(
          f'Model name {self.name!r} is not valid: use letters, digits, '
          '"_", "-" or "." (no "..", "/" or spaces), at most 128 characters.')
    if not self.base_path:
      raise ConfigError(f'Model {self.name!r} has an empty base_path.')

  @property
  def labels(self) -> Dict[str, int]:
    return dict(self.version_labels)


def list_versions(base_path: str) -> Dict[int, str]:
  """Returns version -> directory for the numeric subdirectories of a model.

  A missing base path has no versions (the model may not be pushed yet).
  """
  try:
    entries = list(os.scandir(base_path))
  except (FileNotFoundError, NotADirectoryError):
    return {}
  versions = {}
  for entry in entries:
    version = parse_version_dir_name(entry.name)
    if version is not None and entry.is_dir():
      versions[version] = entry.path
  return versions


def _policy_from_proto(policy_proto) -> VersionPolicy:
  kind = policy_proto.WhichOneof('policy_choice')
  if kind is None or kind == POLICY_LATEST:
    num = policy_proto.latest.num_versions if kind else 0
    return VersionPolicy(POLICY_LATEST, num_versions=num or 1)
  if kind == POLICY_ALL:
    return VersionPolicy(POLICY_ALL)
  return VersionPolicy(POLICY_SPECIFIC,
                       versions=tuple(policy_proto.specific.versions))


def parse_model_config_text(text: str, source: str = 'models.config'
                            ) -> List[ModelConfig]:
  """Parses a text ``ModelServerConfig`` into ModelConfigs.

  Args:
    text: the file content.
    source: the file name, for messages.

  Returns:
    One ModelConfig per ``config`` entry.

  Raises:
    ConfigError: the text does not parse, uses ``custom_model_config``,
      sets a field leantfx does not implement (``logging_config``,
      ``model_type``), names an unknown ``model_platform``, or names a model
      twice.
  """
  from google.protobuf import text_format  # pylint: disable=g-import-not-at-top
  from tensorflow_serving.config import model_server_config_pb2  # pylint: disable=g-import-not-at-top
  config = model_server_config_pb2.ModelServerConfig()
  try:
    text_format.Parse(text, config)
  except text_format.ParseError as e:
    raise ConfigError(
        f'{source} is not a valid ModelServerConfig text proto: {e}. Expected '
        'model_config_list { config { name: "..." base_path: "..." } }.'
    ) from None
  if config.WhichOneof('config') == 'custom_model_config':
    raise ConfigError(f'{source} uses custom_model_config, which leantfx '
                      'does not serve; use model_config_list.')
  models = []
  seen = set()
  for entry in config.model_config_list.config:
    _refuse_unimplemented(entry, source)
    if entry.name in seen:
      raise ConfigError(f'{source} lists model {entry.name!r} twice.')
    seen.add(entry.name)
    models.append(ModelConfig(
        name=entry.name,
        base_path=entry.base_path,
        platform=entry.model_platform,
        version_policy=_policy_from_proto(entry.model_version_policy),
        version_labels=tuple(sorted(entry.version_labels.items()))))
  if not models:
    raise ConfigError(f'{source} lists no models.')
  return models


def _refuse_unimplemented(entry, source: str) -> None:
  """Raises ConfigError for a field of a ModelConfig entry leantfx ignores."""
  from leantfx.runtimes import registry  # pylint: disable=g-import-not-at-top
  for field, _ in entry.ListFields():
    if field.name not in IMPLEMENTED_MODEL_CONFIG_FIELDS:
      raise ConfigError(
          f'{source}: model {entry.name!r} sets {field.name}, which leantfx '
          'serve does not implement (it implements '
          f'{", ".join(sorted(IMPLEMENTED_MODEL_CONFIG_FIELDS))}); remove '
          f'{field.name} from the file, or serve it with TensorFlow Serving.')
  platforms = ('', 'tensorflow') + tuple(registry.RUNTIMES)
  if entry.model_platform not in platforms:
    raise ConfigError(
        f'{source}: model {entry.name!r} has model_platform '
        f'{entry.model_platform!r}; leantfx serve knows '
        f'{", ".join(repr(p) for p in platforms[1:])} (or none: by the '
        'version\'s files).')


def read_model_config_file(path: str) -> List[ModelConfig]:
  """Reads and parses a ``models.config`` file (see parse_model_config_text)."""
  try:
    with open(path, encoding='utf-8') as f:
      text = f.read()
  except OSError as e:
    raise ConfigError(f'Cannot read model config file {path}: {e}') from None
  return parse_model_config_text(text, path)


def _has_versions(path: str) -> bool:
  return bool(list_versions(path))


def models_from_base_path(base_path: str,
                          model_name: Optional[str] = None
                          ) -> List[ModelConfig]:
  """Returns the models a base directory holds.

  Args:
    base_path: ``<base>`` of ``<base>/<model>/<version>/``, or, with
      `model_name`, the model directory itself.
    model_name: serve only this model.

  Returns:
    The model configs (latest-version policy).

  Raises:
    ConfigError: the directory does not exist, or holds no model directory.
  """
  if not os.path.isdir(base_path):
    raise ConfigError(f'--model-base-path {base_path} is not a directory.')
  base_path = os.path.abspath(base_path)
  if model_name is not None:
    candidate = os.path.join(base_path, model_name)
    if os.path.isdir(candidate) or not _has_versions(base_path):
      return [ModelConfig(model_name, candidate)]
    return [ModelConfig(model_name, base_path)]
  models = []
  for entry in sorted(os.scandir(base_path), key=lambda e: e.name):
    if (entry.is_dir() and is_valid_model_name(entry.name) and
        parse_version_dir_name(entry.name) is None):
      models.append(ModelConfig(entry.name, entry.path))
  if not models:
    raise ConfigError(
        f'{base_path} holds no model directories (<base>/<model>/<version>/). '
        'Pass --model-name to serve a directory of version directories.')
  return models
