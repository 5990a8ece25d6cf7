"""End to end: a span where the trees win, pushed as trees and served.

One `leantfx run` (the ModelOptimizer on: its skip is under test) on 1,500
rows of benchmarks/tree_data.py's rules with 30 network steps: the network
barely starts, the gradient-boosted trees find the rules. The run must
export the trees (the run record says why, with both figures), bless and
push them as a SavedModel with the network's signatures, have the
InfraValidator serve them in `leantfx serve`, skip the optimizer with its
reason (exit 0), and answer a REST request in the columns' names from a
server started on the pushed folder.
"""
import json
import os

import pytest
import tensorflow as tf

from benchmarks import tree_data
from leantfx import decision_forests
from leantfx import serving_client as client_lib
from leantfx.serving import model_config
from leantfx.serving import server as server_lib
from leantfx.serving import server_config
from tests.helpers import run_cli

pytestmark = pytest.mark.e2e

ROWS = 1500
NAME = 'graded'


@pytest.fixture(scope='module')
def trees_run(tmp_path_factory):
  tmp = tmp_path_factory.mktemp('trees')
  tree_data.write_span(str(tmp / 'data'), ROWS)
  output, record = str(tmp / 'out'), str(tmp / 'record.json')
  result = run_cli(['run', '--data-root', str(tmp / 'data'), '--label',
                    tree_data.LABEL, '--name', NAME, '--output', output,
                    '--run-record', record, '--train-steps', '30',
                    '--epochs', '1'], optimize=True)
  assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
  with open(record) as f:
    return output, result, json.load(f)


def test_the_trees_win_and_the_record_says_why(trees_run):
  _, result, record = trees_run
  family = record['model_family']
  assert family['chosen'] == 'trees' and family['mode'] == 'auto', family
  assert family['trees'] > family['network'] + family['margin'], family
  assert family['p_value'] < 0.05, family
  assert family['eval_rows'] == record['example_count']
  # The Evaluator scored the pushed trees on the same eval rows.
  assert record['accuracy'] == pytest.approx(family["trees"], abs=1e-4)
  assert 'model family: trees (trees accuracy' in result.stdout


def test_the_pushed_saved_model_is_the_trees_with_every_signature(trees_run):
  output, _, record = trees_run
  pushed = record['pushed_path']
  assert pushed and pushed.startswith(os.path.join(output, 'serving', NAME))
  assert decision_forests.uses_ops(pushed)
  decision_forests.load_ops()
  signatures = tf.saved_model.load(pushed).signatures
  assert {'serving_default', 'predict_examples',
          'transform_features'} <= set(signatures)
  assert record['infra_validation']['blessed'], record['infra_validation']


def test_the_optimizer_skips_the_trees_with_its_reason(trees_run):
  output, result, record = trees_run
  assert 'TFLite, ONNX and OpenVINO cannot run' in record['optimizer_skipped']
  assert '  optimizer: skipped (the Trainer pushed gradient-boosted trees' in (
      result.stdout)
  for runtime in ('tflite', 'onnx', 'openvino'):
    assert not os.path.exists(os.path.join(output, runtime, NAME)), runtime
  card = os.path.join(record['model_card'], 'model_card.md')
  with open(card) as f:
    assert 'Model family: trees' in f.read()


def test_leantfx_serve_answers_from_the_pushed_trees(trees_run):
  output, _, _ = trees_run
  config = server_config.ServerConfig(
      rest_port=0, grpc_port=0, file_system_poll_wait_seconds=-1,
      max_num_load_retries=0, request_timeout_s=60.0)
  server = server_lib.ModelServer(
      model_config.models_from_base_path(os.path.join(output, 'serving')),
      config).start()
  try:
    rest = client_lib.RestClient('127.0.0.1', server.rest_port,
                                 timeout_s=60.0)
    x, labels = tree_data.columns(8)
    answer = rest.predict(NAME, instances=[
        dict(zip(tree_data.NUMERIC, map(float, row))) for row in x])
  finally:
    server.stop(grace_s=5.0)
  predictions = answer['predictions']
  assert len(predictions) == 8
  assert all(p['classes'] in tree_data.CLASSES for p in predictions)
  assert all(abs(sum(p['probabilities']) - 1.0) < 1e-4 for p in predictions)
  # The generator's first rows (in the trees' train split or not): the
  # rules' classes, but for the 3% redrawn labels.
  right = sum(p['classes'] == tree_data.CLASSES[y]
              for p, y in zip(predictions, labels))
  assert right >= 6, (predictions, labels)
