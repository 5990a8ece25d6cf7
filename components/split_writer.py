"""Writes an ExampleGen split shuffled, with no record held by the runner.

TFX's ``WriteSplit`` (tfx/components/example_gen/write_split.py) shuffles a
split with ``beam.Reshuffle()`` before ``WriteToTFRecord``. A Reshuffle is a
GroupByKey, and Beam's DirectRunner (in_memory and multi_processing alike)
keeps a grouping's elements in the runner's own process: the whole span's
serialized examples sat in the `leantfx run` process, the one stage whose
memory grew with rows.

``WriteShuffledSplit`` writes the same layout (``data_tfrecord-SSSSS-of-
NNNNN.gz``, gzipped TFRecord files in the split's folder) in two steps in
which only file names pass through the runner:

1. scatter, fused with the step that made the records (in the worker that
   encoded them): each record goes to one of ``shards`` temporary files by
   a hash of its bytes (CRC-32, independent of TFX's SHA-256 split rule),
   so a shard is a sample of the whole split whatever order the CSV files
   had; each bundle writes its own files, streaming;
2. write: the runner groups the temporary file names by shard; one worker
   per shard reads that shard's records (one shard's worth in memory), puts
   them in a fixed order (sorted bytes), shuffles them with a seed of the
   shard's number and writes the gzipped shard file.

A shard's records and their order depend only on the records, not on how
Beam bundled them: the same span gives the same files.
"""
import math
import os
import random
import struct
import uuid
import zlib
from typing import Any, Dict, Iterable, List, Optional, Tuple

import apache_beam as beam
import tensorflow as tf
from tfx.components.example_gen import utils as example_gen_utils
from tfx.components.example_gen import write_split
from tfx.components.example_gen.base_example_gen_executor import BaseExampleGenExecutor
from tfx.components.util import examples_utils
from tfx.dsl.io import fileio
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils
from tfx.types import standard_component_specs
from tfx.utils import proto_utils

# TFX's file name prefix (write_split.DEFAULT_TF_RECORD_FILE_NAME), which
# readers do not depend on but people looking at the folder do.
FILE_PREFIX = 'data_tfrecord'
# Records of one shard: the most a writing worker holds at once (~25 MB of
# 20-30 feature examples); a span of a million rows is 16 train shards.
RECORDS_PER_SHARD = 50_000
# A scatter bundle's bytes buffered per shard before they go to its file.
_FLUSH_BYTES = 1 << 22
_LENGTH = struct.Struct('<I')
# The temporary shard files' folder in the Examples artifact, removed once
# the splits are written (readers only list the Split-* folders).
SHUFFLE_TMP_DIR = '.shuffle-tmp'


def shard_count(records: int) -> int:
  """Shards for a split of about ``records`` records (at least one)."""
  return max(1, math.ceil(records / RECORDS_PER_SHARD))


def shard_of(record: bytes, shards: int) -> int:
  """The shard a record is written to."""
  return zlib.crc32(record) % shards


def shard_name(shard: int, shards: int) -> str:
  """A shard's file name, as Beam's WriteToTFRecord names it for TFX."""
  return f'{FILE_PREFIX}-{shard:05d}-of-{shards:05d}.gz'


def _decode(data: bytes) -> List[bytes]:
  """The records of a temporary file (each a 4-byte length, then bytes)."""
  records, position = [], 0
  while position < len(data):
    (length,) = _LENGTH.unpack_from(data, position)
    position += _LENGTH.size
    records.append(data[position:position + length])
    position += length
  return records


class _ScatterToShards(beam.DoFn):
  """Records -> (shard, temporary file) of this bundle, one per shard used."""

  def __init__(self, tmp_dir: str, shards: int):
    self._tmp_dir = tmp_dir
    self._shards = shards

  def start_bundle(self):
    self._bundle = uuid.uuid4().hex
    self._buffers = {}
    self._sizes = {}
    self._files = {}

  def _flush(self, shard: int) -> None:
    if shard not in self._files:
      path = os.path.join(self._tmp_dir, f'{shard:05d}-{self._bundle}.rec')
      self._files[shard] = (path, fileio.open(path, 'wb'))
    self._files[shard][1].write(b''.join(self._buffers[shard]))
    self._buffers[shard] = []
    self._sizes[shard] = 0

  def process(self, record: bytes) -> Iterable[Tuple[int, str]]:
    shard = shard_of(record, self._shards)
    buffer = self._buffers.setdefault(shard, [])
    buffer.append(_LENGTH.pack(len(record)))
    buffer.append(record)
    self._sizes[shard] = self._sizes.get(shard, 0) + len(record)
    if self._sizes[shard] >= _FLUSH_BYTES:
      self._flush(shard)
    return ()

  def finish_bundle(self):
    for shard in list(self._buffers):
      if self._buffers[shard]:
        self._flush(shard)
    for shard, (path, handle) in sorted(self._files.items()):
      handle.close()
      yield beam.transforms.window.GlobalWindows.windowed_value((shard, path))


