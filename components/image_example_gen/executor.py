"""ImageExampleGen's executor: a FileBased ExampleGen over image folders.

For the resolved span pattern (span-N/*/*) every image file becomes one
tf.Example {image: PNG bytes resized to the configured size, label: the class
folder name}. Bad files (corrupt, wrong channel count) are counted per reason
and named in image_ingestion.json beside the splits and in the artifact's
custom properties; with the 'fail' policy the execution then fails, with
'skip' they are left out. The splits are written as the CSV ExampleGen's
are (components/split_writer.py): shuffled in the workers, no record held by
the runner's process.
"""
import json
import os
from typing import Any, Dict, List

import apache_beam as beam
import tensorflow as tf
from absl import logging
from tfx import types
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.proto import example_gen_pb2
from tfx.types import standard_component_specs
from tfx.utils import io_utils
from tfx.utils import proto_utils

from leantfx.components import example_gen_config
from leantfx.components import split_writer
from leantfx.components.image_example_gen import decode

REPORT_FILE = 'image_ingestion.json'
BAD_IMAGES_PROPERTY = 'bad_images'
GOOD_IMAGES_PROPERTY = 'good_images'
# Where the Beam stage writes its counts; set by Do for this execution only.
_REPORT_DIR_KEY = '_leantfx_image_report_dir'
_MAX_NAMED_FILES = 10


def settings_from_exec_properties(
    exec_properties: Dict[str, Any]) -> decode.ImageSettings:
  """Reads ImageSettings from the custom_config (a packed Struct)."""
  values = example_gen_config.unpack(exec_properties, 'ImageExampleGen')
  for key in ('height', 'width', 'channels'):
    if key in values:
      values[key] = int(values[key])
  settings = decode.ImageSettings(**values)
  if settings.channels not in (1, 3):
    raise ValueError(f'channels must be 1 or 3, got {settings.channels}.')
  if settings.height < 1 or settings.width < 1:
    raise ValueError('height and width must be >= 1.')
  if settings.bad_images not in ('fail', 'skip'):
    raise ValueError(f'bad_images must be fail or skip, got '
                     f'{settings.bad_images!r}.')
  return settings


def _to_example(path: str, settings: decode.ImageSettings):
  """Reads one file: the serialized Example, or a tagged bad-image record."""
  with fileio.open(path, 'rb') as f:
    data = f.read()
  png, reason, detail = decode.decode_image(data, settings)
  if png is None:
    yield beam.pvalue.TaggedOutput('bad', (reason, path, detail))
    return
  label = os.path.basename(os.path.dirname(path))
  example = tf.train.Example()
  example.features.feature[settings.image_feature].bytes_list.value.append(png)
  example.features.feature[settings.label_feature].bytes_list.value.append(
      label.encode('utf-8'))
  yield example.SerializeToString(deterministic=True)


def _write_report(bad: List, good_count: List[int], path: str) -> None:
  by_reason: Dict[str, List] = {}
  for reason, file_path, detail in sorted(bad):
    by_reason.setdefault(reason, []).append({'file': file_path,
                                             'detail': detail})
  io_utils.write_string_file(
      path,
      json.dumps({'good_images': sum(good_count), 'bad_images': by_reason},
                 indent=2, sort_keys=True))


def _image_files(exec_properties: Dict[str, Any],
                 split_pattern: str) -> List[str]:
  """The image files an input split's (resolved) pattern matches, sorted."""
  pattern = os.path.join(
      exec_properties[standard_component_specs.INPUT_BASE_KEY], split_pattern)
  return sorted(p for p in fileio.glob(pattern) if decode.is_image_file(p))


def _input_image_count(exec_properties: Dict[str, Any]) -> int:
  """How many image files every input split matches (sets the shards)."""
  input_config = example_gen_pb2.Input()
  proto_utils.json_to_proto(
      exec_properties[standard_component_specs.INPUT_CONFIG_KEY], input_config)
  return sum(len(_image_files(exec_properties, split.pattern))
             for split in input_config.splits)


@beam.ptransform_fn
@beam.typehints.with_input_types(beam.Pipeline)
@beam.typehints.with_output_types(bytes)
def _ImagesToExample(pipeline: beam.Pipeline, exec_properties: Dict[str, Any],
                     split_pattern: str) -> beam.pvalue.PCollection:
  """Image files matching split_pattern -> serialized tf.Examples."""
  settings = settings_from_exec_properties(exec_properties)
  files = _image_files(exec_properties, split_pattern)
  logging.info('ImageExampleGen: %d image files match %s', len(files),
               split_pattern)
  results = (
      pipeline
      | 'Files' >> beam.Create(files)
      | 'Spread' >> beam.Reshuffle()
      | 'Decode' >> beam.FlatMap(_to_example, settings).with_outputs(
          'bad', main='good'))
  report_dir = exec_properties.get(_REPORT_DIR_KEY)
  if report_dir:
    good_count = results.good | 'CountGood' >> beam.combiners.Count.Globally()
    _ = (
        results.bad
        | 'BadToList' >> beam.combiners.ToList()
        | 'WriteReport' >> beam.Map(
            _write_report, good_count=beam.pvalue.AsList(good_count),
            path=os.path.join(report_dir, REPORT_FILE)))
  return results.good


class Executor(split_writer.ShuffledSplitsExecutor):
  """ExampleGen for span-N/<class>/*.png|jpg folders."""

  def GetInputSourceToExamplePTransform(self) -> beam.PTransform:
    return _ImagesToExample

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    settings = settings_from_exec_properties(exec_properties)
    examples = artifact_utils.get_single_instance(
        output_dict[standard_component_specs.EXAMPLES_KEY])
    properties = dict(exec_properties)
    properties[_REPORT_DIR_KEY] = examples.uri
    self._log_startup(input_dict, output_dict, properties)
    self.write_splits(output_dict, properties, _input_image_count(properties))
    report_path = os.path.join(examples.uri, REPORT_FILE)
    with fileio.open(report_path, 'r') as f:
      report = json.loads(f.read())
    bad = report['bad_images']
    counts = {reason: len(files) for reason, files in bad.items()}
    examples.set_string_custom_property(BAD_IMAGES_PROPERTY,
                                        json.dumps(counts, sort_keys=True))
    examples.set_int_custom_property(GOOD_IMAGES_PROPERTY,
                                     report['good_images'])
    if counts:
      named = [f'{item["file"]} ({item["detail"]})'
               for files in bad.values() for item in files][:_MAX_NAMED_FILES]
      summary = ', '.join(f'{n} {reason.replace("_", " ")}'
                          for reason, n in sorted(counts.items()))
      if settings.bad_images == 'fail':
        raise ValueError(
            f'{sum(counts.values())} bad image(s) in the span ({summary}); '
            f'policy "fail" stops the run. First: {"; ".join(named)}. Full '
            f'list: {report_path}. Fix or remove them, or pass --bad-images '
            'skip to leave them out.')
      logging.warning('ImageExampleGen skipped %s bad image(s): %s; list in %s',
                      sum(counts.values()), summary, report_path)
