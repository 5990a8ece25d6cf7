"""Tests of measure.py: accuracy, sizes, latency and sparsity of a variant."""
import gzip
import os

import numpy as np
import pytest
import tf_keras

from leantfx.components.optimize.techniques import _keras_utils
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.export import tflite as tflite_export
from leantfx.errors import ConfigError
from leantfx.runtimes import tflite as tflite_runtime
from tests.optimize import conftest

pytestmark = pytest.mark.unit


@pytest.fixture(scope='module')
def eval_data(digits):
  return measure.LabeledData.from_dataset(digits.eval_ds())


@pytest.fixture(scope='module')
def teacher_accuracy_keras(teacher, digits):
  return _keras_utils.accuracy(teacher, digits.eval_ds())


@pytest.fixture(scope='module')
def float_tflite(teacher, tmp_path_factory):
  path = str(tmp_path_factory.mktemp('measure') / 'float32.tflite')
  tflite_export.export_tflite(teacher, 'float32', output_path=path)
  return path


@pytest.fixture(scope='module')
def keras_saved_model(teacher, tmp_path_factory):
  """The teacher saved the way run_fn writes Format-Keras."""
  path = str(tmp_path_factory.mktemp('measure') / 'Format-Keras')
  teacher.save(path, save_format='tf')
  return path


def test_labeled_data_from_batched_and_unbatched_datasets(digits):
  batched = measure.LabeledData.from_dataset(digits.eval_ds(batch_size=100))
  unbatched = measure.LabeledData.from_dataset(digits.eval_ds().unbatch())
  assert len(batched) == len(unbatched) == len(digits.y) - conftest.NUM_TRAIN
  np.testing.assert_array_equal(batched.labels, unbatched.labels)
  assert batched.features[conftest.FEATURE].shape == (len(batched), 64)
  assert batched.example(3)[conftest.FEATURE].shape == (1, 64)


def test_tflite_accuracy_is_the_keras_accuracy(float_tflite, eval_data,
                                               teacher_accuracy_keras, teacher):
  metrics = measure.measure_tflite(
      float_tflite, eval_data, tflite_mode='float32', latency_runs=30,
      warmup_runs=3, keras_model=teacher)
  # float32 TFLite computes the same function; at most one borderline
  # example may flip.
  assert abs(metrics.accuracy - teacher_accuracy_keras) <= 1 / len(eval_data)
  assert metrics.runtime == 'tflite' and metrics.num_threads == 1
  assert metrics.name == 'baseline/float32'
  assert 0 < metrics.latency_p50_ms <= metrics.latency_p99_ms
  assert metrics.latency_runs == 30
  assert metrics.size_bytes == os.path.getsize(float_tflite)
  with open(float_tflite, 'rb') as f:
    assert metrics.gzipped_bytes == len(gzip.compress(f.read(), 9, mtime=0))
  assert metrics.params == teacher.count_params() == 34186
  assert metrics.sparsity == 0.0  # a dense, unpruned model
  assert set(metrics.details['layer_sparsity']) == {
      'conv3x3', 'conv1x1', 'hidden', 'logits'}


def test_saved_model_is_measured_in_tensorflow(keras_saved_model, eval_data,
                                               teacher_accuracy_keras, teacher):
  metrics = measure.measure(keras_saved_model, eval_data, latency_runs=20,
                            warmup_runs=2, tflite_mode='ignored')
  assert metrics.runtime == 'tensorflow' and metrics.tflite_mode is None
  assert metrics.accuracy == pytest.approx(teacher_accuracy_keras, abs=1e-9)
  assert 0 < metrics.latency_p50_ms <= metrics.latency_p99_ms
  # Without the Keras model the counts come from the SavedModel's variables.
  assert metrics.params == teacher.count_params()
  assert metrics.sparsity == 0.0
  assert metrics.size_bytes == measure.size_on_disk(keras_saved_model)
  assert 0 < metrics.gzipped_bytes < metrics.size_bytes


