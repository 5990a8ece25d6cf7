"""``TensorProto`` <-> numpy for the gRPC API.

Requests may carry values in typed fields (``float_val``...) or packed in
``tensor_content``; ``tf.make_ndarray`` reads both. Responses are written in the
typed fields, as TF Serving's ``Tensor::AsProtoField`` does for Predict.
"""
from typing import Any

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


def to_ndarray(proto, alias: str) -> np.ndarray:
  """Returns the array a request ``TensorProto`` holds.

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
