"""The REST API's JSON <-> tensor mapping, as ``util/json_tensor.cc`` defines it.

Requests: ``{"instances": [...]}`` (row format: one entry per batch element,
objects for several named inputs) or ``{"inputs": ...}`` (columnar: a value, or
an object of named values), an optional ``"signature_name"``, binary strings as
``{"b64": "..."}`` and ``NaN``/``Infinity``/``-Infinity`` tokens. Values are
type-checked against the signature's input dtypes with TF Serving's rules (no
lossy float conversion, ints only where ints are expected) and its error
messages. Responses: ``{"predictions": ...}`` for row requests, ``{"outputs":
...}`` for columnar ones, written by :mod:`json_writer` byte for byte.

Classify/regress requests (``{"examples": [...], "context": {...}}``) become
serialized ``tf.Example`` protos; their results become ``{"results": ...}``.

Speed and memory: bodies are parsed by orjson (C, no per-value work beyond
its objects; numbers beyond 64 bits become doubles, as in rapidjson), and a
dense numeric value becomes its array in one numpy call, its types and
ranges checked on the array (``_numeric_array``). Whatever that path does
not take (NaN tokens, lone surrogates, mixed types, out-of-range numbers)
goes through the value-by-value path, which raises TF Serving's errors.
"""
import base64
import binascii
import enum
import json
import math
import re
from typing import (Any, Callable, Dict, List, Mapping, Optional, Sequence,
                    Tuple)

import numpy as np
import orjson

from leantfx.serving import dtypes
from leantfx.serving import json_writer
from leantfx.serving import status

_INT32_MIN, _INT32_MAX = -2**31, 2**31 - 1
_INT64_MIN, _INT64_MAX = -2**63, 2**63 - 1
_UINT32_MAX, _UINT64_MAX = 2**32 - 1, 2**64 - 1
# IsLosslessDecimal: the largest integer a float/double holds exactly.
_FLOAT_MAX_INT, _DOUBLE_MAX_INT = 2**24 - 1, 2**53 - 1
_FLOAT_MAX = float(np.finfo(np.float32).max)
_DOUBLE_MAX = float(np.finfo(np.float64).max)
_BYTES_SUFFIX = '_bytes'
_B64_CHARS = re.compile(rb'^[A-Za-z0-9+/]*={0,2}$')


class RequestFormat(enum.Enum):
  """Which JSON layout a predict request used; the response mirrors it."""
  ROW = 'row'
  COLUMNAR = 'columnar'


# rapidjson's GetParseError_En() texts for the failures Python's parser names.
_PARSE_ERRORS = (
    ('Expecting value', 'Invalid value.'),
    ('Expecting property name enclosed in double quotes',
     'Missing a name for object member.'),
    ("Expecting ':' delimiter",
     'Missing a colon after a name of object member.'),
    ('Extra data', 'The document root must not be followed by other values.'),
    ('Unterminated string', 'Missing a closing quotation mark in string.'),
    ('Invalid control character', 'Invalid encoding in string.'),
    ('Invalid \\escape', 'Invalid escape character in string.'),
    ('Invalid \\uXXXX escape',
     'Incorrect hex digit after \\u escape in string.'),
)


def _parse_error_text(error: json.JSONDecodeError) -> str:
  for python_text, rapidjson_text in _PARSE_ERRORS:
    if error.msg.startswith(python_text):
      return rapidjson_text
  if error.msg.startswith("Expecting ',' delimiter"):
    opener = _innermost_open_bracket(error.doc, error.pos)
    if opener == '[':
      return "Missing a comma or ']' after an array element."
    return "Missing a comma or '}' after an object member."
  return error.msg + '.'


def _innermost_open_bracket(text: str, pos: int) -> str:
  depth: List[str] = []
  in_string = escaped = False
  for char in text[:pos]:
    if in_string:
      if escaped:
        escaped = False
      elif char == '\\':
        escaped = True
      elif char == '"':
        in_string = False
    elif char == '"':
      in_string = True
    elif char in '[{':
      depth.append(char)
    elif char in ']}' and depth:
      depth.pop()
  return depth[-1] if depth else '{'


def _reject_huge_number(text: str) -> float:
  value = float(text)
  if math.isinf(value):
    raise ValueError(text)
  return value


def parse_json_object(body: bytes) -> Dict[str, Any]:
  """Parses a request body as ``ParseJson`` does.

  Args:
    body: the raw HTTP body.

  Returns:
    The top-level JSON object.

  Raises:
    ServingError: INVALID_ARGUMENT for an empty body, bad JSON or a top-level
      value that is not an object.
  """
  if not body:
    raise status.invalid_argument('JSON Parse error: The document is empty')
  try:
    doc = _parse_in_parts(body)
    if doc is None:
      doc = orjson.loads(body)
  except orjson.JSONDecodeError:
    # Not JSON to orjson: NaN/Infinity tokens (which TF Serving accepts),
    # lone surrogates, or an error, which the standard parser names.
    doc = _parse_slowly(body)
  if not isinstance(doc, dict):
    raise status.invalid_argument(
        f'JSON Value: {json_writer.value_to_string(doc)} Is not object')
  return doc


