"""Tests of the server runtimes beside TFLite: OpenVINO and ONNX Runtime.

Real exports and real runtimes on conftest's trained digits CNN (34k
parameters): OpenVINO IR by openvino.convert_model + NNCF int8, ONNX by
tf2onnx + ONNX Runtime static QDQ int8, each measured through its own
runtime. Latency figures on this model say little (per-op overhead); the
MobileNetV2 figures are in benchmarks/bench_optimize.py.
"""
import json
import os

import numpy as np
import pytest
import tf_keras
import tensorflow as tf

from leantfx.components.optimize import config as config_lib
from leantfx.components.optimize import flow
from leantfx.components.optimize.evaluation import measure
from leantfx.runtimes import onnx as onnx_runtime
from leantfx.runtimes import openvino as openvino_runtime
from leantfx.runtimes import push
from leantfx.components.optimize.export import runtime_variants
from leantfx.runtimes import registry as runtimes
from leantfx.components.optimize.evaluation.selection import Budget
from leantfx.errors import ConfigError
from tests.optimize import conftest

pytestmark = pytest.mark.unit

# int8 calibration examples: a digits-sized model calibrates on a few dozen.
CALIBRATION = 32
# Timed runs kept small: these tests check the plumbing, not the figures.
RUNS, WARMUP = 20, 2


def _without(monkeypatch, module):
  real = runtimes.module_installed
  monkeypatch.setattr(runtimes, 'module_installed',
                      lambda name: name != module and real(name))


def test_a_runtime_not_installed_is_named_with_its_extra(monkeypatch):
  _without(monkeypatch, 'nncf')
  built, messages = runtimes.resolve(['tflite', 'openvino', 'onnx'])
  assert built == ('tflite', 'onnx')
  (message,) = messages
  assert "runtime 'openvino' is not installed" in message
  assert 'nncf' in message and "pip install 'leantfx[runtimes]'" in message
  # The default (None) takes what is installed, silently.
  assert runtimes.resolve(None) == (('tflite', 'onnx'), [])


def test_optimize_builds_gates_and_pushes_openvino_while_onnx_is_missing(
    monkeypatch, teacher, digits, tmp_path):
  _without(monkeypatch, 'onnxruntime')
  model_dir = str(tmp_path / 'model')
  teacher.save(model_dir, save_format='tf')
  config = config_lib.OptimizationConfig(
      candidates=(config_lib.Candidate((), ('float32', 'int8')),),
      budget=Budget(max_accuracy_drop=0.03), policy='smallest',
      latency_runs=RUNS, warmup_runs=WARMUP, calibration_samples=CALIBRATION,
      runtimes=('tflite', 'openvino', 'onnx'))
  outcome = flow.optimize(
      teacher, model_dir, 'source-model', digits.train_ds(),
      digits.eval_ds(), config, str(tmp_path / 'report'),
      str(tmp_path / 'out' / 'tflite'), 'digits')

  names = [d.variant.name for d in outcome.decisions]
  assert names == ['baseline/float32', 'baseline/int8',
                   'baseline/openvino_float32', 'baseline/openvino_int8']
  (missing,) = outcome.failures
  assert missing['stage'] == 'runtime' and 'onnxruntime' in missing['error']
  for d in outcome.decisions:
    if d.variant.runtime == 'openvino':
      # float32 IR is the same function; NNCF int8 stays within the budget.
      assert d.accuracy_drop <= 0.03, d
      assert d.variant.latency_runs >= RUNS
      assert d.variant.call_overhead_ms is not None
  ov_float = outcome.decisions[2].variant
  assert ov_float.accuracy == pytest.approx(outcome.baseline.accuracy,
                                            abs=0.005)
  # 'smallest' of OpenVINO's blessed variants: the int8 IR.
  pick = outcome.runtime_picks['openvino']
  assert pick.variant.name == 'baseline/openvino_int8'
  pushed = outcome.runtime_pushes['openvino']
  assert pushed.directory.startswith(str(tmp_path / 'out' / 'openvino' /
                                         'digits'))
  manifest = push.check_version(pushed.directory)
  assert manifest['runtime'] == 'openvino' and manifest['mode'] == 'int8'
  assert sorted(manifest['files']) == ['model.bin', 'model.xml']
  assert not os.path.exists(tmp_path / 'out' / 'onnx')
  with open(outcome.report_paths['variants']) as f:
    record = json.load(f)
  assert record['runtime_picks'] == {'openvino': {
      'selected': 'baseline/openvino_int8', 'pushed_to': pushed.directory}}
  with open(outcome.report_paths['markdown']) as f:
    markdown = f.read()
  assert 'Selected for openvino: baseline/openvino_int8' in markdown


