"""What two runs of the pipeline wrote, compared artifact by artifact.

Shared by the end-to-end tests that run the same pipeline on another runner
(BeamDagRunner with worker processes, Beam's portable runner with LOOPBACK
or EXTERNAL SDK workers) and check that it wrote what LocalDagRunner wrote.
"""
import glob
import os

import numpy as np
import pytest
import tensorflow as tf


def _split_records(artifact, split):
  """A split's tf.Examples, re-serialized deterministically.

  Protobuf map fields (a tf.Example's features) serialize in an order that
  may differ between processes, so equal examples can differ in bytes.
  """
  files = glob.glob(os.path.join(artifact.uri, f'Split-{split}', '*'))
  assert files, (artifact.uri, split)
  return [
      tf.train.Example.FromString(r.numpy()).SerializeToString(
          deterministic=True)
      for r in tf.data.TFRecordDataset(files, compression_type='GZIP')
  ]


def _feature_values(serialized):
  """A tf.Example as {feature: numpy values} (bytes, floats or ints)."""
  parsed = {}
  for name, feature in tf.train.Example.FromString(
      serialized).features.feature.items():
    kind = feature.WhichOneof('kind')
    parsed[name] = np.array(getattr(feature, kind).value if kind else [])
  return parsed


def _files_below(uri):
  """{relative path: bytes} of every file below an artifact's folder."""
  contents = {}
  for root, _, names in os.walk(uri):
    for name in names:
      path = os.path.join(root, name)
      with open(path, 'rb') as f:
        contents[os.path.relpath(path, uri)] = f.read()
  return contents


def _split_statistics(artifact, split):
  from tensorflow_metadata.proto.v0 import statistics_pb2  # pylint: disable=g-import-not-at-top
  stats = statistics_pb2.DatasetFeatureStatisticsList()
  with open(os.path.join(artifact.uri, f'Split-{split}',
                         'FeatureStats.pb'), 'rb') as f:
    stats.ParseFromString(f.read())
  (dataset,) = stats.datasets
  return dataset


def assert_same_artifacts(local, beam):
  """What each node wrote on LocalDagRunner and on another runner agrees.

  Data artifacts must be equal record for record (Beam's sharding may order
  records differently, so they are compared as sorted multisets). Floating
  point aggregates may only differ by the order Beam combined partial sums
  in, hence the 1e-6 relative tolerance on statistics and transformed values.
  """
  assert set(local.executions) == set(beam.executions)
  for node, execution in local.executions.items():
    other = beam.executions[node].outputs
    assert {k: len(v) for k, v in execution.outputs.items()} == {
        k: len(v) for k, v in other.items()}, node
  out = lambda summary, node, key: summary.executions[node].outputs[key][0]
  for node, key in (('CsvExampleGen', 'examples'),
                    ('Augment', 'augmented_examples')):
    for split in ('train', 'eval'):
      assert sorted(_split_records(out(local, node, key), split)) == (
          sorted(_split_records(out(beam, node, key), split))), (node, split)
  assert _files_below(out(local, 'ImportSchemaGen', 'schema').uri) == (
      _files_below(out(beam, 'ImportSchemaGen', 'schema').uri))
  assert _files_below(out(local, 'ExampleValidator', 'anomalies').uri) == (
      _files_below(out(beam, 'ExampleValidator', 'anomalies').uri))
  for split in ('train', 'eval'):
    ours = _split_statistics(out(local, 'StatisticsGen', 'statistics'), split)
    theirs = _split_statistics(out(beam, 'StatisticsGen', 'statistics'),
                               split)
    assert ours.num_examples == theirs.num_examples > 0
    by_name = {f.path.step[0]: f for f in theirs.features}
    assert {f.path.step[0] for f in ours.features} == set(by_name)
    for feature in ours.features:
      other = by_name[feature.path.step[0]]
      stats_kind = feature.WhichOneof('stats')
      assert other.WhichOneof('stats') == stats_kind
      ours_common = getattr(feature, stats_kind).common_stats
      theirs_common = getattr(other, stats_kind).common_stats
      assert ours_common.num_non_missing == theirs_common.num_non_missing
      if stats_kind == 'num_stats':
        assert feature.num_stats.mean == pytest.approx(
            other.num_stats.mean, rel=1e-6)
        assert feature.num_stats.std_dev == pytest.approx(
            other.num_stats.std_dev, rel=1e-6)
  # Transform: identical vocabularies and output schema, and the same
  # transformed examples.
  ours_graph = _files_below(out(local, 'Transform', 'transform_graph').uri)
  theirs_graph = _files_below(out(beam, 'Transform', 'transform_graph').uri)
  assets = lambda files: {k: v for k, v in files.items()
                          if '/assets/' in f'/{k}' or k.endswith('.pbtxt')}
  assert assets(ours_graph) and assets(ours_graph) == assets(theirs_graph)
  for split in ('train', 'eval'):
    _assert_same_transformed_examples(
        [_feature_values(r) for r in _split_records(
            out(local, 'Transform', 'transformed_examples'), split)],
        [_feature_values(r) for r in _split_records(
            out(beam, 'Transform', 'transformed_examples'), split)])


# Transformed values are float32 z-scores and the like. With 2 workers Beam
# combines the mean/variance analyzers' partial sums in another order, which
# moves the results by float32 rounding: measured up to 2.0e-6 (a
# mean-imputed value, 0 up to the mean's rounding). 1e-5 of a standard
# deviation is still far below any real difference between examples.
TRANSFORMED_TOLERANCE = 1e-5


def _assert_same_transformed_examples(ours, theirs):
  """Each example of one run has exactly one match in the other's.

  Matched greedily by nearest numeric values (each used once, so duplicate
  examples pair up too) rather than by sorting, which rounding noise could
  reorder.
  """
  assert len(ours) == len(theirs) > 0
  names = sorted(ours[0])
  numeric = [n for n in names if ours[0][n].dtype.kind in 'fiu']
  matrix = lambda examples: np.stack([np.concatenate(
      [np.asarray(ex[n], dtype=np.float64) for n in numeric])
                                      for ex in examples])
  a, b = matrix(ours), matrix(theirs)
  distance = np.abs(a[:, None, :] - b[None, :, :]).max(axis=2)
  unused = np.ones(len(theirs), dtype=bool)
  match = []
  for i in range(len(ours)):
    j = int(np.where(unused, distance[i], np.inf).argmin())
    assert distance[i, j] <= TRANSFORMED_TOLERANCE, (ours[i], theirs[j])
    unused[j] = False
    match.append(j)
  for i, j in enumerate(match):
    assert sorted(ours[i]) == sorted(theirs[j]) == names
    for name in names:
      if name not in numeric:
        np.testing.assert_array_equal(ours[i][name], theirs[j][name])
