"""Serialized tf.Examples built from Arrow columns, in one fixed byte order.

The bytes are exactly those of protobuf's deterministic serialization of
the same tf.Example (``SerializeToString(deterministic=True)``: the feature
map's entries sorted by key), written column by column with Arrow's
vectorized kernels instead of a message per row. Every column holds at
most one value per row (a CSV field); a missing value is the feature with
an empty list, as tfx_bsl's RecordBatchToExamplesEncoder writes it.

Why not the encoder: it writes the feature map in an order that changes
from process to process, and parsing and re-serializing each of its
records cost four times the encoding itself.

Wire format (tensorflow/core/example/{example,feature}.proto):

  Example   := 0x0a len Features
  Features  := (0x0a len MapEntry)*           feature map, sorted by key
  MapEntry  := 0x0a len key  0x12 len Feature
  Feature   := 0x0a len BytesList | 0x12 len FloatList | 0x1a len Int64List
  BytesList := (0x0a len bytes)*
  FloatList := 0x0a len fixed32*               packed
  Int64List := 0x0a len varint*                packed
"""
from typing import List, Tuple, Union

import numpy as np
import pyarrow as pa

BYTES, FLOAT, INT = 'bytes', 'float', 'int'
# Field tags (field number << 3 | wire type 2, length-delimited).
_TAG_1, _TAG_2, _TAG_3 = b'\x0a', b'\x12', b'\x1a'
_FEATURE_TAG = {BYTES: _TAG_1, FLOAT: _TAG_2, INT: _TAG_3}

Column = Tuple[str, str, np.ndarray, Union[np.ndarray, pa.Array]]


def varint(number: int) -> bytes:
  """One non-negative int as a protobuf varint."""
  out = bytearray()
  while True:
    low = number & 0x7f
    number >>= 7
    if number:
      out.append(low | 0x80)
    else:
      out.append(low)
      return bytes(out)


# The first number of each varint size (2..10 bytes).
_VARINT_STEPS = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)
# A batch's rows are laid out side by side in one array of rows as wide as
# the longest, unless that wastes more than this many bytes beyond twice the
# rows' bytes (one very long text value): then end to end.
_PADDED_SLACK_BYTES = 16 << 20
# Rows per scatter of equally wide parts (bounds its index array).
_SCATTER_ROWS = 8192


def _varint_sizes(numbers: np.ndarray) -> np.ndarray:
  """Bytes of each uint64's varint (1-10)."""
  numbers = numbers.astype(np.uint64, copy=False)
  if not len(numbers) or numbers.max() < _VARINT_STEPS[0]:
    return np.ones(len(numbers), dtype=np.int64)
  return 1 + np.searchsorted(_VARINT_STEPS, numbers, side='right')


