"""The ModelOptimizer on Kubeflow: compiled under the blessing, really run.

The pipeline with ``config.optimization`` is compiled with
``compiler.compile_pipeline``: the ``tfx.dsl.Cond`` on the Evaluator's
blessing becomes the ModelOptimizer task's ``triggerPolicy.condition`` (a CEL
expression on the blessing artifact's metadata, which KFP evaluates before
starting the task). No KFP cluster exists here, so the test then does what
its launcher does for that task (as test_kfp_span_window does for
ExampleGen): it builds the ExecutorInput from the compiled task (constant
parameters, input artifacts as the upstream tasks' executors reported them,
fresh output URIs), substitutes it for ``{{$}}`` in the task's own command
line, and runs it with this Python in place of the image's. The input
artifacts are real: the trained model, transform graph and transformed
examples of one local LocalDagRunner run on penguins (few train steps). The
TFLite push must land in ``<tflite_push_base>/<model>/<version>/``, the
folder standing for the cluster's --tflite-dir.
"""
import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from leantfx import config as config_lib
from leantfx import datasets
from leantfx.kubeflow import compiler
from tests.orchestration import kfp_launcher
from tests.orchestration.conftest import IMAGE

MODEL_NAME = 'penguins'
PIPELINE_NAME = 'leantfx-penguins'
# Enough for a usable penguins model; the gate below is set low so the
# Evaluator blesses it whatever the exact accuracy (the optimizer's own
# budget is relative to this model, so its quality does not matter here).
TRAIN_STEPS = 100
MIN_ACCURACY = 0.5
# The input artifacts the compiled ModelOptimizer task takes, by input key:
# (producer node in the local run, its output key).
LOCAL_INPUTS = {
    'model': ('Trainer', 'model'),
    'transformed_examples': ('Transform', 'transformed_examples'),
    'transform_graph': ('Transform', 'transform_graph'),
    # The raw examples the Transform read: the pushed model takes raw
    # features.
    'examples': ('Augment', 'augmented_examples'),
    # The rows as they arrived: the raw int8 exports calibrate on them.
    'calibration_examples': ('CsvExampleGen', 'examples'),
    '_Evaluator.blessing': ('Evaluator', 'blessing'),
}
_CONDITION_RE = re.compile(
    r"^\(inputs\.artifacts\['(?P<key>[^']+)'\]\.artifacts\[0\]"
    r"\.metadata\['(?P<property>[^']+)'\] == (?P<value>[0-9.]+)\)$")


def _optimization_config():
  """One cheap candidate: the trained model itself, in two TFLite modes."""
  # pylint: disable=g-import-not-at-top
  from leantfx.components.optimize import config as optimize_config
  from leantfx.components.optimize.export import tflite as tflite_export
  # pylint: enable=g-import-not-at-top
  return optimize_config.OptimizationConfig(
      candidates=(optimize_config.Candidate(
          (), (tflite_export.FLOAT32, tflite_export.DYNAMIC_RANGE)),),
      latency_runs=5, warmup_runs=1)


def pipeline_config(root: str, **changes) -> config_lib.PipelineConfig:
  """The local penguins config below root (curated schema, few steps)."""
  import leantfx.schemas  # pylint: disable=g-import-not-at-top
  schema = os.path.join(os.path.dirname(leantfx.schemas.__file__), MODEL_NAME,
                        'schema.pbtxt')
  spec = dataclasses.replace(datasets.BUNDLED[MODEL_NAME], schema_file=schema)
  config = config_lib.PipelineConfig(
      pipeline_name=PIPELINE_NAME,
      pipeline_root=os.path.join(root, 'tfx'),
      data_root=os.path.join(root, 'data'),
      serving_model_dir=os.path.join(root, 'serving', MODEL_NAME),
      dataset=spec,
      training=config_lib.TrainingConfig(train_steps=TRAIN_STEPS, epochs=2),
      # This test's gate is its absolute bound (the optimizer is what it
      # tests); the relative gate is off.
      evaluation=config_lib.EvaluationConfig(min_accuracy=MIN_ACCURACY,
                                             baseline_margin=None),
      metadata_path=os.path.join(root, 'metadata.sqlite'))
  return dataclasses.replace(config, **changes)


