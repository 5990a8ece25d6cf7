"""``TensorProto`` <-> numpy for the gRPC API.

Requests may carry values in typed fields (``float_val``...) or packed in
``tensor_content``; ``tf.make_ndarray`` reads both. Responses are written in the
typed fields, as TF Serving's ``Tensor::AsProtoField`` does for Predict.
"""
from typing import Any, Mapping

import numpy as np

from leantfx.serving import dtypes
from leantfx.serving import status

# numpy kind/dtype -> (DataType, TensorProto field).
_FIELDS = {
    np.dtype(np.float32): (dtypes.DT_FLOAT, 'float_val'),
    np.dtype(np.float64): (dtypes.DT_DOUBLE, 'double_val'),
    np.dtype(np.int32): (dtypes.DT_INT32, 'int_val'),
    np.dtype(np.int16): (dtypes.DT_INT16, 'int_val'),
    np.dtype(np.int8): (dtypes.DT_INT8, 'int_val'),
    np.dtype(np.uint8): (dtypes.DT_UINT8, 'int_val'),
    np.dtype(np.int64): (dtypes.DT_INT64, 'int64_val'),
    np.dtype(np.bool_): (dtypes.DT_BOOL, 'bool_val'),
    np.dtype(np.uint32): (dtypes.DT_UINT32, 'uint32_val'),
    np.dtype(np.uint64): (dtypes.DT_UINT64, 'uint64_val'),
}


# TensorFlow's kMaxDims (tensor_shape.h): a deeper shape is not a tensor.
MAX_RANK = 254
_OBJECT_ITEM_BYTES = 8  # A string element's pointer in an object array.
# The typed field each dtype's values arrive in (Tensor::FromProto's).
_VALUE_FIELDS = {
    dtypes.DT_FLOAT.enum: 'float_val', dtypes.DT_DOUBLE.enum: 'double_val',
    dtypes.DT_INT32.enum: 'int_val', dtypes.DT_INT16.enum: 'int_val',
    dtypes.DT_INT8.enum: 'int_val', dtypes.DT_UINT8.enum: 'int_val',
    17: 'int_val', dtypes.DT_INT64.enum: 'int64_val',
    dtypes.DT_BOOL.enum: 'bool_val', dtypes.DT_STRING.enum: 'string_val',
    dtypes.DT_HALF.enum: 'half_val', 14: 'half_val',
    dtypes.DT_UINT32.enum: 'uint32_val', dtypes.DT_UINT64.enum: 'uint64_val',
    8: 'scomplex_val', 18: 'dcomplex_val',
}
_VALUES_PER_ELEMENT = {8: 2, 18: 2}  # Complex numbers: (real, imaginary).


def _parsing_error(alias: str, why: str) -> status.ServingError:
  return status.invalid_argument(f'tensor parsing error: {alias}: {why}')


