"""What a KFP launcher does for one compiled task, done here without a cluster.

No KFP backend exists on this machine, so the tests that run compiled tasks
(span window, drift, ModelOptimizer) play its part: they resolve the task's
parameters from the PipelineSpec (constants, and pipeline parameters at
their defaults or a run's overrides), build the ExecutorInput the launcher
substitutes for ``{{$}}``, and run the task's own driver (``preCacheCheck``,
when it has one) and executor command lines with this Python in place of
the image's.

It also computes a task's cache key the way the open-source backend's driver
does before it decides to run the task or reuse a cached execution
(backend/src/v2/driver/cache.go, getFingerPrint, and
backend/src/v2/cacheutils/cache.go, GenerateCacheKey): the input parameter
values, the input artifacts' names, the output artifacts with their URIs
wiped, the output parameters' types, and the container's image, command and
arguments, hashed with SHA-256. The JSON here is Python's, not Go's
protojson, so the hex digits differ from a cluster's; what matters for a
test, which inputs change the key, is the same.
"""
import hashlib
import json
import os
import subprocess
import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from leantfx.kubeflow import compiler


def task_parameters(spec, task_name: str,
                    overrides: Optional[Mapping[str, Any]] = None,
                    produced: Optional[Mapping[Tuple[str, str], Any]] = None
                   ) -> Dict[str, Any]:
  """The task's parameter values as the launcher resolves them.

  Args:
    spec: the compiled PipelineSpec.
    task_name: the task.
    overrides: pipeline parameters of the run (others at their defaults).
    produced: (producer task, output parameter key) -> value, for inputs
      taken from an upstream task's output parameter.
  """
  defaults = compiler.parameters_of(spec)
  defaults.update(overrides or {})
  values = {}
  for name, param in spec.root.dag.tasks[task_name].inputs.parameters.items():
    if param.HasField('component_input_parameter'):
      values[name] = defaults[param.component_input_parameter]
    elif param.HasField('task_output_parameter'):
      source = param.task_output_parameter
      values[name] = (produced or {})[(source.producer_task,
                                       source.output_parameter_key)]
    else:
      values[name] = json_format.MessageToDict(param.runtime_value.constant)
  return values


def cache_key(spec, task_name: str, executor_input: Mapping[str, Any]) -> str:
  """The task's cache fingerprint as the open-source backend computes it.

  Args:
    spec: the compiled PipelineSpec.
    task_name: the task.
    executor_input: the ExecutorInput dict the task is (or would be) run
      with: inputs.parameterValues, inputs.artifacts, outputs.artifacts.

  Returns:
    The SHA-256 hex digest of the key's fields (see the module docstring).
  """
  task = spec.root.dag.tasks[task_name]
  component = spec.components[task.component_ref.name]
  container = container_of(spec, task_name)
  inputs = executor_input.get('inputs', {})
  outputs = executor_input.get('outputs', {})
  key = {
      'inputArtifactNames': {
          name: [a.get('name', '') for a in artifacts.get('artifacts', [])]
          for name, artifacts in inputs.get('artifacts', {}).items()},
      'inputParameterValues': dict(inputs.get('parameterValues', {})),
      # GenerateCacheKey keeps name, type and metadata; the URI is wiped.
      'outputArtifactsSpec': {
          name: {k: v for k, v in artifacts['artifacts'][0].items()
                 if k in ('name', 'type', 'metadata')}
          for name, artifacts in outputs.get('artifacts', {}).items()
          if artifacts.get('artifacts')},
      'outputParametersSpec': {
          name: pipeline_spec_pb2.ParameterType.ParameterTypeEnum.Name(
              definition.parameter_type)
          for name, definition in
          component.output_definitions.parameters.items()},
      'containerSpec': {
          'image': container['image'],
          'cmdArgs': list(container.get('command', [])) +
                     list(container.get('args', [])),
      },
  }
  text = json.dumps(key, sort_keys=True, separators=(',', ':'))
  return hashlib.sha256(text.encode('utf-8')).hexdigest()


def container_of(spec, task_name: str) -> Dict[str, Any]:
  """The task's container spec (command, args, lifecycle) as a dict."""
  task = spec.root.dag.tasks[task_name]
  label = spec.components[task.component_ref.name].executor_label
  return json_format.MessageToDict(spec.deployment_spec)['executors'][label][
      'container']


def command_lines(container: Mapping[str, Any],
                  executor_input: Mapping[str, Any]) -> List[List[str]]:
  """The driver's command line (if the task has one), then the executor's."""
  text = json.dumps(executor_input)

  def line(command, args):
    command = [sys.executable if c == 'python' else c for c in command]
    return command + [text if a == '{{$}}' else a for a in args]

  lines = []
  hook = container.get('lifecycle', {}).get('preCacheCheck')
  if hook:
    lines.append(line(hook['command'], hook['args']))
  lines.append(line(container['command'], container['args']))
  return lines


