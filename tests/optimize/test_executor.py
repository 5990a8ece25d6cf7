"""Tests of the ModelOptimizer executor, called directly on artifacts in tmp.

The inputs are built the way the pipeline builds them, only smaller:
  * model: conftest's trained digits teacher saved to <uri>/Format-Keras with
    tf_keras model.save(save_format='tf'), as run_fn does;
  * transformed_examples: Split-train / Split-eval of gzipped TFRecords of
    tf.Example with 'image_xf' (pixels / 16) and 'label_xf', written here;
  * transform_graph: a real tf.Transform output, from running a one-line
    preprocessing_fn (pixels / 16, label as is) through tft_beam on 20 rows.
The config keeps runs short: baseline float32 + int8 and one pruning epoch.
"""
import functools
import glob
import json
import os
import tempfile

import numpy as np
import pytest
import tensorflow as tf
from tfx.types import standard_artifacts

from leantfx.components.optimize import component as component_lib
from leantfx.components.optimize import config as config_lib
from leantfx.components.optimize import executor as executor_lib
from leantfx.components.optimize import flow
from leantfx.components.optimize import inputs
from leantfx.components.optimize.steps import samples
from leantfx.runtimes import push
from leantfx.components.optimize import spec
from leantfx.components.optimize.evaluation.selection import Budget
from leantfx.errors import ConfigError
from leantfx.errors import InputDataError
from tests.optimize import conftest

pytestmark = pytest.mark.unit


def _write_examples(directory, x, y):
  os.makedirs(directory)
  path = os.path.join(directory, 'transformed_examples-00000-of-00001.gz')
  with tf.io.TFRecordWriter(path, options='GZIP') as writer:
    for pixels, label in zip(x, y):
      example = tf.train.Example(features=tf.train.Features(feature={
          'image_xf': tf.train.Feature(
              float_list=tf.train.FloatList(value=pixels)),
          'label_xf': tf.train.Feature(
              int64_list=tf.train.Int64List(value=[int(label)])),
      }))
      writer.write(example.SerializeToString())


def _write_transform_graph(output_dir):
  import apache_beam as beam  # pylint: disable=g-import-not-at-top
  import tensorflow_transform.beam as tft_beam  # pylint: disable=g-import-not-at-top
  from tensorflow_transform.tf_metadata import dataset_metadata  # pylint: disable=g-import-not-at-top
  from tensorflow_transform.tf_metadata import schema_utils  # pylint: disable=g-import-not-at-top
  raw_spec = {'pixels': tf.io.FixedLenFeature([64], tf.float32),
              'digit': tf.io.FixedLenFeature([], tf.int64)}

  def preprocessing_fn(inputs):
    return {'image_xf': inputs['pixels'] / 16.0, 'label_xf': inputs['digit']}

  rows = [{'pixels': [float(i % 17)] * 64, 'digit': i % 10} for i in range(20)]
  metadata = dataset_metadata.DatasetMetadata(
      schema_utils.schema_from_feature_spec(raw_spec))
  with tft_beam.Context(temp_dir=tempfile.mkdtemp()):
    with beam.Pipeline() as pipeline:
      _, transform_fn = ((pipeline | beam.Create(rows), metadata)
                         | tft_beam.AnalyzeAndTransformDataset(
                             preprocessing_fn))
      _ = transform_fn | tft_beam.WriteTransformFn(output_dir)


@pytest.fixture(scope='module')
def inputs_root(tmp_path_factory, teacher, digits):
  """Model, examples and transform graph directories shared by the tests."""
  root = tmp_path_factory.mktemp('optimizer_inputs')
  teacher.save(str(root / 'model' / 'Format-Keras'), save_format='tf')
  n = conftest.NUM_TRAIN
  _write_examples(str(root / 'examples' / 'Split-train'), digits.x[:n],
                  digits.y[:n])
  _write_examples(str(root / 'examples' / 'Split-eval'), digits.x[n:],
                  digits.y[n:])
  _write_transform_graph(str(root / 'transform_graph'))
  return root


