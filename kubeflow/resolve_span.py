"""ResolveSpan: the span ExampleGen reads, resolved in a task of its own.

The open-source KFP backend computes a task's cache key in its driver, before
the task runs, from the task's inputs (parameter values, input artifact
names), its outputs' names and types, and its image and command line
(backend/src/v2/driver/cache.go, getFingerPrint). It runs no lifecycle
``preCacheCheck`` hook, where TFX's Kubeflow V2 ExampleGen resolves the span
on Vertex AI. ExampleGen's own inputs (``data_root``, ``range_config=''``
for the newest span, ``span_window``) do not change when a new span lands,
so a recurring run would take the first span's examples from the cache.

This task (never cached) does what that driver does, with TFX's own input
processor: resolves the span (the newest, or the pinned one), the input
files' fingerprint and the split patterns of that span, and hands them to
ExampleGen as parameters. A new span, or new files in it, changes
ExampleGen's inputs and so its cache key; the same span keeps it a cache hit.

The task's command line:
  python -m leantfx.kubeflow.resolve_span --executor_input '{{$}}'
It reads ``input_base``, ``input_config`` and ``range_config`` from the
ExecutorInput, and writes ``span`` (integer), ``input_fingerprint`` and the
resolved ``input_config`` (strings) as output parameters in the
ExecutorOutput file (``outputs.outputFile``), which KFP's launcher reads.
"""
import argparse
import json
import os
import sys
from typing import Any, Dict, Optional, Sequence

from tfx.components.example_gen import input_processor
from tfx.components.example_gen import utils as example_gen_utils
from tfx.dsl.io import fileio
from tfx.proto import example_gen_pb2
from tfx.proto import range_config_pb2
from tfx.utils import proto_utils

from leantfx.kubeflow import container_task

TASK_ID = 'ResolveSpan'
# Inputs (ExampleGen's parameter names).
INPUT_BASE = 'input_base'
INPUT_CONFIG = 'input_config'
RANGE_CONFIG = 'range_config'
# Outputs: ExampleGen's execution properties of the same names, which its
# executor stamps on the Examples artifact.
SPAN = example_gen_utils.SPAN_PROPERTY_NAME
FINGERPRINT = example_gen_utils.FINGERPRINT_PROPERTY_NAME
OUTPUT_TYPES = {SPAN: 'NUMBER_INTEGER', FINGERPRINT: 'STRING',
                INPUT_CONFIG: 'STRING'}
INPUT_TYPES = {INPUT_BASE: 'STRING', INPUT_CONFIG: 'STRING',
               RANGE_CONFIG: 'STRING'}


def resolve(input_base: str, input_config_json: str,
            range_config_json: Optional[str]) -> Dict[str, Any]:
  """The span, fingerprint and resolved input config, as TFX's driver has them.

  Args:
    input_base: the data root holding span-<N>/ folders.
    input_config_json: ExampleGen's Input proto as JSON (patterns with
      {SPAN}).
    range_config_json: a RangeConfig as JSON pinning the span, or ''/None
      for the newest span.

  Returns:
    {SPAN: int, FINGERPRINT: str, INPUT_CONFIG: JSON of the Input proto with
    the span's patterns}.

  Raises:
    ValueError: when no span matches (TFX's message names the pattern).
  """
  input_config = example_gen_pb2.Input()
  proto_utils.json_to_proto(input_config_json, input_config)
  range_config = None
  if range_config_json:
    range_config = range_config_pb2.RangeConfig()
    proto_utils.json_to_proto(range_config_json, range_config)
  processor = input_processor.FileBasedInputProcessor(
      input_base, input_config.splits, range_config)
  span, version = processor.resolve_span_and_version()
  fingerprint = processor.get_input_fingerprint(span, version)
  for split in input_config.splits:
    split.pattern = processor.get_pattern_for_span_version(
        split.pattern, span, version)
  return {SPAN: int(span), FINGERPRINT: fingerprint,
          INPUT_CONFIG: proto_utils.proto_to_json(input_config)}


