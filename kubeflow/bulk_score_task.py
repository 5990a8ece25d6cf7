"""BulkScore: the run's span scored with the served model, on Kubeflow.

``compile --bulk-score`` adds this task after the Pusher: TFX's
BulkInferrer step, for a push of any runtime, done as ``leantfx run
--bulk-score`` does it locally (leantfx/span_scoring.py runs ``leantfx
score`` on the span ExampleGen ingested, with the newest version under the
Pusher's base path, into ``<pipeline root>/bulk_scores/span-<N>/
version-<V>/``).

The task's command line:
  python -m leantfx.kubeflow.bulk_score_task --executor_input '{{$}}'
Its inputs: ExampleGen's ``examples`` artifact (its ``span`` property
names the span) and the Pusher's ``pushed_model`` (so it runs after the
push, and its cache key changes with each push), and the constant
parameters below. Its outputs: ``rows_scored`` (0 when no version was
pushed yet) and ``scored_dir`` ('' then), in the ExecutorOutput file KFP's
launcher reads. A failed scoring fails the task with ``leantfx score``'s
message.
"""
import argparse
import json
import os
import sys
from typing import Any, Dict, Optional, Sequence

from leantfx import span_scoring
from leantfx.errors import LeantfxError
from leantfx.kubeflow import container_task

TASK_ID = 'BulkScore'
PUSHER_TASK = 'Pusher'
EXAMPLES = 'examples'
PUSHED_MODEL = 'pushed_model'
# Constant parameters, from the compiled config.
MODEL_BASE_PATH = 'model_base_path'
DATA_ROOT = 'data_root'
OUT_ROOT = 'out_root'
LABEL = 'label'
NORMALIZE_LABELS = 'normalize_labels'
INPUT_TYPES = {MODEL_BASE_PATH: 'STRING', DATA_ROOT: 'STRING',
               OUT_ROOT: 'STRING', LABEL: 'STRING',
               NORMALIZE_LABELS: 'STRING'}
ROWS_SCORED = 'rows_scored'
SCORED_DIR = 'scored_dir'
OUTPUT_TYPES = {ROWS_SCORED: 'NUMBER_INTEGER', SCORED_DIR: 'STRING'}


def _span(executor_input: Dict[str, Any]) -> int:
  (examples,) = executor_input['inputs']['artifacts'][EXAMPLES]['artifacts']
  metadata = examples.get('metadata', {})
  span = metadata.get('span', metadata.get('custom:span'))
  if span is None:
    raise LeantfxError(
        f'The {EXAMPLES} artifact at {examples.get("uri")} has no span '
        'property: ExampleGen did not stamp it.')
  return int(span)


def run(executor_input: Dict[str, Any]) -> Dict[str, Any]:
  """Scores the span; writes and returns the ExecutorOutput."""
  values = executor_input['inputs'].get('parameterValues', {})
  result = span_scoring.score_span(
      values[MODEL_BASE_PATH], values[DATA_ROOT], _span(executor_input),
      values[OUT_ROOT], values.get(LABEL) or None,
      values.get(NORMALIZE_LABELS) == 'true')
  print(span_scoring.describe(result))
  output = {'parameterValues': {
      ROWS_SCORED: int(result.get('rows_scored', 0)),
      SCORED_DIR: result.get('out', '')}}
  output_file = executor_input['outputs']['outputFile']
  os.makedirs(os.path.dirname(output_file), exist_ok=True)
  with open(output_file, 'w', encoding='utf-8') as f:
    json.dump(output, f)
  return output


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--executor_input', required=True,
                      help='the ExecutorInput JSON KFP substitutes for {{$}}')
  args = parser.parse_args(argv)
  try:
    run(json.loads(args.executor_input))
  except LeantfxError as e:
    print(f'BulkScore: {e}', file=sys.stderr)
    return e.exit_code
  return 0


def add_to_spec(pipeline_spec: Dict[str, Any], example_gen_task: str,
                image: str, parameters: Dict[str, str]) -> None:
  """Adds the BulkScore task after the Pusher in a PipelineSpec dict.

  Args:
    pipeline_spec: the PipelineSpec as a JSON dict, changed in place.
    example_gen_task: the ExampleGen task's name.
    image: the container image.
    parameters: a value for every name in INPUT_TYPES but DATA_ROOT, which
      is ExampleGen's ``input_base`` (a pipeline parameter a run may set).

  Raises:
    ValueError: a task or output it reads is missing.
  """
  tasks = pipeline_spec['root']['dag']['tasks']
  components = pipeline_spec['components']
  sources = {EXAMPLES: (example_gen_task, 'examples'),
             PUSHED_MODEL: (PUSHER_TASK, 'pushed_model')}
  artifact_types = {}
  for name, (task, key) in sources.items():
    if task not in tasks:
      raise ValueError(f'No task {task!r} for BulkScore to read; the tasks '
                       f'are {sorted(tasks)}.')
    outputs = components[tasks[task]['componentRef']['name']].get(
        'outputDefinitions', {}).get('artifacts', {})
    if key not in outputs:
      raise ValueError(f'Task {task!r} has no output artifact {key!r}.')
    artifact_types[name] = outputs[key]['artifactType']
  gen_params = tasks[example_gen_task].get('inputs', {}).get('parameters', {})
  if 'input_base' not in gen_params:
    raise ValueError(f'Task {example_gen_task!r} has no input_base.')
  missing = sorted(set(INPUT_TYPES) - set(parameters) - {DATA_ROOT})
  if missing:
    raise ValueError(f'BulkScore needs parameter(s) {missing}.')
  container_task.add_component(pipeline_spec, TASK_ID, __name__, image,
                               INPUT_TYPES, OUTPUT_TYPES, artifact_types)
  tasks[TASK_ID] = {
      'componentRef': {'name': TASK_ID},
      'taskInfo': {'name': TASK_ID},
      'dependentTasks': sorted({task for task, _ in sources.values()}),
      'inputs': {
          'artifacts': {name: {'taskOutputArtifact': {
              'producerTask': task, 'outputArtifactKey': key}}
                        for name, (task, key) in sources.items()},
          'parameters': dict(
              {name: {'runtimeValue': {'constant': str(value)}}
               for name, value in parameters.items()},
              **{DATA_ROOT: dict(gen_params['input_base'])})},
      # Same span and same push: the same scores.
      'cachingOptions': {'enableCache': True},
  }


if __name__ == '__main__':
  sys.exit(main())
