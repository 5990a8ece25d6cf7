"""What a CSV span file is, as leantfx reads it: one definition for every reader.

The pre-flight checks (leantfx/input_checks.py) and the CSV ExampleGen
(components/csv_example_gen) both read files through this module, so they
agree on the rows, the columns and each column's type by construction:

* the header is line 1, parsed as CSV (so a quoted name may hold commas);
  a UTF-8 byte-order mark before it is dropped (Excel's "CSV UTF-8");
* data records follow RFC 4180 (quoted fields may hold commas, quotes and
  line breaks); blank lines are skipped;
* an empty field is a missing value, the only missing-value marker;
* a column's kind is ``int`` when every present value is a Python ``int``
  within int64, else ``float`` when every one is a Python ``float``, else
  ``bytes`` (text, kept exactly as written). Columns read as text whatever
  they hold: the label of a classification (``+1``, ``01`` and ``1.0`` stay
  three classes) and categorical columns.

Files are streamed in blocks (pyarrow's CSV reader), never loaded whole.
"""
import codecs
import csv
import math
import os
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import csv as pa_csv

from leantfx import columns
from leantfx import example_bytes
from leantfx.errors import InputDataError

INT, FLOAT, BYTES = 'int', 'float', 'bytes'
# Kinds ordered by what they can hold: a column takes the widest kind of its
# values (an int column with one '2.5' is float, with one 'x' it is text).
_ORDER = {None: -1, INT: 0, FLOAT: 1, BYTES: 2}
_INT64_MIN, _INT64_MAX = -2**63, 2**63 - 1
# pyarrow parses this many bytes per record batch.
BLOCK_BYTES = 8 << 20
# record_blocks reads files in pieces of this many bytes.
_SCAN_BYTES = 1 << 20
# Values whose kind a pattern settles (array_kind): integers of at most 18
# digits (within int64 whatever they are), and decimals with a point or an
# exponent (Python floats, never ints).
_SHORT_INT_RE = r'^[+-]?[0-9]{1,18}$'
_DECIMAL_RE = (r'^[+-]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+(\.[0-9]*)?[eE][+-]?[0-9]+'
               r'|\.[0-9]+[eE][+-]?[0-9]+)$')


def widest(a: Optional[str], b: Optional[str]) -> Optional[str]:
  """The kind that holds the values of two kinds (None: no value seen)."""
  return a if _ORDER[a] >= _ORDER[b] else b


def value_kind(text: str) -> str:
  """The kind of one present (non-empty) value."""
  try:
    number = int(text)
  except ValueError:
    pass
  else:
    return INT if _INT64_MIN <= number <= _INT64_MAX else FLOAT
  try:
    float(text)
  except ValueError:
    return BYTES
  return FLOAT


def is_finite_number(text: str) -> bool:
  """Whether a value reads as a finite number."""
  try:
    return math.isfinite(float(text))
  except ValueError:
    return False


def read_header(path: str) -> List[str]:
  """The column names of line 1, parsed as CSV (BOM dropped).

  Raises:
    OSError: the file cannot be read.
    UnicodeDecodeError: line 1 is not UTF-8.
    csv.Error: line 1 is not valid CSV.
  """
  with open(path, 'rb') as f:
    raw = f.readline()
  if raw.startswith(codecs.BOM_UTF8):
    raw = raw[len(codecs.BOM_UTF8):]
  text = raw.decode('utf-8').rstrip('\r\n')
  if not text:
    return []
  return next(csv.reader([text], strict=True))


def record_blocks(path: str, block_bytes: int = BLOCK_BYTES
                 ) -> List[Tuple[int, int]]:
  """The data records of a file cut into byte ranges of whole records.

  A range ends at a line break outside quotes (an even number of '"'
  since the data began: a quoted field's line breaks and doubled quotes
  stay inside it), at least ``block_bytes`` after the range began; so
  ranges can be parsed on their own and hold every record once.

  Args:
    path: the CSV file.
    block_bytes: the least bytes of a range (the last one may hold fewer).

  Returns:
    [(start, end), ...] byte offsets, the first starting after line 1 (the
    header), the last ending at the end of the file; none when the file
    holds no more than its header.
  """
  with open(path, 'rb') as f:
    data_start = len(f.readline())
    size = os.fstat(f.fileno()).st_size
    cuts = [data_start]
    target = data_start + block_bytes
    quotes = 0  # Parity of the quotes before the next byte scanned.
    offset = data_start  # The file offset of piece[0].
    while target < size:
      piece = f.read(_SCAN_BYTES)
      if not piece:
        break
      scan = 0
      while offset + len(piece) > target:
        scan_to = max(scan, target - offset)
        quotes ^= piece.count(b'"', scan, scan_to) & 1
        scan = scan_to
        line_break = piece.find(b'\n', scan)
        if line_break < 0:
          break
        quotes ^= piece.count(b'"', scan, line_break) & 1
        scan = line_break + 1
        if not quotes:
          cuts.append(offset + scan)
          target = offset + scan + block_bytes
      quotes ^= piece.count(b'"', scan) & 1
      offset += len(piece)
  cuts = [c for c in cuts if c < size]
  return list(zip(cuts, cuts[1:] + [size]))


