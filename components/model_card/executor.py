"""ModelCardGenerator's executor: checks its inputs, reads the run, writes the card.

``Do`` validates every input and parameter first, then, for a model the
Pusher pushed, reads the run's figures (facts.py), builds the card
(card.py; the tests check its JSON against model_card.schema.json) and writes
model_card.json, .md and .html to ``<card base>/<model>/<version>/`` (each
file written beside its place and renamed over it, so a reader never sees a
half-written card) and into the output artifact. A model that was not pushed
gets no card: the artifact says so.
"""
import datetime
import json
import os
from typing import Any, Dict, List, Optional

from absl import logging
from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils

from leantfx import config as config_lib
from leantfx import sizing
from leantfx.components.model_card import card as card_lib
from leantfx.components.model_card import facts as facts_lib
from leantfx.components.model_card import render
from leantfx.components.model_card import spec as spec_lib
from leantfx.errors import ConfigError
from leantfx.errors import InputDataError
from leantfx.models.training import precision


def _json_property(exec_properties: Dict[str, Any], key: str,
                   kind: type) -> Any:
  text = exec_properties.get(key)
  try:
    value = json.loads(text) if text else None
  except ValueError:
    value = None
  if not isinstance(value, kind):
    raise ConfigError(f'ModelCardGenerator\'s {key!r} must be a JSON '
                      f'{kind.__name__}, got {text!r}.')
  return value


def card_config(exec_properties: Dict[str, Any]) -> config_lib.ModelCardConfig:
  """The ModelCardConfig of the execution properties (validated)."""
  values = _json_property(exec_properties, spec_lib.CARD_CONFIG_KEY, dict)
  try:
    return config_lib.ModelCardConfig(**values)
  except TypeError as e:
    raise ConfigError(f'ModelCardGenerator\'s {spec_lib.CARD_CONFIG_KEY!r} '
                      f'is not a ModelCardConfig: {e}') from None


def _optional(input_dict, key) -> Optional[types.Artifact]:
  artifacts = input_dict.get(key) or []
  return artifacts[0] if artifacts else None


def _write(directory: str, name: str, text: str) -> str:
  path = os.path.join(directory, name)
  staging = os.path.join(directory, f'.{name}.writing')
  with fileio.open(staging, 'w') as f:
    f.write(text)
  fileio.rename(staging, path, overwrite=True)
  return path


def gather_facts(input_dict: Dict[str, List[types.Artifact]],
                 exec_properties: Dict[str, Any]) -> Dict[str, Any]:
  """Everything the card says, from the input artifacts (see facts.py)."""
  single = lambda key: artifact_utils.get_single_instance(input_dict[key])
  dataset = _json_property(exec_properties, spec_lib.DATASET_KEY, dict)
  config = card_config(exec_properties)
  slicing = (_json_property(exec_properties, spec_lib.SLICING_KEY, list)
             if exec_properties.get(spec_lib.SLICING_KEY) else [])
  push = facts_lib.push(single(spec_lib.PUSHED_MODEL_KEY))
  statistics = single(spec_lib.STATISTICS_KEY)
  report = _optional(input_dict, spec_lib.VALIDATION_REPORT_KEY)
  devices = precision.detect_devices()
  return {
      'model': {
          'name': exec_properties[spec_lib.MODEL_NAME_KEY],
          'version': push['version'],
          'destination': push['destination'],
          'reused_version': push['reused_version'],
          'date': datetime.datetime.now(
              datetime.timezone.utc).date().isoformat(),
      },
      'dataset': dataset,
      'data': {
          'span': (int(statistics.span) if statistics.has_property('span') and
                   statistics.span > 0
                   else None),
          'splits': facts_lib.split_statistics(statistics),
          'validation': facts_lib.validation(report),
      },
      'training': facts_lib.training(single(spec_lib.MODEL_KEY)),
      'optimizer_compute': facts_lib.compute(
          _optional(input_dict, spec_lib.OPTIMIZED_MODEL_KEY)),
      'evaluation': facts_lib.evaluation(
          single(spec_lib.EVALUATION_KEY),
          single(spec_lib.MODEL_BLESSING_KEY)),
      'slicing': slicing,
      'infra': facts_lib.infra(single(spec_lib.INFRA_BLESSING_KEY)),
      'picks': facts_lib.runtime_picks(
          _optional(input_dict, spec_lib.OPTIMIZATION_REPORT_KEY)),
      'config': {'target_qps': config.target_qps,
                 'core_hour_price': config.core_hour_price},
      'cpu': {'model': devices.cpu_model,
              'flags': list(devices.cpu_bf16_flags),
              'cores': sizing.machine_cores()},
  }


def write_card(card: card_lib.Card, directory: str) -> Dict[str, str]:
  """Writes the card's three files into directory; returns their paths."""
  fileio.makedirs(directory)
  return {
      spec_lib.JSON_FILE: _write(directory, spec_lib.JSON_FILE,
                                 json.dumps(card.json, indent=2,
                                            allow_nan=False) + '\n'),
      spec_lib.MARKDOWN_FILE: _write(directory, spec_lib.MARKDOWN_FILE,
                                     render.markdown(card)),
      spec_lib.HTML_FILE: _write(directory, spec_lib.HTML_FILE,
                                 render.html_page(card)),
  }


class Executor(base_executor.BaseExecutor):
  """Validates the inputs, then writes the pushed model's card."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    """Writes the model card; see ModelCardGenerator.

    Raises:
      ConfigError: invalid execution properties.
      InputDataError: a required input artifact is missing.
    """
    self._log_startup(input_dict, output_dict, exec_properties)
    for key in (spec_lib.STATISTICS_KEY, spec_lib.MODEL_KEY,
                spec_lib.EVALUATION_KEY, spec_lib.MODEL_BLESSING_KEY,
                spec_lib.INFRA_BLESSING_KEY, spec_lib.PUSHED_MODEL_KEY):
      if not input_dict.get(key):
        raise InputDataError(f'ModelCardGenerator: no {key!r} input; the '
                             'pipeline wires it from the run\'s components.')
    for key in (spec_lib.MODEL_NAME_KEY, spec_lib.CARD_BASE_KEY):
      if not exec_properties.get(key):
        raise ConfigError(f'ModelCardGenerator needs {key!r}.')
    card_config(exec_properties)
    _json_property(exec_properties, spec_lib.DATASET_KEY, dict)
    output = artifact_utils.get_single_instance(
        output_dict[spec_lib.MODEL_CARD_KEY])
    pushed = facts_lib.push(artifact_utils.get_single_instance(
        input_dict[spec_lib.PUSHED_MODEL_KEY]))
    if not pushed['pushed']:
      logging.info('ModelCardGenerator: nothing was pushed; no card.')
      output.set_string_custom_property(spec_lib.CARD_PATH_PROPERTY, '')
      return
    facts = gather_facts(input_dict, exec_properties)
    card = card_lib.build(facts)
    directory = os.path.join(exec_properties[spec_lib.CARD_BASE_KEY],
                             exec_properties[spec_lib.MODEL_NAME_KEY],
                             str(pushed['version']))
    paths = write_card(card, directory)
    write_card(card, output.uri)
    output.set_string_custom_property(spec_lib.CARD_PATH_PROPERTY, directory)
    output.set_string_custom_property(spec_lib.VERSION_PROPERTY,
                                      str(pushed['version']))
    logging.info('ModelCardGenerator: wrote %s', sorted(paths.values()))