# A flat array of numbers with this much text is parsed on its own (a column
# of a large columnar request: 100,000 pixels are ~240 KB).
_LONG_ARRAY_BYTES = 64 * 1024
_LONG_ARRAY = re.compile(rb'\[[-+0-9.eE, \t\r\n]{%d,}\]' % _LONG_ARRAY_BYTES)
_PLACEHOLDER = '\x00leantfx-array'


def _parse_in_parts(body: bytes) -> Any:
  """Parses a body with long numeric arrays one array at a time, or None.

  One orjson call on a 15 MB body holds the interpreter for about half a
  second, and with it the event loop's status answers; an array at a time
  it yields between arrays. The document is the one orjson would give:
  each array's text is parsed by orjson, the rest (with a placeholder
  object in each array's place) too. A placeholder matched inside a string
  makes that string end at its quote and the rest invalid, so it can only
  come back as an object where the array was; anything else raises, and
  the caller parses the body whole.

  Returns:
    The document, or None when the body has no long array.

  Raises:
    orjson.JSONDecodeError: a part is not JSON (the caller starts over).
  """
  if len(body) < 2 * _LONG_ARRAY_BYTES:
    return None
  arrays, pieces, last = [], [], 0
  for match in _LONG_ARRAY.finditer(body):
    start, end = match.span()
    pieces.append(body[last:start])
    pieces.append(b'{"\\u0000leantfx-array":%d}' % len(arrays))
    arrays.append(orjson.loads(body[start:end]))
    last = end
  if not arrays:
    return None
  pieces.append(body[last:])
  doc = orjson.loads(b''.join(pieces))
  if _put_back(doc, arrays) != len(arrays):
    raise orjson.JSONDecodeError('placeholder out of place', '', 0)
  return doc


def _put_back(doc: Any, arrays: List[Any]) -> int:
  """Replaces each placeholder object in doc by its array; returns how many.

  Iterative: the document may be nested as deep as orjson allows (1024),
  deeper than Python's recursion.
  """
  def placeholder(value):
    if type(value) is dict and len(value) == 1 and _PLACEHOLDER in value:  # pylint: disable=unidiomatic-typecheck
      index = value[_PLACEHOLDER]
      if type(index) is int and 0 <= index < len(arrays):  # pylint: disable=unidiomatic-typecheck
        return index
    return None

  if placeholder(doc) is not None:
    return 0  # The document itself cannot be an array: not ours to mend.
  put, stack = 0, [doc]
  while stack:
    container = stack.pop()
    items = (container.items() if isinstance(container, dict)
             else enumerate(container))
    for key, value in items:
      index = placeholder(value)
      if index is not None:
        container[key] = arrays[index]
        put += 1
      elif isinstance(value, (dict, list)):
        stack.append(value)
  return put


def _parse_slowly(body: bytes) -> Any:
  """Parses with the standard parser, raising rapidjson's error texts."""
  try:
    text = body.decode('utf-8')
  except UnicodeDecodeError as e:
    raise status.invalid_argument(
        f'JSON Parse error: Invalid encoding in string. at offset: {e.start}'
    ) from None
  if not text.strip():
    raise status.invalid_argument(
        f'JSON Parse error: The document is empty. at offset: {len(body)}')
  try:
    doc = json.loads(text, parse_float=_reject_huge_number)
  except json.JSONDecodeError as e:
    offset = len(text[:e.pos].encode('utf-8'))
    raise status.invalid_argument(
        f'JSON Parse error: {_parse_error_text(e)} at offset: {offset}'
    ) from None
  except ValueError as e:
    raise status.invalid_argument(
        'JSON Parse error: Number too big to be stored in double. '
        f'({e.args[0]})') from None
  except RecursionError:
    raise status.invalid_argument(
        'JSON Parse error: The document is nested too deeply.') from None
  return doc


def signature_name_of(doc: Mapping[str, Any]) -> str:
  """Returns the optional ``signature_name`` (``FillSignature``), '' if unset."""
  if 'signature_name' not in doc:
    return ''
  name = doc['signature_name']
  if not isinstance(name, str):
    raise status.invalid_argument(
        f'JSON Value: {json_writer.value_to_string(doc)} not formatted '
        "correctly. 'signature_name' key must be a string value.")
  return name


def _json_type(value: Any) -> str:
  if value is None:
    return 'Null'
  if value is True:
    return 'True'
  if value is False:
    return 'False'
  if isinstance(value, dict):
    return 'Object'
  if isinstance(value, list):
    return 'Array'
  if isinstance(value, str):
    return 'String'
  return 'Number'


def _type_error(value: Any, dtype: dtypes.DType) -> status.ServingError:
  return status.invalid_argument(
      f'JSON Value: {json_writer.value_to_string(value)} Type: '
      f'{_json_type(value)} is not of expected type: {dtype.short_name}')


def _lossy_error(value: Any, target: str) -> status.ServingError:
  return status.invalid_argument(
      f'Cannot convert JSON value: {json_writer.value_to_string(value)} to '
      f'{target} without loss of precision.')


