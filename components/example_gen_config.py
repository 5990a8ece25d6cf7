"""An ExampleGen's custom_config as a JSON object: a Struct packed in an Any.

FileBasedExampleGen's ``custom_config`` is an ``example_gen_pb2.CustomConfig``
(a protobuf Any). leantfx's ExampleGens (CSV, images) keep their settings in
it as a ``google.protobuf.Struct``, so they are ordinary execution properties
on every runner, the compiled Kubeflow spec included.
"""
from typing import Any, Dict, Mapping

from google.protobuf import any_pb2
from google.protobuf import json_format
from google.protobuf import struct_pb2
from tfx.proto import example_gen_pb2
from tfx.types import standard_component_specs
from tfx.utils import proto_utils


def pack(values: Mapping[str, Any]) -> example_gen_pb2.CustomConfig:
  """A CustomConfig holding ``values`` (JSON-like: str, number, bool, list)."""
  packed = any_pb2.Any()
  packed.Pack(json_format.ParseDict(dict(values), struct_pb2.Struct()))
  return example_gen_pb2.CustomConfig(custom_config=packed)


def unpack(exec_properties: Mapping[str, Any], component: str) -> Dict[str, Any]:
  """The values ``pack`` packed, from an execution's properties.

  Raises:
    ValueError: no custom_config, or one that holds no Struct; the message
      names the component.
  """
  raw = exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY)
  if not raw:
    raise ValueError(f'{component} needs a custom_config with its settings.')
  custom = example_gen_pb2.CustomConfig()
  proto_utils.json_to_proto(raw, custom)
  struct = struct_pb2.Struct()
  if not custom.custom_config.Unpack(struct):
    raise ValueError(f'{component} custom_config must hold a Struct.')
  return json_format.MessageToDict(struct)
