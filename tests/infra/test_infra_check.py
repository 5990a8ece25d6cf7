"""leantfx/infra_check.py against a real ``leantfx serve`` on loopback.

One server serves every candidate of a check, so each test starts one
subprocess (about 10-30 s on a busy 2-core machine: it imports TensorFlow).
The offline outputs are computed here, in process, from the same files.
"""
import os

import numpy as np
import pytest
import tensorflow as tf

from leantfx import infra_check
from leantfx import sizing
from tests.serving import model_builders

pytestmark = pytest.mark.e2e

# Few requests: these tests check the answers and the process, not speed.
SETTINGS = infra_check.Settings(max_rows=6, latency_requests=8,
                                concurrent_clients=4, concurrent_requests=16,
                                start_timeout_s=240.0)


def _penguin_rows():
  return {
      'bill_length_mm': np.array([39.1, 46.5, np.nan, 50.0, 45.2, 38.0],
                                 np.float32),
      'flipper_length_mm': np.array([181, 200, 190, 220, 215, 185],
                                    np.float32),
      'island': np.array([b'Biscoe', b'Dream', b'', b'Torgersen', b'Dream',
                          b'Biscoe'], dtype=object),
  }


def _offline(saved_model_dir, rows):
  serve = tf.saved_model.load(saved_model_dir).signatures['serving_default']
  return {k: v.numpy() for k, v in serve(
      **{k: tf.constant(v) for k, v in rows.items()}).items()}


def _tflite_offline(path, rows):
  interpreter = tf.lite.Interpreter(model_path=os.path.join(path,
                                                            'model.tflite'))
  runner = interpreter.get_signature_runner('serving_default')
  return {k: np.asarray(v) for k, v in runner(**rows).items()}


def _gone(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return True
  return False


def test_checks_every_candidate_in_one_server_and_stops_it(tmp_path):
  penguins = model_builders.tabular_model(str(tmp_path / 'penguins'))
  columns = model_builders.columns_saved_model(
      str(tmp_path / 'columns_sm'), model_builders.columns_keras_model())
  lite = model_builders.columns_tflite(columns, str(tmp_path / 'columns_lite'))
  broken = model_builders.tabular_model(str(tmp_path / 'broken'))
  model_builders.truncate_variables(broken)
  rows = _penguin_rows()
  expected = _offline(penguins, rows)
  rng = np.random.default_rng(0)
  column_rows = {k: rng.normal(size=6).astype(np.float32)
                 for k in model_builders.COLUMN_KEYS}
  lite_expected = _tflite_offline(lite, column_rows)
  # Offline outputs with the classes swapped: what a model whose outputs are
  # permuted answers against the true ones.
  permuted = dict(expected, probabilities=expected['probabilities'][:, ::-1])
  pids = []
  results = infra_check.check([
      infra_check.Candidate('penguins', penguins, rows, expected),
      infra_check.Candidate('columns_lite', lite, column_rows, lite_expected),
      infra_check.Candidate('permuted', penguins, rows, permuted),
      infra_check.Candidate('broken', broken, rows, expected),
  ], SETTINGS, on_server_started=pids.append)

  assert len(pids) == 1 and _gone(pids[0])
  good = results['penguins']
  assert good.passed, good.reason
  assert good.figures['rows_checked'] == 6
  for name in ('rest_max_abs_diff', 'grpc_max_abs_diff',
               'batch1_max_abs_diff'):
    assert good.figures[name] <= SETTINGS.tolerance
  assert (0 < good.figures['latency_p50_ms_batch1'] <=
          good.figures['latency_p99_ms_batch1'])
  assert (0 < good.figures['latency_p50_ms_concurrent'] <=
          good.figures['latency_p99_ms_concurrent'])
  assert good.figures['requests'] == 2 + 8 + 16
  # The served throughput: 16 concurrent requests over the phase's wall
  # time, which is at least as long as its slowest request.
  concurrent_ms = 16 / good.figures['throughput_rps_concurrent'] * 1000
  assert concurrent_ms >= good.figures['latency_p99_ms_concurrent']
  assert good.figures['cpu_cores'] == sizing.machine_cores()
  assert results['columns_lite'].passed, results['columns_lite'].reason

  assert not results['permuted'].passed
  assert "output 'probabilities' differs" in results['permuted'].reason
  assert not results['broken'].passed
  assert 'did not load' in results['broken'].reason


def test_a_server_that_does_not_start_fails_every_candidate(tmp_path):
  penguins = model_builders.tabular_model(str(tmp_path / 'penguins'))
  rows = _penguin_rows()
  pids = []
  settings = infra_check.Settings(
      serve_args=('--batching-parameters-file', str(tmp_path / 'missing')))
  results = infra_check.check(
      [infra_check.Candidate('penguins', penguins, rows,
                             _offline(penguins, rows))],
      settings, on_server_started=pids.append)
  assert _gone(pids[0])
  assert not results['penguins'].passed
  assert 'exited with code' in results['penguins'].reason


def test_refuses_unusable_candidates_before_starting_anything(tmp_path):
  with pytest.raises(ValueError, match='at least one'):
    infra_check.check([])
  with pytest.raises(ValueError, match='is not a folder'):
    infra_check.check([infra_check.Candidate('m', str(tmp_path / 'nope'),
                                             {}, {})])
  with pytest.raises(ValueError, match='must be >= 1'):
    infra_check.Settings(max_rows=0)


@pytest.mark.unit
def test_binary_values_go_over_rest_as_base64_and_text_as_text():
  # pylint: disable=g-import-not-at-top
  import base64
  # pylint: enable=g-import-not-at-top
  png = b'\x89PNG\r\n\x1a\n\x00'
  inputs = infra_check._rest_inputs({
      'image': np.array([png], dtype=object),
      'island': np.array([b'Dream'], dtype=object),
      'x': np.array([1.5], dtype=np.float32)})
  assert inputs == {'image': [{'b64': base64.b64encode(png).decode('ascii')}],
                    'island': ['Dream'], 'x': [1.5]}
