"""The tabular (penguins) model goes through the default optimizations.

Regression tests: CategoryEncoding lowered to DenseBincount, which TFLite
cannot run, and a 3-token embedding has fewer weights than 16 clusters.
"""
import numpy as np
import pytest
import tensorflow as tf

from leantfx import config as config_lib
from leantfx import datasets
from leantfx.components.optimize.techniques import clustering
from leantfx.components.optimize import config as optimize_config
from leantfx.components.optimize.export import tflite as tflite_export
from leantfx.models import model as model_lib

pytestmark = pytest.mark.unit

# Vocabulary sizes (OOV bucket included) of the bundled penguins data:
# island has 3 values, sex 2.
_VOCABULARIES = {'island': 4, 'sex': 3}


@pytest.fixture(scope='module')
def tabular():
  spec = datasets.BUNDLED['penguins']
  model = model_lib.build_model(spec, config_lib.TrainingConfig(),
                                _VOCABULARIES)
  rng = np.random.default_rng(0)
  n = 128
  features = {
      f'{c}_xf': rng.normal(size=(n, 1)).astype('float32')
      for c in spec.numeric_features
  }
  for column, size in _VOCABULARIES.items():
    features[f'{column}_xf'] = rng.integers(0, size, (n, 1)).astype('int64')
  labels = rng.integers(0, 3, (n,)).astype('int64')
  return model, tf.data.Dataset.from_tensor_slices((features, labels)).batch(32)


@pytest.mark.parametrize('mode', [tflite_export.FLOAT32, tflite_export.INT8])
def test_tabular_model_converts_to_tflite(tabular, mode, tmp_path):
  model, dataset = tabular
  data = tflite_export.export_tflite(
      model, mode, dataset, output_path=str(tmp_path / f'{mode}.tflite'))
  runner = tf.lite.Interpreter(model_content=data).get_signature_runner()
  assert {'island_xf', 'sex_xf'} <= set(runner.get_input_details())


def test_clustering_skips_kernels_smaller_than_the_cluster_count(tabular):
  model, dataset = tabular
  config = optimize_config.technique_config_class('clustering')(
      number_of_clusters=16, epochs=1, skip_unsupported_layers=True)
  result = clustering.cluster(model, dataset, config)
  skipped = {s['name'] for s in result.details['skipped_layers']}
  # sex: 3 tokens x 3 dimensions = 9 weights < 16 clusters.
  assert 'sex_embedding' in skipped
  assert 'logits' in result.details['clustered_layers']


def test_default_candidates_skip_unsupported_layers():
  for candidate in optimize_config.default_candidates():
    for step in candidate.steps:
      values = step.config.to_dict()
      if 'skip_unsupported_layers' in values:
        assert values['skip_unsupported_layers'], candidate.name
