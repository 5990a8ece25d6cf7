"""The ModelOptimizer's budgets: technique steps tied to the Trainer's, and
memory that does not grow with the rows.

* tie_to_trainer caps every technique step of the default candidates at the
  Trainer's steps (distillation at twice them), all of them together at 3x
  the Trainer's on a large span, keeping a lower own cap;
* _keras_utils.fit trains at most max_steps batches (optimizer iterations
  counted by Keras itself), and a real technique (pruning) reports the steps
  it trained;
* make_dataset above its cache bound streams the files: every record is
  read once per pass, and the tf.data graph holds no cache.
"""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from leantfx.components.optimize.techniques import _keras_utils
from leantfx.components.optimize import config as config_lib
from leantfx.components.optimize import inputs
from leantfx.components.optimize.steps import samples
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.techniques import pruning
from leantfx.components.optimize.evaluation import report
from leantfx.models.training import trainer_executor
from tests import helpers

pytestmark = pytest.mark.unit


@pytest.mark.parametrize('trainer_steps', [1, 180, 1000, 2000])
def test_on_small_spans_each_technique_may_train_as_long_as_the_trainer(
    trainer_steps):
  # 3x shared by 8 weights is below the floor: the Trainer's steps decide.
  candidates = config_lib.tie_to_trainer(config_lib.default_candidates(),
                                         trainer_steps)
  steps = [s for c in candidates for s in c.steps]
  assert {s.technique for s in steps} == set(config_lib.TECHNIQUES)
  unit = min(trainer_steps, config_lib.MIN_TECHNIQUE_STEPS)
  for step in steps:
    limit = unit * (2 if step.technique == 'distillation' else 1)
    assert step.config.max_steps == limit, step.technique
  # The candidates are otherwise the defaults (names, modes, epochs).
  assert [c.name for c in candidates] == [
      c.name for c in config_lib.default_candidates()]


@pytest.mark.parametrize('trainer_steps', [12_500, 20_000])
def test_on_large_spans_all_techniques_together_train_at_most_3x_the_trainer(
    trainer_steps):
  candidates = config_lib.tie_to_trainer(config_lib.default_candidates(),
                                         trainer_steps)
  steps = [s for c in candidates for s in c.steps]
  total = sum(s.config.max_steps for s in steps)
  assert total <= config_lib.OPTIMIZER_STEP_BUDGET * trainer_steps
  # Shared evenly, distillation twice: 8 weights for the defaults.
  assert total > config_lib.OPTIMIZER_STEP_BUDGET * trainer_steps - 8
  for step in steps:
    share = step.config.max_steps // (
        2 if step.technique == 'distillation' else 1)
    assert config_lib.MIN_TECHNIQUE_STEPS <= share < trainer_steps


def test_a_single_technique_may_train_as_long_as_the_trainer():
  (tied,) = config_lib.tie_to_trainer(
      (config_lib.Candidate((config_lib.TechniqueStep('pruning'),)),), 20_000)
  assert tied.steps[0].config.max_steps == 20_000


def test_a_lower_own_cap_is_kept_and_the_config_round_trips():
  own = config_lib.Candidate((config_lib.TechniqueStep(
      'pruning', pruning.PruningConfig(frequency=1, max_steps=50)),))
  (tied,) = config_lib.tie_to_trainer((own,), 1000)
  assert tied.steps[0].config.max_steps == 50
  (tied,) = config_lib.tie_to_trainer((own,), 20)
  assert tied.steps[0].config.max_steps == 20
  config = config_lib.OptimizationConfig(candidates=(tied,))
  again = config_lib.OptimizationConfig.from_json(config.to_json())
  assert again.candidates[0].steps[0].config.max_steps == 20


def _batches(count, batch=4, features=3, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(count * batch, features)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.int64)
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


@pytest.mark.parametrize('batches, epochs, max_steps, expected', [
    (10, 3, None, (3, 10)),    # no cap: three passes
    (10, 3, 30, (3, 10)),      # the passes fit in the cap
    (10, 3, 7, (3, 2)),        # shorter epochs: 6 steps <= 7
    (45, 60, 2000, (60, 33)),  # digits' distillation under 2 x 1,000
    (10, 5, 3, (3, 1)),        # fewer epochs than asked, one step each
])
def test_epoch_plan(batches, epochs, max_steps, expected):
  assert _keras_utils.epoch_plan(_batches(batches), epochs,
                                 max_steps) == expected