def _is_number(value: Any) -> bool:
  return (isinstance(value, (int, float)) and not isinstance(value, bool))


def _is_int(value: Any, low: int, high: int) -> bool:
  return type(value) is int and low <= value <= high  # pylint: disable=unidiomatic-typecheck


def _check_lossless(value: Any, single_precision: bool):
  max_int = _FLOAT_MAX_INT if single_precision else _DOUBLE_MAX_INT
  limit = _FLOAT_MAX if single_precision else _DOUBLE_MAX
  target = 'float' if single_precision else 'double'
  if isinstance(value, int) and -2**63 <= value < 2**64:
    if abs(value) > max_int:
      raise _lossy_error(value, target)
    return
  # rapidjson holds larger integers as doubles and range-checks those.
  try:
    as_double = float(value)
  except OverflowError:
    raise _lossy_error(value, target) from None
  if math.isfinite(as_double) and abs(as_double) > limit:
    raise _lossy_error(value, target)


def _is_b64_object(value: Any) -> bool:
  return (isinstance(value, dict) and len(value) == 1 and
          isinstance(value.get('b64'), str))


def decode_b64_object(value: Any) -> bytes:
  """Decodes ``{"b64": "..."}`` (``JsonDecodeBase64Object``)."""
  if not _is_b64_object(value):
    raise status.invalid_argument(
        f'JSON Value: {json_writer.value_to_string(value)} not formatted '
        'correctly for base64 data')
  data = value['b64'].encode('ascii', 'replace')
  # absl::Base64Unescape accepts unpadded input too.
  data += b'=' * (-len(data) % 4)
  if not _B64_CHARS.match(data):
    raise status.invalid_argument('Unable to base64 decode')
  try:
    return base64.b64decode(data, validate=True)
  except (binascii.Error, ValueError):
    raise status.invalid_argument('Unable to base64 decode') from None


def _convert_leaf(value: Any, dtype: dtypes.DType) -> Any:
  """One JSON value as a Python scalar of `dtype` (``AddValueToTensor``)."""
  enum_value = dtype.enum
  if enum_value in (dtypes.DT_FLOAT.enum, dtypes.DT_DOUBLE.enum):
    if not _is_number(value):
      raise _type_error(value, dtype)
    _check_lossless(value, enum_value == dtypes.DT_FLOAT.enum)
    return float(value)
  if enum_value in (dtypes.DT_INT32.enum, dtypes.DT_INT16.enum,
                    dtypes.DT_INT8.enum, dtypes.DT_UINT8.enum):
    if not _is_int(value, _INT32_MIN, _INT32_MAX):
      raise _type_error(value, dtype)
    return value
  if enum_value == dtypes.DT_STRING.enum:
    if not isinstance(value, str):
      raise _type_error(value, dtype)
    return value.encode('utf-8', 'surrogatepass')
  if enum_value == dtypes.DT_INT64.enum:
    if not _is_int(value, _INT64_MIN, _INT64_MAX):
      raise _type_error(value, dtype)
    return value
  if enum_value == dtypes.DT_BOOL.enum:
    if not isinstance(value, bool):
      raise _type_error(value, dtype)
    return value
  if enum_value == dtypes.DT_UINT32.enum:
    if not _is_int(value, 0, _UINT32_MAX):
      raise _type_error(value, dtype)
    return value
  if enum_value == dtypes.DT_UINT64.enum:
    if not _is_int(value, 0, _UINT64_MAX):
      raise _type_error(value, dtype)
    return value
  raise status.unimplemented(
      f'Conversion of JSON Value: {json_writer.value_to_string(value)} to '
      f'type: {dtype.short_name}')


# TensorFlow's kMaxDims: a list nested deeper cannot be a tensor (and would
# take _fill's recursion past Python's stack).
MAX_RANK = 254
_NOT_PLAIN = object()
_FLOAT_ENUM = dtypes.DT_FLOAT.enum
_INT64_ENUM = dtypes.DT_INT64.enum
_STRING_ENUM = dtypes.DT_STRING.enum
# Scalar columns of these dtypes are grouped into one array (_rows_to_arrays):
# the ones _to_array builds with np.array(values, dtype) directly.
_GROUPED_ENUMS = frozenset(d.enum for d in (
    dtypes.DT_FLOAT, dtypes.DT_DOUBLE, dtypes.DT_INT32, dtypes.DT_INT64))
# The dtypes _numeric_array builds: those of np.array(values, dtype).
_FAST_ENUMS = _GROUPED_ENUMS


def _plain_scalar(value: Any, enum_value: int) -> Any:
  """`value` converted as _convert_leaf would, or _NOT_PLAIN.

  Only the values whose check is a type test and a range test: a float or
  an int for a float tensor, an int for an int64 one, a str for a string
  one. Anything else (lists, b64 objects, bools, out-of-range numbers) is
  _NOT_PLAIN and goes through _fill, which raises TF Serving's errors.
  """
  kind = type(value)
  if enum_value == _FLOAT_ENUM:
    if kind is float:
      if -_FLOAT_MAX <= value <= _FLOAT_MAX or value != value:
        return value
    elif kind is int and -_FLOAT_MAX_INT <= value <= _FLOAT_MAX_INT:
      return value
  elif enum_value == _INT64_ENUM:
    if kind is int and _INT64_MIN <= value <= _INT64_MAX:
      return value
  elif enum_value == _STRING_ENUM:
    if kind is str:
      return value.encode('utf-8', 'surrogatepass')
  return _NOT_PLAIN


