"""The tree family: training, the module the signatures wrap, the choice.

Tiny transformed datasets (numpy columns in the Trainer's names) train real
YDF gradient-boosted trees; the SavedModel they export is loaded in a fresh
process, with and without TF-DF's ops registered (leantfx/decision_forests.py).
``model_family.choose`` runs on the same columns, with split_arrays.read
replaced by the columns it would have read.
"""
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from leantfx import config as config_lib
from leantfx import decision_forests
from leantfx.models import architectures
from leantfx.models import evaluation_model
from leantfx.models import features
from leantfx.models import model_family
from leantfx.models import split_arrays
from leantfx.models import trees
from tests.training import helpers

pytestmark = pytest.mark.unit

# Few trees: the rules below need a handful of splits, and the tests time.
FEW = trees.TreeSettings(num_trees=30, seed=1)


def _rule_columns(rows, seed=0):
  """Eight features and a 3-class label of thresholds and an interaction.

  The rule is benchmarks/tree_data.py's (no label noise here): a few axis
  splits, which trees fit in a few levels.
  """
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(rows, helpers.NUM_FEATURES)).astype(np.float32)
  score = ((x[:, 0] > 0.4).astype(int) + (x[:, 1] < -0.3) +
           ((x[:, 2] > 0) & (x[:, 3] > 0.5)) + (np.abs(x[:, 4]) > 1.2) -
           (x[:, 5] > 1.0))
  columns = {features.transformed_name(f'f{i}'): x[:, i:i + 1]
             for i in range(helpers.NUM_FEATURES)}
  columns[features.LABEL_KEY] = np.clip(score, 0, 2).astype(np.int64)
  return columns


def _accuracy(outputs, labels):
  return float(np.mean(np.argmax(outputs, axis=1) == labels))


@pytest.fixture(scope='module')
def rule_trees():
  return trees.train(_rule_columns(3000), False, 3, [], FEW)


def test_trees_learn_the_rule_and_return_probabilities(rule_trees):
  held_out = _rule_columns(1000, seed=1)
  outputs = trees.predict(rule_trees.model, held_out)
  assert outputs.shape == (1000, 3)
  np.testing.assert_allclose(outputs.sum(axis=1), 1.0, atol=1e-5)
  # A rule of 5 axis splits without noise: trees of depth 6 find it.
  assert _accuracy(outputs, held_out[features.LABEL_KEY]) > 0.95
  assert rule_trees.train_rows == 3000
  assert 0 < rule_trees.num_trees <= 3 * FEW.num_trees


def test_columns_come_in_class_id_order_past_ten_classes():
  # YDF orders classes by their label text ('10' before '2'); the module
  # must return them by class id, or the argmax names the wrong class.
  rng = np.random.default_rng(3)
  x = rng.uniform(size=(3000, 1)).astype(np.float32)
  labels = np.minimum((x[:, 0] * 12).astype(np.int64), 11)
  columns = {'f0_xf': x, features.LABEL_KEY: labels}
  model = trees.train(columns, False, 12, [], FEW).model
  assert _accuracy(trees.predict(model, columns), labels) > 0.95


def test_a_class_missing_from_the_train_rows_has_probability_zero():
  columns = _rule_columns(800)
  model = trees.train(columns, False, 4, [], FEW).model
  outputs = trees.predict(model, columns)
  assert outputs.shape == (800, 4)
  assert np.all(outputs[:, 3] == 0.0)


def test_two_classes_give_two_columns():
  columns = _rule_columns(800)
  columns[features.LABEL_KEY] = (columns[features.LABEL_KEY] > 0).astype(
      np.int64)
  outputs = trees.predict(trees.train(columns, False, 2, [], FEW).model,
                          columns)
  assert outputs.shape == (800, 2)
  assert _accuracy(outputs, columns[features.LABEL_KEY]) > 0.9


@pytest.mark.parametrize('rows, stops_early', [
    (800, False), (trees.EARLY_STOPPING_MIN_ROWS + 2000, True)])
def test_early_stopping_holds_rows_out_only_on_large_train_splits(
    rows, stops_early):
  # Labels of pure noise: with a validation share, early stopping ends the
  # boosting long before its budget; without one, every iteration is grown.
  columns = _rule_columns(rows)
  columns[features.LABEL_KEY] = np.random.default_rng(1).integers(
      0, 2, rows).astype(np.int64)
  settings = trees.TreeSettings(num_trees=40, max_depth=3)
  trained = trees.train(columns, False, 2, [], settings)
  trained.cleanup()
  assert (trained.num_trees < 40) is stops_early, trained.num_trees


