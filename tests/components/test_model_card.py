"""ModelCardGenerator: a card built from a real ML Metadata store, figure for figure.

The store is a real SQLite ML Metadata store holding one run of the
pipeline's shape (contexts, executions, events, artifacts with the
custom properties the components write) and the files the components
write (StatisticsGen's FeatureStats.pb, TFMA's metrics, the validation gate's
report.json, the ModelOptimizer's variants.json), small and written here.
The executor gets the artifacts as ML Metadata returns them, and the card's
figures must equal what the run record (pipeline/run_summary.py) reads from
the same store.
"""
import json
import os

import jsonschema
import pytest
import tensorflow as tf
from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2
from tensorflow_metadata.proto.v0 import statistics_pb2
from tensorflow_model_analysis.proto import metrics_for_slice_pb2
from tfx.types import artifact_utils
from tfx.types import standard_artifacts

from leantfx import compute_cost
from leantfx import config as config_lib
from leantfx.errors import ConfigError
from leantfx.components.model_card import card as card_lib
from leantfx.components.model_card import executor as executor_lib
from leantfx.components.model_card import spec
from leantfx.components.optimize import spec as optimize_spec
from leantfx.components.validation_gate import spec as gate_spec
from leantfx.models.training import trainer_executor
from leantfx.pipeline import run_summary

pytestmark = pytest.mark.unit

PIPELINE = 'leantfx-penguins'
VERSION = 1796547669
# Figures of a penguins run (tests/e2e's first run, rounded): the
# InfraValidator's and the serve check's are infra_check's names.
INFRA = {'latency_p50_ms_batch1': 2.5, 'latency_p99_ms_batch1': 4.0,
         'latency_p50_ms_concurrent': 9.0, 'latency_p99_ms_concurrent': 21.0,
         'throughput_rps_concurrent': 400.0, 'cpu_cores': 2.0,
         'concurrent_clients': 8.0, 'rest_max_abs_diff': 0.0,
         'grpc_max_abs_diff': 0.0, 'rows_checked': 66.0}
SERVED = {'latency_p99_ms_concurrent': 3.0,
          'throughput_rps_concurrent': 1250.0, 'cpu_cores': 2.0}
TRAINER_SECONDS, OPTIMIZER_SECONDS, CORES = 90.0, 180.0, 2
# The relative gate the Evaluator's blessing records (a penguins run's
# baselines, rounded; components/relative_gate/spec.py GATE_PROPERTY).
BASELINES = {
    'task': 'classification', 'metric': 'accuracy', 'seconds': 12.9,
    'rows': {'train': 278, 'train_total': 278, 'eval': 66, 'eval_total': 66,
             'max_rows': 200000, 'sampled': False},
    'baselines': {
        'majority': {'name': 'majority', 'value': 0.4697, 'fit_seconds': 0.0,
                     'model': "the most frequent train class ('Adelie')",
                     'note': ''},
        'linear': {'name': 'linear', 'value': 0.9697, 'fit_seconds': 0.1,
                   'model': 'LogisticRegression on 4 numeric, 2 categorical '
                            'column(s)', 'note': ''},
        'strong': {'name': 'strong', 'value': 0.9697, 'fit_seconds': 11.6,
                   'model': 'HistGradientBoostingClassifier on 4 numeric, 2 '
                            'categorical column(s)', 'note': ''}}}
GATE = {'metric': 'accuracy', 'bounds': [
    {'source': 'trivial', 'value': 0.6126, 'reason': 'beats the majority'},
    {'source': 'strong', 'value': 0.9597, 'reason': 'at most 0.01 below'}]}


def _statistics(uri):
  for split, rows in (('train', 278), ('eval', 66)):
    stats = statistics_pb2.DatasetFeatureStatisticsList()
    dataset = stats.datasets.add(num_examples=rows)
    numeric = dataset.features.add(type=statistics_pb2.FeatureNameStatistics
                                   .FLOAT)
    numeric.path.step.append('bill_length_mm')
    numeric.num_stats.common_stats.num_missing = 2 if split == 'train' else 0
    text = dataset.features.add(type=statistics_pb2.FeatureNameStatistics
                                .STRING)
    text.path.step.append('island')
    text.string_stats.common_stats.num_missing = 0
    os.makedirs(os.path.join(uri, f'Split-{split}'))
    with open(os.path.join(uri, f'Split-{split}', 'FeatureStats.pb'),
              'wb') as f:
      f.write(stats.SerializeToString())