def test_gzipped_size_of_a_directory_is_deterministic(tmp_path):
  (tmp_path / 'a').write_bytes(b'0' * 10000)
  (tmp_path / 'sub').mkdir()
  (tmp_path / 'sub' / 'b').write_bytes(os.urandom(2000))
  first = measure.gzipped_size(str(tmp_path))
  os.utime(tmp_path / 'a', (1, 1))  # mtimes do not change the size
  assert measure.gzipped_size(str(tmp_path)) == first
  # The random file does not compress, the zeros do.
  assert 2000 < first < 4000
  assert measure.size_on_disk(str(tmp_path)) == 12000


def test_weight_stats_counts_zero_kernel_weights(teacher):
  model = tf_keras.models.clone_model(teacher)
  model.set_weights(teacher.get_weights())
  logits = model.get_layer('logits')
  kernel, bias = logits.get_weights()
  kernel[:32] = 0.0  # 32 of 64 input rows: half of the logits kernel
  logits.set_weights([kernel, np.zeros_like(bias)])
  params, sparsity, per_layer = measure.weight_stats(model)
  assert params == 34186
  assert per_layer['logits'] == 0.5
  kernel_sizes = {'conv3x3': 3 * 3 * 1 * 16, 'conv1x1': 16 * 32,
                  'hidden': 4 * 4 * 32 * 64, 'logits': 64 * 10}
  # Zero biases do not count: only the 320 kernel zeros do.
  assert sparsity == pytest.approx(320 / sum(kernel_sizes.values()))


def test_int8_inputs_are_quantized_with_the_tensor_scale():
  detail = {'dtype': np.int8, 'quantization': (1 / 255, -128)}
  # q = round(x / scale + zero_point), clipped to int8.
  q = tflite_runtime.quantize(np.array([[0.0, 0.2, 1.0, 2.0]]), detail)
  assert q.dtype == np.int8
  np.testing.assert_array_equal(q, [[-128, -77, 127, 127]])  # 2.0 saturates
  np.testing.assert_allclose(
      tflite_runtime.dequantize(q, detail), [[0.0, 0.2, 1.0, 1.0]], rtol=1e-6)
  float_detail = {'dtype': np.float32, 'quantization': (0.0, 0)}
  assert tflite_runtime.quantize(np.array([1.5]), float_detail)[0] == 1.5


def test_bad_inputs_are_config_errors(float_tflite, eval_data, tmp_path):
  with pytest.raises(ConfigError, match='latency_runs must be >= 1'):
    measure.measure_tflite(float_tflite, eval_data, latency_runs=0)
  with pytest.raises(ConfigError, match='num_threads must be >= 1'):
    measure.measure_tflite(float_tflite, eval_data, num_threads=0)
  other = tmp_path / 'model.h5'
  other.write_bytes(b'x')
  with pytest.raises(ConfigError, match='expected a .tflite file'):
    measure.measure(str(other), eval_data)
  wrong = measure.LabeledData({'pixels': eval_data.features['image_xf']},
                              eval_data.labels)
  with pytest.raises(ConfigError, match=r"lack the TFLite input\(s\)"):
    measure.measure_tflite(float_tflite, wrong, latency_runs=1)


def test_variant_metrics_round_trip(float_tflite, eval_data):
  metrics = measure.measure_tflite(float_tflite, eval_data, latency_runs=2,
                                   warmup_runs=0, technique='pruning')
  again = measure.VariantMetrics.from_dict(metrics.to_dict())
  assert again == metrics
  with pytest.raises(ConfigError, match='Unknown VariantMetrics field'):
    measure.VariantMetrics.from_dict({**metrics.to_dict(), 'speed': 1})


# Latency: invoke() on a prepared interpreter, in interleaved rounds.


