"""Executor of VersionedPusher.

TFX's Pusher copies the model straight into ``<base>/<unix time>/`` (writing
saved_model.pb last), and pushes the same model again as a new version each
time the Evaluator re-blesses it, e.g. when a re-run first finds a baseline.
This executor instead:
  * copies into a hidden ``<base>/.push-<version>-<pid>/`` and renames it into
    place, so a model server polling ``<base>`` never sees a half-written
    version (TF Serving ignores non-numeric folder names);
  * picks a version strictly greater than every existing one;
  * does not push a model whose files are identical to the newest pushed
    version: it records that version as the push instead.
"""
import hashlib
import os
import shutil
import time
from typing import Any, Dict, List, Optional

from absl import logging
from tfx import types
from tfx.components.pusher import executor as tfx_pusher_executor
from tfx.proto import pusher_pb2
from tfx.types import artifact_utils
from tfx.types import standard_component_specs
from tfx.utils import io_utils
from tfx.utils import proto_utils

REUSED_VERSION_KEY = 'reused_existing_version'


def model_digest(path: str) -> str:
  """sha256 over the relative paths and contents of every file below path."""
  digest = hashlib.sha256()
  for root, dirs, files in os.walk(path):
    dirs.sort()
    for name in sorted(files):
      full = os.path.join(root, name)
      digest.update(os.path.relpath(full, path).encode('utf-8') + b'\0')
      with open(full, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
          digest.update(block)
  return digest.hexdigest()


def existing_versions(base_directory: str) -> List[int]:
  """Numeric version folders below base_directory, ascending."""
  if not os.path.isdir(base_directory):
    return []
  return sorted(
      int(name) for name in os.listdir(base_directory)
      if name.isdigit() and os.path.isdir(os.path.join(base_directory, name)))


def next_version(base_directory: str, now: Optional[int] = None) -> int:
  """The Unix time, or one more than the newest version if that is later."""
  now = int(time.time()) if now is None else now
  versions = existing_versions(base_directory)
  return max([now] + [v + 1 for v in versions])


def push_atomically(model_path: str, base_directory: str,
                    version: int) -> str:
  """Copies model_path to base_directory/version via a hidden temp folder.

  Args:
    model_path: the SavedModel (or any model folder) to push.
    base_directory: the serving base folder of one model.
    version: the version folder name to create; must not exist.

  Returns:
    The version folder's path.

  Raises:
    FileExistsError: if the version folder already exists.
  """
  os.makedirs(base_directory, exist_ok=True)
  destination = os.path.join(base_directory, str(version))
  if os.path.exists(destination):
    raise FileExistsError(f'{destination} already exists; refusing to '
                          'overwrite a pushed version.')
  staging = os.path.join(base_directory, f'.push-{version}-{os.getpid()}')
  shutil.rmtree(staging, ignore_errors=True)
  try:
    shutil.copytree(model_path, staging)
    os.rename(staging, destination)
  finally:
    shutil.rmtree(staging, ignore_errors=True)
  return destination


class Executor(tfx_pusher_executor.Executor):
  """Pushes a blessed model atomically, once per distinct model."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    """Pushes the model if blessed (see the module docstring).

    Args:
      input_dict: 'model' and 'model_blessing', as for TFX's Pusher.
      output_dict: 'pushed_model'.
      exec_properties: 'push_destination' with a filesystem destination.

    Raises:
      ValueError: if the destination is not a filesystem folder.
    """
    self._log_startup(input_dict, output_dict, exec_properties)
    model_push = artifact_utils.get_single_instance(
        output_dict[standard_component_specs.PUSHED_MODEL_KEY])
    if not self.CheckBlessing(input_dict):
      self._MarkNotPushed(model_push)
      return
    push_destination = pusher_pb2.PushDestination()
    proto_utils.json_to_proto(
        exec_properties[standard_component_specs.PUSH_DESTINATION_KEY],
        push_destination)
    if push_destination.WhichOneof('destination') != 'filesystem':
      raise ValueError(
          'VersionedPusher pushes to a filesystem folder only; got push '
          f'destination {push_destination}. Set '
          'push_destination.filesystem.base_directory.')
    base_directory = push_destination.filesystem.base_directory
    model_path = self.GetModelPath(input_dict)
    digest = model_digest(model_path)
    versions = existing_versions(base_directory)
    if versions:
      newest = os.path.join(base_directory, str(versions[-1]))
      if model_digest(newest) == digest:
        logging.info('Model %s is identical to the pushed version %s; not '
                     'pushing it again.', model_path, newest)
        model_push.set_int_custom_property(REUSED_VERSION_KEY, 1)
        self._MarkPushed(model_push, pushed_destination=newest,
                         pushed_version=str(versions[-1]))
        return
    version = next_version(base_directory)
    serving_path = push_atomically(model_path, base_directory, version)
    logging.info('Model pushed to %s.', serving_path)
    # Like TFX's Pusher, keep a copy in the artifact for lineage.
    io_utils.copy_dir(model_path, model_push.uri)
    model_push.set_string_custom_property('model_sha256', digest)
    self._MarkPushed(model_push, pushed_destination=serving_path,
                     pushed_version=str(version))