def _dense_shape(value: Any) -> List[int]:
  """``GetDenseTensorShape``: the shape implied by the first elements."""
  shape = []
  while isinstance(value, list):
    shape.append(len(value))
    if not value:
      break
    value = value[0]
  return shape


def _fill(value: Any, level: int, shape: Sequence[int], dtype: dtypes.DType,
          out: List[Any]):
  """``FillTensorProto``: validates nesting and appends leaf values to `out`."""
  rank = len(shape)
  if not isinstance(value, list):
    if level != rank:
      raise status.invalid_argument(
          f'JSON Value: {json_writer.value_to_string(value)} found at '
          f'incorrect level: {level + 1} in the JSON DOM. Expected at level: '
          f'{rank}')
    if isinstance(value, dict):
      if dtype.enum != dtypes.DT_STRING.enum:
        raise _type_error(value, dtype)
      out.append(decode_b64_object(value))
    else:
      out.append(_convert_leaf(value, dtype))
    return
  if level >= rank:
    raise status.invalid_argument(
        f'Encountered list at unexpected level: {level} expected < {rank}')
  if len(value) != shape[level]:
    raise status.invalid_argument(
        f'Encountered list at unexpected size: {len(value)} at level: '
        f'{level} expected size: {shape[level]}')
  if level == rank - 1 and dtype.enum == dtypes.DT_FLOAT.enum:
    # The innermost list of a float tensor, the hot path: check it in bulk.
    if all(type(v) is float for v in value):  # pylint: disable=unidiomatic-typecheck
      if all(-_FLOAT_MAX <= v <= _FLOAT_MAX or not math.isfinite(v)
             for v in value):
        out.extend(value)
        return
  for item in value:
    _fill(item, level + 1, shape, dtype, out)


def _to_array(values: List[Any], shape: Sequence[int],
              dtype: dtypes.DType) -> np.ndarray:
  if dtype.enum == dtypes.DT_STRING.enum:
    array = np.empty(len(values), dtype=object)
    array[:] = values
  elif dtype.enum in (dtypes.DT_INT16.enum, dtypes.DT_INT8.enum,
                      dtypes.DT_UINT8.enum):
    # TF Serving stores these in int_val and narrows them like Tensor::FromProto.
    array = np.array(values, dtype=np.int64).astype(dtype.numpy)
  else:
    array = np.array(values, dtype=dtype.numpy)
  return array.reshape(shape)


def _check_rank(shape: Sequence[int]) -> None:
  if len(shape) > MAX_RANK:
    raise status.invalid_argument(
        f'JSON Value nested {len(shape)} lists deep: a tensor has at most '
        f'{MAX_RANK} dimensions.')


def _innermost_lists(value: List[Any], shape: Sequence[int]):
  """The innermost lists of a dense nest of `shape`, or None if ragged."""
  rows = [value]
  for size in shape[:-1]:
    inner = []
    for row in rows:
      if type(row) is not list or len(row) != size:  # pylint: disable=unidiomatic-typecheck
        return None
      inner.extend(row)
    rows = inner
  last = shape[-1]
  for row in rows:
    if type(row) is not list or len(row) != last:  # pylint: disable=unidiomatic-typecheck
      return None
  return rows


def _numeric_array(value: Any, shape: Sequence[int],
                   dtype: dtypes.DType) -> Optional[np.ndarray]:
  """A dense list of plain numbers as its array, in one numpy call; or None.

  The checks _convert_leaf makes value by value, made on the whole: the
  Python types of the values (a set of them per innermost list), then the
  ranges on the array. None sends the value to _fill, which accepts what
  this path is unsure of (mixed ints and floats beyond 2**24, ...) and
  raises TF Serving's error for what is wrong.
  """
  enum_value = dtype.enum
  if enum_value not in _FAST_ENUMS or not shape or 0 in shape:
    return None
  rows = _innermost_lists(value, shape)
  if rows is None:
    return None
  kinds = set()
  for row in rows:
    kinds.update(map(type, row))
  floating = enum_value in (_FLOAT_ENUM, dtypes.DT_DOUBLE.enum)
  if not kinds <= ({int, float} if floating else {int}):
    return None
  try:
    array = np.array(rows, dtype=np.float64 if floating else np.int64)
  except OverflowError:  # An int beyond int64.
    return None
  if floating:
    single = enum_value == _FLOAT_ENUM
    # Any value within the lossless integer range passes both checks, as
    # an int and as a float; beyond it, which one applies depends on the
    # value's type, which _fill looks at.
    limit = _FLOAT_MAX_INT if single else _DOUBLE_MAX_INT
    if not np.all(np.abs(array) <= limit):
      if int in kinds or not np.all(np.abs(array) <= (
          _FLOAT_MAX if single else _DOUBLE_MAX)):
        return None
    if single:
      array = array.astype(np.float32)
  elif enum_value == dtypes.DT_INT32.enum:
    if array.size and (array.min() < _INT32_MIN or array.max() > _INT32_MAX):
      return None
    array = array.astype(np.int32)
  return array.reshape(shape)