def _artifact(cls, uri, **properties):
  artifact = cls()
  artifact.uri = str(uri)
  for key, value in properties.items():
    setattr(artifact, key, value)
  return artifact


def _dicts(inputs_root, out, model_uri=None, split_names='["train", "eval"]'):
  input_dict = {
      spec.MODEL_KEY: [_artifact(standard_artifacts.Model,
                                 model_uri or inputs_root / 'model')],
      spec.TRANSFORMED_EXAMPLES_KEY: [_artifact(
          standard_artifacts.Examples, inputs_root / 'examples',
          split_names=split_names)],
      spec.TRANSFORM_GRAPH_KEY: [_artifact(standard_artifacts.TransformGraph,
                                           inputs_root / 'transform_graph')],
  }
  output_dict = {
      spec.OPTIMIZED_MODEL_KEY: [_artifact(standard_artifacts.Model,
                                           out / 'optimized_model')],
      spec.BLESSING_KEY: [_artifact(standard_artifacts.ModelBlessing,
                                    out / 'blessing')],
      spec.REPORT_KEY: [_artifact(spec.OptimizationReport, out / 'report')],
  }
  return input_dict, output_dict


def _config(budget, candidates=None):
  pruning = config_lib.TechniqueStep(
      'pruning', {'epochs': 1, 'frequency': 10, 'target_sparsity': 0.5})
  return config_lib.OptimizationConfig(
      candidates=candidates or (
          config_lib.Candidate((), ('float32', 'int8')),
          config_lib.Candidate((pruning,), ('int8',)),
      ),
      budget=budget, policy='smallest', latency_runs=20, warmup_runs=2,
      # The server runtimes have their own tests (test_runtime_variants.py).
      runtimes=('tflite',))


def _properties(config, push_base):
  return {spec.OPTIMIZATION_CONFIG_KEY: config.to_json(),
          spec.TFLITE_PUSH_BASE_KEY: str(push_base),
          spec.MODEL_NAME_KEY: 'digits'}


