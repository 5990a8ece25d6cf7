"""`leantfx compile --target kubeflow`: the real KubeflowV2DagRunner compile.

The compiled files are parsed with kfp's own protos (kfp-pipeline-spec
0.2.2, `pipeline_spec_pb2`), the way kfp.Client reads a package.
"""
import json
import os
import re

import pytest
import yaml

from leantfx import sizing
from leantfx.kubeflow import compiler
from tests.helpers import run_cli
from tests.orchestration.conftest import COMPILE_ARGS, IMAGE

pytestmark = pytest.mark.unit

# create_pipeline's components for a bundled dataset with a curated schema.
COMPONENTS = {'CsvExampleGen', 'StatisticsGen', 'ImportSchemaGen',
              'ExampleValidator', 'Transform', 'Trainer', 'Baselines',
              'Evaluator', 'InfraValidator', 'Pusher', 'ModelCardGenerator'}
# The open-source backend's (the default): one task reads the Pusher's
# records for the Evaluator's baseline and the warm start.
LAST_BLESSED = 'LastBlessedModel'
# --kfp-backend vertex: the LatestBlessedModel resolvers compile into two
# tasks each.
RESOLVER_TASKS = {
    f'{r}-{part}' for r in ('latest_blessed_model_resolver',
                            'warm_start_model_resolver')
    for part in ('model-blessing-resolver', 'model-resolver')}


def _spec(path):
  return compiler.load_spec(path)


def test_compiled_yaml_parses_with_kfp_protos_and_has_every_component(
    compiled):
  spec = _spec(compiled['yaml'])
  tasks = set(spec.root.dag.tasks)
  assert COMPONENTS <= tasks
  assert LAST_BLESSED in tasks
  assert not any('resolver' in t for t in tasks), tasks
  assert spec.pipeline_info.name == 'leantfx-penguins'
  assert spec.schema_version == '2.1.0'
  for name, task in spec.root.dag.tasks.items():
    label = spec.components[task.component_ref.name].executor_label
    executor = spec.deployment_spec['executors'][label]
    # The open-source backend runs containers and importers, no resolver.
    assert set(executor) == {'container'}, name
    container = executor['container']
    assert container['image'] == IMAGE, name
    module = {
        'ResolveSpan': 'leantfx.kubeflow.resolve_span',
        'BulkScore': 'leantfx.kubeflow.bulk_score_task',
    }.get(name,
          'tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor')
    assert list(container['command'])[:3] == ['python', '-m', module], name
  assert f'{len(tasks)} tasks, image {IMAGE}' in compiled['stdout']
  # Without --span-rows the command says the tasks keep fixed sizes.
  assert 'pass --span-rows N' in compiled['stdout']
  # The artifacts' estimate of the sample data (the bundled penguins, 13.5 kB
  # of CSV); the cluster's storage is not visible from here.
  assert re.search(r'^disk: about \S+ MB of artifacts for 13\.5 kB of input '
                   r'\(the sample data; .*\); the cluster\'s storage is not '
                   r'checked: compile cannot see it$', compiled['stdout'],
                   re.M), compiled['stdout']
  # Every component of the local run is compiled: the ValidationGate with
  # its drift check, and the ModelOptimizer (under the blessing condition).
  assert {'ValidationGate', 'Augment', 'ModelOptimizer'} <= tasks
  # --bulk-score: the BulkScore task after the Pusher reads ExampleGen's
  # examples (their span) and the data root ExampleGen reads, a pipeline
  # parameter a run may set.
  bulk = spec.root.dag.tasks['BulkScore']
  assert set(bulk.dependent_tasks) == {'Pusher', 'CsvExampleGen'}
  assert bulk.inputs.artifacts['pushed_model'].task_output_artifact.producer_task == 'Pusher'
  assert (bulk.inputs.parameters['data_root'] ==
          spec.root.dag.tasks['CsvExampleGen'].inputs.parameters['input_base'])
  assert bulk.inputs.parameters['data_root'].component_input_parameter
  assert bulk.inputs.parameters[
      'model_base_path'].runtime_value.constant.string_value == (
          'gs://bucket/serving/penguins')