def value_to_array(value: Any, dtype: dtypes.DType) -> np.ndarray:
  """Converts one JSON value (scalar or nested lists) to a dense array.

  Raises:
    ServingError: INVALID_ARGUMENT for ragged lists, lists nested deeper
      than a tensor's rank, or wrong value types.
  """
  shape = _dense_shape(value)
  _check_rank(shape)
  array = _numeric_array(value, shape, dtype)
  if array is not None:
    return array
  values: List[Any] = []
  _fill(value, 0, shape, dtype, values)
  return _to_array(values, shape, dtype)


def _shape_text(shape: Sequence[int]) -> str:
  return '[' + ','.join(str(d) for d in shape) + ']'


def _instances_to_arrays(
    instances: List[Any],
    input_dtypes: Mapping[str, dtypes.DType]) -> Dict[str, np.ndarray]:
  """``FillTensorMapFromInstancesList``."""
  if not isinstance(instances[0], dict) and len(input_dtypes) > 1:
    raise status.invalid_argument(
        'instances is a plain list, but expecting list of objects as multiple '
        'input tensors required as per tensorinfo_map')

  def is_element_object(value):
    return isinstance(value, dict) and not _is_b64_object(value)

  named = is_element_object(instances[0])
  input_names = sorted(input_dtypes)
  values: Dict[str, List[Any]] = {}
  shapes: Dict[str, List[int]] = {}

  def add_item(item, name):
    dtype = input_dtypes.get(name)
    if dtype is None:
      raise status.invalid_argument(
          f'JSON object: does not have named input: {name}')
    scalar = _plain_scalar(item, dtype.enum)
    if scalar is not _NOT_PLAIN and not shapes.get(name):
      # The common case of the row format: one plain number or string per
      # column, checked as _fill would check it, without its recursion.
      # (After a non-scalar value of the column, the path below raises.)
      if name in shapes:
        values[name].append(scalar)
      else:
        shapes[name], values[name] = [], [scalar]
      return
    shape = _dense_shape(item)
    _check_rank(shape)
    flat: List[Any] = []
    _fill(item, 0, shape, input_dtypes[name], flat)
    if name not in shapes:
      shapes[name] = shape
      values[name] = flat
      return
    expected_size = int(np.prod(shapes[name], dtype=np.int64))
    if expected_size != len(flat):
      raise status.invalid_argument(
          f'Expecting tensor size: {expected_size} but got: {len(flat)}')
    if shapes[name] != shape:
      raise status.invalid_argument(
          f'Expecting shape {_shape_text(shapes[name])} but got: '
          f'{_shape_text(shape)}')
    values[name].extend(flat)

  for index, element in enumerate(instances):
    if named:
      if not is_element_object(element):
        raise status.invalid_argument(
            f'Expecting object but got list at item {index} of input list')
      for name, item in element.items():
        try:
          add_item(item, name)
        except status.ServingError as e:
          raise status.invalid_argument(
              f'Failed to process element: {index} key: {name} of '
              f"'instances' list. Error: {e.to_string()}") from None
      if sorted(element) != input_names:
        raise status.invalid_argument(
            f"Failed to process element: {index} of 'instances' list. JSON "
            f'object: {json_writer.value_to_string(element)} must only have '
            f'keys: {",".join(input_names)}')
    else:
      if is_element_object(element):
        raise status.invalid_argument(
            f'Expecting value/list but got object at item {index} of input '
            'list')
      try:
        add_item(element, input_names[0])
      except status.ServingError as e:
        raise status.invalid_argument(
            f"Failed to process element: {index} of 'instances' list. "
            f'Error: {e.to_string()}') from None

  return _rows_to_arrays(values, shapes, input_dtypes, len(instances))


def _rows_to_arrays(values: Mapping[str, List[Any]],
                    shapes: Mapping[str, List[int]],
                    input_dtypes: Mapping[str, dtypes.DType],
                    batch: int) -> Dict[str, np.ndarray]:
  """Each input's values as an array of shape [batch] + its shape.

  Scalar columns of one numeric dtype (the 64 pixels of a digits row, a
  CSV's numeric columns) are built by one ``np.array`` call and handed out
  as its rows, instead of one call per column.
  """
  arrays: Dict[str, np.ndarray] = {}
  groups: Dict[int, List[str]] = {}
  for name in values:
    dtype = input_dtypes[name]
    if not shapes[name] and dtype.enum in _GROUPED_ENUMS:
      groups.setdefault(dtype.enum, []).append(name)
    else:
      arrays[name] = _to_array(values[name], [batch] + shapes[name], dtype)
  for names in groups.values():
    matrix = np.array([values[n] for n in names],
                      dtype=input_dtypes[names[0]].numpy)
    for row, name in zip(matrix, names):
      arrays[name] = row
  return arrays