def test_a_regression_returns_one_column_near_the_target():
  columns = _rule_columns(2000)
  target = (2.0 * (columns['f0_xf'][:, 0] > 0) +
            columns['f1_xf'][:, 0]).astype(np.float32)
  columns[features.LABEL_KEY] = target
  outputs = trees.predict(trees.train(columns, True, 0, [], FEW).model,
                          columns)
  assert outputs.shape == (2000, 1)
  rmse = float(np.sqrt(np.mean((outputs[:, 0] - target) ** 2)))
  # The target's spread is about 1.4; the trees get most of it.
  assert rmse < 0.3 * float(target.std())


def test_categorical_ids_and_wide_features_are_used():
  rng = np.random.default_rng(5)
  ids = rng.integers(0, 6, size=(2000, 1)).astype(np.int64)
  wide = rng.normal(size=(2000, 3)).astype(np.float32)
  # Class: an id in {1, 4} (no threshold on the id separates them), or the
  # third column of the wide feature above 1.
  labels = (np.isin(ids[:, 0], (1, 4)) | (wide[:, 2] > 1)).astype(np.int64)
  columns = {'kind_xf': ids, 'wide_xf': wide, features.LABEL_KEY: labels}
  assert set(trees.feature_columns(columns)) == {
      'kind_xf', 'wide_xf.0', 'wide_xf.1', 'wide_xf.2'}
  model = trees.train(columns, False, 2, ['kind_xf'], FEW).model
  assert _accuracy(trees.predict(model, columns), labels) > 0.97


def test_no_rows_is_a_clear_error():
  columns = {'f0_xf': np.zeros((0, 1), np.float32),
             features.LABEL_KEY: np.zeros((0,), np.int64)}
  with pytest.raises(ValueError, match='need rows and features'):
    trees.train(columns, False, 2, [], FEW)


@pytest.fixture(scope='module')
def saved_trees(rule_trees, tmp_path_factory):
  """The trees saved with a serving signature, as run_fn saves them."""
  path = str(tmp_path_factory.mktemp('trees') / 'saved')
  model = rule_trees.model
  specs = {name: tf.TensorSpec([None, 1], tf.float32, name=name)
           for name in trees.feature_columns(_rule_columns(1))}

  @tf.function(input_signature=[specs])
  def serve(transformed):
    return {'probabilities': model(transformed)}

  model_family.save_serving(model, path, {'serving_default': serve})
  return path


def test_a_tree_saved_model_names_its_tf_df_ops_and_a_network_none(
    saved_trees, tmp_path):
  assert decision_forests.uses_ops(saved_trees)
  assert 'SimpleMLInferenceOpWithHandle' in decision_forests.op_names(
      saved_trees)
  network = architectures.build_compiled(helpers.TABULAR, helpers.TINY_TRAINING,
                                         {})
  network.save(str(tmp_path / 'network'), save_format='tf')
  assert not decision_forests.uses_ops(str(tmp_path / 'network'))
  assert not decision_forests.uses_ops(str(tmp_path / 'nothing-here'))


def test_a_fresh_process_loads_the_trees_only_after_ensure_ops(saved_trees):
  script = textwrap.dedent(f"""
      import numpy as np, tensorflow as tf
      from leantfx import decision_forests
      path = {saved_trees!r}
      try:
        tf.saved_model.load(path)
        print('LOADED WITHOUT OPS')
      except Exception as e:
        print('UNREGISTERED' if 'SimpleML' in str(e) else repr(e))
      assert decision_forests.ensure_ops(path)
      serve = tf.saved_model.load(path).signatures['serving_default']
      rows = {{f'f{{i}}_xf': tf.fill([2, 1], 0.5) for i in range(8)}}
      print('SHAPE', serve(**rows)['probabilities'].shape)
      """)
  result = subprocess.run([sys.executable, '-c', script], capture_output=True,
                          text=True, timeout=240, check=False)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'UNREGISTERED' in result.stdout, result.stdout
  assert 'SHAPE (2, 3)' in result.stdout, result.stdout


