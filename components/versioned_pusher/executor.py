"""Executor of VersionedPusher.

TFX's Pusher copies the model straight into ``<base>/<unix time>/`` (writing
saved_model.pb last), and pushes the same model again as a new version each
time the Evaluator re-blesses it, e.g. when a re-run first finds a baseline.
This executor instead pushes through leantfx/versioned_push.py, the
versioned atomic push the TFLite push uses too:
  * on a local filesystem, copies into a hidden staging folder beside the
    versions and renames it into place, so a model server polling ``<base>``
    never sees a half-written version (TF Serving ignores non-numeric folder
    names);
  * on an object store (``gs://``, ``s3://``, any ``scheme://`` that
    tf.io.gfile knows), where renaming a folder is not one operation (it is
    not even supported by every filesystem plugin), copies straight into the
    version folder with the SavedModel's ``saved_model.pb`` (the commit file)
    written last, as TFX's Pusher does: TF Serving cannot load a version
    before that file exists;
  * picks a version strictly greater than every existing one and than the
    last one ever pushed there (versioned_push.next_version);
  * does not push a model whose files are identical to the newest pushed
    version: it records that version as the push instead;
  * with an InfraValidator's blessing (``infra_blessing``), pushes only a
    model it blessed, and pushes the InfraBlessing's copy of the model,
    which carries TF Serving's warm-up requests (``GetModelPath``);
  * with ``custom_config['blessed_model_records']`` (a folder), adds a
    record of the pushed model there, from which the next runs take their
    last blessed model where no ML Metadata resolver runs
    (components/blessed_model/records.py).
All file access goes through tfx.dsl.io.fileio (tf.io.gfile), so the same
code pushes to a local folder and to a bucket on Kubeflow.
"""
import hashlib
import json
import os
from typing import Any, Dict, List

from absl import logging
from tfx import types
from tfx.components.pusher import executor as tfx_pusher_executor
from tfx.dsl.io import fileio
from tfx.proto import pusher_pb2
from tfx.types import artifact_utils
from tfx.types import standard_component_specs
from tfx.utils import io_utils
from tfx.utils import path_utils
from tfx.utils import proto_utils

from leantfx import versioned_push
from leantfx.components.blessed_model import records
from leantfx.models import serving_graph

REUSED_VERSION_KEY = 'reused_existing_version'
# custom_config key: the folder of the blessed-model records to keep.
RECORDS_DIR_CONFIG_KEY = 'blessed_model_records'
# The pushed serving graph's op count and call cost (models/serving_graph.py);
# pipeline/run_summary.py reads them by these names.
SERVING_OPS_KEY = 'serving_graph_ops'
SERVING_CALL_MS_KEY = 'serving_call_ms_batch{batch}'
# The commit files: written last on object stores, a version without one is
# not loadable yet.
SAVED_MODEL_FILES = ('saved_model.pb', 'saved_model.pbtxt')


def model_digest(path: str) -> str:
  """sha256 over the relative paths and contents of every file below path."""
  digest = hashlib.sha256()
  for relative in versioned_push.files_below(path):
    digest.update(relative.encode('utf-8') + b'\0')
    with fileio.open(os.path.join(path, relative), 'rb') as f:
      for block in iter(lambda: f.read(1 << 20), b''):
        digest.update(block)
  return digest.hexdigest()


def push_atomically(model_path: str, base_directory: str,
                    version: int) -> str:
  """Copies model_path to base_directory/version (see the module docstring).

  Args:
    model_path: the SavedModel (or any model folder) to push.
    base_directory: the serving base folder of one model.
    version: the version folder name to create; must not exist.

  Returns:
    The version folder's path.

  Raises:
    FileExistsError: if the version folder already exists.
  """
  return versioned_push.push(
      base_directory,
      versioned_push.directory_payload(model_path, SAVED_MODEL_FILES),
      version=version).path


# TFX's InfraBlessing property: the blessing holds the model with its
# warm-up requests (tfx/components/infra_validator/executor.py).
INFRA_HAS_MODEL_PROPERTY = 'has_model'


