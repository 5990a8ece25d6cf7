"""steps/serve_check.py: the optimizer's picks served by a real ``leantfx serve``.

The pick is a raw-column TFLite model (tests/serving/model_builders.py: four
float columns whose keys differ from the names a CSV header wrote), staged
as its push lays it out, with the trained model's feature_names.json.
"""
import os

import numpy as np
import pytest

from leantfx import feature_names as feature_names_lib
from leantfx import infra_check
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.export import raw_features
from leantfx.components.optimize.steps import push_picks
from leantfx.components.optimize.steps import serve_check
from tests.serving import model_builders

pytestmark = pytest.mark.e2e

NAMES = {'alcohol_x1': 'alcohol (%)', 'groesse_x2': 'größe',
         'a_b_q_x3': 'a,b'}
SETTINGS = infra_check.Settings(max_rows=8, latency_requests=8,
                                concurrent_clients=4, concurrent_requests=16)


@pytest.fixture(scope='module')
def tflite_pick(tmp_path_factory):
  folder = tmp_path_factory.mktemp('pick')
  saved = model_builders.columns_saved_model(
      str(folder / 'saved'), model_builders.columns_keras_model())
  return os.path.join(model_builders.columns_tflite(saved,
                                                    str(folder / 'lite')),
                      'model.tflite')


def _raw():
  rng = np.random.default_rng(0)
  rows = {k: rng.normal(size=20).astype(np.float32)
          for k in model_builders.COLUMN_KEYS}
  data = measure.LabeledData(rows, np.zeros(20, np.int64))
  return raw_features.RawInputs(tf_transform_output=None, label='label',
                                classes=('a', 'b', 'c'), train=data,
                                eval=data, names=NAMES)


def _source_model(tmp_path, names_map):
  """A trained model's folder with only its feature_names.json."""
  uri = str(tmp_path / 'model')
  feature_names_lib.write_for_saved_model(
      os.path.join(uri, 'Format-Serving'), names_map)
  return uri


def test_a_pick_that_serves_right_passes_with_its_figures(tmp_path,
                                                          tflite_pick):
  names_map = {NAMES.get(k, k): k for k in model_builders.COLUMN_KEYS}
  failures = []
  variant = type('Variant', (), {'name': 'baseline/float32'})()
  served = serve_check.check_picks(
      {'tflite': variant}, {'tflite': (tflite_pick, {'inputs': 'raw'})},
      _raw(), NAMES, _source_model(tmp_path, names_map), failures, SETTINGS)
  assert served['tflite']['passed'], served['tflite']['reason']
  assert served['tflite']['figures']['rows_checked'] == 8
  assert served['tflite']['figures']['rest_max_abs_diff'] <= 1e-4
  assert not failures


def test_a_pick_served_with_swapped_columns_is_not_pushed(tmp_path,
                                                          tflite_pick):
  # The names map sends 'alcohol (%)' to the model's 'größe' input and back:
  # the server answers, but not what the pick answers offline.
  names_map = {'alcohol (%)': 'groesse_x2', 'größe': 'alcohol_x1',
               'a,b': 'a_b_q_x3', 'age': 'age'}
  failures = []
  variant = type('Variant', (), {'name': 'pruning/int8'})()
  served = serve_check.check_picks(
      {'tflite': variant}, {'tflite': (tflite_pick, {'inputs': 'raw'})},
      _raw(), NAMES, _source_model(tmp_path, names_map), failures, SETTINGS)
  assert not served['tflite']['passed']
  assert "output 'probabilities' differs" in served['tflite']['reason']
  assert failures == [{'candidate': 'pruning/int8', 'stage': serve_check.STAGE,
                       'error': served['tflite']['reason'],
                       'not_pushed': 'tflite'}]
  # push_picks leaves a refused pick out before touching anything else.
  assert push_picks.push_tflite_pick(object(), {}, None, None,
                                     served) == (None, None)
  assert push_picks.push_runtime_picks({'onnx': object()}, {}, None,
                                       {'onnx': served['tflite']}) == ({}, {})


def test_a_transformed_input_pick_is_not_served():
  variant = type('Variant', (), {'name': 'baseline/float32'})()
  served = serve_check.check_picks(
      {'tflite': variant}, {'tflite': (None, {'inputs': 'transformed'})},
      _raw(), NAMES, '/nowhere', [], SETTINGS)
  assert served == {'tflite': {'passed': True, 'figures': {},
                               'reason': serve_check.NOT_SERVED}}