def _inputs_to_arrays(
    inputs: Any,
    input_dtypes: Mapping[str, dtypes.DType]) -> Dict[str, np.ndarray]:
  """``FillTensorMapFromInputsMap``."""
  if not isinstance(inputs, dict) or _is_b64_object(inputs):
    if len(input_dtypes) > 1:
      raise status.invalid_argument(
          'inputs is a plain value/list, but expecting an object as multiple '
          'input tensors required as per tensorinfo_map')
    name = next(iter(input_dtypes))
    return {name: value_to_array(inputs, input_dtypes[name])}
  arrays = {}
  for name in sorted(input_dtypes):
    if name not in inputs:
      raise status.invalid_argument(
          f"Missing named input: {name} in 'inputs' object.")
    arrays[name] = value_to_array(inputs[name], input_dtypes[name])
  return arrays


def input_names_of(doc: Mapping[str, Any]) -> List[str]:
  """The input names a predict request's JSON uses, for error messages.

  The keys of its row objects (``instances``) or of its columnar object
  (``inputs``); none for unnamed values.
  """
  names: Dict[str, None] = {}  # ordered, without repeats
  instances = doc.get('instances')
  if isinstance(instances, list):
    for element in instances:
      if isinstance(element, dict) and not _is_b64_object(element):
        names.update(dict.fromkeys(element))
  inputs = doc.get('inputs')
  if isinstance(inputs, dict) and not _is_b64_object(inputs):
    names.update(dict.fromkeys(inputs))
  return list(names)


def predict_inputs_from_json(
    doc: Mapping[str, Any], signature_name: str,
    get_input_dtypes: Callable[[str], Mapping[str, dtypes.DType]]
) -> Tuple[Dict[str, np.ndarray], RequestFormat]:
  """Builds a predict request's input arrays (``FillPredictRequestFromJson``).

  Args:
    doc: the parsed request object.
    signature_name: its ``signature_name`` ('' for the default).
    get_input_dtypes: returns the signature's input name -> dtype map; it
      raises ServingError when the model or signature is not there.

  Returns:
    (input arrays by name, the request format).

  Raises:
    ServingError: INVALID_ARGUMENT for any malformed request.
  """
  input_dtypes = get_input_dtypes(signature_name)
  if not input_dtypes:
    raise status.invalid_argument(
        'Failed to get input map for signature: '
        f'{signature_name or "DEFAULT"}')
  has_instances = 'instances' in doc
  has_inputs = 'inputs' in doc
  if has_instances and has_inputs:
    raise status.invalid_argument(
        f'JSON Value: {json_writer.value_to_string(dict(doc))} Not formatted '
        "correctly expecting only one of 'inputs' or 'instances' keys to "
        'exist ')
  if has_instances:
    instances = doc['instances']
    if not isinstance(instances, list):
      raise status.invalid_argument(
          f'JSON Value: {json_writer.value_to_string(dict(doc))} Excepting '
          "'instances' to be an list/array")
    if not instances:
      raise status.invalid_argument(
          f'JSON Value: {json_writer.value_to_string(dict(doc))} No values '
          "in 'instances' array")
    return _instances_to_arrays(instances, input_dtypes), RequestFormat.ROW
  if has_inputs:
    return (_inputs_to_arrays(doc['inputs'], input_dtypes),
            RequestFormat.COLUMNAR)
  raise status.invalid_argument("Missing 'inputs' or 'instances' key")


def _write_scalar(writer: json_writer.PrettyWriter, value: Any,
                  dtype: dtypes.DType, as_b64: bool):
  """``AddSingleValueAndAdvance``."""
  enum_value = dtype.enum
  if enum_value in (dtypes.DT_FLOAT.enum, dtypes.DT_HALF.enum):
    writer.raw_number(json_writer.format_decimal(value, True))
  elif enum_value == dtypes.DT_DOUBLE.enum:
    writer.raw_number(json_writer.format_decimal(value, False))
  elif enum_value == dtypes.DT_STRING.enum:
    if isinstance(value, str):
      value = value.encode('utf-8')
    if as_b64:
      writer.start_object()
      writer.key('b64')
      writer.string(base64.b64encode(bytes(value)))
      writer.end_object()
    else:
      writer.string(bytes(value))
  elif enum_value == dtypes.DT_BOOL.enum:
    writer.bool(bool(value))
  elif dtype.numpy is not None and dtype.numpy.kind in 'iu':
    writer.int(int(value))
  else:
    raise status.invalid_argument(
        f'Failed to write JSON value for tensor type: {dtype.short_name}')