class _Recorder:
  """Logs interpreter calls and timed windows (a clock read opens or closes
  one), so a test can see what ran inside each timed window."""

  def __init__(self, monkeypatch):
    from tensorflow.lite.python import interpreter as interpreter_lib
    self.events = []
    self.reads = 0
    cls = interpreter_lib.Interpreter
    for method, tag in (('invoke', 'invoke'), ('allocate_tensors', 'allocate'),
                        ('resize_tensor_input', 'resize'),
                        ('set_tensor', 'set_tensor')):
      monkeypatch.setattr(cls, method, self._logging(getattr(cls, method), tag))
    monkeypatch.setattr(
        interpreter_lib.SignatureRunner, '__call__',
        self._logging(interpreter_lib.SignatureRunner.__call__, 'runner'))

  def _logging(self, fn, tag):
    def wrapped(obj, *args, **kwargs):
      owner = getattr(obj, '_interpreter', obj) if tag == 'runner' else obj
      self.events.append((tag, id(owner)))
      return fn(obj, *args, **kwargs)
    return wrapped

  def clock(self):
    self.reads += 1
    self.events.append(('open' if self.reads % 2 else 'close', None))
    return float(self.reads)

  def windows(self):
    """The calls inside each timed window, in order."""
    result, current = [], None
    for tag, owner in self.events:
      if tag == 'open':
        current = []
      elif tag == 'close':
        result.append(current)
        current = None
      elif current is not None:
        current.append((tag, owner))
    return result


def test_latency_times_only_invoke_on_a_prepared_interpreter(float_tflite,
                                                             monkeypatch):
  recorder = _Recorder(monkeypatch)
  result = measure.measure_latency_interleaved(
      [measure.LatencyVariant('a', float_tflite)], runs=12, warmup_runs=2,
      rounds=3, clock=recorder.clock)
  windows = recorder.windows()
  # Per round: 4 timed invokes, then 4 timed SignatureRunner calls.
  assert [w[0][0] for w in windows] == (['invoke'] * 4 + ['runner'] * 4) * 3
  # Each window holds exactly the one timed call: no set_tensor, resize or
  # AllocateTensors inside (the old method timed a SignatureRunner call per
  # run, which resizes and re-allocates every time).
  assert all(len(w) == 1 for w in windows)
  first_timed = recorder.events.index(('open', None))
  setup = [tag for tag, _ in recorder.events[:first_timed]]
  assert setup.count('allocate') == 1 and setup.count('set_tensor') == 1
  assert setup.count('runner') == 0
  later = [tag for tag, _ in recorder.events[first_timed:]]
  assert not {'allocate', 'resize', 'set_tensor'} & set(later)
  stats = result.variants['a']
  assert stats.runs == 12 and len(stats.round_p50_ms) == 3
  assert len(stats.runner_round_p50_ms) == 3
  assert stats.call_overhead_ms is not None


def test_measure_tflite_reports_rounds_and_call_overhead(float_tflite,
                                                         eval_data,
                                                         monkeypatch):
  recorder = _Recorder(monkeypatch)
  metrics = measure.measure_tflite(float_tflite, eval_data, latency_runs=20,
                                   warmup_runs=2, latency_rounds=4)
  tags = [tag for tag, _ in recorder.events]
  # A noisy machine can make the re-measure rule take more attempts; each
  # attempt repeats the rounds, so the counts are per attempt.
  attempts = metrics.details['latency']['attempts']
  assert 1 <= attempts <= measure.DEFAULT_MAX_ATTEMPTS
  # Accuracy: one invoke per eval example; latency: warm-up once, then per
  # attempt the round warm-ups and the 20 timed invokes.
  assert tags.count('invoke') == (
      len(eval_data) + 2 + attempts * (4 * measure.ROUND_WARMUP_RUNS + 20))
  assert tags.count('runner') == 20 * attempts  # the overhead phase only
  # Two interpreters (accuracy, latency), each allocated once: batch-1
  # examples never change the allocated shape.
  assert tags.count('allocate') == 2 and tags.count('resize') == 0
  assert metrics.latency_runs == 20
  assert len(metrics.latency_round_p50_ms) == 4
  assert metrics.call_overhead_ms is not None
  assert metrics.details['latency']['rounds'] == 4


