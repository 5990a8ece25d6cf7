"""Shared by the data tests: the bundled rows as the CSV ExampleGen types them.

The ExampleGen (components/csv_example_gen) writes an empty CSV field as a
feature with no value and types a column by leantfx/csv_format.py's kinds
(int64, float or text); the statistics built here from pyarrow record batches
have that shape, so TFDV sees what it sees in the pipeline, without a Beam
job per test. (Text-looking labels only: a class label of digits would be
text in the pipeline.)
"""
import csv
import os
from typing import Dict, List, Sequence

import pyarrow as pa
import tensorflow_data_validation as tfdv
from tensorflow_data_validation.statistics import stats_impl
from tensorflow_metadata.proto.v0 import schema_pb2

from leantfx import csv_format
from leantfx import datasets
from leantfx import schemas


def bundled_rows(name: str, tmp_dir: str) -> List[Dict[str, str]]:
  """The bundled dataset's rows as dicts of CSV text ('' = missing)."""
  path = datasets.prepare(name, os.path.join(tmp_dir, f'{name}-rows'))
  with open(path, newline='', encoding='utf-8') as f:
    return list(csv.DictReader(f))


def schema(name: str) -> schema_pb2.Schema:
  return tfdv.load_schema_text(schemas.bundled_schema(name))


def _kind(values: Sequence[str]) -> str:
  kind = None
  for value in values:
    if value != '':
      kind = csv_format.widest(kind, csv_format.value_kind(value))
  return kind or csv_format.BYTES


def record_batch(rows: Sequence[Dict[str, str]]) -> pa.RecordBatch:
  """Rows -> a RecordBatch typed the way the ExampleGen types the columns."""
  columns = list(rows[0])
  arrays = []
  for column in columns:
    values = [r.get(column, '') for r in rows]
    kind = _kind(values)
    if kind == 'int':
      arrays.append(pa.array([[int(v)] if v != '' else [] for v in values],
                             type=pa.list_(pa.int64())))
    elif kind == 'float':
      arrays.append(pa.array([[float(v)] if v != '' else [] for v in values],
                             type=pa.list_(pa.float32())))
    else:
      arrays.append(pa.array([[v.encode()] if v != '' else [] for v in values],
                             type=pa.list_(pa.binary())))
  return pa.RecordBatch.from_arrays(arrays, columns)


def statistics(rows: Sequence[Dict[str, str]], with_schema=None):
  """TFDV statistics of rows (with the schema, as StatisticsGen gets it)."""
  options = tfdv.StatsOptions(schema=with_schema) if with_schema else (
      tfdv.StatsOptions())
  return stats_impl.generate_statistics_in_memory(record_batch(rows), options)
