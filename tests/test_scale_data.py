"""benchmarks/scale_data.py: the scale benchmark's span is the same bytes every time."""
import os

import pytest

from benchmarks import scale_data


def _span_bytes(directory):
  return {os.path.basename(p): open(p, 'rb').read()
          for p in scale_data.span_files(directory)}


@pytest.mark.unit
def test_same_seed_same_bytes_and_another_seed_others(tmp_path):
  scale_data.write_span(str(tmp_path / 'a'), 3000, files=3)
  scale_data.write_span(str(tmp_path / 'b'), 3000, files=3)
  scale_data.write_span(str(tmp_path / 'c'), 3000, files=3, seed=7)
  first = _span_bytes(str(tmp_path / 'a'))
  assert first == _span_bytes(str(tmp_path / 'b'))
  assert first != _span_bytes(str(tmp_path / 'c'))
  assert sorted(first) == ['part-00.csv', 'part-01.csv', 'part-02.csv']
  lines = b''.join(first.values()).decode().splitlines()
  header = ','.join(scale_data.NUMERIC + scale_data.CATEGORICAL +
                    (scale_data.LABEL,))
  assert lines.count(header) == 3 and len(lines) == 3000 + 3
  labels = {line.rsplit(',', 1)[1] for line in lines if line != header}
  assert labels == {f'class_{c}' for c in range(scale_data.CLASSES)}


@pytest.mark.unit
def test_the_optimizers_candidate_times_are_read_from_ml_metadata(tmp_path):
  # pylint: disable=g-import-not-at-top
  import json
  from ml_metadata import metadata_store
  from ml_metadata.proto import metadata_store_pb2
  from benchmarks import bench_scale
  # pylint: enable=g-import-not-at-top
  path = str(tmp_path / 'metadata.sqlite')
  config = metadata_store_pb2.ConnectionConfig()
  config.sqlite.filename_uri = path
  store = metadata_store.MetadataStore(config)
  assert bench_scale.optimizer_candidate_times(path) == {}
  kind = metadata_store_pb2.ArtifactType(name='Model')
  kind_id = store.put_artifact_type(kind)
  times = {'baseline': {'techniques_s': 0.5, 'tflite_s': 3.4},
           'pruning': {'techniques_s': 9.0, 'tflite_s': 3.2,
                       'train_steps': 364},
           'distillation': {'techniques_s': 12.0, 'tflite_s': 4.2,
                            'train_steps': 1980}}
  artifact = metadata_store_pb2.Artifact(type_id=kind_id, uri='/x')
  artifact.custom_properties['candidate_times'].string_value = json.dumps(
      times)
  store.put_artifacts([artifact])
  read = bench_scale.optimizer_candidate_times(path)
  assert read == times
  # Training is every candidate's techniques_s but the baseline's; TFLite
  # every candidate's exports; the rest of the optimizer's 40 s remains.
  assert bench_scale.optimizer_split(read, 40.0, 7.0) == {
      'optimizer_training_s': 21.0, 'optimizer_tflite_s': 10.8,
      'optimizer_rest_s': 8.2, 'techniques_vs_trainer': 3.0}
