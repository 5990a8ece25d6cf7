"""A span's train/eval split: which of its rows train and which evaluate.

The ExampleGen writes each row's serialized tf.Example to a split chosen by a
hash of its bytes (TFX's base ExampleGen executor, ``_PartitionFn``: sha256
of the record, modulo the total hash buckets, then the split whose buckets
hold it). The CSV ExampleGen's bytes are the same for the same row in every
process (leantfx/csv_format.py ``encode_batch``), so ``split_of`` tells,
from a row alone, which split the pipeline put it in: ``leantfx score
--split eval`` scores exactly the rows the Evaluator measured.
"""
import bisect
import hashlib
from typing import Sequence, Tuple

from tfx.proto import example_gen_pb2

# (split name, hash buckets): 4 of every 5 rows train, 1 evaluates.
SPLITS: Tuple[Tuple[str, int], ...] = (('train', 4), ('eval', 1))
NAMES = tuple(name for name, _ in SPLITS)


def output_config() -> example_gen_pb2.Output:
  """The ExampleGen's output_config for SPLITS."""
  return example_gen_pb2.Output(split_config=example_gen_pb2.SplitConfig(
      splits=[example_gen_pb2.SplitConfig.Split(name=name, hash_buckets=n)
              for name, n in SPLITS]))


def _bounds(splits: Sequence[Tuple[str, int]]) -> Tuple[int, ...]:
  total, bounds = 0, []
  for _, buckets in splits:
    total += buckets
    bounds.append(total)
  return tuple(bounds)


def split_of(record: bytes,
             splits: Sequence[Tuple[str, int]] = SPLITS) -> str:
  """The split the ExampleGen writes a serialized example to."""
  bounds = _bounds(splits)
  bucket = int(hashlib.sha256(record).hexdigest(), 16) % bounds[-1]
  return splits[bisect.bisect(bounds, bucket)][0]