def run(lines: List[List[str]], timeout: float
       ) -> subprocess.CompletedProcess:
  """Runs the command lines in order; stops at (and returns) the first failure."""
  result = None
  for line in lines:
    result = subprocess.run(line, capture_output=True, text=True,
                            timeout=timeout, check=False)
    if result.returncode:
      return result
  return result


def run_output_parameters(spec, task_name: str, task_dir: str,
                          overrides: Optional[Mapping[str, Any]] = None,
                          timeout: float = 300) -> Dict[Tuple[str, str], Any]:
  """Runs a task that has only parameters in and out (e.g. ResolveSpan).

  Returns:
    (task, output parameter key) -> value, as KFP records them from the
    ExecutorOutput file, for task_parameters' ``produced``.

  Raises:
    AssertionError: with the task's stderr, if it fails.
  """
  component = spec.components[spec.root.dag.tasks[task_name].component_ref.name]
  output_file = f'{task_dir}/executor_output.json'
  executor_input = {
      'inputs': {'parameterValues': task_parameters(spec, task_name,
                                                    overrides)},
      'outputs': {'parameters': {
          name: {'outputFile': f'{task_dir}/{name}'}
          for name in component.output_definitions.parameters},
                  'outputFile': output_file},
  }
  result = run(command_lines(container_of(spec, task_name), executor_input),
               timeout=timeout)
  assert result.returncode == 0, result.stderr[-4000:]
  with open(output_file, encoding='utf-8') as f:
    values = json.load(f)['parameterValues']
  return {(task_name, name): value for name, value in values.items()}


def ancestors(spec, task_name):
  """Every task task_name depends on, directly or not."""
  found, todo = set(), [task_name]
  while todo:
    for dependency in spec.root.dag.tasks[todo.pop()].dependent_tasks:
      if dependency not in found:
        found.add(dependency)
        todo.append(dependency)
  return found


def executor_input(spec, name, run_dir, produced, overrides):
  """The ExecutorInput KFP's driver builds for one compiled task.

  Args:
    spec: the compiled PipelineSpec.
    name: the task's name.
    run_dir: <pipeline root>/<run id>.
    produced: (task, output key) -> the RuntimeArtifact dict KFP recorded,
      or the output parameter's value.
    overrides: pipeline parameters of the run (others at their defaults).
  """
  task = spec.root.dag.tasks[name]
  component = spec.components[task.component_ref.name]
  inputs = {}
  for key, source in task.inputs.artifacts.items():
    producer = source.task_output_artifact
    inputs[key] = {'artifacts': [
        produced[(producer.producer_task, producer.output_artifact_key)]]}
  task_dir = os.path.join(run_dir, name)
  outputs = {}
  for key, definition in component.output_definitions.artifacts.items():
    outputs[key] = {'artifacts': [{
        'type': json_format.MessageToDict(definition.artifact_type),
        'uri': os.path.join(task_dir, key),
        'metadata': {},
    }]}
  return {
      'inputs': {'parameterValues': task_parameters(
          spec, name, overrides, produced),
                 'artifacts': inputs},
      'outputs': {'artifacts': outputs,
                  'outputFile': os.path.join(task_dir,
                                             'executor_output.json')},
  }


def run_task(spec, name, run_dir, produced, overrides, timeout=600):
  """Runs one compiled task as the KFP launcher would.

  Args:
    spec: the compiled PipelineSpec.
    name: the task's name.
    run_dir: <pipeline root>/<run id>.
    produced: (task, output key) -> the RuntimeArtifact dict KFP recorded
      (named <run>-<task>-<key>), or the output parameter's value; the
      task's outputs are added to it when it succeeds.
    overrides: pipeline parameters of the run (others at their defaults).
    timeout: seconds the task may take.

  Returns:
    The executor's CompletedProcess.
  """
  task_input = executor_input(spec, name, run_dir, produced, overrides)
  result = run(command_lines(container_of(spec, name), task_input),
               timeout=timeout)
  if result.returncode:
    return result
  with open(task_input['outputs']['outputFile'], encoding='utf-8') as f:
    executor_output = json.load(f)
  for key, output in task_input['outputs']['artifacts'].items():
    (written,) = executor_output['artifacts'][key]['artifacts']
    recorded = dict(output['artifacts'][0])
    recorded['name'] = f'{os.path.basename(run_dir)}-{name}-{key}'
    recorded['metadata'] = written.get('metadata', {})
    produced[(name, key)] = recorded
  for key, value in executor_output.get('parameterValues', {}).items():
    produced[(name, key)] = value
  return result


def levels(spec, names):
  """names in dependency levels: each level depends only on earlier ones."""
  found, left = [], set(names)
  while left:
    ready = sorted(n for n in left
                   if not set(spec.root.dag.tasks[n].dependent_tasks) & left)
    assert ready, f'dependency cycle among {left}'
    found.append(ready)
    left -= set(ready)
  return found