def _metrics(uri, slices):
  """TFMA's metrics file: one MetricsForSlice per slice."""
  os.makedirs(uri)
  with tf.io.TFRecordWriter(
      os.path.join(uri, 'metrics-00000-of-00001.tfrecord')) as writer:
    for (column, value), metrics in slices.items():
      proto = metrics_for_slice_pb2.MetricsForSlice()
      if column:
        proto.slice_key.single_slice_keys.add(column=column,
                                              bytes_value=value.encode())
      for name, number in metrics.items():
        entry = proto.metric_keys_and_values.add()
        entry.key.name = name
        entry.value.double_value.value = number
      writer.write(proto.SerializeToString())


class _Run:
  """One run in a real ML Metadata store: node -> its output artifacts."""

  def __init__(self, path):
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = path
    self.store = metadata_store.MetadataStore(config)
    pipeline_type = self.store.put_context_type(
        metadata_store_pb2.ContextType(name='pipeline'))
    self.node_type = self.store.put_context_type(
        metadata_store_pb2.ContextType(name='node'))
    self.pipeline = metadata_store_pb2.Context(type_id=pipeline_type,
                                               name=PIPELINE)
    [self.pipeline.id] = self.store.put_contexts([self.pipeline])
    self.execution_type = self.store.put_execution_type(
        metadata_store_pb2.ExecutionType(name='component'))

  def add(self, node, outputs):
    """Records a complete execution of node with outputs {key: artifact}."""
    context = metadata_store_pb2.Context(type_id=self.node_type,
                                         name=f'{PIPELINE}.{node}')
    [context.id] = self.store.put_contexts([context])
    pairs = []
    for key, artifact in outputs.items():
      artifact.type_id = self.store.put_artifact_type(artifact.artifact_type)
      event = metadata_store_pb2.Event(type=metadata_store_pb2.Event.OUTPUT)
      event.path.steps.add().key = key
      pairs.append((artifact.mlmd_artifact, event))
    execution = metadata_store_pb2.Execution(
        type_id=self.execution_type,
        last_known_state=metadata_store_pb2.Execution.COMPLETE)
    _, ids, _ = self.store.put_execution(execution, pairs,
                                         [self.pipeline, context])
    for (key, artifact), artifact_id in zip(outputs.items(), ids):
      artifact.id = artifact_id

  def read(self, artifact):
    """The artifact as ML Metadata returns it, as a TFX Artifact."""
    [stored] = self.store.get_artifacts_by_id([artifact.id])
    [kind] = self.store.get_artifact_types_by_id([stored.type_id])
    return artifact_utils.deserialize_artifact(kind, stored)


def _artifact(cls, uri, **properties):
  artifact = cls()
  artifact.uri = uri
  for key, value in properties.items():
    if isinstance(value, bool) or isinstance(value, int):
      artifact.set_int_custom_property(key, int(value))
    elif isinstance(value, float):
      artifact.set_float_custom_property(key, value)
    else:
      artifact.set_string_custom_property(key, value)
  return artifact