def test_runtime_parameters_are_declared_with_defaults_and_wired(compiled):
  spec = _spec(compiled['yaml'])
  assert compiler.parameters_of(spec) == {
      'data_root': 'gs://bucket/data',
      'range_config': '',  # The newest span unless a run pins one.
      'span_window': 1,  # --span-window's default: the newest span only.
      'train_args': '{"num_steps": 500}',  # --train-steps 500
  }
  tasks = spec.root.dag.tasks
  wiring = {
      ('CsvExampleGen', 'input_base'): 'data_root',
      ('CsvExampleGen', 'range_config'): 'range_config',
      ('CsvExampleGen', 'span_window'): 'span_window',
      ('Trainer', 'train_args'): 'train_args',
  }
  for (task, key), param in wiring.items():
    assert tasks[task].inputs.parameters[key].component_input_parameter == (
        param)
  # The curated schema is read inside the image (kubeflow/Dockerfile).
  schema = tasks['ImportSchemaGen'].inputs.parameters['schema_file']
  assert schema.runtime_value.constant.string_value == (
      '/opt/leantfx/schemas/penguins/schema.pbtxt')
  with open(compiled['yaml']) as f:
    text = f.read()
  assert os.path.dirname(os.path.dirname(compiler.__file__)) not in text
  # Warm start and the Evaluator's baseline: the one task that reads the
  # Pusher's records, kept below the pipeline root.
  for task, key in (('Trainer', 'base_model'), ('Evaluator', 'baseline_model')):
    source = tasks[task].inputs.artifacts[key].task_output_artifact
    assert (source.producer_task, source.output_artifact_key) == (
        LAST_BLESSED, 'model')
  records = 'gs://bucket/root/leantfx-penguins/Pusher/blessed_models'
  assert tasks[LAST_BLESSED].inputs.parameters[
      'records_dir'].runtime_value.constant.string_value == records
  pusher_config = json.loads(tasks['Pusher'].inputs.parameters[
      'custom_config'].runtime_value.constant.string_value)
  assert pusher_config == {'blessed_model_records': records}


def test_retries_resources_and_caching_are_applied(compiled):
  spec = _spec(compiled['yaml'])
  executors = spec.deployment_spec['executors']
  for name, task in spec.root.dag.tasks.items():
    if name == 'ValidationGate':
      # Its failure is a data-validation stop: a retry re-checks the span.
      assert not task.HasField('retry_policy'), name
    else:
      assert task.retry_policy.max_retry_count == 3, name  # --retries 3
      assert task.retry_policy.backoff_duration.seconds == 60
    # The records and the data root must be read anew each run;
    # --no-cache-component Pusher.
    cached = name not in (LAST_BLESSED, 'ResolveSpan', 'Pusher')
    assert task.caching_options.enable_cache == cached, name
  trainer = executors['Trainer_executor']['container']['resources']
  assert trainer['cpuRequest'] == 2.0 and trainer['memoryRequest'] == 4.0
  assert dict(trainer['accelerator']) == {'type': 'nvidia.com/gpu',
                                          'count': '1'}
  pusher = executors['Pusher_executor']['container']['resources']
  assert pusher['cpuLimit'] == 1.0 and pusher['memoryLimit'] == 2.0
  assert 'accelerator' not in pusher
  # The DirectRunner uses the task's cores: Transform's 2 (--trainer-cpu's
  # default), StatisticsGen's 1 (--cpu's default).
  transform = list(executors['Transform_executor']['container']['args'])
  assert '--direct_running_mode=multi_processing' in transform
  assert '--direct_num_workers=2' in transform
  statistics = list(executors['StatisticsGen_executor']['container']['args'])
  assert '--direct_running_mode=in_memory' in statistics
  assert '--direct_num_workers=1' in statistics


