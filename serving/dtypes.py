"""TensorFlow ``DataType`` values, their names and numpy equivalents.

The enum numbers are those of ``tensorflow/core/framework/types.proto`` (stable
wire values), so JSON parsing and validation need no TensorFlow import. The
short names are ``DataTypeString()``'s, which TF Serving's error messages use
("is not of expected type: float").
"""
import dataclasses
from typing import Dict, Optional

import numpy as np


@dataclasses.dataclass(frozen=True)
class DType:
  """One TensorFlow data type.

  Attributes:
    enum: the ``DataType`` wire value (``DT_FLOAT`` = 1, ...).
    proto_name: the enum name, e.g. ``DT_FLOAT`` (used in metadata JSON).
    short_name: ``DataTypeString()``, e.g. ``float``.
    numpy: the numpy dtype, or None when there is no plain equivalent.
  """
  enum: int
  proto_name: str
  short_name: str
  numpy: Optional[np.dtype]


_ALL = (
    DType(0, 'DT_INVALID', 'invalid', None),
    DType(1, 'DT_FLOAT', 'float', np.dtype(np.float32)),
    DType(2, 'DT_DOUBLE', 'double', np.dtype(np.float64)),
    DType(3, 'DT_INT32', 'int32', np.dtype(np.int32)),
    DType(4, 'DT_UINT8', 'uint8', np.dtype(np.uint8)),
    DType(5, 'DT_INT16', 'int16', np.dtype(np.int16)),
    DType(6, 'DT_INT8', 'int8', np.dtype(np.int8)),
    DType(7, 'DT_STRING', 'string', np.dtype(object)),
    DType(8, 'DT_COMPLEX64', 'complex64', np.dtype(np.complex64)),
    DType(9, 'DT_INT64', 'int64', np.dtype(np.int64)),
    DType(10, 'DT_BOOL', 'bool', np.dtype(np.bool_)),
    DType(14, 'DT_BFLOAT16', 'bfloat16', None),
    DType(17, 'DT_UINT16', 'uint16', np.dtype(np.uint16)),
    DType(18, 'DT_COMPLEX128', 'complex128', np.dtype(np.complex128)),
    DType(19, 'DT_HALF', 'half', np.dtype(np.float16)),
    DType(20, 'DT_RESOURCE', 'resource', None),
    DType(21, 'DT_VARIANT', 'variant', None),
    DType(22, 'DT_UINT32', 'uint32', np.dtype(np.uint32)),
    DType(23, 'DT_UINT64', 'uint64', np.dtype(np.uint64)),
)

_BY_ENUM: Dict[int, DType] = {d.enum: d for d in _ALL}
_BY_NUMPY: Dict[np.dtype, DType] = {
    d.numpy: d for d in _ALL if d.numpy is not None
}

DT_FLOAT = _BY_ENUM[1]
DT_DOUBLE = _BY_ENUM[2]
DT_INT32 = _BY_ENUM[3]
DT_UINT8 = _BY_ENUM[4]
DT_INT16 = _BY_ENUM[5]
DT_INT8 = _BY_ENUM[6]
DT_STRING = _BY_ENUM[7]
DT_INT64 = _BY_ENUM[9]
DT_BOOL = _BY_ENUM[10]
DT_HALF = _BY_ENUM[19]
DT_UINT32 = _BY_ENUM[22]
DT_UINT64 = _BY_ENUM[23]


def from_enum(value: int) -> DType:
  """Returns the DType of a ``DataType`` wire value (unknown ones kept)."""
  found = _BY_ENUM.get(int(value))
  if found is None:
    return DType(int(value), f'DT_{int(value)}', f'type{int(value)}', None)
  return found


def from_numpy(dtype) -> DType:
  """Returns the DType of a numpy dtype (bytes/str/object arrays are strings).

  Raises:
    ValueError: the numpy dtype has no TensorFlow equivalent.
  """
  found = _BY_NUMPY.get(dtype) if isinstance(dtype, np.dtype) else None
  if found is not None:  # The request path's case: an array's dtype.
    return found
  dtype = np.dtype(dtype)
  if dtype.kind in ('S', 'U', 'O'):
    return DT_STRING
  found = _BY_NUMPY.get(dtype)
  if found is None:
    raise ValueError(f'numpy dtype {dtype} has no TensorFlow DataType.')
  return found