def test_variants_are_timed_in_interleaved_rounds(float_tflite, tmp_path,
                                                  monkeypatch):
  other = str(tmp_path / 'copy.tflite')
  with open(float_tflite, 'rb') as src, open(other, 'wb') as dst:
    dst.write(src.read())
  recorder = _Recorder(monkeypatch)
  result = measure.measure_latency_interleaved(
      [measure.LatencyVariant('a', float_tflite),
       measure.LatencyVariant('b', other, num_threads=2)],
      runs=6, warmup_runs=0, rounds=3, measure_overhead=False,
      clock=recorder.clock)
  assert result.round_order == [['a', 'b'], ['b', 'a'], ['a', 'b']]
  assert result.runs_per_round == 2 and result.rounds == 3
  # The interpreters behind the timed invokes, in order, name the same
  # alternation: a a b b | b b a a | a a b b.
  owners = [w[0][1] for w in recorder.windows()]
  a, b = owners[0], owners[2]
  assert a != b
  assert owners == [a, a, b, b, b, b, a, a, a, a, b, b]
  for label in ('a', 'b'):
    stats = result.variants[label]
    assert len(stats.round_p50_ms) == 3 and stats.runs == 6
    assert stats.runner_round_p50_ms == [] and stats.call_overhead_ms is None
  assert result.variants['b'].num_threads == 2


class _ScriptedClock:
  """Each timed call lasts the next of `durations_ms`."""

  def __init__(self, durations_ms):
    self.durations = list(durations_ms)
    self.now = 0.0
    self.reads = 0

  def __call__(self):
    self.reads += 1
    if self.reads % 2 == 0:
      self.now += self.durations.pop(0) / 1000.0
    return self.now


def test_rounds_that_disagree_are_measured_again(float_tflite):
  # 5 rounds of 2 runs. Attempt 1: round p50s 1, 2, 2, 2, 2 ms, a spread of
  # (2 - 1) / 2 = 0.5 > 0.25: measured again. Attempt 2 agrees: kept.
  clock = _ScriptedClock([1, 1] + [2] * 8 + [1.0] * 10)
  result = measure.measure_latency_interleaved(
      [measure.LatencyVariant('a', float_tflite)], runs=10, warmup_runs=0,
      rounds=5, max_round_spread=0.25, measure_overhead=False, clock=clock)
  assert result.attempts == 2 and result.stable
  assert result.attempt_spreads == pytest.approx([0.5, 0.0])
  stats = result.variants['a']
  assert stats.round_p50_ms == pytest.approx([1.0] * 5)
  assert stats.p50_ms == pytest.approx(1.0) and stats.spread == 0.0
  assert clock.durations == []  # exactly two attempts ran


def test_rounds_that_keep_disagreeing_keep_the_least_spread_attempt(
    float_tflite):
  # 3 rounds of 2 runs. Spreads 0.5 (p50s 1, 2, 2), 0.4 (5, 5, 7) and 1.0
  # (2, 4, 2): all above 0.25, so all 3 attempts run and the second is kept,
  # marked unstable.
  clock = _ScriptedClock([1, 1, 2, 2, 2, 2] + [5, 5, 5, 5, 7, 7] +
                         [2, 2, 4, 4, 2, 2])
  result = measure.measure_latency_interleaved(
      [measure.LatencyVariant('a', float_tflite)], runs=6, warmup_runs=0,
      rounds=3, max_round_spread=0.25, max_attempts=3,
      measure_overhead=False, clock=clock)
  assert result.attempts == 3 and not result.stable
  assert result.attempt_spreads == pytest.approx([0.5, 0.4, 1.0])
  stats = result.variants['a']
  assert stats.round_p50_ms == pytest.approx([5.0, 5.0, 7.0])
  assert stats.spread == pytest.approx(0.4)


def test_round_spread():
  assert measure._round_spread([10.0]) == 0.0
  assert measure._round_spread([10.0, 10.0, 10.0]) == 0.0
  assert measure._round_spread([9.0, 10.0, 12.0]) == pytest.approx(0.3)


def test_bad_latency_arguments_are_config_errors(float_tflite):
  variant = measure.LatencyVariant('a', float_tflite)
  with pytest.raises(ConfigError, match='unique'):
    measure.measure_latency_interleaved([variant, variant], runs=2)
  with pytest.raises(ConfigError, match='rounds and max_attempts'):
    measure.measure_latency_interleaved([variant], runs=2, rounds=0)
  with pytest.raises(ConfigError, match='num_threads must be >= 1'):
    measure.measure_latency_interleaved(
        [measure.LatencyVariant('a', float_tflite, num_threads=0)], runs=2)
  with pytest.raises(ConfigError, match='at least 1 variant'):
    measure.measure_latency_interleaved([], runs=2)