def test_task_resources_override_a_component_and_size_its_beam(tmp_path):
  out = str(tmp_path / 'p.yaml')
  result = run_cli(COMPILE_ARGS + [
      '--out', out, '--task-resources', 'StatisticsGen=3,6G',
      '--task-resources', 'Trainer=4,16Gi'])
  assert result.returncode == 0, result.stdout + result.stderr
  executors = _spec(out).deployment_spec['executors']
  statistics = executors['StatisticsGen_executor']['container']
  assert statistics['resources']['cpuLimit'] == 3.0
  assert statistics['resources']['memoryLimit'] == 6.0
  assert '--direct_num_workers=3' in list(statistics['args'])
  trainer = executors['Trainer_executor']['container']['resources']
  assert trainer['cpuLimit'] == 4.0
  assert trainer['memoryLimit'] == pytest.approx(16 * 1.073741824)
  # --trainer-gpu (COMPILE_ARGS) still holds.
  assert dict(trainer['accelerator']) == {'type': 'nvidia.com/gpu',
                                          'count': '1'}


def test_span_rows_size_every_data_task_and_its_beam_workers(tmp_path):
  out = str(tmp_path / 'p.yaml')
  result = run_cli(COMPILE_ARGS + [
      '--out', out, '--span-rows', '1000000',
      '--task-resources', 'Evaluator=3,5G'])
  assert result.returncode == 0, result.stdout + result.stderr
  assert 'tasks sized for spans of 1,000,000 rows' in result.stdout
  executors = _spec(out).deployment_spec['executors']
  cores, memory = sizing.task_resources(1_000_000)['StatisticsGen']
  assert cores >= 2
  for name in ('CsvExampleGen', 'StatisticsGen', 'Transform', 'Augment',
               'ValidationGate'):
    container = executors[f'{name}_executor']['container']
    assert container['resources']['cpuLimit'] == cores, name
    assert container['resources']['memoryLimit'] == memory, name
    assert '--direct_running_mode=multi_processing' in list(
        container['args']), name
    assert f'--direct_num_workers={int(cores)}' in list(
        container['args']), name
  trainer = executors['Trainer_executor']['container']['resources']
  assert trainer['cpuLimit'] == sizing.task_resources(1_000_000)['Trainer'][0]
  assert dict(trainer['accelerator'])['type'] == 'nvidia.com/gpu'
  # --task-resources still overrides one task.
  evaluator = executors['Evaluator_executor']['container']
  assert evaluator['resources']['cpuLimit'] == 3.0
  assert '--direct_num_workers=3' in list(evaluator['args'])
  # A small span keeps every data task on one core, in_memory.
  small = str(tmp_path / 'small.yaml')
  result = run_cli(COMPILE_ARGS + ['--out', small, '--span-rows', '2000'])
  assert result.returncode == 0, result.stdout + result.stderr
  statistics = _spec(small).deployment_spec['executors'][
      'StatisticsGen_executor']['container']
  assert statistics['resources']['cpuLimit'] == 1.0
  assert '--direct_running_mode=in_memory' in list(statistics['args'])


def _strings(value):
  """Every string in a JSON value, and in JSON-encoded strings inside it."""
  if isinstance(value, dict):
    for item in value.values():
      yield from _strings(item)
  elif isinstance(value, list):
    for item in value:
      yield from _strings(item)
  elif isinstance(value, str):
    yield value
    if value.startswith(('{', '[')):
      try:
        decoded = json.loads(value)
      except ValueError:
        return
      yield from _strings(decoded)


def test_pipeline_root_is_in_the_spec_and_every_root_path_derives_from_it(
    compiled):
  spec = _spec(compiled['yaml'])
  # --pipeline-root gs://bucket/root (COMPILE_ARGS).
  assert spec.default_pipeline_root == 'gs://bucket/root'
  with open(compiled['yaml']) as f:
    raw = yaml.safe_load(f)
  # Paths compiled from the root: the drift baselines (and whatever else a
  # component keeps across runs) are below it, never beside it. The model
  # cards go beside the --serving-dir, as OUTPUT/model_cards beside
  # OUTPUT/serving in a local run.
  assert any(s == 'gs://bucket/model_cards' for s in _strings(raw))
  kept = [s for s in _strings(raw) if s.startswith('gs://bucket/')
          and not s.startswith(('gs://bucket/data', 'gs://bucket/serving',
                                'gs://bucket/tflite',
                                'gs://bucket/model_cards'))]
  assert any(s.endswith('/ValidationGate/drift_baselines') for s in kept)
  root = spec.default_pipeline_root
  for path in kept:
    assert path == root or path.startswith(root + '/'), path


