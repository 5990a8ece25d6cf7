"""A leantfx task of its own in a compiled PipelineSpec: one container.

ResolveSpan (resolve_span.py) and BulkScore (bulk_score_task.py) are not TFX
components: each is a Python module run in the pipeline's image as
``python -m MODULE --executor_input '{{$}}'``, which reads the ExecutorInput
KFP's launcher substitutes and writes its ExecutorOutput file. This adds such
a task's component definition and container executor to a spec.
"""
from typing import Any, Dict, Mapping, Optional


def add_component(pipeline_spec: Dict[str, Any], task_id: str, module: str,
                  image: str, input_parameters: Mapping[str, str],
                  output_parameters: Mapping[str, str],
                  input_artifacts: Optional[Mapping[str, Any]] = None
                 ) -> None:
  """Adds the component ``task_id`` and its container executor, in place.

  Args:
    pipeline_spec: the PipelineSpec as a JSON dict.
    task_id: the task's and its component's name.
    module: the Python module the container runs.
    image: the container image.
    input_parameters: {name: parameterType} the task takes.
    output_parameters: {name: parameterType} it writes.
    input_artifacts: {name: artifactType} it reads, if any.
  """
  executor_label = f'{task_id}_executor'
  inputs: Dict[str, Any] = {'parameters': {
      name: {'parameterType': kind}
      for name, kind in input_parameters.items()}}
  if input_artifacts:
    inputs['artifacts'] = {name: {'artifactType': kind}
                           for name, kind in input_artifacts.items()}
  pipeline_spec['components'][task_id] = {
      'executorLabel': executor_label,
      'inputDefinitions': inputs,
      'outputDefinitions': {'parameters': {
          name: {'parameterType': kind}
          for name, kind in output_parameters.items()}},
  }
  pipeline_spec['deploymentSpec']['executors'][executor_label] = {
      'container': {
          'image': image,
          'command': ['python', '-m', module],
          'args': ['--executor_input', '{{$}}'],
      }}