def test_blessed_variant_is_pushed_with_manifest_and_report(
    inputs_root, tmp_path, digits, monkeypatch):
  input_dict, output_dict = _dicts(inputs_root, tmp_path)
  push_base = tmp_path / 'tflite_serving'
  # What each technique gets to search and measure on.
  technique_rows = []
  technique_function = config_lib.technique_function

  def recording(technique):
    function = technique_function(technique)

    @functools.wraps(function)  # Its config annotation, as config.py reads.
    def run(model, train_ds, config, eval_ds):
      technique_rows.append(np.concatenate(
          [f[conftest.FEATURE] for f, _ in eval_ds.as_numpy_iterator()]))
      return function(model, train_ds, config, eval_ds)
    return run

  monkeypatch.setattr(config_lib, 'technique_function', recording)
  executor_lib.Executor().Do(
      input_dict, output_dict,
      _properties(_config(Budget(max_accuracy_drop=0.03)), push_base))

  # The pruning step searched and measured on TECHNIQUE_EXAMPLES train rows,
  # none of them an eval row (the gate's selection split is eval rows).
  rows, = technique_rows
  assert len(rows) == samples.TECHNIQUE_EXAMPLES
  as_bytes = lambda x: {r.tobytes() for r in np.asarray(x, np.float32)}  # pylint: disable=unnecessary-lambda-assignment
  train_rows = as_bytes(digits.x[:conftest.NUM_TRAIN])
  eval_rows = as_bytes(digits.x[conftest.NUM_TRAIN:])
  assert as_bytes(rows) <= train_rows and not as_bytes(rows) & eval_rows

  blessing = output_dict[spec.BLESSING_KEY][0]
  assert blessing.get_int_custom_property('blessed') == 1
  assert os.path.exists(os.path.join(blessing.uri, 'BLESSED'))
  selected = blessing.get_string_custom_property('selected_variant')
  # 'smallest' among blessed int8 variants (float32 is ~3.5x bigger).
  assert selected.endswith('/int8'), selected

  versions = push.list_versions(str(push_base), 'digits')
  assert len(versions) == 1
  version_dir = push_base / 'digits' / str(versions[0])
  manifest = push.read_manifest(str(version_dir))
  assert manifest['sha256'] == push.sha256_of(str(version_dir /
                                                   'model.tflite'))
  assert manifest['tflite_mode'] == 'int8'
  assert manifest['source_model_uri'] == str(inputs_root / 'model')
  assert manifest['metrics']['selection_accuracy_drop'] <= 0.03
  # Selected on one half of the 397 eval digits, reported on the other.
  assert manifest['metrics']['selection_examples'] == 198
  assert manifest['metrics']['eval_examples'] == 199

  optimized = output_dict[spec.OPTIMIZED_MODEL_KEY][0]
  copied = os.path.join(optimized.uri, 'Format-TFLite', 'model.tflite')
  assert push.sha256_of(copied) == manifest['sha256']
  assert optimized.get_int_custom_property('pushed_version') == versions[0]

  report_dir = output_dict[spec.REPORT_KEY][0].uri
  with open(os.path.join(report_dir, 'variants.json')) as f:
    record = json.load(f)
  assert [d['variant']['name'] for d in record['decisions']] == [
      'baseline/float32', 'baseline/int8', 'pruning/int8']
  assert record['selected'] == selected
  assert record['baseline']['runtime'] == 'tensorflow'
  assert record['baseline']['num_examples'] == 198
  assert record['policy_size'] == 'size_bytes'
  assert sorted(record['held_out']) == sorted(
      ['baseline/savedmodel', 'baseline/float32', 'baseline/int8',
       'pruning/int8'])
  assert {h['num_examples'] for h in record['held_out'].values()} == {199}
  assert manifest['metrics']['accuracy'] == record['held_out'][selected][
      'accuracy']
  with open(os.path.join(report_dir, 'report.md')) as f:
    markdown = f.read()
  assert 'selection policy: smallest (fewest bytes on disk' in markdown
  assert 'the other 199 eval examples, which neither' in markdown
  pruned = record['decisions'][2]['variant']
  # 50% of every pruned kernel is zero (the stripped model is measured).
  assert pruned['sparsity'] == pytest.approx(0.5, abs=0.01)
  assert pruned['details']['history']  # the fine-tuning curve is kept
  for name in ('report.html', 'report.md', 'training_curves.png',
               'sparsity_per_layer.png'):
    assert os.path.isfile(os.path.join(report_dir, name)), name
  assert len(glob.glob(os.path.join(report_dir, 'variants', '*',
                                    '*.tflite'))) == 3


def test_budget_nobody_meets_blesses_nothing_pushes_nothing_reports(
    inputs_root, tmp_path):
  input_dict, output_dict = _dicts(inputs_root, tmp_path)
  push_base = tmp_path / 'tflite_serving'
  config = _config(
      Budget(max_accuracy_drop=0.0, max_size_bytes=1000),
      candidates=(config_lib.Candidate((), ('float32',)),))
  # Does not raise: nothing blessed is a result, not a failure.
  executor_lib.Executor().Do(input_dict, output_dict,
                             _properties(config, push_base))

  blessing = output_dict[spec.BLESSING_KEY][0]
  assert blessing.get_int_custom_property('blessed') == 0
  assert os.path.exists(os.path.join(blessing.uri, 'NOT_BLESSED'))
  assert push.list_versions(str(push_base), 'digits') == []
  optimized = output_dict[spec.OPTIMIZED_MODEL_KEY][0]
  assert optimized.get_int_custom_property('blessed') == 0
  assert os.listdir(optimized.uri) == []
  report_dir = output_dict[spec.REPORT_KEY][0].uri
  with open(os.path.join(report_dir, 'report.md')) as f:
    text = f.read()
  assert 'no variant blessed' in text
  assert 'size ' in text and ' > 1000 B' in text