def test_compile_is_deterministic_and_json_job_matches(compiled):
  with open(compiled['yaml'], 'rb') as a, open(compiled['yaml_again'],
                                               'rb') as b:
    assert a.read() == b.read()
  assert _spec(compiled['json']) == _spec(compiled['yaml'])
  with open(compiled['json']) as f:
    job = json.load(f)
  assert job['runtimeConfig']['gcsOutputDirectory'] == 'gs://bucket/root'
  assert set(job['runtimeConfig']['parameterValues']) == {
      'data_root', 'range_config', 'span_window', 'train_args'}
  # The stamped fields named in kubeflow/compiler.py.
  with open(compiled['yaml']) as f:
    raw = yaml.safe_load(f)
  assert raw['sdkVersion'].startswith('tfx-')
  assert set(job['labels']) == {'tfx_py_version', 'tfx_runner',
                                'tfx_version'}


def test_span_window_compiles_into_example_gen_without_a_resolver(tmp_path):
  """--span-window K: ExampleGen reads the K spans (no SpanRangeStrategy)."""
  out = str(tmp_path / 'p.yaml')
  result = run_cli(COMPILE_ARGS + ['--out', out, '--span-window', '3'])
  assert result.returncode == 0, result.stdout + result.stderr
  spec = _spec(out)
  assert compiler.parameters_of(spec)['span_window'] == 3
  tasks = set(spec.root.dag.tasks)
  assert COMPONENTS <= tasks and LAST_BLESSED in tasks
  assert not any('span_window' in t for t in tasks), tasks


def test_vertex_backend_keeps_tfx_resolvers(tmp_path):
  """--kfp-backend vertex: the spec TFX's runner writes, resolvers and all."""
  out = str(tmp_path / 'p.yaml')
  result = run_cli(COMPILE_ARGS + ['--out', out, '--kfp-backend', 'vertex'])
  assert result.returncode == 0, result.stdout + result.stderr
  spec = _spec(out)
  tasks = spec.root.dag.tasks
  assert COMPONENTS | RESOLVER_TASKS <= set(tasks)
  assert LAST_BLESSED not in tasks
  for name in RESOLVER_TASKS:
    label = spec.components[tasks[name].component_ref.name].executor_label
    assert 'resolver' in spec.deployment_spec['executors'][label], name
    assert not tasks[name].caching_options.enable_cache, name
    assert not tasks[name].HasField('retry_policy'), name  # No pod to retry.
  base = tasks['Trainer'].inputs.artifacts['base_model']
  assert base.task_output_artifact.producer_task == (
      'warm_start_model_resolver-model-resolver')
  pusher_config = tasks['Pusher'].inputs.parameters['custom_config']
  assert pusher_config.runtime_value.constant.string_value == 'null'
  assert spec.default_pipeline_root == 'gs://bucket/root'


@pytest.mark.parametrize('args, message', [
    (['--image', 'Bad Image'], 'is not a container image reference'),
    (['--out', 'pipeline.txt'], 'must end in .yaml'),
    (['--memory', 'lots'], 'is not a quantity'),
    (['--trainer-gpu', 'nvidia.com/gpu:0'], 'is not TYPE or TYPE:COUNT'),
    (['--no-cache-component', 'Trainr'], "No component named ['Trainr']"),
    (['--task-resources', 'Transform=lots'], 'is not NAME=CPU,MEM'),
    (['--task-resources', 'Trainr=2,4G'], "No component named ['Trainr']"),
])
def test_bad_compile_options(tmp_path, args, message, cli):
  out = str(tmp_path / 'p.yaml')
  base = COMPILE_ARGS + ['--out', out]
  for i in range(0, len(args), 2):
    flag = args[i]
    if flag in base:
      base[base.index(flag) + 1] = args[i + 1]
    else:
      base += args[i:i + 2]
  result = cli(base)
  assert result.returncode == 2, result.stdout + result.stderr
  assert message in result.stderr, result.stderr
  assert 'Traceback' not in result.stderr
