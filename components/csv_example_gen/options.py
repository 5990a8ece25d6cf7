"""What the CSV ExampleGen needs to know of the columns, as custom_config.

The options travel in FileBasedExampleGen's ``custom_config``
(components/example_gen_config.py), as ImageExampleGen's settings do.
"""
import dataclasses
from typing import Any, Mapping, Tuple

from tfx.proto import example_gen_pb2

from leantfx.components import example_gen_config


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
    marker_columns: numeric columns whose ``missing_markers`` are missing
      values (leantfx/column_roles.py).
    missing_markers: the values read as missing in marker_columns ('NA',
      'n/a', ...); the empty field is missing everywhere.
    min_rows_per_class: the rows of every class with fewer rows than this
      in the files read are dropped, and counted (0: none is dropped).
  """
  label: str
  label_as_text: bool = True
  categorical_columns: Tuple[str, ...] = ()
  normalize_labels: bool = False
  marker_columns: Tuple[str, ...] = ()
  missing_markers: Tuple[str, ...] = ()
  min_rows_per_class: int = 0

  def __post_init__(self):
    for name in ('categorical_columns', 'marker_columns', 'missing_markers'):
      object.__setattr__(self, name, tuple(getattr(self, name)))
    # custom_config's Struct holds numbers as floats.
    object.__setattr__(self, 'min_rows_per_class',
                       int(self.min_rows_per_class))
    if not self.label:
      raise ValueError('CsvReadOptions needs the label column.')
    if self.min_rows_per_class and not self.label_as_text:
      raise ValueError('min_rows_per_class drops rows of rare classes; a '
                       'label read as a number has none.')

  @property
  def text_columns(self) -> Tuple[str, ...]:
    """Columns read as text: the categorical ones, and a class label."""
    label = (self.label,) if self.label_as_text else ()
    return label + self.categorical_columns


def custom_config(options: CsvReadOptions) -> example_gen_pb2.CustomConfig:
  """Packs the options into ExampleGen's custom_config."""
  values = dataclasses.asdict(options)
  for name in ('categorical_columns', 'marker_columns', 'missing_markers'):
    values[name] = list(getattr(options, name))
  return example_gen_config.pack(values)


def from_exec_properties(exec_properties: Mapping[str, Any]) -> CsvReadOptions:
  """Reads the options back from the execution properties.

  Raises:
    ValueError: no custom_config, or not one that ``custom_config`` packed.
  """
  return CsvReadOptions(**example_gen_config.unpack(
      exec_properties, 'The CSV ExampleGen'))