def test_model_without_saved_model_is_a_clear_error(inputs_root, tmp_path):
  model_uri = tmp_path / 'not_a_model'
  (model_uri / 'Format-Keras').mkdir(parents=True)
  (model_uri / 'Format-Keras' / 'weights.h5').write_bytes(b'\x89HDF')
  input_dict, output_dict = _dicts(inputs_root, tmp_path, model_uri=model_uri)
  with pytest.raises(InputDataError, match=r'is not a SavedModel \(no '
                     r"saved_model.pb\); found \['weights.h5'\]"):
    executor_lib.Executor().Do(
        input_dict, output_dict,
        _properties(_config(Budget(0.01)), tmp_path / 'push'))


def test_model_artifact_without_format_keras_is_a_clear_error(
    inputs_root, tmp_path):
  model_uri = tmp_path / 'serving_only'
  (model_uri / 'Format-Serving').mkdir(parents=True)
  input_dict, output_dict = _dicts(inputs_root, tmp_path, model_uri=model_uri)
  with pytest.raises(InputDataError, match='has no Format-Keras/ directory'):
    executor_lib.Executor().Do(
        input_dict, output_dict,
        _properties(_config(Budget(0.01)), tmp_path / 'push'))


def test_corrupt_saved_model_is_a_clear_error(inputs_root, tmp_path):
  model_uri = tmp_path / 'corrupt'
  (model_uri / 'Format-Keras').mkdir(parents=True)
  (model_uri / 'Format-Keras' / 'saved_model.pb').write_bytes(
      b'this is not a protobuf' * 10)
  input_dict, output_dict = _dicts(inputs_root, tmp_path, model_uri=model_uri)
  with pytest.raises(InputDataError, match='Cannot load the tf_keras model'):
    executor_lib.Executor().Do(
        input_dict, output_dict,
        _properties(_config(Budget(0.01)), tmp_path / 'push'))


def test_missing_eval_split_is_a_clear_error(inputs_root, tmp_path):
  input_dict, output_dict = _dicts(inputs_root, tmp_path,
                                   split_names='["train"]')
  with pytest.raises(InputDataError, match="no 'eval' split"):
    executor_lib.Executor().Do(
        input_dict, output_dict,
        _properties(_config(Budget(0.01)), tmp_path / 'push'))


def test_transform_graph_without_the_model_input_is_a_clear_error(
    inputs_root, tmp_path):
  with pytest.raises(InputDataError, match=r"lack \['pixels'\]"):
    inputs.transformed_feature_spec(
        str(inputs_root / 'transform_graph'), ['pixels'])


def test_unreadable_examples_are_a_clear_error(inputs_root, tmp_path):
  bad = tmp_path / 'bad.gz'
  bad.write_bytes(b'not gzip at all')
  feature_spec = inputs.transformed_feature_spec(
      str(inputs_root / 'transform_graph'), ['image_xf'])
  with pytest.raises(InputDataError, match='Cannot read transformed examples'):
    inputs.make_dataset([str(bad)], feature_spec, 'label_xf', 8)


@pytest.mark.parametrize('properties, message', [
    ({spec.OPTIMIZATION_CONFIG_KEY:
          '{"policy": "cheapest", "candidates": [{"steps": []}]}'},
     'Unknown selection policy'),
    ({spec.OPTIMIZATION_CONFIG_KEY: '{not json'}, 'not valid JSON'),
    ({spec.TFLITE_PUSH_BASE_KEY: ''}, 'tflite_push_base'),
    ({spec.MODEL_NAME_KEY: '../x'}, 'not usable as a directory'),
])
def test_bad_execution_properties_are_config_errors(inputs_root, tmp_path,
                                                    properties, message):
  input_dict, output_dict = _dicts(inputs_root, tmp_path)
  exec_properties = _properties(_config(Budget(0.01)), tmp_path / 'push')
  exec_properties.update(properties)
  with pytest.raises(ConfigError, match=message):
    executor_lib.Executor().Do(input_dict, output_dict, exec_properties)