def test_the_evaluator_loader_registers_the_ops_for_trees_only(saved_trees):
  eval_config = config_lib_eval_config()
  shared = evaluation_model.custom_eval_shared_model(
      eval_saved_model_path=saved_trees, model_name='', eval_config=eval_config)
  construct = shared.model_loader.construct_fn
  assert construct.func is evaluation_model._load_with_ops  # pylint: disable=protected-access
  # Beam workers unpickle it by reference to this module.
  assert pickle.loads(pickle.dumps(construct.func)) is construct.func
  assert construct.args[1] == saved_trees


def config_lib_eval_config():
  import tensorflow_model_analysis as tfma  # pylint: disable=g-import-not-at-top
  return tfma.EvalConfig(model_specs=[tfma.ModelSpec(
      signature_name='serving_default', label_key=features.LABEL_KEY)])


class _Reads:
  """Stands in for split_arrays.read: train columns first, then eval."""

  def __init__(self, train, evaluation):
    self._queue = [train, evaluation]

  def __call__(self, *unused_args, **unused_kwargs):
    arrays = self._queue.pop(0)
    rows = len(arrays[features.LABEL_KEY])
    return split_arrays.SplitArrays(arrays=arrays, split_rows=rows, rows=rows)


class _FnArgs:
  train_files = ['train-*']
  eval_files = ['eval-*']


def _weak_network():
  """The Trainer's MLP after 20 steps: far from the rule the trees find."""
  network = architectures.build_compiled(helpers.TABULAR, helpers.TINY_TRAINING,
                                         {})
  columns = _rule_columns(640, seed=2)
  label = columns.pop(features.LABEL_KEY)
  network.fit(columns, label, batch_size=32, epochs=1, steps_per_epoch=20,
              verbose=0)
  return network


def test_auto_exports_the_trees_when_they_beat_the_network(monkeypatch):
  monkeypatch.setattr(split_arrays, 'read', _Reads(_rule_columns(3000),
                                                   _rule_columns(1000, 1)))
  choice = model_family.choose(
      helpers.training(model_family='auto'), helpers.TABULAR,
      _weak_network(), _FnArgs(), tf_transform_output=None)
  record = choice.record
  assert choice.family == model_family.TREES, record
  assert record['chosen'] == 'trees' and record['metric'] == 'accuracy'
  assert record['trees'] > record['network'] + model_family.ACCURACY_MARGIN
  assert record['eval_rows'] == 1000 and record['trees_train_rows'] == 3000
  assert record['seconds'] >= record['trees_seconds'] > 0
  assert 'points better' in record['reason'], record['reason']
  assert isinstance(choice.serving_model('the network'), trees.TreeModel)
  choice.cleanup()


def test_network_mode_trains_no_trees(monkeypatch):
  monkeypatch.setattr(split_arrays, 'read', None)  # Not read at all.
  choice = model_family.choose(helpers.training(model_family='network'),
                               helpers.TABULAR, object(), _FnArgs(), None)
  assert choice.family == 'network' and choice.trees is None
  assert choice.record == {'mode': 'network', 'chosen': 'network',
                           'reason': '--model-family network'}


def test_images_keep_the_network_and_refuse_trees(monkeypatch):
  monkeypatch.setattr(split_arrays, 'read', None)
  choice = model_family.choose(helpers.training(model_family='auto'),
                               helpers.DIGITS, object(), _FnArgs(), None)
  assert choice.family == 'network'
  assert choice.record['reason'].startswith('no trees: image data')
  with pytest.raises(ValueError, match='--model-family trees cannot train'):
    model_family.choose(helpers.training(model_family='trees'),
                        helpers.DIGITS, object(), _FnArgs(), None)


@pytest.mark.parametrize('network,trees_figure,p_value,regression,better', [
    # Accuracy: the trees must lead by more than half a point ...
    (0.900, 0.906, 0.01, False, True),
    (0.900, 0.904, 0.01, False, False),
    (0.900, 0.900, 0.50, False, False),
    # ... and significantly.
    (0.900, 0.950, 0.06, False, False),
    # RMSE: the trees' must be more than 1% lower.
    (10.0, 9.8, 0.01, True, True),
    (10.0, 9.95, 0.01, True, False),
    (10.0, 9.0, 0.20, True, False),
])
def test_the_margin_and_the_noise_go_to_the_network(network, trees_figure,
                                                    p_value, regression,
                                                    better):
  assert model_family._trees_better(  # pylint: disable=protected-access
      network, trees_figure, p_value, regression) is better