def _varints(numbers: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
  """uint64 numbers as varints: (bytes padded to the longest, sizes)."""
  numbers = numbers.astype(np.uint64, copy=False)
  sizes = _varint_sizes(numbers)
  width = int(sizes.max()) if len(sizes) else 1
  groups = np.empty((len(numbers), width), dtype=np.uint8)
  for k in range(width):
    more = (sizes > k + 1).astype(np.uint8) << 7
    groups[:, k] = ((numbers >> np.uint64(7 * k)) & np.uint64(0x7f)).astype(
        np.uint8) | more
  return groups, sizes


class _RowWriter:
  """Appends parts to every row of one buffer whose row sizes are known.

  While every row has the same number of bytes written (the features
  before the first one of varying size), a part is one slice assignment
  over all rows; after that, a scatter.
  """

  def __init__(self, row_sizes: np.ndarray):
    rows = len(row_sizes)
    self._sizes = row_sizes
    width = int(row_sizes.max()) if rows else 0
    total = int(row_sizes.sum())
    if width * rows <= 2 * total + _PADDED_SLACK_BYTES:
      self._width = width  # Row i starts at i * width.
      self._starts = np.arange(rows, dtype=np.int64) * width
      self.out = np.empty(width * rows, dtype=np.uint8)
    else:
      self._width = None
      self._starts = np.zeros(rows, dtype=np.int64)
      np.cumsum(row_sizes[:-1], out=self._starts[1:])
      self.out = np.empty(total, dtype=np.uint8)
    self._written = np.zeros(rows, dtype=np.int64)
    self._same = 0  # Bytes written in every row while all are alike.
    self._pending = []

  def padded(self, rows: np.ndarray, sizes: np.ndarray) -> None:
    """Row i gets rows[i, :sizes[i]]."""
    width = rows.shape[1]
    if (sizes == width).all():
      # Parts as wide in every row are gathered and written in one go.
      self._pending.append(rows)
      return
    self._flush()
    index = (self._starts + self._written)[:, np.newaxis] + np.arange(width)
    keep = np.arange(width)[np.newaxis, :] < sizes[:, np.newaxis]
    self.out[index[keep]] = rows[keep]
    self._same = None
    self._written += sizes

  def _flush(self) -> None:
    if not self._pending:
      return
    block = np.hstack(self._pending)
    self._pending = []
    width = block.shape[1]
    if self._same is not None and self._width is not None:
      view = self.out.reshape(-1, self._width)
      view[:, self._same:self._same + width] = block
      self._same += width
    else:
      starts = self._starts + self._written
      for first in range(0, len(starts), _SCATTER_ROWS):
        part = slice(first, first + _SCATTER_ROWS)
        self.out[starts[part, np.newaxis] + np.arange(width)] = block[part]
    self._written += width

  def const(self, data: bytes, present: np.ndarray) -> None:
    """Rows where present get data."""
    rows = np.broadcast_to(np.frombuffer(data, dtype=np.uint8),
                           (len(present), len(data)))
    self.padded(rows, present * len(data))

  def varint(self, numbers: np.ndarray, present: np.ndarray) -> None:
    groups, sizes = _varints(numbers)
    self.padded(groups, sizes * present)

  def ragged(self, data: np.ndarray, starts: np.ndarray,
             sizes: np.ndarray) -> None:
    """Row i gets data[starts[i]:starts[i] + sizes[i]]."""
    self._flush()
    total = int(sizes.sum())
    if total:
      before = np.zeros(len(sizes), dtype=np.int64)
      np.cumsum(sizes[:-1], out=before[1:])
      within = np.arange(total, dtype=np.int64)
      self.out[np.repeat(self._starts + self._written - before, sizes) +
               within] = data[np.repeat(starts - before, sizes) + within]
    self._written += sizes
    if len(sizes) and (sizes != sizes[0]).any():
      self._same = None
    elif self._same is not None and len(sizes):
      self._same += int(sizes[0])

  def rows(self) -> List[bytes]:
    self._flush()
    data = self.out.tobytes()
    return [data[a:a + n] for a, n in
            zip(self._starts.tolist(), self._sizes.tolist())]


def _binary_parts(values: pa.Array) -> Tuple[np.ndarray, np.ndarray,
                                             np.ndarray]:
  """(value bytes, start of each value, size of each value) of a binary array."""
  values = values.cast(pa.binary())
  _, offsets_buffer, data_buffer = values.buffers()
  offsets = np.frombuffer(offsets_buffer, dtype=np.int32)[
      values.offset:values.offset + len(values) + 1].astype(np.int64)
  data = (np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None
          else np.zeros(0, dtype=np.uint8))
  return data, offsets[:-1], np.diff(offsets)


def _payloads(kind: str, values: Union[np.ndarray, pa.Array],
              present: np.ndarray):
  """Each row's list value: ('padded', rows, sizes) or ('ragged', ...)."""
  if kind == FLOAT:
    rows = np.ascontiguousarray(values, dtype='<f4').view(np.uint8).reshape(
        -1, 4)
    return ('padded', rows, present * 4)
  if kind == INT:
    groups, sizes = _varints(
        np.asarray(values, dtype=np.int64).view(np.uint64))
    return ('padded', groups, sizes * present)
  data, starts, sizes = _binary_parts(values)
  return ('ragged', data, starts, sizes * present)


def serialize(columns: List[Column], num_rows: int) -> List[bytes]:
  """One serialized tf.Example per row, as protobuf's deterministic bytes.

  Args:
    columns: (feature key, kind, present, values) per feature: kind is
      'bytes', 'float' or 'int'; present a bool array (False: the row has
      an empty list); values one per row (any value where not present):
      a binary array for 'bytes', numbers for 'float' (written as float32)
      and 'int' (int64).
    num_rows: the rows (every column's length).

  Returns:
    The serialized tf.Examples, in row order.

  Raises:
    ValueError: no columns.
  """
  if not columns:
    raise ValueError('A tf.Example needs at least one column.')
  planned = []
  features_size = np.zeros(num_rows, dtype=np.int64)
  for key, kind, present, values in sorted(columns, key=lambda c: c[0]):
    present = np.asarray(present, dtype=bool).astype(np.int64)
    payload = _payloads(kind, values, present)
    payload_size = payload[-1]
    # The list: 0x0a varint(size) value, or nothing when missing.
    list_size = present * (1 + _varint_sizes(payload_size.astype(np.uint64))
                           ) + payload_size
    feature_size = 1 + _varint_sizes(list_size.astype(np.uint64)) + list_size
    key_bytes = key.encode('utf-8')
    key_part = _TAG_1 + varint(len(key_bytes)) + key_bytes + _TAG_2
    entry_size = (len(key_part) +
                  _varint_sizes(feature_size.astype(np.uint64)) + feature_size)
    features_size += (
        1 + _varint_sizes(entry_size.astype(np.uint64)) + entry_size)
    planned.append((kind, present, payload, list_size, feature_size, key_part,
                    entry_size))
  writer = _RowWriter(
      1 + _varint_sizes(features_size.astype(np.uint64)) + features_size)
  everyone = np.ones(num_rows, dtype=np.int64)
  writer.const(_TAG_1, everyone)
  writer.varint(features_size, everyone)
  for (kind, present, payload, list_size, feature_size, key_part,
       entry_size) in planned:
    writer.const(_TAG_1, everyone)
    writer.varint(entry_size, everyone)
    writer.const(key_part, everyone)
    writer.varint(feature_size, everyone)
    writer.const(_FEATURE_TAG[kind], everyone)
    writer.varint(list_size, everyone)
    writer.const(_TAG_1, present)
    writer.varint(payload[-1], present)
    if payload[0] == 'padded':
      writer.padded(payload[1], payload[2])
    else:
      writer.ragged(*payload[1:])
  return writer.rows()