def run_local_pipeline(root: str) -> None:
  """Runs the pipeline (no optimizer) once; writes the inputs' artifacts.

  Run in a child process (see local_inputs). Writes ``<root>/inputs.json``:
  input key -> the RuntimeArtifact JSON the producing task's executor
  reports to KFP (uri and metadata: properties and custom properties).
  """
  # pylint: disable=g-import-not-at-top
  from google.protobuf import json_format
  from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils
  from tfx.types import artifact_utils
  from leantfx.pipeline import local_runner
  from leantfx.pipeline import run_summary
  # pylint: enable=g-import-not-at-top
  config = pipeline_config(root)
  datasets.prepare(MODEL_NAME, config.data_root)
  local_runner.run_pipeline(config, 'local', os.path.join(root, 'run.log'))
  store = run_summary.open_store(config.metadata_path)
  executions = run_summary.node_executions(store, PIPELINE_NAME)
  found = {}
  for key, (node, output) in LOCAL_INPUTS.items():
    (mlmd_artifact,) = executions[node].outputs[output]
    (artifact_type,) = store.get_artifact_types_by_id([mlmd_artifact.type_id])
    artifact = artifact_utils.deserialize_artifact(artifact_type,
                                                   mlmd_artifact)
    runtime = kubeflow_v2_entrypoint_utils.to_runtime_artifact(artifact, {})
    found[key] = json_format.MessageToDict(runtime)
    found[key]['name'] = f'artifacts/{mlmd_artifact.id}'
  with open(os.path.join(root, 'inputs.json'), 'w', encoding='utf-8') as f:
    json.dump(found, f, indent=2, sort_keys=True)


@pytest.fixture(scope='module')
def local_inputs(tmp_path_factory):
  """The real upstream artifacts: one local run, in a child process."""
  root = str(tmp_path_factory.mktemp('kfp_optimizer_local'))
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  result = subprocess.run(
      [sys.executable, '-c',
       'import sys; from tests.orchestration import test_kfp_optimizer as t; '
       't.run_local_pipeline(sys.argv[1])', root],
      capture_output=True, text=True, env=env, timeout=1800, check=False,
      cwd=os.path.dirname(os.path.dirname(os.path.dirname(
          os.path.abspath(__file__)))))
  log = os.path.join(root, 'run.log')
  tail = open(log, encoding='utf-8').read()[-4000:] if os.path.exists(
      log) else ''
  assert result.returncode == 0, result.stderr[-4000:] + tail
  with open(os.path.join(root, 'inputs.json'), encoding='utf-8') as f:
    return json.load(f)


@pytest.fixture(scope='module')
def compiled(tmp_path_factory):
  """The Kubeflow compile of the pipeline with optimization on."""
  root = tmp_path_factory.mktemp('kfp_optimizer_compile')
  tflite_dir = str(root / 'tflite')  # Stands for the cluster's --tflite-dir.
  config = pipeline_config(str(root), optimization=_optimization_config(),
                           tflite_push_base=tflite_dir)
  config = compiler.kubeflow_pipeline_config(config,
                                             str(root / 'pipeline_root'))
  out = str(root / 'pipeline.yaml')
  compiler.compile_pipeline(config, IMAGE, out)
  return compiler.load_spec(out), tflite_dir


def _instance_title(artifact_type):
  return yaml.safe_load(artifact_type['instanceSchema'])['title']


def _evaluate_condition(condition, input_artifacts):
  """KFP's check of the compiled trigger condition (the one form it takes)."""
  match = _CONDITION_RE.match(condition)
  assert match, condition
  artifact = input_artifacts[match.group('key')]['artifacts'][0]
  return artifact['metadata'].get(match.group('property')) == float(
      match.group('value'))


@pytest.mark.e2e
def test_compiled_optimizer_runs_only_on_the_evaluator_blessing(compiled):
  spec, tflite_dir = compiled
  assert 'ModelOptimizer' in compiler.task_names(spec)
  task = spec.root.dag.tasks['ModelOptimizer']
  condition = task.trigger_policy.condition
  match = _CONDITION_RE.match(condition)
  assert match, condition
  assert (match.group('property'), float(match.group('value'))) == (
      'blessed', 1.0)
  # The condition's artifact is the Evaluator's blessing, an input of the task
  # (so KFP waits for the Evaluator and has the blessing to evaluate).
  blessing = task.inputs.artifacts[match.group('key')].task_output_artifact
  assert (blessing.producer_task, blessing.output_artifact_key) == (
      'Evaluator', 'blessing')
  assert 'Evaluator' in task.dependent_tasks
  constant = task.inputs.parameters['tflite_push_base'].runtime_value.constant
  assert constant.string_value == tflite_dir
  # The InfraValidator and the Pusher run on every run, as TFX's do (each
  # reads the blessing itself), so the Pusher's inputs always resolve.
  for name in ('InfraValidator', 'Pusher'):
    assert not spec.root.dag.tasks[name].trigger_policy.condition, name
    assert 'Evaluator' in spec.root.dag.tasks[name].dependent_tasks, name
  # TFX's container entry point imports each artifact's class from its
  # schema title: the report's custom type must import to its class.
  # pylint: disable=g-import-not-at-top
  from tfx.utils import import_utils
  from leantfx.components.optimize import spec as optimize_spec
  # pylint: enable=g-import-not-at-top
  outputs = spec.components[task.component_ref.name].output_definitions
  title = yaml.safe_load(
      outputs.artifacts['report'].artifact_type.instance_schema)['title']
  assert import_utils.import_class_by_path(title) is (
      optimize_spec.OptimizationReport)