def _number_tokens(array: np.ndarray,
                   dtype: dtypes.DType) -> Optional[List[str]]:
  """The JSON tokens of a numeric array's values, flat; None if not numeric.

  The tokens _write_scalar writes, made for the whole array at once.
  """
  enum_value = dtype.enum
  if enum_value in (dtypes.DT_FLOAT.enum, dtypes.DT_HALF.enum):
    return json_writer.format_decimals(array, True)
  if enum_value == dtypes.DT_DOUBLE.enum:
    return json_writer.format_decimals(array, False)
  if enum_value == dtypes.DT_BOOL.enum:
    return ['true' if v else 'false' for v in array.reshape(-1).tolist()]
  if dtype.numpy is not None and dtype.numpy.kind in 'iu':
    return list(map(str, array.reshape(-1).tolist()))
  return None


def _write_tokens(writer: json_writer.PrettyWriter, tokens: List[str],
                  shape: Sequence[int], start: int) -> None:
  """Writes tokens[start:] as nested arrays of `shape` (_write_tensor's)."""
  if not shape:
    writer.raw_number(tokens[start])
  elif len(shape) == 1:
    writer.numbers(tokens[start:start + shape[0]])
  else:
    step = int(np.prod(shape[1:], dtype=np.int64))
    writer.start_array()
    for index in range(shape[0]):
      _write_tokens(writer, tokens, shape[1:], start + index * step)
    writer.end_array()


def _write_tensor(writer: json_writer.PrettyWriter, value: Any,
                  dtype: dtypes.DType, as_b64: bool):
  """``AddTensorValues``: nested arrays for each dimension of `value`.

  `value` is an array or, for one element of a 1-D tensor, a scalar.
  """
  if isinstance(value, np.ndarray) and value.ndim:
    tokens = _number_tokens(value, dtype)
    if tokens is not None:
      _write_tokens(writer, tokens, value.shape, 0)
      return
  if not isinstance(value, np.ndarray):
    _write_scalar(writer, value, dtype, as_b64)
    return
  if value.ndim == 0:
    _write_scalar(writer, value.item() if dtype.enum != dtypes.DT_STRING.enum
                  else value[()], dtype, as_b64)
    return
  writer.start_array()
  if value.ndim == 1:
    for item in (value if dtype.enum == dtypes.DT_STRING.enum
                 else value.tolist()):
      _write_scalar(writer, item, dtype, as_b64)
  else:
    for sub in value:
      _write_tensor(writer, sub, dtype, as_b64)
  writer.end_array()


def _output_dtype(array: np.ndarray) -> dtypes.DType:
  try:
    return dtypes.from_numpy(array.dtype)
  except ValueError:
    raise status.invalid_argument(
        f'Failed to write JSON value for tensor type: {array.dtype}') from None


def predict_outputs_to_json(outputs: Mapping[str, np.ndarray],
                            request_format: RequestFormat) -> bytes:
  """Writes a predict response (``MakeJsonFromTensors``).

  Args:
    outputs: output arrays by alias.
    request_format: ROW gives ``predictions`` (one entry per batch element),
      COLUMNAR gives ``outputs``.

  Returns:
    The response body.

  Raises:
    ServingError: INVALID_ARGUMENT when the outputs cannot be written in the
      row format (no batch dimension, or batch sizes that differ).
  """
  if not outputs:
    raise status.invalid_argument('Cannot convert empty tensor map to JSON')
  names = sorted(outputs)
  arrays = {name: np.asarray(outputs[name]) for name in names}
  out_dtypes = {name: _output_dtype(arrays[name]) for name in names}
  writer = json_writer.PrettyWriter()
  several = len(names) > 1
  if request_format == RequestFormat.ROW:
    batch_size = 0
    for name in names:
      array = arrays[name]
      if array.ndim == 0:
        raise status.invalid_argument(
            f'Tensor name: {name} has no shape information ')
      if array.shape[0] < 1:
        raise status.invalid_argument(
            f'Tensor name: {name} has invalid batch size: {array.shape[0]}')
      if batch_size and batch_size != array.shape[0]:
        raise status.invalid_argument(
            f'Tensor name: {name} has inconsistent batch size: '
            f'{array.shape[0]} expecting: {batch_size}')
      batch_size = array.shape[0]
    # Each numeric output's tokens are made once, for all its rows.
    tokens = {name: _number_tokens(arrays[name], out_dtypes[name])
              for name in names}
    steps = {name: int(np.prod(arrays[name].shape[1:], dtype=np.int64))
             for name in names}
    writer.start_object()
    writer.key('predictions')
    writer.start_array()
    for item in range(batch_size):
      if several:
        writer.start_object()
      writer.single_line_array = True
      for name in names:
        if several:
          writer.key(name)
        if tokens[name] is not None:
          _write_tokens(writer, tokens[name], arrays[name].shape[1:],
                        item * steps[name])
          continue
        _write_tensor(writer, arrays[name][item], out_dtypes[name],
                      name.endswith(_BYTES_SUFFIX))
      writer.single_line_array = False
      if several:
        writer.end_object()
    writer.end_array()
    writer.end_object()
  else:
    writer.start_object()
    writer.key('outputs')
    if several:
      writer.start_object()
    for name in names:
      if several:
        writer.key(name)
      _write_tensor(writer, arrays[name], out_dtypes[name],
                    name.endswith(_BYTES_SUFFIX))
    if several:
      writer.end_object()
    writer.end_object()
  return writer.getvalue()


