"""models/preprocessing.py: the numeric block (every numeric column scaled
in one vectorized op) through the real tf.Transform on Beam, against a numpy
reference.

The numeric columns are scaled as one [batch, k] block with per-column
statistics; these tests pin what each column gets (its own in-domain mean for
gaps and out-of-domain values, its own z-score) and that the transform
graph's imputation and scaling ops do not grow with the column count.
"""
import collections
import dataclasses
import functools
import os

import numpy as np
import pytest
import tensorflow as tf

from leantfx import config as config_lib
from leantfx.models import preprocessing

pytestmark = pytest.mark.unit

tft = pytest.importorskip('tensorflow_transform')
tft_beam = pytest.importorskip('tensorflow_transform.beam')

_LABEL = 'y'


def _spec(numeric):
  return config_lib.DatasetSpec(
      name='block', label=_LABEL, classes=('no', 'yes'),
      numeric_features=tuple(numeric), categorical_features=('k',))


def _run(numeric, raw_spec, rows, domains, temp_dir):
  """AnalyzeAndTransformDataset with the project's preprocessing_fn."""
  from tensorflow_transform.tf_metadata import dataset_metadata  # pylint: disable=g-import-not-at-top
  from tensorflow_transform.tf_metadata import schema_utils  # pylint: disable=g-import-not-at-top
  metadata = dataset_metadata.DatasetMetadata(
      schema_utils.schema_from_feature_spec(raw_spec))
  fn = functools.partial(
      preprocessing.preprocessing_fn,
      custom_config={'dataset': dataclasses.asdict(_spec(numeric)),
                     'domains': domains})
  with tft_beam.Context(temp_dir=str(temp_dir), force_tf_compat_v1=False):
    (out, _), transform_fn = ((rows, metadata)
                              | tft_beam.AnalyzeAndTransformDataset(fn))
    out_dir = str(temp_dir / 'transform_fn')
    _ = transform_fn | tft_beam.WriteTransformFn(out_dir)
  return out, out_dir


def _reference(values, domain):
  """Column z-scores, gaps and out-of-domain values taking the mean."""
  x = np.array([np.nan if v is None else v for v in values], np.float64)
  lo, hi = (domain or {}).get('min'), (domain or {}).get('max')
  if lo is not None:
    x[x < lo] = np.nan
  if hi is not None:
    x[x > hi] = np.nan
  x = np.where(np.isnan(x), np.nanmean(x), x)
  std = x.std()
  return (x - x.mean()) / std if std > 0 else x - x.mean()


def test_each_numeric_column_gets_its_own_imputation_and_z_score(tmp_path):
  rng = np.random.default_rng(3)
  n = 40
  # a: float with gaps and values outside [0, 10]; b: int64 with gaps and a
  # lower bound only; c: a dense float column with no domain, on a scale
  # 1000x the others (a shared statistic would show at once).
  a = [None if i % 7 == 0 else float(v)
       for i, v in enumerate(rng.uniform(-3, 13, n))]
  b = [None if i % 5 == 2 else int(v) for i, v in enumerate(
      rng.integers(-20, 60, n))]
  c = [float(v) for v in rng.normal(5000, 800, n)]
  k = ['x' if i % 3 else 'z' for i in range(n)]
  y = ['yes' if i % 2 else 'no' for i in range(n)]
  rows = [{'a': [] if a[i] is None else [a[i]],
           'b': [] if b[i] is None else [b[i]],
           'c': c[i], 'k': [k[i].encode()], _LABEL: y[i].encode()}
          for i in range(n)]
  raw_spec = {'a': tf.io.VarLenFeature(tf.float32),
              'b': tf.io.VarLenFeature(tf.int64),
              'c': tf.io.FixedLenFeature([], tf.float32),
              'k': tf.io.VarLenFeature(tf.string),
              _LABEL: tf.io.FixedLenFeature([], tf.string)}
  domains = {'a': {'min': 0, 'max': 10}, 'b': {'min': 0}}
  out, _ = _run(('a', 'b', 'c'), raw_spec, rows, domains, tmp_path)
  assert len(out) == n
  for column, values in (('a', a), ('b', b), ('c', c)):
    got = np.array([row[f'{column}_xf'] for row in out], np.float64).ravel()
    np.testing.assert_allclose(got, _reference(values, domains.get(column)),
                               rtol=1e-4, atol=1e-5, err_msg=column)
  # The rest of the Transform is unchanged by the block.
  assert sorted(out[0]) == ['a_xf', 'b_xf', 'c_xf', 'k_xf', 'label_xf']
  assert [int(row['label_xf']) for row in out] == [
      ('no', 'yes').index(v) for v in y]


def _op_types(transform_dir):
  """Op types of the transform graph's serving function, nested functions
  included."""
  loaded = tf.saved_model.load(os.path.join(transform_dir, 'transform_fn'))
  fn = loaded.signatures['serving_default']
  graph_def = fn.graph.as_graph_def()
  ops = [node.op for node in graph_def.node]
  for f in graph_def.library.function:
    ops.extend(node.op for node in f.node_def)
  return ops


def test_imputation_and_scaling_ops_do_not_grow_with_the_column_count(
    tmp_path):
  counts = {}
  for count in (2, 8):
    names = [f'n{i}' for i in range(count)]
    rows = [{**{name: [float(i + j)] for j, name in enumerate(names)},
             'k': [b'x'], _LABEL: b'no' if i % 2 else b'yes'}
            for i in range(12)]
    raw_spec = {**{name: tf.io.VarLenFeature(tf.float32) for name in names},
                'k': tf.io.VarLenFeature(tf.string),
                _LABEL: tf.io.FixedLenFeature([], tf.string)}
    domains = {name: {'min': 0, 'max': 100} for name in names}
    _, transform_dir = _run(names, raw_spec, rows, domains,
                            tmp_path / str(count))
    counts[count] = collections.Counter(_op_types(transform_dir))
  # Per column, one column's imputation and scaling would add a NaN test,
  # a domain test per bound, a select and a subtraction: none grow.
  for op in ('IsNan', 'Less', 'Greater', 'SelectV2', 'Sub'):
    assert counts[2][op] == counts[8][op] >= 1, (op, counts[2][op],
                                                 counts[8][op])
