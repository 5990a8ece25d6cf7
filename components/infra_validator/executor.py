"""InfraValidator's executor: checks its inputs, then serves and queries the model.

``Do`` validates every input first (a blessed Evaluator verdict, a
Format-Serving SavedModel, eval examples), then:

  1. copies the SavedModel into a local folder and adds TF Serving's
     warm-up file of real eval rows to it;
  2. serves that copy (the model that will be pushed, warm-up included: a
     failing warm-up record fails the load, as in TF Serving) in ``leantfx
     serve`` and checks it (leantfx/infra_check.py) against the original
     SavedModel's own answers on the same rows;
  3. keeps the copy in the InfraBlessing (``stamped_model/``, TFX's layout)
     and marks it blessed with ``has_model`` = 1, or marks it not blessed
     with the reason (no copy: nothing to push).

A model that does not load, answers otherwise or times out is a verdict
(INFRA_NOT_BLESSED), not an error: the run goes on and the Pusher pushes
nothing. Inputs that cannot be used (no SavedModel, no eval rows) are an
error, as in every leantfx executor.
"""
import json
import os
import tempfile
import time
from typing import Any, Dict, List

from absl import logging
from tfx import types
from tfx.components.util import model_utils
from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.utils import io_utils
from tfx.utils import path_utils

from leantfx import columns
from leantfx import infra_check
from leantfx.components.infra_validator import requests
from leantfx.components.infra_validator import spec as spec_lib
from leantfx.components.optimize.inputs import split_files
from leantfx.errors import ConfigError
from leantfx.errors import InputDataError


def _mark(blessing: types.Artifact, blessed: bool, reason: str = '') -> None:
  """TFX's verdict file and ``blessed`` property, with leantfx's reason."""
  fileio.makedirs(blessing.uri)
  marker = spec_lib.BLESSED_FILE if blessed else spec_lib.NOT_BLESSED_FILE
  io_utils.write_string_file(os.path.join(blessing.uri, marker), '')
  blessing.set_int_custom_property(spec_lib.BLESSED_PROPERTY, int(blessed))
  blessing.set_int_custom_property(spec_lib.HAS_MODEL_PROPERTY, int(blessed))
  if reason:
    blessing.set_string_custom_property(spec_lib.REASON_PROPERTY, reason)


def _serve_args(exec_properties: Dict[str, Any]) -> List[str]:
  text = exec_properties.get(spec_lib.SERVE_ARGS_KEY) or '[]'
  try:
    args = json.loads(text)
  except ValueError:
    args = None
  if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
    raise ConfigError(f'InfraValidator\'s {spec_lib.SERVE_ARGS_KEY!r} must be '
                      f'a JSON list of `leantfx serve` options, got {text!r}.')
  return args


class Executor(base_executor.BaseExecutor):
  """Validates the inputs, then serves, queries and blesses (or not)."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    """Infra-validates the model; see InfraValidator.

    Raises:
      ConfigError: invalid execution properties.
      InputDataError: no SavedModel, or no usable eval rows.
    """
    self._log_startup(input_dict, output_dict, exec_properties)
    started = time.monotonic()
    model = artifact_utils.get_single_instance(input_dict[spec_lib.MODEL_KEY])
    model_blessing = artifact_utils.get_single_instance(
        input_dict[spec_lib.MODEL_BLESSING_KEY])
    examples = artifact_utils.get_single_instance(
        input_dict[spec_lib.EXAMPLES_KEY])
    blessing = artifact_utils.get_single_instance(
        output_dict[spec_lib.BLESSING_KEY])
    model_name = exec_properties.get(spec_lib.MODEL_NAME_KEY) or ''
    if not model_name:
      raise ConfigError(f'InfraValidator needs {spec_lib.MODEL_NAME_KEY!r}: '
                        'the model\'s name in the server.')
    serve_args = _serve_args(exec_properties)
    # The deployment's options the model was (or would have been) served with.
    blessing.set_string_custom_property(spec_lib.SERVE_ARGS_KEY,
                                        json.dumps(list(serve_args)))
    if not model_utils.is_model_blessed(model_blessing):
      _mark(blessing, False, 'the Evaluator did not bless the model')
      return
    model_path = path_utils.serving_model_path(model.uri)
    if not fileio.exists(os.path.join(model_path, 'saved_model.pb')):
      raise InputDataError(
          f'InfraValidator: no SavedModel at {model_path} (no saved_model.pb);'
          ' the Trainer writes its serving model there (Format-Serving).')
    eval_files = split_files(examples, spec_lib.EVAL_SPLIT, 'raw examples')

    settings = infra_check.Settings(serve_args=tuple(serve_args))
    signature = requests.serving_signature(model_path)
    rows = requests.read_rows(eval_files, requests.input_specs(signature),
                              settings.max_rows)
    expected = requests.offline_outputs(signature, rows)
    request_rows = requests.as_written(rows, columns.recorded_names(examples))
    # The copy is built and served in a local folder (the server reads local
    # files; the artifact may be on gs:// on Kubeflow), then kept in the
    # InfraBlessing only when it passed.
    with tempfile.TemporaryDirectory(prefix='leantfx-infra-') as scratch:
      local = os.path.join(scratch, 'stamped_model')
      io_utils.copy_dir(model_path, local)
      warmup = requests.write_warmup_file(local, rows, model_name)
      logging.info('InfraValidator: wrote %s; serving the model in leantfx '
                   'serve.', warmup)
      result = infra_check.check(
          [infra_check.Candidate(model_name, local, request_rows, expected)],
          settings)[model_name]
      if result.passed:
        io_utils.copy_dir(local, path_utils.stamped_model_path(blessing.uri))
    for name, value in result.figures.items():
      blessing.set_float_custom_property(spec_lib.FIGURE_PREFIX + name,
                                         float(value))
    # What the check cost this run (the run summary prints it).
    blessing.set_float_custom_property(spec_lib.SECONDS_PROPERTY,
                                       time.monotonic() - started)
    if not result.passed:
      logging.error('InfraValidator: %s is not blessed: %s', model.uri,
                    result.reason)
      _mark(blessing, False, result.reason)
      return
    logging.info('InfraValidator: %s blessed: %s', model.uri, result.figures)
    _mark(blessing, True)
