"""Fixtures shared by the orchestration tests: one real Kubeflow compile."""
import os

import pytest

from tests.helpers import run_cli

IMAGE = 'registry.example.com/team/leantfx:1.0'
COMPILE_ARGS = [
    'compile', '--target', 'kubeflow', '--image', IMAGE, '--dataset',
    'penguins', '--data-root', 'gs://bucket/data', '--pipeline-root',
    'gs://bucket/root', '--serving-dir', 'gs://bucket/serving',
    '--tflite-dir', 'gs://bucket/tflite', '--warm-start', '--train-steps',
    '500', '--trainer-gpu', 'nvidia.com/gpu:1',
    '--no-cache-component', 'Pusher', '--retries', '3', '--bulk-score'
]


@pytest.fixture(scope='session')
def compiled(tmp_path_factory):
  """Compiles the pipeline twice to YAML and once to JSON with the CLI.

  Returns:
    dict with 'yaml', 'yaml_again', 'json' paths and the first stdout.
  """
  root = tmp_path_factory.mktemp('compiled')
  paths = {
      'yaml': str(root / 'pipeline.yaml'),
      'yaml_again': str(root / 'again' / 'pipeline.yaml'),
      'json': str(root / 'job.json'),
  }
  outputs = {}
  for key, path in paths.items():
    result = run_cli(COMPILE_ARGS + ['--out', path])
    assert result.returncode == 0, result.stdout + result.stderr
    assert os.path.isfile(path)
    outputs[key] = result.stdout
  paths['stdout'] = outputs['yaml']
  return paths
