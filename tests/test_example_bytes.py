"""leantfx/example_bytes.py: the same bytes as protobuf's deterministic serialization.

Each case builds the tf.Example with protobuf (features in a scrambled
order, a missing value as an empty list, as tfx_bsl's encoder writes it)
and compares its ``SerializeToString(deterministic=True)`` with what
``serialize`` writes from the columns; Hypothesis generates the values,
with the boundaries of every varint size, NaN, -0.0 and long text.
"""
import hypothesis
from hypothesis import strategies as st
import numpy as np
import pyarrow as pa
import pytest
from tensorflow.core.example import example_pb2

from leantfx import example_bytes

_INT64 = st.one_of(st.integers(-2**63, 2**63 - 1),
                   st.sampled_from([0, 1, 127, 128, 16383, 16384, -1,
                                    2**63 - 1, -2**63]))
_FLOAT32 = st.floats(width=32, allow_nan=True, allow_infinity=True)
_TEXT = st.one_of(st.binary(max_size=40),
                  st.sampled_from([b'', b'x' * 127, b'y' * 128, b'z' * 20000,
                                   'é'.encode()]))


def _expected(columns, num_rows):
  rows = []
  for row in range(num_rows):
    example = example_pb2.Example()
    for key, kind, present, values in reversed(columns):
      feature = example.features.feature[key]
      target = {'bytes': feature.bytes_list, 'float': feature.float_list,
                'int': feature.int64_list}[kind]
      target.SetInParent()
      if present[row]:
        value = values[row]
        target.value.append(value.as_py() if kind == 'bytes' else value)
    rows.append(example.SerializeToString(deterministic=True))
  return rows


@st.composite
def _columns(draw):
  num_rows = draw(st.integers(1, 6))
  columns = []
  names = draw(st.lists(st.from_regex(r'[A-Za-z][A-Za-z0-9_]{0,12}',
                                      fullmatch=True),
                        min_size=1, max_size=5, unique=True))
  for name in names:
    kind = draw(st.sampled_from(['bytes', 'float', 'int']))
    present = np.array(draw(st.lists(st.booleans(), min_size=num_rows,
                                     max_size=num_rows)))
    if kind == 'bytes':
      values = pa.array(draw(st.lists(_TEXT, min_size=num_rows,
                                      max_size=num_rows)), pa.binary())
    elif kind == 'int':
      values = np.array(draw(st.lists(_INT64, min_size=num_rows,
                                      max_size=num_rows)), dtype=np.int64)
    else:
      values = np.array(draw(st.lists(_FLOAT32, min_size=num_rows,
                                      max_size=num_rows)), dtype=np.float32)
    columns.append((name, kind, present, values))
  return columns, num_rows


@pytest.mark.unit
@hypothesis.settings(max_examples=300, deadline=None)
@hypothesis.given(_columns())
def test_serialize_writes_protobufs_deterministic_bytes(case):
  columns, num_rows = case
  assert example_bytes.serialize(columns, num_rows) == _expected(
      columns, num_rows)


@pytest.mark.unit
def test_one_very_long_value_lays_rows_end_to_end():
  # 200 rows, one of 1 MB: padding every row to the longest would need
  # 200 MB, so the rows are written end to end; the bytes are the same.
  num_rows = 200
  text = [b'short'] * num_rows
  text[7] = b'v' * (1 << 20)
  columns = [('t', 'bytes', np.ones(num_rows, bool), pa.array(text)),
             ('n', 'float', np.arange(num_rows) % 3 > 0,
              np.arange(num_rows, dtype=np.float32)),
             ('a', 'int', np.ones(num_rows, bool),
              np.arange(num_rows, dtype=np.int64) - 100)]
  assert example_bytes.serialize(columns, num_rows) == _expected(
      columns, num_rows)


@pytest.mark.unit
def test_varint_matches_protobuf():
  for number in (0, 1, 127, 128, 300, 16384, 2**63, 2**64 - 1):
    example = example_pb2.Example()
    example.features.feature['k'].int64_list.value.append(
        number if number < 2**63 else number - 2**64)
    assert example_bytes.varint(number) in example.SerializeToString()
