"""What the CSV ExampleGen needs to know of the columns, as custom_config.

The options travel in FileBasedExampleGen's ``custom_config`` (a Struct
packed in an Any, as ImageExampleGen's settings do), so they are ordinary
execution properties on every runner, the compiled Kubeflow spec included.
"""
import dataclasses
from typing import Any, Mapping, Tuple

from google.protobuf import any_pb2
from google.protobuf import json_format
from google.protobuf import struct_pb2
from tfx.proto import example_gen_pb2
from tfx.types import standard_component_specs
from tfx.utils import proto_utils


@dataclasses.dataclass(frozen=True)
class CsvReadOptions:
  """How the span's columns are read (names as written in the header).

  Attributes:
    label: the label column.
    label_as_text: read the label as text exactly as written (a
      classification's classes); False reads it as a number (a regression).
    categorical_columns: feature columns read as text whatever they hold.
    normalize_labels: strip leading and trailing white space from labels
      (``--normalize-labels``).
  """
  label: str
  label_as_text: bool = True
  categorical_columns: Tuple[str, ...] = ()
  normalize_labels: bool = False

  def __post_init__(self):
    object.__setattr__(self, 'categorical_columns',
                       tuple(self.categorical_columns))
    if not self.label:
      raise ValueError('CsvReadOptions needs the label column.')

  @property
  def text_columns(self) -> Tuple[str, ...]:
    """Columns read as text: the categorical ones, and a class label."""
    label = (self.label,) if self.label_as_text else ()
    return label + self.categorical_columns


def custom_config(options: CsvReadOptions) -> example_gen_pb2.CustomConfig:
  """Packs the options into ExampleGen's custom_config."""
  values = dataclasses.asdict(options)
  values['categorical_columns'] = list(options.categorical_columns)
  struct = json_format.ParseDict(values, struct_pb2.Struct())
  packed = any_pb2.Any()
  packed.Pack(struct)
  return example_gen_pb2.CustomConfig(custom_config=packed)


def from_exec_properties(exec_properties: Mapping[str, Any]) -> CsvReadOptions:
  """Reads the options back from the execution properties.

  Raises:
    ValueError: no custom_config, or not one that ``custom_config`` packed.
  """
  raw = exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY)
  if not raw:
    raise ValueError('The CSV ExampleGen needs a custom_config naming the '
                     'label column.')
  custom = example_gen_pb2.CustomConfig()
  proto_utils.json_to_proto(raw, custom)
  struct = struct_pb2.Struct()
  if not custom.custom_config.Unpack(struct):
    raise ValueError('The CSV ExampleGen custom_config must hold a Struct.')
  return CsvReadOptions(**json_format.MessageToDict(struct))