@pytest.fixture(name='run')
def _run_fixture(tmp_path):
  """A pushed penguins run with the optimizer, recorded in ML Metadata."""
  root = str(tmp_path / 'tfx')
  run = _Run(str(tmp_path / 'metadata.sqlite'))
  statistics = _artifact(standard_artifacts.ExampleStatistics,
                         f'{root}/StatisticsGen/statistics/4')
  statistics.split_names = artifact_utils.encode_split_names(
      ['train', 'eval'])
  _statistics(statistics.uri)
  report = _artifact(gate_spec.DataValidationReport,
                     f'{root}/ValidationGate/report/6', span=1, passed=1,
                     blocking_anomalies=0, allowed_anomalies=1, rows_read=344,
                     rows_used=344)
  os.makedirs(report.uri)
  with open(os.path.join(report.uri, 'report.json'), 'w') as f:
    json.dump({'span': 1, 'passed': True, 'anomalies': [{
        'span': 1, 'split': 'eval', 'feature': 'sex',
        'kind': 'ENUM_TYPE_UNEXPECTED_STRING_VALUES',
        'short_description': 'Unexpected string values',
        'description': '...', 'allowed': True}]}, f)
  model = _artifact(standard_artifacts.Model, f'{root}/Trainer/model/9', **{
      trainer_executor.PRECISION_POLICY: 'float32',
      trainer_executor.PRECISION_REASON: 'no bfloat16 unit on this CPU',
      trainer_executor.STRATEGY: 'default', trainer_executor.REPLICAS: 1,
      trainer_executor.TRAIN_STEPS: 1000, trainer_executor.GLOBAL_BATCH: 32,
      trainer_executor.TRAIN_EXAMPLES: 32000,
      compute_cost.COMPUTE_SECONDS_PROPERTY: TRAINER_SECONDS,
      compute_cost.COMPUTE_CORES_PROPERTY: CORES})
  evaluation = _artifact(standard_artifacts.ModelEvaluation,
                         f'{root}/Evaluator/evaluation/10')
  _metrics(evaluation.uri, {
      ('', ''): {'sparse_categorical_accuracy': 0.984848,
                 'example_count': 66.0},
      ('island', 'Dream'): {'sparse_categorical_accuracy': 0.96,
                            'example_count': 25.0,
                            # TFMA's value of a metric undefined on a slice.
                            'auc': float('nan')}})
  blessing = _artifact(standard_artifacts.ModelBlessing,
                       f'{root}/Evaluator/blessing/10', blessed=1,
                       relative_gate=json.dumps({'baselines': BASELINES,
                                                 'gate': GATE}))
  infra = _artifact(standard_artifacts.InfraBlessing,
                    f'{root}/InfraValidator/blessing/11', blessed=1,
                    has_model=1,
                    **{f'infra_{k}': v for k, v in INFRA.items()})
  destination = str(tmp_path / 'serving' / 'penguins' / str(VERSION))
  pushed = _artifact(standard_artifacts.PushedModel,
                     f'{root}/Pusher/pushed_model/12', pushed=1,
                     pushed_version=str(VERSION),
                     pushed_destination=destination)
  optimized = _artifact(standard_artifacts.Model,
                        f'{root}/ModelOptimizer/optimized_model/13', **{
                            compute_cost.COMPUTE_SECONDS_PROPERTY:
                                OPTIMIZER_SECONDS,
                            compute_cost.COMPUTE_CORES_PROPERTY: CORES})
  optimization = _artifact(optimize_spec.OptimizationReport,
                           f'{root}/ModelOptimizer/report/13')
  os.makedirs(optimization.uri)
  variant = {'name': 'baseline/int8', 'size_bytes': 20560,
             'gzipped_bytes': 9000, 'latency_p50_ms': 0.024,
             'latency_p99_ms': 0.231, 'num_threads': 1}
  onnx = dict(variant, name='baseline/onnx_float32', size_bytes=41000)
  with open(os.path.join(optimization.uri, 'variants.json'), 'w') as f:
    json.dump({
        'selected': 'baseline/int8', 'pushed_to': str(tmp_path / 'tflite'),
        'runtime_picks': {'onnx': {'selected': 'baseline/onnx_float32',
                                   'pushed_to': str(tmp_path / 'onnx')}},
        'decisions': [{'variant': variant, 'blessed': True},
                      {'variant': onnx, 'blessed': True}],
        'held_out': {'baseline/int8': {'num_examples': 33,
                                       'accuracy': 0.9697},
                     'baseline/onnx_float32': {'num_examples': 33,
                                               'accuracy': 1.0}},
        'infra_validation': {
            'tflite': {'passed': True, 'reason': '', 'figures': SERVED},
            'onnx': {'passed': True, 'reason': 'not served before the push',
                     'figures': {}}}}, f)
  run.add('StatisticsGen', {'statistics': statistics})
  run.add('ValidationGate', {'report': report})
  run.add('Trainer', {'model': model})
  run.add('Evaluator', {'evaluation': evaluation, 'blessing': blessing})
  run.add('InfraValidator', {'blessing': infra})
  run.add('Pusher', {'pushed_model': pushed})
  run.add('ModelOptimizer', {'optimized_model': optimized,
                             'report': optimization})
  inputs = {
      spec.STATISTICS_KEY: [run.read(statistics)],
      spec.VALIDATION_REPORT_KEY: [run.read(report)],
      spec.MODEL_KEY: [run.read(model)],
      spec.EVALUATION_KEY: [run.read(evaluation)],
      spec.MODEL_BLESSING_KEY: [run.read(blessing)],
      spec.INFRA_BLESSING_KEY: [run.read(infra)],
      spec.PUSHED_MODEL_KEY: [run.read(pushed)],
      spec.OPTIMIZED_MODEL_KEY: [run.read(optimized)],
      spec.OPTIMIZATION_REPORT_KEY: [run.read(optimization)],
  }
  return tmp_path, inputs


