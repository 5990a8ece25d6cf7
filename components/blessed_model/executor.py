"""Executor of LastBlessedModel: copies the newest recorded model.

A task's output artifact is always a new folder on KFP, so the model is
copied into it (a SavedModel and its Keras twin: megabytes). With no record
the folder stays empty and FOUND_PROPERTY is 0; the Evaluator and the warm
start then run without a baseline, as they do on the first local run.
"""
from typing import Any, Dict, List

from absl import logging
from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.utils import io_utils

from leantfx.components.blessed_model import records
from leantfx.components.blessed_model import spec as spec_lib


def has_model(model: types.Artifact) -> bool:
  """Whether a Model artifact holds a model.

  LastBlessedModel's says so in FOUND_PROPERTY; any other Model (a
  Resolver's, a Trainer's) holds one when its folder has files.
  """
  if model.has_custom_property(spec_lib.FOUND_PROPERTY):
    return bool(model.get_int_custom_property(spec_lib.FOUND_PROPERTY))
  return fileio.isdir(model.uri) and bool(fileio.listdir(model.uri))


class Executor(base_executor.BaseExecutor):
  """Finds the newest blessed-model record and copies its model."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    """Copies the last blessed model into the output Model.

    Args:
      input_dict: empty.
      output_dict: 'model'.
      exec_properties: 'records_dir'.

    Raises:
      ValueError: if records_dir is empty.
    """
    directory = exec_properties.get(spec_lib.RECORDS_DIR_KEY)
    if not directory:
      raise ValueError(
          f'LastBlessedModel needs {spec_lib.RECORDS_DIR_KEY!r}, the folder '
          'the Pusher keeps its records in (records.records_dir()).')
    model = artifact_utils.get_single_instance(
        output_dict[spec_lib.MODEL_KEY])
    record = records.latest_record(directory)
    if record is None:
      logging.info('No blessed-model record in %s: no baseline yet.',
                   directory)
      model.set_int_custom_property(spec_lib.FOUND_PROPERTY, 0)
      return
    source = record[records.MODEL_URI]
    logging.info('Last blessed model: %s (version %s).', source,
                 record[records.PUSHED_VERSION])
    io_utils.copy_dir(source, model.uri)
    model.set_int_custom_property(spec_lib.FOUND_PROPERTY, 1)
    model.set_string_custom_property(spec_lib.SOURCE_URI_PROPERTY, source)