def test_component_wires_channels_and_serializes_the_config():
  from tfx import types  # pylint: disable=g-import-not-at-top
  config = _config(Budget(0.02, max_p99_ms=5.0))
  component = component_lib.ModelOptimizer(
      model=types.Channel(type=standard_artifacts.Model),
      transformed_examples=types.Channel(type=standard_artifacts.Examples),
      transform_graph=types.Channel(type=standard_artifacts.TransformGraph),
      tflite_push_base='/serving/tflite', model_name='digits',
      optimization_config=config)
  assert set(component.outputs) == {'optimized_model', 'blessing', 'report'}
  assert component.outputs['report'].type_name == 'leantfx.OptimizationReport'
  text = component.exec_properties['optimization_config']
  assert config_lib.OptimizationConfig.from_json(text) == config


def test_component_takes_the_raw_examples_with_their_label():
  from tfx import types  # pylint: disable=g-import-not-at-top
  channels = dict(
      model=types.Channel(type=standard_artifacts.Model),
      transformed_examples=types.Channel(type=standard_artifacts.Examples),
      transform_graph=types.Channel(type=standard_artifacts.TransformGraph),
      tflite_push_base='/serving/tflite', model_name='penguins')
  raw = types.Channel(type=standard_artifacts.Examples)
  component = component_lib.ModelOptimizer(
      **channels, examples=raw, raw_label='species',
      classes=('Adelie', 'Chinstrap', 'Gentoo'),
      serve_args=('--batching', 'off'))
  assert component.inputs['examples'] is raw
  assert json.loads(component.exec_properties['raw_serving']) == {
      'label': 'species', 'classes': ['Adelie', 'Chinstrap', 'Gentoo'],
      'serve_args': ['--batching', 'off'], 'identifiers': []}
  # Without them the push takes the transformed features, as before.
  plain = component_lib.ModelOptimizer(**channels)
  assert 'examples' not in plain.inputs
  assert plain.exec_properties.get('raw_serving') is None
  with pytest.raises(ConfigError, match='examples and raw_label together'):
    component_lib.ModelOptimizer(**channels, examples=raw)
  with pytest.raises(ConfigError, match='examples and raw_label together'):
    component_lib.ModelOptimizer(**channels, raw_label='species')


def test_a_malformed_raw_serving_property_is_a_config_error(tmp_path):
  config = config_lib.OptimizationConfig()
  for text, match in (('not json', 'must be JSON'),
                      ('{"label": "species"}', 'must be JSON'),
                      ('{"label": "species", "classes": []}',
                       "no 'examples' input")):
    with pytest.raises(ConfigError, match=match):
      executor_lib._raw_inputs(  # pylint: disable=protected-access
          {}, {'raw_serving': text}, str(tmp_path), config)
  assert executor_lib._raw_inputs(  # pylint: disable=protected-access
      {}, {}, str(tmp_path), config) is None