@pytest.mark.parametrize('trees_right,network_right,expected', [
    # McNemar's exact test on the discordant rows: 9 against 1 is
    # P(X >= 9 | 10, 0.5) = 11/1024; 2 against 1 is 4/8; none is no evidence.
    ([1] * 9 + [0] + [1] * 50, [0] * 9 + [1] + [1] * 50, 11 / 1024),
    ([1, 1, 0] + [1] * 50, [0, 0, 1] + [1] * 50, 0.5),
    ([1] * 20, [1] * 20, 1.0),
])
def test_the_p_value_is_mcnemars_exact_test(trees_right, network_right,
                                            expected):
  p_value = model_family._p_value(  # pylint: disable=protected-access
      np.array(network_right, float), np.array(trees_right, float), False)
  assert p_value == pytest.approx(expected)


class _TransformOutput:
  """The one method split_arrays.read asks of a TFTransformOutput."""

  def transformed_feature_spec(self):
    return {'f0_xf': tf.io.FixedLenFeature([1], tf.float32),
            features.LABEL_KEY: tf.io.FixedLenFeature([], tf.int64)}


def _write_split(path, rows):
  """rows tf.Examples (f0_xf = the row's index) as a gzipped TFRecord."""
  with tf.io.TFRecordWriter(path, options='GZIP') as writer:
    for i in range(rows):
      writer.write(tf.train.Example(features=tf.train.Features(feature={
          'f0_xf': tf.train.Feature(float_list=tf.train.FloatList(
              value=[float(i)])),
          features.LABEL_KEY: tf.train.Feature(int64_list=tf.train.Int64List(
              value=[i % 3]))})).SerializeToString())


@pytest.mark.parametrize('rows,max_rows', [(2000, 5000), (20_000, 2000)])
def test_split_arrays_keep_every_row_or_a_uniform_sample(tmp_path, rows,
                                                         max_rows):
  _write_split(str(tmp_path / 'part-0.gz'), rows)
  pattern = [str(tmp_path / 'part-*')]
  read = split_arrays.read(pattern, _TransformOutput(), max_rows, seed=0)
  assert read.split_rows == rows
  values = read.arrays['f0_xf'][:, 0]
  np.testing.assert_array_equal(read.arrays[features.LABEL_KEY],
                                values.astype(np.int64) % 3)
  if rows <= max_rows:
    assert read.rows == rows and not read.sampled
    np.testing.assert_array_equal(values, np.arange(rows))
    return
  assert read.sampled
  # A Bernoulli sample of p = 0.1: 2,000 expected, sd 42.
  assert abs(read.rows - max_rows) < 5 * 42
  # Uniform over the split, not its first rows: the mean row is mid-split
  # (the mean of 2,000 uniform indices has sd 0.0065 of the split).
  assert abs(values.mean() - rows / 2) < 0.03 * rows
  # The same seed draws the same sample.
  again = split_arrays.read(pattern, _TransformOutput(), max_rows, seed=0)
  np.testing.assert_array_equal(again.arrays['f0_xf'], read.arrays['f0_xf'])


def test_the_pipeline_refuses_trees_for_images_and_text():
  with pytest.raises(config_lib.ConfigError, match='digits.*image'):
    config_lib.PipelineConfig(
        pipeline_name='p', pipeline_root='/r', data_root='/d',
        serving_model_dir='/s', dataset=helpers.DIGITS,
        training=helpers.training(model_family='trees'))
  with pytest.raises(config_lib.ConfigError, match='Unknown model_family'):
    helpers.training(model_family='forest')


def test_leantfx_serve_loads_the_trees_or_says_what_is_missing(saved_trees,
                                                              monkeypatch):
  # pylint: disable=g-import-not-at-top
  from leantfx.errors import InputDataError
  from leantfx.serving import saved_model_servable
  from leantfx.serving import servable
  from leantfx.serving import status
  # pylint: enable=g-import-not-at-top
  loaded = saved_model_servable.SavedModelServable('trees', 1, saved_trees)
  assert 'serving_default' in loaded.signatures
  loaded.close()

  def missing():
    raise InputDataError('tensorflow-decision-forests is not installed here')

  monkeypatch.setattr(decision_forests, 'load_ops', missing)
  with pytest.raises(servable.LoadError, match='not installed') as error:
    saved_model_servable.SavedModelServable('trees', 1, saved_trees)
  assert error.value.code == status.Code.FAILED_PRECONDITION