def decoded_bytes(proto, alias: str) -> int:
  """The bytes `proto` decodes to, checked against what it carries.

  Nothing is allocated: the shape and the payload's sizes are read, so a
  small message that declares a huge shape is caught before it costs memory.

  Args:
    proto: a request ``TensorProto``.
    alias: its input name, for the error.

  Returns:
    The decoded array's size in bytes.

  Raises:
    ServingError: INVALID_ARGUMENT ``tensor parsing error: <alias>`` for a
      shape that is not one (unknown rank, negative or too many dimensions),
      a ``tensor_content`` whose length is not the shape's, or more values
      than the shape holds.
  """
  shape = proto.tensor_shape
  if shape.unknown_rank:
    raise _parsing_error(alias, 'the shape has an unknown rank.')
  if len(shape.dim) > MAX_RANK:
    raise _parsing_error(alias, f'{len(shape.dim)} dimensions; a tensor has '
                         f'at most {MAX_RANK}.')
  elements = 1
  for dim in shape.dim:
    if dim.size < 0:
      raise _parsing_error(alias, f'dimension of size {dim.size}.')
    elements *= dim.size  # Python ints: no overflow on a hostile shape.
  dtype = dtypes.from_enum(proto.dtype)
  field = _VALUE_FIELDS.get(dtype.enum)
  if field is None:
    raise _parsing_error(alias, f'dtype {dtype.short_name} cannot be fed.')
  item = (_OBJECT_ITEM_BYTES if dtype.enum == dtypes.DT_STRING.enum else
          (dtype.numpy.itemsize if dtype.numpy is not None else 2))
  content = len(proto.tensor_content)
  if content:
    if dtype.enum == dtypes.DT_STRING.enum or content != elements * item:
      raise _parsing_error(
          alias, f'tensor_content holds {content} bytes; shape '
          f'{_shape_text(shape)} of {dtype.short_name} takes '
          f'{elements * item}.')
    return content
  carried = len(getattr(proto, field))
  if carried > elements * _VALUES_PER_ELEMENT.get(dtype.enum, 1):
    raise _parsing_error(alias, f'{carried} values for shape '
                         f'{_shape_text(shape)}.')
  size = elements * item
  if dtype.enum == dtypes.DT_STRING.enum:
    size += sum(len(v) for v in proto.string_val)
  return size


def check_request_size(protos: Mapping[str, Any], max_bytes: int) -> int:
  """The bytes a request's tensors decode to, refused over `max_bytes`.

  Returns:
    Their total.

  Raises:
    ServingError: INVALID_ARGUMENT for a malformed tensor (decoded_bytes);
      RESOURCE_EXHAUSTED when the tensors would decode to more than
      `max_bytes` (a shape the message's values are stretched to fill).
  """
  sizes = {alias: decoded_bytes(proto, alias)
           for alias, proto in protos.items()}
  total = sum(sizes.values())
  if total > max_bytes:
    largest = max(sizes, key=sizes.get)
    raise status.resource_exhausted(
        f'The request\'s tensors would decode to {total} bytes, over the '
        f'limit of {max_bytes} (4x --max-body-bytes); the largest is '
        f'{largest!r} with shape '
        f'{_shape_text(protos[largest].tensor_shape)}. Send fewer rows per '
        'request.')
  return total


def _shape_text(shape) -> str:
  return '[' + ','.join(str(d.size) for d in shape.dim) + ']'


def to_ndarray(proto, alias: str) -> np.ndarray:
  """Returns the array a request ``TensorProto`` holds.

  Call decoded_bytes (or check_request_size) first: this allocates the
  array the shape declares, filling it with the last value as TensorFlow's
  ``Tensor::FromProto`` does.

  Raises:
    ServingError: INVALID_ARGUMENT ``tensor parsing error: <alias>`` when the
      proto is inconsistent (as TF Serving's ``Tensor::FromProto`` check).
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    return tf.make_ndarray(proto)
  except Exception:  # pylint: disable=broad-except
    raise status.invalid_argument(f'tensor parsing error: {alias}') from None


def from_ndarray(array: Any):
  """Returns a ``TensorProto`` with `array` in its typed value field."""
  from tensorflow.core.framework import tensor_pb2  # pylint: disable=g-import-not-at-top
  array = np.asarray(array)
  proto = tensor_pb2.TensorProto()
  for size in array.shape:
    proto.tensor_shape.dim.add(size=size)
  if array.dtype.kind in ('O', 'S', 'U'):
    proto.dtype = dtypes.DT_STRING.enum
    proto.string_val.extend(
        v if isinstance(v, bytes) else str(v).encode('utf-8')
        for v in array.reshape(-1))
    return proto
  if array.dtype == np.float16:
    proto.dtype = dtypes.DT_HALF.enum
    proto.half_val.extend(array.reshape(-1).view(np.uint16).tolist())
    return proto
  found = _FIELDS.get(array.dtype)
  if found is None:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    return tf.make_tensor_proto(array)
  dtype, field = found
  proto.dtype = dtype.enum
  getattr(proto, field).extend(array.reshape(-1).tolist())
  return proto