class Executor(tfx_pusher_executor.Executor):
  """Pushes a blessed model atomically, once per distinct model."""

  def GetModelPath(self, input_dict: Dict[str, List[types.Artifact]]) -> str:
    """The InfraBlessing's model when it has one, else the Trainer's.

    TFX's Pusher reads ``model`` first and the InfraBlessing's model only
    without one; here the InfraBlessing's copy wins, since it is the
    Trainer's SavedModel plus the warm-up requests the model server replays
    at load, and the very files the InfraValidator served.
    """
    infra = input_dict.get(standard_component_specs.INFRA_BLESSING_KEY)
    if infra:
      blessing = artifact_utils.get_single_instance(infra)
      if (blessing.has_custom_property(INFRA_HAS_MODEL_PROPERTY) and
          blessing.get_int_custom_property(INFRA_HAS_MODEL_PROPERTY)):
        return path_utils.stamped_model_path(blessing.uri)
    return super().GetModelPath(input_dict)

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    """Pushes the model if blessed (see the module docstring).

    Args:
      input_dict: 'model', 'model_blessing' and optionally 'infra_blessing',
        as for TFX's Pusher.
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
    versions = versioned_push.list_versions(base_directory)
    if versions:
      newest = os.path.join(base_directory, str(versions[-1]))
      if model_digest(newest) == digest:
        logging.info('Model %s is identical to the pushed version %s; not '
                     'pushing it again.', model_path, newest)
        model_push.set_int_custom_property(REUSED_VERSION_KEY, 1)
        self._MarkPushed(model_push, pushed_destination=newest,
                         pushed_version=str(versions[-1]))
        _keep_record(input_dict, exec_properties, str(versions[-1]))
        return
    pushed = versioned_push.push(
        base_directory,
        versioned_push.directory_payload(model_path, SAVED_MODEL_FILES),
        existing=versions)
    version, serving_path = pushed.version, pushed.path
    logging.info('Model pushed to %s.', serving_path)
    # Like TFX's Pusher, keep a copy in the artifact for lineage.
    io_utils.copy_dir(model_path, model_push.uri)
    model_push.set_string_custom_property('model_sha256', digest)
    _record_serving_cost(model_path, model_push)
    self._MarkPushed(model_push, pushed_destination=serving_path,
                     pushed_version=str(version))
    _keep_record(input_dict, exec_properties, str(version))


def _keep_record(input_dict: Dict[str, List[types.Artifact]],
                 exec_properties: Dict[str, Any], version: str) -> None:
  """Records the pushed model as the last blessed one, when asked to."""
  custom_config = exec_properties.get(
      standard_component_specs.CUSTOM_CONFIG_KEY) or '{}'
  if isinstance(custom_config, str):
    custom_config = json.loads(custom_config)
  directory = (custom_config or {}).get(RECORDS_DIR_CONFIG_KEY)
  if not directory:
    return
  model = artifact_utils.get_single_instance(
      input_dict[standard_component_specs.MODEL_KEY])
  path = records.write_record(directory, model.uri, version)
  logging.info('Recorded %s as the last blessed model in %s.', model.uri,
               path)


def _record_serving_cost(model_path: str, model_push: types.Artifact) -> None:
  """Records the pushed serving graph's op count and call cost.

  A figure for the run summary: a model that cannot be measured (say, a
  signature that refuses filler values) is pushed all the same, with a
  warning in the log and no figure.
  """
  try:
    cost = serving_graph.measure(model_path)
  except Exception as e:  # pylint: disable=broad-except
    logging.warning('Could not measure the serving graph of %s: %s: %s',
                    model_path, type(e).__name__, e)
    return
  model_push.set_int_custom_property(SERVING_OPS_KEY, cost.ops)
  for batch, ms in cost.call_ms.items():
    if ms is not None:
      model_push.set_float_custom_property(
          SERVING_CALL_MS_KEY.format(batch=batch), ms)
