"""What a KFP launcher does for one compiled task, done here without a cluster.

No KFP backend exists on this machine, so the tests that run compiled tasks
(span window, drift, ModelOptimizer) play its part: they resolve the task's
parameters from the PipelineSpec (constants, and pipeline parameters at
their defaults or a run's overrides), build the ExecutorInput the launcher
substitutes for ``{{$}}``, and run the task's own driver (``preCacheCheck``,
when it has one) and executor command lines with this Python in place of
the image's.
"""
import json
import subprocess
import sys
from typing import Any, Dict, List, Mapping, Optional

from google.protobuf import json_format

from leantfx.kubeflow import compiler


def task_parameters(spec, task_name: str,
                    overrides: Optional[Mapping[str, Any]] = None
                   ) -> Dict[str, Any]:
  """The task's parameter values as the launcher resolves them."""
  defaults = compiler.parameters_of(spec)
  defaults.update(overrides or {})
  values = {}
  for name, param in spec.root.dag.tasks[task_name].inputs.parameters.items():
    if param.HasField('component_input_parameter'):
      values[name] = defaults[param.component_input_parameter]
    else:
      values[name] = json_format.MessageToDict(param.runtime_value.constant)
  return values


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