def batches(path: str, columns: Sequence[str],
            byte_range: Optional[Tuple[int, int]] = None
            ) -> Iterator[pa.RecordBatch]:
  """The data records of a file as record batches of strings (null: missing).

  Args:
    path: the CSV file.
    columns: its header (read_header), which names the batches' columns.
    byte_range: only the records of this (start, end) range of
      ``record_blocks``; None: every record of the file.

  Raises:
    pyarrow.ArrowInvalid: a record that is not valid CSV or has another
      number of fields than the header; the pre-flight checks explain these
      with file and line first.
  """
  if byte_range is None:
    source, skip_rows = path, 1
  else:
    start, end = byte_range
    if end <= start:
      return
    with open(path, 'rb') as f:
      f.seek(start)
      source, skip_rows = pa.BufferReader(f.read(end - start)), 0
  reader = pa_csv.open_csv(
      source,
      read_options=pa_csv.ReadOptions(
          column_names=list(columns), skip_rows=skip_rows,
          block_size=BLOCK_BYTES, use_threads=False),
      parse_options=pa_csv.ParseOptions(newlines_in_values=True,
                                        ignore_empty_lines=True),
      convert_options=pa_csv.ConvertOptions(
          column_types={c: pa.string() for c in columns},
          null_values=[''], strings_can_be_null=True,
          quoted_strings_can_be_null=True))
  for batch in reader:
    if batch.num_rows:
      yield batch


def null_markers(batch: pa.RecordBatch, columns: Sequence[str],
                 markers: Sequence[str]) -> pa.RecordBatch:
  """The batch with ``markers`` ('NA', 'n/a', ...) in ``columns`` as missing.

  The numeric columns whose missing values are written as markers
  (leantfx/column_roles.py) are then typed and encoded as numbers with
  gaps, as if the fields were empty.
  """
  if not columns or not markers:
    return batch
  value_set = pa.array(list(markers), pa.string())
  arrays = []
  for name, column in zip(batch.schema.names, batch.columns):
    if name in columns:
      is_marker = pc.fill_null(pc.is_in(column, value_set=value_set), False)
      column = pc.if_else(is_marker, pa.scalar(None, pa.string()), column)
    arrays.append(column)
  return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)


def span_header(files: Sequence[str]) -> List[str]:
  """The header every file of a span shares (read_header of each).

  Raises:
    InputDataError: a header that is not UTF-8 CSV, or a file whose header
      differs from the first file's.
  """
  header = None
  for path in files:
    try:
      found = read_header(path)
    except (UnicodeDecodeError, csv.Error) as e:
      raise InputDataError(
          f'{path}, line 1: the header is not UTF-8 CSV ({e}). Re-save the '
          'file as UTF-8 CSV; `leantfx run` on the data names the problem.'
      ) from e
    if header is None:
      header = found
    elif found != header:
      raise InputDataError(
          f'{path}: its header {found} differs from that of {files[0]} '
          f'({header}). Every file of a span needs the same header line.')
  return header or []


def checked_batches(path: str, columns: Sequence[str],
                    byte_range: Optional[Tuple[int, int]] = None,
                    marker_columns: Sequence[str] = (),
                    markers: Sequence[str] = ()
                   ) -> Iterator[pa.RecordBatch]:
  """``batches``, with a record that is not valid CSV as an InputDataError.

  ``markers`` in ``marker_columns`` come out missing (null_markers).
  """
  try:
    for batch in batches(path, columns,
                         tuple(byte_range) if byte_range else None):
      yield null_markers(batch, marker_columns, markers)
  except pa.ArrowInvalid as e:
    raise InputDataError(
        f'{path}: not valid CSV ({e}). `leantfx run` on the data names the '
        'file and line.') from e


def array_kind(values: pa.Array) -> Optional[str]:
  """The widest kind of a string array's present values (None: all missing).

  The same answer as ``value_kind`` over every value, vectorized: values
  that are plainly integers (at most 18 digits) or decimals are matched by
  pattern; only the others (19+ digit integers, 'nan', ' 7', text) are
  tried one by one, once per distinct value.
  """
  present = values.drop_null()
  if not len(present):
    return None
  is_int = pc.match_substring_regex(present, _SHORT_INT_RE)
  if pc.all(is_int).as_py():
    return INT
  kind = INT if pc.any(is_int).as_py() else None
  rest = present.filter(pc.invert(is_int))
  is_decimal = pc.match_substring_regex(rest, _DECIMAL_RE)
  if pc.any(is_decimal).as_py():
    kind = widest(kind, FLOAT)
  for text in rest.filter(pc.invert(is_decimal)).unique().to_pylist():
    kind = widest(kind, value_kind(text))
    if kind == BYTES:
      break
  return kind


def batch_kinds(batch: pa.RecordBatch,
                skip: Sequence[str] = ()) -> Dict[str, Optional[str]]:
  """{column: kind} of a batch's columns, ``skip`` ones left out."""
  return {name: array_kind(batch.column(i))
          for i, name in enumerate(batch.schema.names) if name not in skip}


