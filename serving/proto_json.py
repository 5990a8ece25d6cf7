"""Protocol buffers as JSON text the way TF Serving's REST API prints them.

TF Serving prints ``GetModelStatusResponse`` and the metadata response with the
C++ ``MessageToJsonString`` (``add_whitespace``, ``always_print_primitive_fields``):
one space of indent per level, a newline at the end, 64-bit integers as
strings, enums by name, and fields in the order of protobuf's
``DefaultValueObjectWriter``: ordinary fields in declaration order first (unset
scalars and lists printed with their defaults), then the members of a oneof that
are set. That is why the model spec reads ``name``, ``signature_name``,
``version`` and a ``TensorInfo`` reads ``dtype``, ``tensor_shape``, ``name``.
Python's ``json_format`` orders them differently, hence this module.
"""
import base64
import json
import math
from typing import Any, List

from google.protobuf import descriptor as descriptor_lib

_FD = descriptor_lib.FieldDescriptor
_INT64_TYPES = (_FD.TYPE_INT64, _FD.TYPE_UINT64, _FD.TYPE_SINT64,
                _FD.TYPE_FIXED64, _FD.TYPE_SFIXED64)
_WRAPPERS = {
    'google.protobuf.Int64Value', 'google.protobuf.UInt64Value',
    'google.protobuf.Int32Value', 'google.protobuf.UInt32Value',
    'google.protobuf.FloatValue', 'google.protobuf.DoubleValue',
    'google.protobuf.BoolValue', 'google.protobuf.StringValue',
    'google.protobuf.BytesValue',
}


def _scalar(field: descriptor_lib.FieldDescriptor, value: Any) -> Any:
  if field.type == _FD.TYPE_ENUM:
    enum_value = field.enum_type.values_by_number.get(value)
    return enum_value.name if enum_value is not None else value
  if field.type in _INT64_TYPES:
    return str(value)
  if field.type == _FD.TYPE_BYTES:
    return base64.b64encode(value).decode('ascii')
  if field.type in (_FD.TYPE_FLOAT, _FD.TYPE_DOUBLE):
    if math.isnan(value):
      return 'NaN'
    if math.isinf(value):
      return 'Infinity' if value > 0 else '-Infinity'
    if field.type == _FD.TYPE_FLOAT:
      value = float('%.9g' % value)
  return value


def _value(field, value, preserve_names: bool) -> Any:
  if field.type == _FD.TYPE_MESSAGE:
    return to_dict(value, preserve_names)
  return _scalar(field, value)


def _default(field) -> Any:
  if field.type == _FD.TYPE_ENUM:
    return field.enum_type.values_by_number[0].name
  if field.type in _INT64_TYPES:
    return '0'
  if field.type == _FD.TYPE_BOOL:
    return False
  if field.type in (_FD.TYPE_STRING, _FD.TYPE_BYTES):
    return ''
  if field.type in (_FD.TYPE_FLOAT, _FD.TYPE_DOUBLE):
    return 0
  return 0


def to_dict(message, preserve_names: bool = True) -> Any:
  """Returns `message` as JSON-ready Python values in C++ printer order.

  Args:
    message: any protobuf message.
    preserve_names: True prints field names as in the .proto
      (``preserve_proto_field_names``), False prints their ``json_name``.

  Returns:
    A dict (or a scalar for wrapper types such as ``Int64Value``).
  """
  descriptor = message.DESCRIPTOR
  if descriptor.full_name in _WRAPPERS:
    return _scalar(descriptor.fields_by_name['value'], message.value)
  ordinary: List = []
  oneof_members: List = []
  for field in descriptor.fields:
    name = field.name if preserve_names else field.json_name
    if field.containing_oneof is not None:
      if message.HasField(field.name):
        oneof_members.append(
            (field.number, name,
             _value(field, getattr(message, field.name), preserve_names)))
      continue
    value = getattr(message, field.name)
    if field.label == _FD.LABEL_REPEATED:
      if field.message_type is not None and \
          field.message_type.GetOptions().map_entry:
        value_field = field.message_type.fields_by_name['value']
        ordinary.append((name, {
            str(key): _value(value_field, value[key], preserve_names)
            for key in sorted(value)
        }))
      else:
        ordinary.append(
            (name, [_value(field, item, preserve_names) for item in value]))
    elif field.type == _FD.TYPE_MESSAGE:
      if message.HasField(field.name):
        ordinary.append((name, to_dict(value, preserve_names)))
    else:
      ordinary.append((name, _scalar(field, value)))
  # Set oneof members are appended in wire (field number) order.
  oneof_members.sort(key=lambda item: item[0])
  return dict(ordinary + [(name, value) for _, name, value in oneof_members])


def dumps(value: Any) -> str:
  """Prints JSON-ready values as ``add_whitespace`` does (1-space indent, \\n)."""
  return json.dumps(value, indent=1, ensure_ascii=False) + '\n'


def message_to_json(message, preserve_names: bool = True) -> str:
  """Returns `message` as TF Serving's C++ JSON printer writes it."""
  return dumps(to_dict(message, preserve_names))