def test_onnx_variants_match_keras_and_a_truncated_push_is_refused(
    teacher, teacher_accuracy, digits, tmp_path):
  eval_data = measure.LabeledData.from_dataset(digits.eval_ds())
  failures = []
  built = runtime_variants.build_runtime_variants(
      teacher, candidate_name='baseline', technique='baseline',
      runtimes=('onnx',), representative_data=digits.train_ds(),
      eval_data=eval_data, out_dir=str(tmp_path / 'variants'),
      latency_runs=RUNS, warmup_runs=WARMUP,
      num_calibration_samples=CALIBRATION,
      on_failure=lambda stage, e: failures.append((stage, e)))
  assert not failures
  by_mode = {v.tflite_mode: v for v in built}
  assert by_mode['float32'].accuracy == pytest.approx(teacher_accuracy,
                                                      abs=0.005)
  assert by_mode['int8'].accuracy >= teacher_accuracy - 0.03
  assert by_mode['int8'].size_bytes < by_mode['float32'].size_bytes / 2
  assert by_mode['int8'].details['latency']['interleaved_with'] == [
      'baseline/onnx_float32', 'baseline/onnx_int8']

  base = str(tmp_path / 'out' / 'onnx')
  pushed = push.push_runtime_model(
      'onnx', os.path.dirname(by_mode['int8'].path), base, 'digits',
      source_model_uri='m', technique_chain=[], mode='int8', metrics={})
  assert push.check_version(pushed.directory)['files']['model.onnx']
  with open(pushed.model_path, 'r+b') as f:
    f.truncate(100)
  with pytest.raises(ConfigError, match='truncated or altered'):
    push.check_version(pushed.directory)


def _unconvertible_model():
  """A model with an op neither converter knows (tf.math.bessel_i0e)."""
  image = tf_keras.Input(shape=(64,), name=conftest.FEATURE)
  x = tf_keras.layers.Lambda(tf.math.bessel_i0e, name='bessel')(image)
  x = tf_keras.layers.Dense(10, activation='softmax', name='probabilities')(x)
  return tf_keras.Model({conftest.FEATURE: image}, x)


def test_a_model_the_converters_cannot_convert_is_skipped_and_listed(
    digits, tmp_path):
  eval_data = measure.LabeledData.from_dataset(digits.eval_ds().take(1))
  failures = []
  built = runtime_variants.build_runtime_variants(
      _unconvertible_model(), candidate_name='odd', technique='baseline',
      runtimes=('openvino', 'onnx'), representative_data=digits.train_ds(),
      eval_data=eval_data, out_dir=str(tmp_path), latency_runs=RUNS,
      warmup_runs=WARMUP, num_calibration_samples=CALIBRATION,
      on_failure=lambda stage, e: failures.append(stage))
  assert built == []
  assert failures == ['openvino float32', 'openvino int8', 'onnx float32',
                      'onnx int8']


@pytest.mark.parametrize('export, runtime', [
    (openvino_runtime.export_openvino, 'OpenVINO'),
    (onnx_runtime.export_onnx, 'ONNX'),
])
def test_an_empty_calibration_set_is_a_clear_error(teacher, tmp_path, export,
                                                   runtime):
  empty = {conftest.FEATURE: np.zeros((0, 64), np.float32)}
  with pytest.raises(ConfigError,
                     match=f'The {runtime} int8 calibration set is empty'):
    export(teacher, 'int8', empty, output_dir=str(tmp_path))
  assert not os.listdir(tmp_path)


def test_a_variant_that_cannot_be_timed_is_listed_not_fatal(monkeypatch):
  """One runtime refusing its timing inputs must not fail the optimizer."""

  def refuse(*args, **kwargs):
    raise RuntimeError('ParameterMismatch: the input precision is i64')

  monkeypatch.setattr(runtime_variants, 'timer', refuse)
  failures = []
  data = measure.LabeledData({'x': np.zeros((2, 3), np.float32)},
                             np.zeros(2))
  timed = runtime_variants.time_built(
      [runtime_variants.Built('openvino', 'float32', 'c/openvino_float32',
                              '/x/model.xml', {'accuracy': 1.0}, 'baseline',
                              None, None, {})], data, 1, 5, 1,
      lambda stage, e: failures.append((stage, str(e))))
  assert timed == []
  assert failures == [('openvino float32 timing',
                       'ParameterMismatch: the input precision is i64')]


def test_openvino_and_nncf_send_no_telemetry(tmp_path, monkeypatch):
  """convert_model and nncf.quantize sent 43 events for one small model
  (each from a new multiprocessing process) before the export declined
  their telemetry; the sender is replaced by a recorder here, so nothing
  leaves the machine either way."""
  from openvino_telemetry.utils import sender  # pylint: disable=g-import-not-at-top
  sent = []
  monkeypatch.setattr(sender.TelemetrySender, 'send',
                      lambda self, backend, message: sent.append(message))
  # openvino_telemetry declines by itself in a CI job: not the user's case.
  for name in ('CI', 'TF_BUILD', 'JENKINS_URL'):
    monkeypatch.delenv(name, raising=False)

  class Tiny(tf.Module):

    def __init__(self):
      super().__init__()
      self.w = tf.Variable(tf.random.normal([4, 3], seed=0))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32,
                                                name='x')])
    def serve(self, x):
      return {'y': tf.nn.relu(tf.matmul(x, self.w))}

  module = Tiny()
  saved = str(tmp_path / 'saved_model')
  tf.saved_model.save(module, saved, signatures={'serving_default':
                                                     module.serve})
  ov_model = openvino_runtime.convert(saved)
  rows = np.random.default_rng(0).random((8, 1, 4), dtype=np.float32)
  quantized = openvino_runtime.quantize_int8(ov_model,
                                            [{'x': r} for r in rows])
  assert quantized is not None
  assert sent == []
  import openvino_telemetry  # pylint: disable=g-import-not-at-top
  assert openvino_telemetry.Telemetry().consent is False