@pytest.mark.e2e
def test_compiled_optimizer_task_pushes_tflite(compiled, local_inputs,
                                               tmp_path):
  from google.protobuf import json_format  # pylint: disable=g-import-not-at-top
  spec, tflite_dir = compiled
  task = spec.root.dag.tasks['ModelOptimizer']
  component = json_format.MessageToDict(
      spec.components[task.component_ref.name])
  container = kfp_launcher.container_of(spec, 'ModelOptimizer')
  definitions = component['inputDefinitions']['artifacts']
  assert set(definitions) == set(task.inputs.artifacts) == set(LOCAL_INPUTS)
  input_artifacts = {}
  for key, definition in definitions.items():
    artifact = dict(local_inputs[key], type=definition['artifactType'])
    assert _instance_title(artifact['type']) == _instance_title(
        definition['artifactType'])
    input_artifacts[key] = {'artifacts': [artifact]}
  # KFP starts the task only when its trigger condition holds.
  assert _evaluate_condition(task.trigger_policy.condition, input_artifacts)

  outputs = {}
  for key, definition in component['outputDefinitions']['artifacts'].items():
    outputs[key] = {'artifacts': [{
        'name': f'{key}-1',
        'type': definition['artifactType'],
        'uri': str(tmp_path / 'outputs' / key),
        'metadata': {},
    }]}
  output_file = str(tmp_path / 'task' / 'executor_output.json')
  parameters = kfp_launcher.task_parameters(spec, 'ModelOptimizer')
  assert all(
      p.HasField('runtime_value') for p in
      spec.root.dag.tasks['ModelOptimizer'].inputs.parameters.values())
  executor_input = {
      'inputs': {'artifacts': input_artifacts, 'parameterValues': parameters},
      'outputs': {'artifacts': outputs, 'outputFile': output_file},
  }
  args = list(container['args'])
  assert args[args.index('--executor_class_path') + 1] == (
      'leantfx.components.optimize.executor.Executor')
  result = kfp_launcher.run(
      kfp_launcher.command_lines(container, executor_input), timeout=1200)
  assert result.returncode == 0, result.stderr[-6000:]

  # The push: <tflite_push_base>/<model>/<version>/{model.tflite,manifest.json}.
  model_dir = os.path.join(tflite_dir, MODEL_NAME)
  versions = [n for n in os.listdir(model_dir) if n.isdigit()]
  assert len(versions) == 1, os.listdir(model_dir)
  version_dir = os.path.join(model_dir, versions[0])
  # The model takes the raw columns, so their names as written come along.
  assert sorted(os.listdir(version_dir)) == [
      'feature_names.json', 'manifest.json', 'model.tflite']
  with open(os.path.join(version_dir, 'manifest.json'), encoding='utf-8') as f:
    manifest = json.load(f)
  with open(os.path.join(version_dir, 'model.tflite'), 'rb') as f:
    tflite = f.read()
  assert tflite[4:8] == b'TFL3'
  assert manifest['sha256'] == hashlib.sha256(tflite).hexdigest()
  assert manifest['size_bytes'] == len(tflite)
  assert manifest['version'] == int(versions[0])
  assert manifest['model_name'] == MODEL_NAME
  assert manifest['source_model_uri'] == local_inputs['model']['uri']
  assert manifest['technique_chain'] == []
  assert manifest['metrics']['serving_inputs']['inputs'] == 'raw', manifest

  # What the task reports to KFP: the blessing, the push, the report.
  with open(output_file, encoding='utf-8') as f:
    reported = json.load(f)['artifacts']
  (blessing,) = reported['blessing']['artifacts']
  assert blessing['metadata']['blessed'] == 1.0
  (optimized,) = reported['optimized_model']['artifacts']
  assert optimized['metadata']['pushed_version'] == float(versions[0])
  assert optimized['metadata']['pushed_destination'] == version_dir
  optimized_dir = outputs['optimized_model']['artifacts'][0]['uri']
  with open(os.path.join(optimized_dir, 'Format-TFLite', 'model.tflite'),
            'rb') as f:
    assert f.read() == tflite
  report_dir = outputs['report']['artifacts'][0]['uri']
  assert os.path.isfile(os.path.join(report_dir, 'report.html'))
  with open(os.path.join(report_dir, 'variants.json'), encoding='utf-8') as f:
    record = json.load(f)
  assert record['pushed_to'] == version_dir
  assert record['selected'] == optimized['metadata']['selected_variant']
  assert len(record['decisions']) == 2  # The candidate's two TFLite modes.
  assert record['failures'] == []