def _generate(tmp_path, inputs, target_qps=None, price=None):
  output = _artifact(spec.ModelCard, str(tmp_path / 'card_artifact'))
  properties = {
      spec.MODEL_NAME_KEY: 'penguins',
      spec.CARD_BASE_KEY: str(tmp_path / 'model_cards'),
      spec.DATASET_KEY: json.dumps({
          'name': 'penguins', 'label': 'species', 'task': 'classification',
          'classes': ['Adelie', 'Chinstrap', 'Gentoo'], 'model_kind': 'mlp'}),
      spec.CARD_CONFIG_KEY: json.dumps({'target_qps': target_qps,
                                        'core_hour_price': price}),
      spec.SLICING_KEY: json.dumps(['Overall', 'island']),
  }
  executor_lib.Executor().Do(inputs, {spec.MODEL_CARD_KEY: [output]},
                             properties)
  directory = tmp_path / 'model_cards' / 'penguins' / str(VERSION)
  with open(directory / spec.JSON_FILE, encoding='utf-8') as f:
    return directory, json.load(f), output


def test_the_card_s_figures_are_the_run_record_s(run):
  tmp_path, inputs = run
  directory, card, output = _generate(tmp_path, inputs, target_qps=1000,
                                      price=0.05)
  summary = run_summary.summarize(str(tmp_path / 'metadata.sqlite'),
                                  PIPELINE)
  figure = lambda subject, kind: card_lib.figure(card, subject, kind)
  # The Evaluator's: what the run record reads, and the configured slice.
  assert figure('Overall', 'sparse_categorical_accuracy') == summary.accuracy
  assert summary.accuracy == pytest.approx(0.984848)
  assert figure('Overall', 'example_count') == summary.example_count == 66
  assert figure('island:Dream', 'sparse_categorical_accuracy') == 0.96
  # JSON has no NaN: the undefined figure is left out of it.
  assert figure('island:Dream', 'auc') is None
  # The baselines the Evaluator blessed against: what the record holds.
  assert summary.baselines == BASELINES and summary.gate == GATE
  for name, entry in BASELINES['baselines'].items():
    assert figure(card_lib.baseline_subject(name), 'accuracy') == entry[
        'value'], name
  # The InfraValidator's, every one the record holds.
  for name, value in INFRA.items():
    assert figure(card_lib.INFRA_SUBJECT, name) == summary.infra[name], name
  # The data: each split's rows from StatisticsGen.
  assert figure(card_lib.data_subject('train'), 'rows') == 278
  assert figure(card_lib.data_subject('eval'), 'rows') == 66
  # Training: the Trainer's steps; core-hours = (90 s + 180 s) x 2 cores.
  assert figure(card_lib.TRAINING_SUBJECT, 'train_steps') == 1000
  core_hours = (TRAINER_SECONDS + OPTIMIZER_SECONDS) * CORES / 3600
  assert figure(card_lib.TRAINING_SUBJECT, 'core_hours') == pytest.approx(
      core_hours)
  assert figure(card_lib.TRAINING_SUBJECT, 'cost') == pytest.approx(
      core_hours * 0.05)
  # Each runtime's pick: size, latency and report-split accuracy.
  tflite = card_lib.pick_subject('tflite')
  assert figure(tflite, 'size_bytes') == 20560
  assert figure(tflite, 'latency_p99_ms') == 0.231
  assert figure(tflite, 'accuracy') == 0.9697
  assert figure(card_lib.pick_subject('onnx'), 'size_bytes') == 41000
  # 1000 predictions/s at 1250/s on 2 cores (625 per core): 2 cores;
  # 0.05 x 2 / (1000 x 3600) x 1e6 = 0.02777... per million.
  assert figure(tflite, 'cores_needed') == 2
  assert figure(tflite, 'cost_per_million_predictions') == pytest.approx(
      0.05 * 2 / (1000 * 3600) * 1e6)
  # The SavedModel: 400/s on 2 cores is 200 per core: 5 cores.
  assert figure(card_lib.INFRA_SUBJECT, 'cores_needed') == 5
  # The ONNX pick was not served: no served figures, no cores, and the
  # limitations say so.
  assert figure(card_lib.pick_subject('onnx'), 'cores_needed') is None
  limitations = [d['description']
                 for d in card['considerations']['limitations']]
  assert any('onnx pick' in d and 'not served' in d for d in limitations)
  assert any('fairness' in d for d in limitations)
  assert card['model_details']['version']['name'] == str(VERSION)
  # The three files, valid against the schema, and a copy in the artifact.
  card_lib.validate(card)
  markdown = (directory / spec.MARKDOWN_FILE).read_text()
  page = (directory / spec.HTML_FILE).read_text()
  assert '| island:Dream |' in markdown and '<td>island:Dream</td>' in page
  assert 'ENUM_TYPE_UNEXPECTED_STRING_VALUES' in markdown
  assert ('The Evaluator blessed against: >= 0.6126, beats the majority; '
          '>= 0.9597, at most 0.01 below.') in markdown
  assert sorted(os.listdir(output.uri)) == sorted(spec.CARD_FILES)
  assert output.get_string_custom_property(
      spec.CARD_PATH_PROPERTY) == str(directory)


