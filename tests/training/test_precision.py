"""Mixed precision: auto's decisions, the CPU probe and its cache, the policies
themselves, and the float32 export of a mixed-precision model."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from leantfx.errors import ConfigError
from leantfx.models import architectures
from leantfx.models.training import plan as plan_lib
from leantfx.models.training import precision
from tests.helpers import run_cli
from tests.training import helpers

pytestmark = pytest.mark.unit

CPU_BF16 = precision.DeviceInfo(cpu_bf16_flags=('avx512_bf16',),
                                cpu_model='test cpu')


@pytest.mark.parametrize('devices,expected', [
    # Tensor cores from compute capability 7.0 (TF's mixed precision guide).
    (precision.DeviceInfo(gpus=(('GPU:0', (8, 0)),)), 'mixed_float16'),
    (precision.DeviceInfo(gpus=(('GPU:0', (7, 0)),)), 'mixed_float16'),
    (precision.DeviceInfo(gpus=(('GPU:0', (6, 1)),)), 'float32'),
    (precision.DeviceInfo(tpus=8), 'mixed_bfloat16'),
    (precision.DeviceInfo(cpu_model='old cpu'), 'float32'),
])
def test_auto_without_probe(devices, expected):
  decision = precision._decide_without_probe('auto', devices)  # pylint: disable=protected-access
  assert decision.policy == expected
  assert decision.reason


def test_auto_on_a_bf16_cpu_needs_a_probe():
  assert precision._decide_without_probe('auto', CPU_BF16) is None  # pylint: disable=protected-access


def test_mixed_float16_without_gpu_is_refused():
  with pytest.raises(ConfigError, match='needs a GPU') as error:
    precision.check_supported('mixed_float16', CPU_BF16)
  assert 'mixed_bfloat16' in str(error.value)  # It says what to use instead.
  precision.check_supported('mixed_float16', precision.DeviceInfo(
      gpus=(('GPU:0', (8, 0)),)))
  precision.check_supported('mixed_bfloat16', CPU_BF16)


@pytest.mark.parametrize('best,median,expected', [
    ((100.0, 200.0), (100.0, 190.0), 'mixed_bfloat16'),
    ((100.0, 104.0), (100.0, 104.0), 'float32'),  # Within the 5% margin.
    ((100.0, 65.0), (100.0, 65.0), 'float32'),  # bf16 at 0.65x float32's speed.
    # One lucky bf16 round on a loaded machine: the median disagrees, so the
    # safe side (float32) wins. Figures from a real probe under load 9.
    ((5985.0, 7532.0), (5001.0, 1340.0), 'float32'),
])
def test_choose_from_probe_never_picks_the_slower(best, median, expected):
  figures = {
      'examples_per_s': {'float32': best[0], 'mixed_bfloat16': best[1]},
      'median_examples_per_s': {'float32': median[0],
                                'mixed_bfloat16': median[1]},
  }
  policy, reason = precision.choose_from_probe(figures)
  assert policy == expected
  assert f'{best[0]:.0f}' in reason and f'{best[1]:.0f}' in reason


def _build():
  return architectures.build_compiled(helpers.TABULAR, helpers.training(), {})


def test_probe_times_both_policies_and_caches_the_decision(tmp_path):
  cache = str(tmp_path / 'probe.json')
  dataset = lambda: helpers.tabular_dataset(32).take(4).cache().repeat()
  first = precision.resolve('auto', _build, dataset, 32, 'default x1',
                            cache_path=cache, devices=CPU_BF16)
  assert not first.cached
  figures = first.probe['examples_per_s']
  assert set(figures) == {'float32', 'mixed_bfloat16'}
  assert all(v > 0 for v in figures.values())
  assert first.probe['rounds'] == precision.PROBE_ROUNDS
  assert len(first.probe['runs']['float32']) == precision.PROBE_ROUNDS
  # The choice follows the measured figures.
  assert first.policy == precision.choose_from_probe(first.probe)[0]
  stored = json.load(open(cache))
  assert stored[first.cache_key]['policy'] == first.policy

  def no_probe(*args, **kwargs):
    raise AssertionError('the cached decision must not probe again')

  original = precision.probe
  precision.probe = no_probe
  try:
    second = precision.resolve('auto', _build, dataset, 32, 'default x1',
                               cache_path=cache, devices=CPU_BF16)
  finally:
    precision.probe = original
  assert second.cached and second.policy == first.policy
  assert second.probe == json.loads(json.dumps(first.probe))
  # Another batch size is another shape: not the same cache entry.
  with precision.policy_scope('float32'):
    model = _build()
  assert precision.cache_key(model, 64, 'default x1', CPU_BF16) != (
      first.cache_key)


def test_auto_never_probes_under_multi_worker():
  decision = precision.resolve('auto', _build, None, 32, 'mw x2',
                               devices=CPU_BF16, can_probe=False)
  assert decision.policy == 'float32' and 'multi-worker' in decision.reason


def _batch(rows=32):
  x, y = helpers.tabular_arrays(rows)
  return x, y


def test_mixed_bfloat16_computes_in_bf16_with_a_float32_output():
  with precision.policy_scope('mixed_bfloat16'):
    model = _build()
  dtypes = precision.layer_dtypes(model)
  dense = [d for name, d in dtypes.items() if name.startswith('dense')]
  assert dense and all(d == ('bfloat16', 'float32') for d in dense)
  assert dtypes['probabilities'] == ('float32', 'float32')
  assert precision.output_dtypes(model) == [tf.float32]
  assert not isinstance(model.optimizer,
                        tf_keras.mixed_precision.LossScaleOptimizer)
  x, y = _batch()
  before = [w.copy() for w in model.get_weights()]
  model.train_on_batch(x, y)
  assert any(not np.array_equal(a, b)
             for a, b in zip(before, model.get_weights()))
  # The policy was restored after the scope.
  assert tf_keras.mixed_precision.global_policy().name == 'float32'


def test_mixed_float16_trains_through_a_loss_scale_optimizer():
  # float16 runs (slowly) on a CPU too, so the optimizer path is testable
  # here even though the configuration refuses mixed_float16 without a GPU.
  with precision.policy_scope('mixed_float16'):
    model = _build()
  assert isinstance(model.optimizer,
                    tf_keras.mixed_precision.LossScaleOptimizer)
  assert precision.output_dtypes(model) == [tf.float32]
  x, y = _batch()
  loss = model.train_on_batch(x, y)[0]
  assert np.isfinite(loss)
  assert int(model.optimizer.iterations.numpy()) == 1
  assert model.optimizer.dynamic  # Dynamic loss scaling is on.
  assert float(model.optimizer.loss_scale) > 1


def test_mixed_precision_model_exports_as_float32_for_tflite(tmp_path):
  """Format-Keras of a bf16-trained model loads and runs in float32."""
  training = helpers.training()
  with precision.policy_scope('mixed_bfloat16'):
    model = architectures.build_compiled(helpers.TABULAR, training, {})
  x, y = _batch(64)
  model.fit(x, y, epochs=2, batch_size=16, verbose=0)
  twin = plan_lib.float32_twin(
      model, lambda: architectures.build_compiled(helpers.TABULAR, training,
                                                  {}))
  assert {d for d in precision.layer_dtypes(twin).values()} == {
      ('float32', 'float32')}
  # Same weights; predictions agree within bf16's ~3 significant digits.
  np.testing.assert_allclose(twin.predict(x, verbose=0),
                             model.predict(x, verbose=0), atol=2e-2)
  path = str(tmp_path / 'Format-Keras')
  twin.save(path, save_format='tf')
  loaded = tf_keras.models.load_model(path, compile=False)
  assert {l.compute_dtype for l in loaded.layers
          if l.compute_dtype} == {'float32'}
  np.testing.assert_allclose(loaded.predict(x, verbose=0),
                             twin.predict(x, verbose=0), atol=1e-6)
  tflite = tf.lite.TFLiteConverter.from_keras_model(loaded).convert()
  interpreter = tf.lite.Interpreter(model_content=tflite)
  kinds = {np.dtype(d['dtype']).name
           for d in interpreter.get_tensor_details()}
  assert 'float32' in kinds
  assert not kinds & {'bfloat16', 'float16'}


def test_cli_refuses_mixed_float16_without_a_gpu(tmp_path):
  out = str(tmp_path / 'out')
  result = run_cli(['run', '--dataset', 'penguins', '--output', out,
                    '--precision', 'mixed_float16'], timeout=300)
  assert result.returncode == 2, result.stdout + result.stderr
  assert 'needs a GPU' in result.stderr
  assert 'Traceback' not in result.stderr
  assert not os.path.exists(os.path.join(out, 'serving'))
  assert not os.path.exists(os.path.join(out, 'tfx'))