def test_fit_takes_at_most_max_steps_optimizer_steps():
  model = tf_keras.Sequential([tf_keras.layers.Dense(2, activation='softmax',
                                                     input_shape=(3,))])
  _keras_utils.compile_classifier(model, 1e-3)
  _keras_utils.fit(model, _batches(10), epochs=3, max_steps=7)
  assert int(model.optimizer.iterations.numpy()) == 6


def test_pruning_reports_the_capped_steps():
  inputs = tf_keras.Input((3,))
  outputs = tf_keras.layers.Dense(2, activation='softmax')(
      tf_keras.layers.Dense(8, activation='relu')(inputs))
  model = tf_keras.Model(inputs, outputs)
  config = pruning.PruningConfig(frequency=1, epochs=4, max_steps=10)
  result = pruning.prune(model, _batches(8), config)
  # 4 epochs x 8 batches = 32 > 10: 4 epochs of 2 steps.
  assert result.details['training_steps'] == 8
  assert result.details['sparsity']['zeros'] > 0


_SPEC = {'x': tf.io.FixedLenFeature([], tf.float32),
         'label': tf.io.FixedLenFeature([], tf.int64)}


def _ops(dataset):
  graph = tf.compat.v1.GraphDef()
  graph.ParseFromString(dataset._as_serialized_graph().numpy())  # pylint: disable=protected-access
  return {node.op for node in graph.node} | {
      node.op for f in graph.library.function for node in f.node_def}


def test_a_split_above_the_bound_is_streamed_not_cached(tmp_path):
  files = helpers.write_gzip_split(str(tmp_path / 'train'), 301)
  streamed = inputs.make_dataset(files, _SPEC, 'label', 16,
                                       shuffle=True, cache_max_records=100)
  assert not any('Cache' in op for op in _ops(streamed))
  # ceil(301 / 16) batches, known without a counting pass.
  assert int(streamed.cardinality()) == 19
  for _ in range(2):  # every pass reads every record once, in a new order
    seen = np.concatenate([f['x'].numpy() for f, _ in streamed])
    assert sorted(seen.tolist()) == [float(i) for i in range(301)]
  cached = inputs.make_dataset(files, _SPEC, 'label', 16,
                                     cache_max_records=1000)
  assert any('Cache' in op for op in _ops(cached))
  seen = np.concatenate([f['x'].numpy() for f, _ in cached])
  assert sorted(seen.tolist()) == [float(i) for i in range(301)]


def test_the_trainer_records_its_budget_on_the_model():
  record = {'budget': {'rule': 'passes', 'steps': 2500, 'examples': 80_000,
                       'train_rows': 80_020, 'passes': 0.9998,
                       'train_rows_at_least': False}}
  properties = trainer_executor.record_properties(record)
  assert properties[trainer_executor.TRAIN_STEPS] == 2500
  assert properties[trainer_executor.TRAIN_EXAMPLES] == 80_000
  assert properties[trainer_executor.TRAIN_ROWS] == 80_020
  assert properties[trainer_executor.TRAIN_PASSES] == '0.9998'


def test_the_report_says_what_was_sampled_and_how_long_each_candidate_took():
  lines = report.budget_lines({
      'trainer_steps': 2490,
      'technique_step_caps': {'pruning': 1000, 'distillation': 2000},
      'step_budget': 3, 'min_technique_steps': 1000,
      'train_split': {'batches': 2499, 'cached': False,
                      'cache_max_records': 50_000, 'shuffle_buffer': 10_000},
      'samples': {'eval_rows_scored': 20_000, 'eval_sampled': True,
                  'scoring_max_examples': 20_000, 'calibration_samples': 100,
                  'technique_examples': 1024, 'raw_eval_rows': 20_000},
      'candidates': {'pruning': {'techniques_s': 20.0, 'tflite_s': 3.1,
                                 'train_steps': 2488}}})
  text = '\n'.join(lines)
  assert ('the Trainer trained 2,490 steps; each technique fine-tunes at '
          'most 1,000 steps, distillation at most 2,000 (all together at '
          "most 3x the Trainer's steps, at least 1,000 each)") in text
  assert 'streamed from its files' in text
  assert 'the first 20,000 eval rows (a sample' in text
  assert 'calibrated on 100 train rows' in text
  assert 'pruning 23.1 s (2,488 steps)' in text
  assert 'own epochs' in report.budget_lines({'trainer_steps': None})[0]


def test_first_rows_keeps_the_order_and_bounds_the_rows():
  data = measure.LabeledData({'x': np.arange(10.0)}, np.arange(10))
  assert samples.first_rows(data, 4).labels.tolist() == [0, 1, 2, 3]
  assert samples.first_rows(data, 40) is data