def _add_feature_value(value: Any, name: str, kind: List[str],
                       lists: Dict[str, List[Any]]):
  """``AddValueToFeature``: appends one JSON value to a feature's list."""

  def need(wanted: str):
    if kind[0] not in ('', wanted):
      raise status.invalid_argument(
          f'Unexpected element type in feature: {name} expecting type: '
          f'{kind[0]}')
    kind[0] = wanted

  if value is None or isinstance(value, list) or (
      isinstance(value, dict) and not _is_b64_object(value)):
    raise status.invalid_argument(
        f'Feature: {name} has element with unexpected JSON type: '
        f'{_json_type(value)}')
  if isinstance(value, bool):
    need('int64')
    lists['int64'].append(1 if value else 0)
  elif isinstance(value, dict):
    need('bytes')
    lists['bytes'].append(decode_b64_object(value))
  elif isinstance(value, str):
    need('bytes')
    lists['bytes'].append(value.encode('utf-8', 'surrogatepass'))
  elif isinstance(value, float):
    need('float')
    _check_lossless(value, single_precision=True)
    lists['float'].append(value)
  else:
    need('int64')
    if value > _INT64_MAX:
      raise status.invalid_argument(
          f'Feature: {name} has uint64 element. Only int64 is supported.')
    if value < _INT64_MIN:
      raise _lossy_error(value, 'int64')
    lists['int64'].append(value)


def _example_from_json(value: Any):
  """``MakeExampleFromJsonObject``: a JSON object as a ``tf.train.Example``."""
  from tensorflow.core.example import example_pb2  # pylint: disable=g-import-not-at-top
  if not isinstance(value, dict):
    raise status.invalid_argument(
        f'Example must be JSON object but got JSON {_json_type(value)}')
  example = example_pb2.Example()
  for name, content in value.items():
    kind = ['']
    lists: Dict[str, List[Any]] = {'bytes': [], 'float': [], 'int64': []}
    for item in (content if isinstance(content, list) else [content]):
      _add_feature_value(item, name, kind, lists)
    feature = example.features.feature[name]
    if kind[0] == 'bytes':
      feature.bytes_list.value.extend(lists['bytes'])
    elif kind[0] == 'float':
      feature.float_list.value.extend(lists['float'])
    elif kind[0] == 'int64':
      feature.int64_list.value.extend(lists['int64'])
  return example


def examples_from_json(doc: Mapping[str, Any]) -> List[bytes]:
  """Builds the serialized examples of a classify/regress request.

  ``context`` features are merged into every example (examples win on a clash),
  which is what TF Serving's ``ExampleListWithContext`` input does.

  Returns:
    One serialized ``tf.train.Example`` per entry of ``examples``.

  Raises:
    ServingError: INVALID_ARGUMENT for malformed requests.
  """
  context = None
  if 'context' in doc:
    context = _example_from_json(doc['context']).SerializeToString()
  if 'examples' not in doc:
    raise status.invalid_argument(
        f'JSON Value: {json_writer.value_to_string(dict(doc))} When method is '
        "classify, key 'examples' is expected and was not found")
  examples = doc['examples']
  if not isinstance(examples, list):
    raise status.invalid_argument(
        f'JSON Value: {json_writer.value_to_string(dict(doc))} Expecting '
        "'examples' value to be an list/array")
  if not examples:
    raise status.invalid_argument(
        f'JSON Value: {json_writer.value_to_string(dict(doc))} '
        "'examples' value is an empty array")
  serialized = []
  for value in examples:
    example = _example_from_json(value).SerializeToString()
    # Concatenated protos merge; map entries that come later win.
    serialized.append(context + example if context else example)
  return serialized


def classification_to_json(
    results: Sequence[Sequence[Tuple[bytes, float]]]) -> bytes:
  """Writes a classify response (``MakeJsonFromClassificationResult``)."""
  if not results:
    raise status.invalid_argument(
        'Cannot convert empty ClassificationResults to JSON')
  writer = json_writer.PrettyWriter()
  writer.start_object()
  writer.key('results')
  writer.start_array()
  for classes in results:
    writer.single_line_array = True
    writer.start_array()
    for label, score in classes:
      writer.start_array()
      writer.string(label)
      writer.raw_number(json_writer.format_decimal(score, True))
      writer.end_array()
    writer.end_array()
    writer.single_line_array = False
  writer.end_array()
  writer.end_object()
  return writer.getvalue()


def regression_to_json(values: Sequence[float]) -> bytes:
  """Writes a regress response (``MakeJsonFromRegressionResult``)."""
  if not len(values):  # pylint: disable=g-explicit-length-test
    raise status.invalid_argument(
        'Cannot convert empty RegressionResults to JSON')
  writer = json_writer.PrettyWriter()
  writer.start_object()
  writer.key('results')
  writer.single_line_array = True
  writer.start_array()
  for value in values:
    writer.raw_number(json_writer.format_decimal(value, True))
  writer.end_array()
  writer.end_object()
  return writer.getvalue()