def merge_kinds(a: Dict[str, Optional[str]],
                b: Dict[str, Optional[str]]) -> Dict[str, Optional[str]]:
  """Column kinds over two parts of the data."""
  return {name: widest(a.get(name), b.get(name)) for name in {**a, **b}}


def numbers(values: pa.Array, kind: str) -> np.ndarray:
  """A string array's present values as int64 or float64 (missing dropped).

  pyarrow's parser, after a leading '+' is dropped, reads every value whose
  kind the patterns of ``array_kind`` gave as Python does; any value it
  refuses (' 7', '1_000', 'infinity') sends the array to Python's int()
  or float(), once per distinct value.
  """
  present = values.drop_null()
  target = pa.int64() if kind == INT else pa.float64()
  try:
    return pc.cast(pc.replace_substring_regex(present, r'^\+', ''),
                   target).to_numpy(zero_copy_only=False)
  except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
    pass
  uniques = present.unique()
  cast = int if kind == INT else float
  converted = np.fromiter((cast(t) for t in uniques.to_pylist()),
                          dtype=np.int64 if kind == INT else np.float64,
                          count=len(uniques))
  return converted[pc.index_in(present, value_set=uniques).to_numpy()]


def encode_batch(batch: pa.RecordBatch, kinds: Mapping[str, Optional[str]],
                 keys: Mapping[str, str],
                 strip_column: Optional[str] = None) -> List[bytes]:
  """Serialized tf.Examples of a batch of string columns.

  Args:
    batch: a record batch of ``batches``.
    kinds: every column's kind over the whole span (a column whose values
      are all missing has none and is left out).
    keys: {column: feature key} (leantfx/columns.py).
    strip_column: a text column whose values lose surrounding white space
      (the label with --normalize-labels), or None.

  Returns:
    One serialized tf.Example per row, features under their keys: numbers
    as int64 or float, text as bytes exactly as written; a missing value is
    an empty list. The bytes are protobuf's deterministic serialization
    (features sorted by key, leantfx/example_bytes.py), the same in every
    process: ExampleGen's hash split, Augment's seeds and the runners'
    comparisons need the same bytes for the same row.
  """
  columns_out = []
  for i, name in enumerate(batch.schema.names):
    kind = kinds.get(name)
    if kind is None:
      continue
    column = batch.column(i)
    present = np.logical_not(column.is_null().to_numpy(zero_copy_only=False))
    if kind == BYTES:
      values = column.fill_null('')
      if name == strip_column:
        values = pc.utf8_trim_whitespace(values)
      values = values.cast(pa.binary())
    else:
      values = np.zeros(len(column),
                        dtype=np.int64 if kind == INT else np.float64)
      values[present] = numbers(column, kind)
    columns_out.append((keys[name], kind, present, values))
  return example_bytes.serialize(columns_out, batch.num_rows)


def _labels(batch: pa.RecordBatch, label: str, strip: bool) -> pa.Array:
  values = batch.column(batch.schema.get_field_index(label)).fill_null('')
  return pc.utf8_trim_whitespace(values) if strip else values


def label_counts(batch: pa.RecordBatch, label: str,
                 strip: bool = False) -> Dict[str, int]:
  """{label as written (stripped with ``strip``): rows} of a batch."""
  counts = pc.value_counts(_labels(batch, label, strip))
  return {value.as_py(): count.as_py() for value, count in zip(
      counts.field('values'), counts.field('counts'))}


def without_labels(batch: pa.RecordBatch, label: str, drop: Sequence[str],
                   strip: bool = False) -> pa.RecordBatch:
  """The batch without the rows whose label is one of ``drop``."""
  if not drop:
    return batch
  dropped = pc.is_in(_labels(batch, label, strip),
                     value_set=pa.array(list(drop), pa.string()))
  return batch.filter(pc.invert(dropped))


def span_kinds(files: Sequence[str], header: Sequence[str],
               text_columns: Sequence[str], marker_columns: Sequence[str] = (),
               markers: Sequence[str] = ()) -> Dict[str, Optional[str]]:
  """Every column's kind over all files (text_columns: text)."""
  kinds: Dict[str, Optional[str]] = {}
  for path in files:
    for batch in checked_batches(path, header, None, marker_columns, markers):
      kinds = merge_kinds(kinds, batch_kinds(batch, skip=text_columns))
  kinds.update({name: BYTES for name in text_columns})
  return kinds


def encode_files(files: Sequence[str], text_columns: Sequence[str],
                 strip_column: Optional[str] = None,
                 marker_columns: Sequence[str] = (),
                 markers: Sequence[str] = ()) -> Iterator[bytes]:
  """The serialized tf.Examples of CSV files, typed over all of them.

  What the CSV ExampleGen writes, in one process (``leantfx schema infer``
  infers a schema from them, so it matches the pipeline's examples).
  """
  header = read_header(files[0])
  kinds = span_kinds(files, header, text_columns, marker_columns, markers)
  keys = columns.feature_keys(header)
  for path in files:
    for batch in checked_batches(path, header, None, marker_columns, markers):
      yield from encode_batch(batch, kinds, keys, strip_column)