def test_without_a_target_load_the_card_says_so(run):
  tmp_path, inputs = run
  _, card, _ = _generate(tmp_path, inputs)
  assert card_lib.figure(card, card_lib.pick_subject('tflite'),
                         'cores_needed') is None
  assert card_lib.figure(card, card_lib.TRAINING_SUBJECT, 'cost') is None
  [tradeoff] = card['considerations']['tradeoffs']
  assert tradeoff['description'].startswith('No --target-qps was given')


def test_a_model_not_pushed_gets_no_card(run):
  tmp_path, inputs = run
  not_pushed = _artifact(standard_artifacts.PushedModel, '/x', pushed=0)
  inputs[spec.PUSHED_MODEL_KEY] = [not_pushed]
  output = _artifact(spec.ModelCard, str(tmp_path / 'card_artifact'))
  executor_lib.Executor().Do(inputs, {spec.MODEL_CARD_KEY: [output]}, {
      spec.MODEL_NAME_KEY: 'penguins',
      spec.CARD_BASE_KEY: str(tmp_path / 'model_cards'),
      spec.DATASET_KEY: '{}', spec.CARD_CONFIG_KEY: '{}'})
  assert not (tmp_path / 'model_cards').exists()
  assert output.get_string_custom_property(spec.CARD_PATH_PROPERTY) == ''


def test_the_schema_refuses_a_card_that_strays_from_it(run):
  """model_card.schema.json holds every card field to its shape."""
  tmp_path, inputs = run
  _, card, _ = _generate(tmp_path, inputs)
  card_lib.validate(card)
  strays = [
      dict(card, cost={'per_million': 1.0}),  # A field of no section.
      {k: v for k, v in card.items() if k != 'considerations'},
      dict(card, quantitative_analysis={'performance_metrics': [
          {'type': 'accuracy', 'value': '0.9', 'slice': 'Overall'}]}),
      dict(card, quantitative_analysis={'performance_metrics': [
          {'type': 'accuracy', 'value': 0.9}]}),  # No slice.
      dict(card, considerations=dict(card['considerations'],
                                     limitations=[])),
  ]
  for stray in strays:
    with pytest.raises(jsonschema.ValidationError):
      card_lib.validate(stray)


def test_serving_cost_arithmetic():
  # 625 predictions/s per core: 1250 needs exactly 2, 1251 needs 3.
  assert compute_cost.serving_cost(1250.0, 2, 1250.0).cores_needed == 2
  assert compute_cost.serving_cost(1250.0, 2, 1251.0).cores_needed == 3
  cost = compute_cost.serving_cost(1250.0, 2, 100.0, core_hour_price=0.1)
  assert cost.cores_needed == 1
  assert cost.cost_per_million == pytest.approx(0.1 / (100 * 3600) * 1e6)
  with pytest.raises(ValueError):
    compute_cost.serving_cost(0.0, 2, 10.0)


@pytest.mark.parametrize('values,fragment', [
    ({'target_qps': -5.0}, '--target-qps'),
    ({'target_qps': 0.0}, '--target-qps'),
    ({'core_hour_price': 0.05}, 'pass --target-qps'),
    ({'target_qps': 10.0, 'core_hour_price': -1.0}, '--core-hour-price'),
])
def test_bad_card_config(values, fragment):
  with pytest.raises(ConfigError, match=fragment):
    config_lib.ModelCardConfig(**values)
