"""Baselines' executor: checks its inputs, reads the splits, fits, writes.

Thin by design: reading is rows.py, fitting fits.py, the document report.py.
"""
import json
import os
import time
from typing import Any, Dict, List

from absl import logging
from tfx import types
from tfx.components.util import examples_utils
from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.utils import io_utils

from leantfx import config as config_lib
from leantfx.components.baselines import fits
from leantfx.components.baselines import report
from leantfx.components.baselines import rows
from leantfx.components.baselines import spec as spec_lib


def split_files(examples: types.Artifact, split: str) -> List[str]:
  """The split's files.

  Raises:
    ValueError: the Examples have no such split, or it has no file.
  """
  splits = artifact_utils.decode_split_names(examples.split_names)
  if split not in splits:
    raise ValueError(f'The baselines need a {split!r} split; the examples '
                     f'have {splits}.')
  folder = artifact_utils.get_split_uri([examples], split)
  files = [os.path.join(folder, n) for n in sorted(fileio.listdir(folder))]
  if not files:
    raise ValueError(f'The {split!r} split ({folder}) holds no file.')
  return files


class Executor(base_executor.BaseExecutor):
  """Fits the baselines on ExampleGen's train split, measures them on eval."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    """Writes baselines.json.

    Raises:
      ValueError: the inputs are not what the component needs.
      InputDataError: the split files cannot be read.
    """
    start = time.perf_counter()
    spec = config_lib.dataset_from_dict(
        json.loads(exec_properties[spec_lib.DATASET_KEY]))
    max_rows = int(exec_properties[spec_lib.MAX_ROWS_KEY])
    if max_rows < 1:
      raise ValueError(f'max_rows must be >= 1, got {max_rows}.')
    examples = artifact_utils.get_single_instance(
        input_dict[spec_lib.EXAMPLES_KEY])
    payload = examples_utils.get_payload_format_string(examples)
    if payload != 'FORMAT_TF_EXAMPLE':
      raise ValueError(f'The baselines read tf.Example records; the examples '
                       f'are {payload}.')
    schema = io_utils.SchemaReader().read(io_utils.get_only_uri_in_dir(
        artifact_utils.get_single_uri(input_dict[spec_lib.SCHEMA_KEY])))
    roles = fits.roles_of(spec)
    parse = rows.feature_spec(schema, (spec.label,) + roles.keys)
    train = rows.read_split(split_files(examples, spec_lib.TRAIN_SPLIT),
                            parse, max_rows)
    evaluation = rows.read_split(split_files(examples, spec_lib.EVAL_SPLIT),
                                 parse, max_rows)
    found = fits.fit_all(spec.task, roles, spec.label, train.columns,
                         evaluation.columns)
    doc = report.document(spec.task, found, train.rows, train.total_rows,
                          evaluation.rows, evaluation.total_rows, max_rows,
                          time.perf_counter() - start)
    text = json.dumps(doc, indent=2, sort_keys=True)
    output = artifact_utils.get_single_instance(
        output_dict[spec_lib.BASELINES_KEY])
    io_utils.write_string_file(
        os.path.join(output.uri, spec_lib.BASELINES_FILE), text)
    output.set_string_custom_property(spec_lib.FIGURES_PROPERTY,
                                      json.dumps(doc, sort_keys=True))
    for line in report.lines(doc):
      logging.info('Baseline %s', line)
