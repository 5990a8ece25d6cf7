"""The compiled spec against the rules of the open-source KFP backend.

The open-source backend turns a PipelineSpec into an Argo Workflow when a run
is created, and its driver resolves each task's inputs before the task runs;
a spec that breaks one of their rules compiles here and fails there, at the
user's first run. Each rule below mirrors one check of the backend's source
(kubeflow/pipelines, read at the path named in the rule) and is applied to
the default compile (``--kfp-backend oss``) of the conftest options, parsed
with kfp's own ``pipeline_spec_pb2``. The Vertex AI spec
(``--kfp-backend vertex``) breaks the first rule, which shows the check can
fail.
"""
import re

import pytest
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from leantfx.kubeflow import compiler
from tests.helpers import run_cli
from tests.orchestration.conftest import COMPILE_ARGS

pytestmark = pytest.mark.unit

_TYPES = pipeline_spec_pb2.ParameterType
# The value kinds normalizeResolvedParameterValue accepts per declared type;
# a STRING parameter takes any value (it is converted to text).
_KINDS = {
    _TYPES.NUMBER_INTEGER: ('number_value',),
    _TYPES.NUMBER_DOUBLE: ('number_value',),
    _TYPES.BOOLEAN: ('bool_value',),
    _TYPES.LIST: ('list_value',),
    _TYPES.STRUCT: ('struct_value',),
}
# objectstore/config.go: bucketPattern and the schemes it accepts.
_BUCKET_RE = re.compile(r'^(gs|s3|minio|mem)://[^/?]+(/[^?]*)?(\?.+)?$')


def executor_kind_violations(spec):
  """backend/src/v2/compiler/argocompiler/dag.go, task(): an executor is a
  container or an importer; a resolver fails the run's creation with
  "resolver executors not implemented", a custom job with "custom job
  executors is Google Cloud only"."""
  found = []
  executors = json_format.MessageToDict(spec.deployment_spec)['executors']
  for name, task in spec.root.dag.tasks.items():
    label = spec.components[task.component_ref.name].executor_label
    kinds = set(executors[label]) & {'container', 'importer', 'resolver',
                                     'customJob'}
    if kinds - {'container', 'importer'}:
      found.append(f'{name}: {sorted(kinds)} executor')
  return found


def condition_violations(spec):
  """dag.go, task(): "triggerPolicy.condition on importer task is not
  supported"; "artifact iterator not implemented yet"."""
  found = []
  executors = json_format.MessageToDict(spec.deployment_spec)['executors']
  for name, task in spec.root.dag.tasks.items():
    label = spec.components[task.component_ref.name].executor_label
    if task.trigger_policy.condition and 'importer' in executors[label]:
      found.append(f'{name}: a condition on an importer task')
    if task.HasField('artifact_iterator'):
      found.append(f'{name}: an artifact iterator')
  return found


def parameter_type_violations(spec):
  """backend/src/v2/driver/resolver/parameters.go,
  normalizeResolvedParameterValue: a resolved value must be of the kind
  the component declares (a number for NUMBER_INTEGER, ...), and never
  null; an upstream output parameter must be declared by its producer."""
  found = []
  pipeline_inputs = spec.root.input_definitions.parameters
  for name, task in spec.root.dag.tasks.items():
    declared = spec.components[task.component_ref.name].input_definitions
    for key, source in task.inputs.parameters.items():
      if key not in declared.parameters:
        found.append(f'{name}.{key}: not declared by its component')
        continue
      kind = declared.parameters[key].parameter_type
      if kind == _TYPES.PARAMETER_TYPE_ENUM_UNSPECIFIED:
        found.append(f'{name}.{key}: no parameterType')
        continue
      if source.HasField('runtime_value'):
        value = source.runtime_value.constant
      elif source.HasField('component_input_parameter'):
        value = pipeline_inputs[source.component_input_parameter].default_value
      else:
        producer = source.task_output_parameter
        outputs = spec.components[spec.root.dag.tasks[
            producer.producer_task].component_ref.name].output_definitions
        produced = outputs.parameters.get(producer.output_parameter_key)
        if produced is None:
          found.append(f'{name}.{key}: {producer.producer_task} declares no '
                       f'output {producer.output_parameter_key!r}')
        elif kind != _TYPES.STRING and produced.parameter_type != kind:
          found.append(f'{name}.{key}: {kind} from an output of type '
                       f'{produced.parameter_type}')
        continue
      which = value.WhichOneof('kind')
      if which in (None, 'null_value'):
        found.append(f'{name}.{key}: null')
      elif kind in _KINDS and which not in _KINDS[kind]:
        found.append(f'{name}.{key}: {which} for a '
                     f'{_TYPES.ParameterTypeEnum.Name(kind)} parameter')
  return found


def pipeline_root_violations(spec):
  """backend/src/v2/objectstore/config.go, ParseBucketPathToConfig: the
  pipeline root is a gs://, s3://, minio:// (or mem://) bucket path; a run
  that gets none from its runtime config uses the spec's
  defaultPipelineRoot."""
  root = spec.default_pipeline_root
  if not root:
    return ['no defaultPipelineRoot']
  if not _BUCKET_RE.match(root):
    return [f'defaultPipelineRoot {root!r} is not a gs://, s3:// or '
            'minio:// bucket path']
  return []


RULES = (executor_kind_violations, condition_violations,
         parameter_type_violations, pipeline_root_violations)


@pytest.fixture(scope='module')
def vertex_spec(tmp_path_factory):
  out = str(tmp_path_factory.mktemp('vertex') / 'p.yaml')
  result = run_cli(COMPILE_ARGS + ['--out', out, '--kfp-backend', 'vertex'])
  assert result.returncode == 0, result.stdout + result.stderr
  return compiler.load_spec(out)


@pytest.mark.parametrize('rule', RULES, ids=lambda r: r.__name__)
def test_default_spec_follows_the_open_source_backend(compiled, rule):
  assert rule(compiler.load_spec(compiled['yaml'])) == []


def test_vertex_spec_has_the_resolvers_the_open_source_backend_rejects(
    vertex_spec):
  found = executor_kind_violations(vertex_spec)
  assert len(found) == 4 and all('resolver' in f for f in found), found


def test_the_rules_catch_what_they_mirror(compiled):
  """Each rule finds its fault when one is put into the good spec."""
  spec = compiler.load_spec(compiled['yaml'])
  bad = pipeline_spec_pb2.PipelineSpec()
  bad.CopyFrom(spec)
  label = bad.components[bad.root.dag.tasks['Trainer'].component_ref.name
                        ].executor_label
  bad.deployment_spec['executors'][label] = {'importer': {}}
  bad.root.dag.tasks['Trainer'].trigger_policy.condition = 'x == 1'
  gen = bad.root.dag.tasks['CsvExampleGen']
  gen.inputs.parameters['span_window'].ClearField('component_input_parameter')
  gen.inputs.parameters['span_window'].runtime_value.constant.string_value = (
      '2')
  bad.default_pipeline_root = '/mnt/root'
  assert condition_violations(bad) == [
      'Trainer: a condition on an importer task']
  assert parameter_type_violations(bad) == [
      'CsvExampleGen.span_window: string_value for a NUMBER_INTEGER '
      'parameter']
  assert len(pipeline_root_violations(bad)) == 1