class _WriteShard(beam.DoFn):
  """(shard, its temporary files) -> the shard's gzipped TFRecord file."""

  def __init__(self, split_dir: str, tmp_dir: str, shards: int):
    self._split_dir = split_dir
    self._tmp_dir = tmp_dir
    self._shards = shards
    self._records = beam.metrics.Metrics.counter('leantfx.ExampleGen',
                                                 'records_written')

  def process(self, element: Tuple[int, Iterable[Optional[str]]]
             ) -> Iterable[int]:
    shard, paths = element
    paths = sorted(p for p in paths if p)
    records = []
    for path in paths:
      with fileio.open(path, 'rb') as f:
        records += _decode(f.read())
    # Bundling decides which temporary file holds a record; sorting first
    # makes the written order a function of the records alone.
    records.sort()
    random.Random(shard).shuffle(records)
    name = shard_name(shard, self._shards)
    staged = os.path.join(self._tmp_dir, f'{name}.{uuid.uuid4().hex}')
    with tf.io.TFRecordWriter(staged, options='GZIP') as writer:
      for record in records:
        writer.write(record)
    # A retried bundle rewrites the whole shard: the rename is the commit.
    fileio.rename(staged, os.path.join(self._split_dir, name), overwrite=True)
    for path in paths:
      fileio.remove(path)
    self._records.inc(len(records))
    yield len(records)


@beam.ptransform_fn
@beam.typehints.with_input_types(bytes)
def WriteShuffledSplit(records: beam.PCollection, split_dir: str,
                       tmp_dir: str, shards: int) -> beam.PCollection:
  """Writes serialized records to ``shards`` shuffled gzipped TFRecord files.

  Args:
    records: the split's serialized examples.
    split_dir: the split's folder (``<artifact uri>/Split-<name>``).
    tmp_dir: a folder of this split alone for the temporary files; the
      caller removes it after the pipeline.
    shards: how many files (shard_count); every one is written, an empty
      one for a shard no record hashed to.

  Returns:
    The records written per shard (one int per shard).
  """
  fileio.makedirs(split_dir)
  fileio.makedirs(tmp_dir)
  scattered = records | 'Scatter' >> beam.ParDo(
      _ScatterToShards(tmp_dir, shards))
  every_shard = (records.pipeline
                 | 'EveryShard' >> beam.Create(
                     [(shard, None) for shard in range(shards)]))
  return ((scattered, every_shard)
          | 'Files' >> beam.Flatten()
          | 'FilesByShard' >> beam.GroupByKey()
          | 'Write' >> beam.ParDo(_WriteShard(split_dir, tmp_dir, shards)))


class ShuffledSplitsExecutor(BaseExampleGenExecutor):
  """An ExampleGen executor whose splits WriteShuffledSplit writes.

  A subclass's Do calls ``write_splits`` where TFX's base Do would run, with
  about how many records the span has (which sets the shard count).
  """

  def write_splits(self, output_dict, exec_properties: Dict[str, Any],
                   rows: int) -> None:
    """TFX's base Do, with WriteShuffledSplit in place of TFX's WriteSplit.

    The artifact gets what the base Do gives it: the split names, one
    Split-<name> folder of gzipped TFRecord files each, the payload and
    file format properties.

    Raises:
      ValueError: the configuration asks for Parquet output, which this
        ExampleGen does not write.
    """
    input_config = example_gen_pb2.Input()
    proto_utils.json_to_proto(
        exec_properties[standard_component_specs.INPUT_CONFIG_KEY],
        input_config)
    output_config = example_gen_pb2.Output()
    proto_utils.json_to_proto(
        exec_properties[standard_component_specs.OUTPUT_CONFIG_KEY],
        output_config)
    payload_format = exec_properties.get(
        standard_component_specs.OUTPUT_DATA_FORMAT_KEY)
    if payload_format == example_gen_pb2.PayloadFormat.FORMAT_PARQUET:
      raise ValueError(
          'The CSV ExampleGen writes tf.Examples (FORMAT_TF_EXAMPLE); '
          'output_data_format FORMAT_PARQUET is not supported.')
    artifacts = output_dict[standard_component_specs.EXAMPLES_KEY]
    examples = artifact_utils.get_single_instance(artifacts)
    split_names = example_gen_utils.generate_output_split_names(
        input_config, output_config)
    examples.split_names = artifact_utils.encode_split_names(split_names)
    # Each split's share of the rows, by its hash buckets (one input split
    # per output split reads every row).
    buckets = {s.name: s.hash_buckets
               for s in output_config.split_config.splits}
    total = sum(buckets.values())
    tmp_root = os.path.join(examples.uri, SHUFFLE_TMP_DIR)
    with self._make_beam_pipeline() as pipeline:
      splits = self.GenerateExamplesByBeam(pipeline, exec_properties)
      for name, records in splits.items():
        share = buckets[name] / total if total else 1.0
        _ = (records
             | f'WriteSplit[{name}]' >> WriteShuffledSplit(
                 artifact_utils.get_split_uri(artifacts, name),
                 os.path.join(tmp_root, name),
                 shard_count(round(rows * share))))
    fileio.rmtree(tmp_root)
    if payload_format:
      for artifact in artifacts:
        examples_utils.set_payload_format(artifact, payload_format)
    file_format = exec_properties.get(
        standard_component_specs.OUTPUT_FILE_FORMAT_KEY,
        example_gen_pb2.FILE_FORMAT_UNSPECIFIED)
    if file_format:
      for artifact in artifacts:
        examples_utils.set_file_format(
            artifact, write_split.to_file_format_str(file_format))
