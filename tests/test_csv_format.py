"""leantfx/csv_format.py: the vectorized kinds and numbers agree with Python's.

A column's kind is defined value by value (``value_kind``: Python's int()
within int64, else float(), else text); ``array_kind`` and ``numbers``
compute it and the values with patterns and pyarrow's parser. Hypothesis
checks that the two agree on generated columns, hostile values included.
"""
import hypothesis
from hypothesis import strategies as st
import numpy as np
import pyarrow as pa
import pytest

from leantfx import csv_format

_VALUES = st.one_of(
    st.integers(-2**70, 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(['+1', '01', '-0', '1.', '.5', '1e5', '+.5e-3', 'nan',
                     'inf', '-Infinity', '0x10', ' 7', '1_000', 'abc', '1e',
                     'e5', '+', '-', '.', '١', '9223372036854775807',
                     '9223372036854775808']),
    st.text(max_size=4))


def _by_value(values):
  kind = None
  for value in values:
    if value:
      kind = csv_format.widest(kind, csv_format.value_kind(value))
  return kind


@pytest.mark.unit
@hypothesis.settings(max_examples=600, deadline=None, derandomize=True,
                     database=None)
@hypothesis.given(st.lists(st.one_of(st.none(), _VALUES), min_size=1,
                           max_size=8))
def test_array_kind_and_numbers_agree_with_python_value_by_value(values):
  values = [None if v == '' else v for v in values]
  array = pa.array(values, pa.string())
  kind = csv_format.array_kind(array)
  assert kind == _by_value([v for v in values if v is not None])
  if kind in (csv_format.INT, csv_format.FLOAT):
    cast = int if kind == csv_format.INT else float
    expected = np.array([cast(v) for v in values if v is not None],
                        dtype=np.int64 if kind == csv_format.INT else
                        np.float64)
    got = csv_format.numbers(array, kind)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


@pytest.mark.unit
@pytest.mark.parametrize('values, kind', [
    (['1', '+2', '-3'], csv_format.INT),
    (['1', '2.5'], csv_format.FLOAT),
    (['1', 'nan'], csv_format.FLOAT),
    (['9223372036854775808'], csv_format.FLOAT),  # beyond int64
    (['1', 'NA'], csv_format.BYTES),
    (['0x10'], csv_format.BYTES),                 # pyarrow reads hex; Python not
    ([None, None], None),
])
def test_array_kind_examples(values, kind):
  assert csv_format.array_kind(pa.array(values, pa.string())) == kind


@pytest.mark.unit
def test_encoded_examples_are_protobufs_deterministic_bytes(tmp_path):
  # tfx_bsl's encoder writes the feature map in an order that changes from
  # process to process; the same row must give the same bytes in every run
  # (ExampleGen's hash split, Augment's seeds, the runners' comparisons).
  from tensorflow.core.example import example_pb2  # pylint: disable=g-import-not-at-top
  path = tmp_path / 'a.csv'
  path.write_text('b,a,d,c\n1,x,2.5,\n3,y,,z\n')
  records = list(csv_format.encode_files([str(path)], text_columns=('a',)))
  assert len(records) == 2
  for record in records:
    assert record == example_pb2.Example.FromString(record).SerializeToString(
        deterministic=True)


_QUOTED = ('id,text,x\r\n'
           '1,"a, b",2.5\r\n'
           '2,"two\nlines ""quoted""\n",\r\n'
           '\r\n'
           '3,plain,-1\n'
           '4,"""",7\n'
           '5,"x\r\ny",8\n')


@pytest.mark.unit
@pytest.mark.parametrize('block_bytes', [1, 5, 17, 40, 10_000])
def test_record_blocks_hold_every_record_once(tmp_path, block_bytes):
  # Cuts fall at line breaks outside quotes only: the blocks, parsed one by
  # one, give the whole file's records (quoted line breaks, doubled quotes,
  # CRLF and blank lines included), and each block starts a record.
  path = tmp_path / 'q.csv'
  path.write_bytes(_QUOTED.encode() * 3)
  header = csv_format.read_header(str(path))
  whole = pa.Table.from_batches(list(csv_format.batches(str(path), header)))
  blocks = csv_format.record_blocks(str(path), block_bytes)
  parts = [b for block in blocks
           for b in csv_format.batches(str(path), header, block)]
  assert pa.Table.from_batches(parts).equals(whole)
  # 5 records a copy, and the header lines of copies 2 and 3 are records.
  assert whole.num_rows == 3 * 5 + 2
  assert blocks[0][0] == len('id,text,x\r\n')
  assert blocks[-1][1] == path.stat().st_size
  assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
  if block_bytes == 1:
    # The smallest blocks are single records, or a blank line (3 of them).
    assert len(blocks) == whole.num_rows + 3


@pytest.mark.unit
def test_record_blocks_of_a_header_only_file(tmp_path):
  path = tmp_path / 'h.csv'
  path.write_text('a,b\n')
  assert not csv_format.record_blocks(str(path), 1)
