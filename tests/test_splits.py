"""leantfx/splits.py: the split of a row is TFX's ExampleGen's."""
import random

from tfx.components.example_gen import base_example_gen_executor
from tfx.proto import example_gen_pb2

from leantfx import splits


def test_split_of_is_the_example_gens_partition_rule():
  config = splits.output_config().split_config
  buckets = [4, 5]
  rng = random.Random(0)
  seen = {}
  for _ in range(2000):
    record = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64)))
    tfx_index = base_example_gen_executor._PartitionFn(  # pylint: disable=protected-access
        record, 2, buckets, config)
    name = splits.split_of(record)
    assert name == config.splits[tfx_index].name
    seen[name] = seen.get(name, 0) + 1
  # About 4:1, both splits reached.
  assert 0.72 < seen['train'] / 2000 < 0.88, seen


def test_output_config_is_four_to_one():
  config = splits.output_config()
  assert isinstance(config, example_gen_pb2.Output)
  assert [(s.name, s.hash_buckets) for s in config.split_config.splits] == [
      ('train', 4), ('eval', 1)]