def test_every_uri_and_the_push_base_on_an_object_store(inputs_root, tmp_path):
  """Artifacts and push base on ram://, as they are on gs:// on Kubeflow.

  ram:// goes through tf.io.gfile like gs:// and s3:// and is not a POSIX
  folder tree, so a run that works here makes no os-level file call on an
  artifact or the push base.
  """
  from tfx.dsl.io import fileio  # pylint: disable=g-import-not-at-top
  from tfx.utils import io_utils  # pylint: disable=g-import-not-at-top
  store = f'ram://{tmp_path.name}'
  for name in ('model', 'examples', 'transform_graph'):
    io_utils.copy_dir(str(inputs_root / name), f'{store}/inputs/{name}')
  input_dict, output_dict = _dicts(
      type('Root', (), {'__truediv__': lambda _, n: f'{store}/inputs/{n}'})(),
      type('Out', (), {'__truediv__': lambda _, n: f'{store}/out/{n}'})())
  executor_lib.Executor().Do(
      input_dict, output_dict,
      _properties(_config(Budget(max_accuracy_drop=0.03),
                          (config_lib.Candidate((), ('int8',)),)),
                  f'{store}/tflite'))
  blessing = output_dict[spec.BLESSING_KEY][0]
  assert blessing.get_int_custom_property('blessed') == 1
  assert fileio.exists(f'{blessing.uri}/BLESSED')
  (version,) = push.list_versions(f'{store}/tflite', 'digits')
  version_dir = f'{store}/tflite/digits/{version}'
  manifest = push.read_manifest(version_dir)
  assert manifest['sha256'] == push.sha256_of(f'{version_dir}/model.tflite')
  assert manifest['version'] == version
  optimized = output_dict[spec.OPTIMIZED_MODEL_KEY][0]
  assert push.sha256_of(
      f'{optimized.uri}/Format-TFLite/model.tflite') == manifest['sha256']
  report_uri = output_dict[spec.REPORT_KEY][0].uri
  for name in ('report.html', 'variants.json'):
    assert fileio.exists(f'{report_uri}/{name}'), name


def test_a_failing_candidate_is_skipped_and_reported(inputs_root, tmp_path):
  """Structured 2:4 pruning cannot apply to the 1-channel conv: real failure.

  The other candidate is still built, gated and pushed; the failure is in the
  report and in the optimized model's custom properties.
  """
  two_four = config_lib.TechniqueStep(
      'pruning', {'epochs': 1, 'frequency': 10, 'structured_2_4': True})
  input_dict, output_dict = _dicts(inputs_root, tmp_path)
  push_base = tmp_path / 'tflite_serving'
  executor_lib.Executor().Do(
      input_dict, output_dict,
      _properties(_config(Budget(max_accuracy_drop=0.03), (
          config_lib.Candidate((two_four,), ('int8',)),
          config_lib.Candidate((), ('int8',)),
      )), push_base))
  assert len(push.list_versions(str(push_base), 'digits')) == 1
  optimized = output_dict[spec.OPTIMIZED_MODEL_KEY][0]
  (failure,) = json.loads(optimized.get_string_custom_property(
      executor_lib.SKIPPED_CANDIDATES_PROPERTY))
  assert failure['stage'] == 'pruning'
  assert "'conv3x3' (Conv2D)" in failure['error']
  report_dir = output_dict[spec.REPORT_KEY][0].uri
  with open(os.path.join(report_dir, 'variants.json')) as f:
    record = json.load(f)
  assert record['failures'] == [failure]
  assert [d['variant']['name'] for d in record['decisions']] == [
      f"{config_lib.Candidate((), ('int8',)).name}/int8"]
  with open(os.path.join(report_dir, 'report.md')) as f:
    assert f"Skipped: candidate {failure['candidate']} failed at pruning" in (
        f.read())


def test_every_candidate_failing_is_a_clear_error(inputs_root, tmp_path):
  two_four = config_lib.TechniqueStep(
      'pruning', {'epochs': 1, 'frequency': 10, 'structured_2_4': True})
  input_dict, output_dict = _dicts(inputs_root, tmp_path)
  push_base = tmp_path / 'tflite_serving'
  with pytest.raises(flow.NoVariantBuilt,
                     match=r"every candidate failed.*'conv3x3' \(Conv2D\)"):
    executor_lib.Executor().Do(
        input_dict, output_dict,
        _properties(_config(Budget(max_accuracy_drop=0.03), (
            config_lib.Candidate((two_four,), ('int8',)),)), push_base))
  assert push.list_versions(str(push_base), 'digits') == []
