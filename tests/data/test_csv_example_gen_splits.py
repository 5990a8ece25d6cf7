"""How the ExampleGens write their splits (components/split_writer.py).

Against TFX's own writer (the base executor's Do, WriteSplit with its
Reshuffle) on the same span: the same artifact layout and properties, the
same records in each split; every row written once in both Beam modes; a
CSV sorted by label, and image class folders read in order, are not written
in that order.
"""
import glob
import hashlib
import json
import os
import re

import apache_beam as beam
import pytest
import tensorflow as tf
from tfx.components.example_gen import base_example_gen_executor
from tfx.components.example_gen import utils as example_gen_utils
from tfx.proto import example_gen_pb2
from tfx.types import standard_artifacts
from tfx.utils import proto_utils

from leantfx.components.csv_example_gen import executor
from leantfx.components.csv_example_gen import options as options_lib
from leantfx.components import split_writer

_SPLITS = example_gen_pb2.SplitConfig(splits=[
    example_gen_pb2.SplitConfig.Split(name='train', hash_buckets=4),
    example_gen_pb2.SplitConfig.Split(name='eval', hash_buckets=1)])
_LABEL = 'animal'
_CLASSES = ('ant', 'bee', 'cat', 'dog')


def _write_span(root, files=3, rows_per_class=150, label_sorted=False):
  """A span of ``files`` CSV files; rows by label when label_sorted."""
  rows = [(c, i) for c in _CLASSES for i in range(rows_per_class)]
  if not label_sorted:
    rows.sort(key=lambda r: hashlib.md5(repr(r).encode()).digest())
  folder = os.path.join(root, 'span-1')
  os.makedirs(folder)
  per_file = -(-len(rows) // files)
  for part in range(files):
    with open(os.path.join(folder, f'part-{part}.csv'), 'w') as f:
      f.write(f'id,x,colour,{_LABEL}\n')
      for label, i in rows[part * per_file:(part + 1) * per_file]:
        f.write(f'{label}{i},{i * 0.25},c{i % 5},{label}\n')
  return len(rows)


def _properties(root, pattern='span-1/*', custom_config=None):
  """An ExampleGen's exec properties; the CSV options unless custom_config."""
  if custom_config is None:
    custom_config = options_lib.custom_config(
        options_lib.CsvReadOptions(label=_LABEL))
  return {
      'input_base': str(root),
      'input_config': proto_utils.proto_to_json(example_gen_pb2.Input(splits=[
          example_gen_pb2.Input.Split(name='single_split',
                                      pattern=pattern)])),
      'output_config': proto_utils.proto_to_json(
          example_gen_pb2.Output(split_config=_SPLITS)),
      'output_data_format': example_gen_pb2.FORMAT_TF_EXAMPLE,
      'output_file_format': example_gen_pb2.FORMAT_TFRECORDS_GZIP,
      'custom_config': proto_utils.proto_to_json(custom_config),
      'span': 1,
  }


def _examples(uri):
  artifact = standard_artifacts.Examples()
  artifact.uri = uri
  return artifact


def _records(uri, split):
  """The split's records, file by file in name order, each in file order."""
  files = sorted(glob.glob(os.path.join(uri, f'Split-{split}', '*')))
  return [r.numpy() for r in tf.data.TFRecordDataset(
      files, compression_type='GZIP')]


def _run(root, out, beam_args=()):
  artifact = _examples(out)
  context = executor.Executor.Context(beam_pipeline_args=list(beam_args),
                                      tmp_dir=out + '.tmp')
  executor.Executor(context).Do({}, {'examples': [artifact]},
                                _properties(root))
  return artifact


@pytest.mark.unit
def test_same_layout_properties_and_split_records_as_tfx_writer(tmp_path):
  rows = _write_span(str(tmp_path / 'data'))
  ours = _run(tmp_path / 'data', str(tmp_path / 'ours'))

  # TFX's base Do on the same plan: GenerateExamplesByBeam + WriteSplit.
  properties = _properties(tmp_path / 'data')
  files = executor.Executor().files_to_read(properties)[0][1]
  plan = executor.scan_files(
      files, options_lib.from_exec_properties(properties))
  properties[executor._PLAN_KEY] = json.dumps(plan)
  theirs = _examples(str(tmp_path / 'tfx'))
  base_example_gen_executor.BaseExampleGenExecutor.Do(
      executor.Executor(), {}, {'examples': [theirs]}, properties)

  assert sorted(os.listdir(ours.uri)) == sorted(os.listdir(theirs.uri)) == [
      'Split-eval', 'Split-train']
  assert ours.split_names == theirs.split_names == '["train", "eval"]'
  for key in (example_gen_utils.PAYLOAD_FORMAT_PROPERTY_NAME,
              example_gen_utils.FILE_FORMAT_PROPERTY_NAME):
    assert (ours.get_string_custom_property(key) ==
            theirs.get_string_custom_property(key) != '')
  total = 0
  for split in ('train', 'eval'):
    names = os.listdir(os.path.join(ours.uri, f'Split-{split}'))
    assert names and all(
        re.fullmatch(r'data_tfrecord-\d{5}-of-\d{5}\.gz', n) for n in names)
    written = _records(ours.uri, split)
    assert sorted(written) == sorted(_records(theirs.uri, split))
    total += len(written)
  assert total == rows


@pytest.mark.unit
def test_each_record_is_in_the_split_of_tfx_hash_rule(tmp_path, monkeypatch):
  # Several shards per split: the shards must not move a record across splits.
  monkeypatch.setattr(split_writer, 'RECORDS_PER_SHARD', 100)
  rows = _write_span(str(tmp_path / 'data'))
  artifact = _run(tmp_path / 'data', str(tmp_path / 'out'))
  counts = {}
  for index, split in enumerate(('train', 'eval')):
    records = _records(artifact.uri, split)
    counts[split] = len(records)
    for record in records:
      assert base_example_gen_executor._PartitionFn(
          record, 2, [4, 5], _SPLITS) == index
  assert counts['train'] + counts['eval'] == rows
  # 4:1 by hash buckets: 480 of 600 expected; 120 is more than 10 sd away.
  assert abs(counts['train'] - 0.8 * rows) < 60
  assert len(os.listdir(os.path.join(artifact.uri, 'Split-train'))) == (
      split_writer.shard_count(round(0.8 * rows)))


@pytest.mark.unit
@pytest.mark.parametrize('mode', ['in_memory', 'multi_processing'])
def test_every_row_written_once_in_both_beam_modes(tmp_path, monkeypatch,
                                                   mode):
  # Small blocks and shards, so that several bundles scatter to the same
  # shard and the two workers share the blocks.
  monkeypatch.setattr(executor, 'BLOCK_BYTES', 2000)
  monkeypatch.setattr(split_writer, 'RECORDS_PER_SHARD', 150)
  rows = _write_span(str(tmp_path / 'data'), files=2)
  args = [f'--direct_running_mode={mode}']
  if mode == 'multi_processing':
    args.append('--direct_num_workers=2')
  artifact = _run(tmp_path / 'data', str(tmp_path / 'out'), args)
  written = _records(artifact.uri, 'train') + _records(artifact.uri, 'eval')
  ids = [tf.train.Example.FromString(r).features.feature['id'].bytes_list
         .value[0] for r in written]
  assert len(ids) == rows
  assert len(set(ids)) == rows
  # The temporary shard files are gone; only the splits remain.
  assert sorted(os.listdir(artifact.uri)) == ['Split-eval', 'Split-train']


@pytest.mark.unit
def test_a_label_sorted_csv_is_not_written_in_file_order(tmp_path,
                                                        monkeypatch):
  monkeypatch.setattr(split_writer, 'RECORDS_PER_SHARD', 100)
  _write_span(str(tmp_path / 'data'), label_sorted=True)
  artifact = _run(tmp_path / 'data', str(tmp_path / 'out'))
  labels = [tf.train.Example.FromString(r).features.feature[_LABEL]
            .bytes_list.value[0] for r in _records(artifact.uri, 'train')]
  changes = sum(a != b for a, b in zip(labels, labels[1:]))
  # Written in file order, the ~480 train records change label at most
  # once per class per file (12 times); shuffled, a neighbour differs 3
  # times in 4 (~360 changes, sd ~10). Half of the pairs cannot be reached
  # by the sorted order and is missed by a shuffle with negligible odds.
  assert changes > len(labels) / 2
  # Each shard on its own is mixed too (~96 records, ~72 changes, sd ~4).
  for name in sorted(os.listdir(os.path.join(artifact.uri, 'Split-train'))):
    shard = [tf.train.Example.FromString(r.numpy()).features.feature[_LABEL]
             .bytes_list.value[0] for r in tf.data.TFRecordDataset(
                 os.path.join(artifact.uri, 'Split-train', name),
                 compression_type='GZIP')]
    assert sum(a != b for a, b in zip(shard, shard[1:])) > len(shard) / 2


@pytest.mark.unit
def test_every_shard_file_is_written_even_when_no_record_hashes_to_it(
    tmp_path):
  split_dir = str(tmp_path / 'Split-eval')
  with beam.Pipeline() as pipeline:
    _ = (pipeline | beam.Create([b'only record'])
         | split_writer.WriteShuffledSplit(split_dir, str(tmp_path / 'tmp'),
                                           3))
  assert sorted(os.listdir(split_dir)) == [
      split_writer.shard_name(shard, 3) for shard in range(3)]
  assert [r.numpy() for r in tf.data.TFRecordDataset(
      [os.path.join(split_dir, n) for n in sorted(os.listdir(split_dir))],
      compression_type='GZIP')] == [b'only record']
  assert os.listdir(tmp_path / 'tmp') == []


def _image_span(root, per_class=30):
  """A span of PNG class folders: ``per_class`` digits of each class."""
  # pylint: disable=g-import-not-at-top
  from leantfx import datasets
  # pylint: enable=g-import-not-at-top
  datasets.prepare('digits', str(root), 1, 'images')
  span = os.path.join(str(root), 'span-1')
  for label in os.listdir(span):
    for name in sorted(os.listdir(os.path.join(span, label)))[per_class:]:
      os.remove(os.path.join(span, label, name))
  return sum(len(os.listdir(os.path.join(span, label)))
             for label in os.listdir(span))


@pytest.mark.unit
def test_image_example_gen_writes_tfx_splits_shuffled(tmp_path):
  # pylint: disable=g-import-not-at-top
  from leantfx.components.image_example_gen import component as image_component
  from leantfx.components.image_example_gen import decode
  from leantfx.components.image_example_gen import executor as image_executor
  # pylint: enable=g-import-not-at-top
  images = _image_span(tmp_path / 'images')
  properties = _properties(
      tmp_path / 'images', 'span-1/*/*', image_component.custom_config(
          decode.ImageSettings(height=8, width=8, channels=1,
                               label_feature='digit')))
  ours = _examples(str(tmp_path / 'ours'))
  image_executor.Executor().Do({}, {'examples': [ours]}, dict(properties))
  assert ours.get_int_custom_property(
      image_executor.GOOD_IMAGES_PROPERTY) == images
  # TFX's base Do with its WriteSplit on the same span.
  theirs = _examples(str(tmp_path / 'tfx'))
  properties[image_executor._REPORT_DIR_KEY] = theirs.uri
  base_example_gen_executor.BaseExampleGenExecutor.Do(
      image_executor.Executor(), {}, {'examples': [theirs]}, properties)

  assert ours.split_names == theirs.split_names == '["train", "eval"]'
  for key in (example_gen_utils.PAYLOAD_FORMAT_PROPERTY_NAME,
              example_gen_utils.FILE_FORMAT_PROPERTY_NAME):
    assert (ours.get_string_custom_property(key) ==
            theirs.get_string_custom_property(key) != '')
  assert not os.path.exists(
      os.path.join(ours.uri, split_writer.SHUFFLE_TMP_DIR))
  written = []
  for split in ('train', 'eval'):
    records = _records(ours.uri, split)
    assert sorted(records) == sorted(_records(theirs.uri, split)), split
    written += records
  assert len(written) == len(set(written)) == images
  # The class folders are read in order (0/, 1/, ...), where 9 neighbours
  # differ in label; the train split as written is mixed: most of them do.
  labels = [tf.train.Example.FromString(r).features.feature['digit']
            .bytes_list.value[0] for r in _records(ours.uri, 'train')]
  changes = sum(a != b for a, b in zip(labels, labels[1:]))
  assert changes > 0.5 * (len(labels) - 1), changes