def _parameter(executor_input: Dict[str, Any], name: str) -> Any:
  values = executor_input.get('inputs', {}).get('parameterValues', {})
  if name not in values:
    raise ValueError(
        f'{TASK_ID}: the ExecutorInput has no parameter {name!r} (it has '
        f'{sorted(values)}); the compiled task must pass '
        f'{sorted(INPUT_TYPES)}.')
  return values[name]


def run(executor_input: Dict[str, Any]) -> Dict[str, Any]:
  """Resolves the span and writes the ExecutorOutput file.

  Args:
    executor_input: the ExecutorInput as KFP's launcher substitutes it.

  Returns:
    The ExecutorOutput dict written.
  """
  resolved = resolve(_parameter(executor_input, INPUT_BASE),
                     _parameter(executor_input, INPUT_CONFIG),
                     _parameter(executor_input, RANGE_CONFIG))
  output = {'parameterValues': resolved}
  output_file = executor_input['outputs']['outputFile']
  fileio.makedirs(os.path.dirname(output_file))
  with fileio.open(output_file, 'w') as f:
    f.write(json.dumps(output, sort_keys=True))
  return output


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--executor_input', required=True,
                      help="the ExecutorInput JSON (KFP's {{$}})")
  args = parser.parse_args(argv)
  output = run(json.loads(args.executor_input))
  print(json.dumps(output['parameterValues'], sort_keys=True))
  return 0


def add_to_spec(pipeline_spec: Dict[str, Any], example_gen_task: str,
                image: str) -> None:
  """Adds the ResolveSpan task before ExampleGen in a PipelineSpec dict.

  ExampleGen then takes ``input_config``, ``span`` and ``input_fingerprint``
  from it (so they are in its cache key), and its lifecycle hook, which the
  open-source backend never runs, is dropped: the spec says what runs.

  Args:
    pipeline_spec: the PipelineSpec as a JSON dict, changed in place.
    example_gen_task: the ExampleGen task's name.
    image: the container image.

  Raises:
    ValueError: if the task is missing or takes its input base or input
      config from somewhere unexpected.
  """
  tasks = pipeline_spec['root']['dag']['tasks']
  if example_gen_task not in tasks:
    raise ValueError(f'No task {example_gen_task!r} to resolve the span of; '
                     f'the tasks are {sorted(tasks)}.')
  gen = tasks[example_gen_task]
  gen_params = gen['inputs']['parameters']
  missing = sorted({INPUT_BASE, INPUT_CONFIG, RANGE_CONFIG} - set(gen_params))
  if missing:
    raise ValueError(f'Task {example_gen_task!r} has no parameter(s) '
                     f'{missing}: it is not a file-based ExampleGen.')
  container_task.add_component(pipeline_spec, TASK_ID, __name__, image,
                               INPUT_TYPES, OUTPUT_TYPES)
  tasks[TASK_ID] = {
      'componentRef': {'name': TASK_ID},
      'taskInfo': {'name': TASK_ID},
      'inputs': {'parameters': {
          name: dict(gen_params[name]) for name in INPUT_TYPES}},
      # It looks at the data root anew on every run.
      'cachingOptions': {'enableCache': False},
  }
  for name in OUTPUT_TYPES:
    gen_params[name] = {'taskOutputParameter': {
        'producerTask': TASK_ID, 'outputParameterKey': name}}
  gen['dependentTasks'] = sorted(set(gen.get('dependentTasks', [])) |
                                 {TASK_ID})
  component = pipeline_spec['components'][gen['componentRef']['name']]
  definitions = component.setdefault('inputDefinitions', {}).setdefault(
      'parameters', {})
  for name, kind in OUTPUT_TYPES.items():
    definitions[name] = {'parameterType': kind}
  container = pipeline_spec['deploymentSpec']['executors'][
      component['executorLabel']]['container']
  container.pop('lifecycle', None)


if __name__ == '__main__':
  sys.exit(main())
