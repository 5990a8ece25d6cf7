"""Tests for figure 5's int8 ceiling in benchmarks/bench_optimize.py.

``openvino_layer_ms`` reads the CPU plugin's own per-layer profiling of a
real OpenVINO export (a small inverted-residual block: 1x1 convolution,
depthwise convolution, 1x1 projection, pooling, Dense, exported float32 and
NNCF int8 as the ModelOptimizer exports them); ``int8_ceiling_rows`` must
compute its ceiling from those figures, so a spy records them.
"""
import numpy as np
import pytest
import tf_keras

from benchmarks import bench_optimize
from leantfx.components.optimize.export import runtime_variants
from leantfx.runtimes import registry as runtimes

pytest.importorskip('openvino')
pytest.importorskip('nncf')

pytestmark = pytest.mark.unit

SIDE = 16


def _block() -> tf_keras.Model:
  tf_keras.utils.set_random_seed(0)
  x = tf_keras.Input(shape=(SIDE, SIDE, 3), name='image')
  h = tf_keras.layers.Conv2D(32, 1, activation='relu')(x)
  h = tf_keras.layers.DepthwiseConv2D(3, padding='same', activation='relu')(h)
  h = tf_keras.layers.Conv2D(16, 1)(h)
  h = tf_keras.layers.GlobalAveragePooling2D()(h)
  y = tf_keras.layers.Dense(4, activation='softmax', name='probabilities')(h)
  return tf_keras.Model({'image': x}, y)


@pytest.fixture(scope='module')
def exported(tmp_path_factory):
  work = tmp_path_factory.mktemp('int8_ceiling')
  rng = np.random.default_rng(0)
  train = {'image': rng.random((16, SIDE, SIDE, 3), dtype=np.float32)}
  model, cache = _block(), {'scratch': str(work)}
  paths = {mode: runtime_variants.export(
      runtimes.OPENVINO, model, mode, train, str(work / mode), 8, cache)
           for mode in ('float32', 'int8')}
  return paths, {'image': train['image'][:1]}


@pytest.mark.parametrize('node_type, exec_type, kind', [
    ('Convolution', 'brgconv_avx512_1x1_I8', '1x1 conv'),
    ('Convolution', 'brgconv_avx512_f32', 'other'),
    ('GroupConvolution', 'brgconv_avx512_dw_I8', 'depthwise conv'),
    ('FullyConnected', 'gemm_mlas_f32', 'other'),
])
def test_layer_kind(node_type, exec_type, kind):
  assert bench_optimize.layer_kind(node_type, exec_type) == kind


def test_the_profile_names_the_block_s_layers_in_both_modes(exported):
  paths, example = exported
  for mode, path in paths.items():
    kinds = bench_optimize.openvino_layer_ms(path, example, runs=5)
    assert {'1x1 conv', 'depthwise conv'} <= set(kinds), (mode, kinds)
    assert all(ms > 0 for ms in kinds.values()), (mode, kinds)


def test_the_ceiling_is_computed_from_the_profiles(exported, monkeypatch):
  paths, example = exported
  real, seen = bench_optimize.openvino_layer_ms, {}

  def spy(path, features, runs=bench_optimize.PROFILE_RUNS):
    seen[path] = real(path, features, runs=3)
    return seen[path]

  monkeypatch.setattr(bench_optimize, 'openvino_layer_ms', spy)
  rows = bench_optimize.int8_ceiling_rows(paths, example, tflite_f32_ms=2.0)
  f32, int8 = seen[paths['float32']], seen[paths['int8']]
  assert [r['measured'] for r in rows[:2]] == pytest.approx(
      [sum(f32.values()), sum(int8.values())])
  ceiling = (sum(int8.values()) - int8['1x1 conv'] + f32['1x1 conv'] / 4)
  assert rows[2]['computed'] == pytest.approx(2.0 / ceiling)
  assert 'ceiling' in rows[2]['figure']
