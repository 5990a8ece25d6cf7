"""Augment's counts of a batch of serialized tf.Examples, without a message per row.

The same counts as CleanRows + CountPerClass (stages.py) give row by row
(examples.label_of, examples.row_problems, Domain.contains), computed on
the batch decoded by tfx_bsl into Arrow columns: class counts before and
after the noisy-row policy, (feature, 'missing' | 'out_of_domain') counts,
noisy and dropped rows. Augment uses them when it changes no row (no
oversampling, no image copies): the rows then pass on as the files they
are, and only these counts need reading them.
"""
import collections
from typing import Dict, List, Mapping, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tfx_bsl.coders import example_coder

from leantfx.components.augment import examples as examples_lib

# (what, key, count): what is 'class_counts_before' | 'class_counts_after'
# (key: label text), 'problems' (key: (feature, kind)), 'noisy_rows' or
# 'dropped_rows' (key: None); the entries stages.counts_to_report folds.
Entry = Tuple[str, object, int]


def _lists(batch: pa.RecordBatch, name: str):
  index = batch.schema.get_field_index(name)
  return None if index < 0 else batch.column(index)


def _value_rows(lists: pa.Array) -> Tuple[pa.Array, np.ndarray]:
  """(every value, the row of each value) of a list column."""
  return (lists.flatten(),
          pc.list_parent_indices(lists).to_numpy(zero_copy_only=False))


def _texts(values: pa.Array) -> List[str]:
  """Domain.contains's text of each value (bytes decoded, ints as str)."""
  if pa.types.is_binary(values.type) or pa.types.is_large_binary(
      values.type) or pa.types.is_string(values.type):
    return [v.decode('utf-8', 'replace') if isinstance(v, bytes) else v
            for v in values.to_pylist()]
  return [str(v) for v in values.to_pylist()]


def _bad_values(values: pa.Array, domain: examples_lib.Domain) -> np.ndarray:
  """Whether each value is outside the domain (as Domain.contains says)."""
  numeric = pa.types.is_floating(values.type) or pa.types.is_integer(
      values.type)
  if domain.values is not None:
    if not (pa.types.is_integer(values.type) or not numeric):
      return np.zeros(len(values), dtype=bool)  # Floats: no texts to check.
    uniques = values.unique()
    inside = np.array([t in domain.values for t in _texts(uniques)],
                      dtype=bool)
    return ~inside[pc.index_in(values, value_set=uniques).to_numpy(
        zero_copy_only=False)]
  if not numeric:
    return np.zeros(len(values), dtype=bool)  # Text: no numbers to check.
  numbers = values.to_numpy(zero_copy_only=False).astype(np.float64)
  bad = np.isnan(numbers)
  if domain.minimum is not None:
    bad |= numbers < domain.minimum
  if domain.maximum is not None:
    bad |= numbers > domain.maximum
  return bad


def _label_texts(lists, num_rows: int) -> np.ndarray:
  """examples.label_of of every row ('' when it has no value)."""
  labels = np.full(num_rows, '', dtype=object)
  if lists is None:
    return labels
  values, rows = _value_rows(lists)
  if not len(values):
    return labels
  first = np.ones(len(rows), dtype=bool)
  first[1:] = rows[1:] != rows[:-1]
  values, rows = values.filter(pa.array(first)), rows[first]
  uniques = values.unique()
  if pa.types.is_floating(values.type):
    texts = [str(int(v)) if float(v).is_integer() else repr(v)
             for v in uniques.to_pylist()]
  else:
    texts = _texts(uniques)
  labels[rows] = np.array(texts, dtype=object)[
      pc.index_in(values, value_set=uniques).to_numpy(zero_copy_only=False)]
  return labels


def _row_by_row_counts(records: Sequence[bytes], label: str,
                       columns: Sequence[str],
                       domains: Mapping[str, examples_lib.Domain],
                       drop: bool) -> Tuple[List[Entry], np.ndarray]:
  """batch_counts's answer, one tf.Example message at a time."""
  # Lazy: only batches tfx_bsl cannot decode come here.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  problems: Dict[Tuple[str, str], int] = collections.Counter()
  before, after = collections.Counter(), collections.Counter()
  kept = np.ones(len(records), dtype=bool)
  noisy = 0
  for row, record in enumerate(records):
    example = tf.train.Example.FromString(record)
    found = examples_lib.row_problems(example, tuple(columns), domains)
    problems.update(found)
    text = examples_lib.label_of(example, label)
    before[text] += 1
    noisy += bool(found)
    if found and (drop or any(f == label for f, _ in found)):
      kept[row] = False
    else:
      after[text] += 1
  entries: List[Entry] = [('class_counts_before', k, n)
                          for k, n in before.items()]
  entries += [('class_counts_after', k, n) for k, n in after.items()]
  entries += [('problems', key, n) for key, n in sorted(problems.items())]
  entries += [('noisy_rows', None, noisy),
              ('dropped_rows', None, int((~kept).sum()))]
  return entries, kept


def batch_counts(records: Sequence[bytes], label: str,
                 columns: Sequence[str],
                 domains: Mapping[str, examples_lib.Domain],
                 drop: bool) -> Tuple[List[Entry], np.ndarray]:
  """The counts of a batch of serialized tf.Examples, and the rows kept.

  Args:
    records: serialized tf.Examples.
    label: the label feature.
    columns: the features checked for noisy values (label included).
    domains: the schema's domains (examples.schema_domains).
    drop: whether a noisy row is dropped ('drop' policy on the train split);
      a row whose label is noisy is dropped in any case.

  Returns:
    (entries, kept): the Entry counts, and a bool per row: kept or dropped.
  """
  try:
    batch = example_coder.ExamplesToRecordBatchDecoder().DecodeBatch(
        list(records))
  except RuntimeError:
    # A feature of different kinds in different rows has no Arrow column.
    return _row_by_row_counts(records, label, columns, domains, drop)
  num_rows = len(records)
  problems: Dict[Tuple[str, str], int] = {}
  noisy = np.zeros(num_rows, dtype=bool)
  label_bad = np.zeros(num_rows, dtype=bool)
  for name in columns:
    lists = _lists(batch, name)
    if lists is None:
      missing = np.ones(num_rows, dtype=bool)
      bad = np.zeros(num_rows, dtype=bool)
    else:
      lengths = pc.list_value_length(lists).fill_null(0).to_numpy(
          zero_copy_only=False)
      missing = lengths == 0
      bad = np.zeros(num_rows, dtype=bool)
      domain = domains.get(name)
      if domain is not None:
        values, rows = _value_rows(lists)
        bad[rows[_bad_values(values, domain)]] = True
        bad &= ~missing
    for kind, flags in (('missing', missing), ('out_of_domain', bad)):
      count = int(flags.sum())
      if count:
        problems[(name, kind)] = count
    noisy |= missing | bad
    if name == label:
      label_bad = missing | bad
  dropped = (noisy & drop) | label_bad
  labels = _label_texts(_lists(batch, label), num_rows)
  entries: List[Entry] = []
  for what, rows in (('class_counts_before', labels),
                     ('class_counts_after', labels[~dropped])):
    for text, count in collections.Counter(rows.tolist()).items():
      entries.append((what, text, count))
  entries += [('problems', key, n) for key, n in sorted(problems.items())]
  entries += [('noisy_rows', None, int(noisy.sum())),
              ('dropped_rows', None, int(dropped.sum()))]
  return entries, ~dropped
