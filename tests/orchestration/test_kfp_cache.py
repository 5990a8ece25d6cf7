"""The open-source backend's cache and a new span: the ExampleGen key changes.

No KFP cluster exists here, so the test plays its driver and launcher for
the compiled tasks (tests/orchestration/kfp_launcher.py): it runs the
ResolveSpan task's own command line, feeds its output parameters to
CsvExampleGen's ExecutorInput as KFP resolves them, and computes
CsvExampleGen's cache key the way the backend's driver does before deciding
to run it. A new span in the data root must change the key; the same data
must keep it, so a re-run is still a cache hit. The Vertex spec (no
ResolveSpan task: Vertex resolves the span in ExampleGen's preCacheCheck
hook, which the open-source backend never runs) shows the failure this
prevents: its ExampleGen key is the same for both spans.
"""
import csv
import dataclasses
import json
import os

import pytest
import tensorflow as tf

from leantfx import config as config_lib
from leantfx import datasets
from leantfx import schemas
from leantfx.kubeflow import compiler
from leantfx.kubeflow import resolve_span
from tests.orchestration import kfp_launcher
from tests.orchestration.conftest import IMAGE

GEN = 'CsvExampleGen'
RESOLVE = resolve_span.TASK_ID
# Rows of span 1 and span 2: distinct, so the examples name their span.
SPAN_ROWS = {1: 60, 2: 90}


def _config(root):
  spec = dataclasses.replace(datasets.BUNDLED['penguins'],
                             schema_file=schemas.bundled_schema('penguins'))
  return config_lib.PipelineConfig(
      pipeline_name='leantfx-penguins', pipeline_root=str(root / 'local'),
      data_root=str(root / 'data'), serving_model_dir=str(root / 'serving'),
      dataset=spec, optimization=None,
      beam_pipeline_args=('--direct_num_workers=1',))


@pytest.fixture(scope='module')
def specs(tmp_path_factory):
  """The pipeline compiled for both backends, with a local data root."""
  root = tmp_path_factory.mktemp('kfp_cache')
  source = datasets.prepare('penguins', str(root / 'bundled'))
  with open(source, newline='', encoding='utf-8') as f:
    rows = list(csv.DictReader(f))
  compiled = {}
  for backend in compiler.BACKENDS:
    config = compiler.kubeflow_pipeline_config(
        _config(root), str(root / 'pipeline_root'), backend)
    out = str(root / f'{backend}.yaml')
    compiler.compile_pipeline(config, IMAGE, out)
    compiled[backend] = compiler.load_spec(out)
  return compiled, root, rows


def _write_span(root, span, rows):
  folder = root / 'data' / f'span-{span}'
  folder.mkdir(parents=True)
  with open(folder / 'penguins.csv', 'w', newline='', encoding='utf-8') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)


def _resolve(spec, task_dir):
  """Runs ResolveSpan's command line; returns its output parameters."""
  return kfp_launcher.run_output_parameters(spec, RESOLVE, task_dir)


def _gen_input(spec, task_dir, produced=None):
  """CsvExampleGen's ExecutorInput as the backend's driver builds it."""
  examples = spec.components[spec.root.dag.tasks[GEN].component_ref.name]
  from google.protobuf import json_format  # pylint: disable=g-import-not-at-top
  artifact_type = json_format.MessageToDict(
      examples.output_definitions.artifacts['examples'].artifact_type)
  return {
      'inputs': {'parameterValues': kfp_launcher.task_parameters(
          spec, GEN, produced=produced)},
      'outputs': {
          'artifacts': {'examples': {'artifacts': [{
              'type': artifact_type,
              'uri': os.path.join(task_dir, 'examples'),
              'metadata': {}}]}},
          'outputFile': os.path.join(task_dir, 'executor_output.json'),
      },
  }


@pytest.mark.unit
def test_oss_spec_resolves_the_span_before_example_gen(specs):
  compiled, _, _ = specs
  spec = compiled['oss']
  gen = spec.root.dag.tasks[GEN]
  assert RESOLVE in gen.dependent_tasks
  for name in resolve_span.OUTPUT_TYPES:
    source = gen.inputs.parameters[name].task_output_parameter
    assert (source.producer_task, source.output_parameter_key) == (RESOLVE,
                                                                   name)
  # It must look at the data root on every run, never from the cache.
  assert not spec.root.dag.tasks[RESOLVE].caching_options.enable_cache
  resolve_inputs = spec.root.dag.tasks[RESOLVE].inputs.parameters
  assert resolve_inputs['input_base'].component_input_parameter == 'data_root'
  assert resolve_inputs['range_config'].component_input_parameter == (
      'range_config')
  # No preCacheCheck hook: the open-source backend never runs one.
  assert 'lifecycle' not in kfp_launcher.container_of(spec, GEN)
  assert 'lifecycle' in kfp_launcher.container_of(compiled['vertex'], GEN)
  assert RESOLVE not in compiled['vertex'].root.dag.tasks


@pytest.mark.e2e
def test_a_new_span_changes_example_gen_cache_key_and_is_read(specs):
  compiled, root, rows = specs
  spec = compiled['oss']
  _write_span(root, 1, rows[:SPAN_ROWS[1]])
  run_1 = _resolve(spec, str(root / 'run-1' / RESOLVE))
  assert run_1[(RESOLVE, 'span')] == 1
  key_1 = kfp_launcher.cache_key(
      spec, GEN, _gen_input(spec, str(root / 'run-1' / GEN), run_1))
  # The same data again: the same key, a cache hit.
  again = _resolve(spec, str(root / 'run-1b' / RESOLVE))
  assert kfp_launcher.cache_key(
      spec, GEN, _gen_input(spec, str(root / 'run-1b' / GEN), again)) == key_1
  # A new span lands: ResolveSpan resolves it and the key changes.
  _write_span(root, 2, rows[SPAN_ROWS[1]:SPAN_ROWS[1] + SPAN_ROWS[2]])
  run_2 = _resolve(spec, str(root / 'run-2' / RESOLVE))
  assert run_2[(RESOLVE, 'span')] == 2
  assert 'span-2' in run_2[(RESOLVE, 'input_config')]
  gen_input = _gen_input(spec, str(root / 'run-2' / GEN), run_2)
  assert kfp_launcher.cache_key(spec, GEN, gen_input) != key_1

  # Without the task (the Vertex spec), nothing in ExampleGen's inputs
  # depends on the data: the open-source backend would replay span 1.
  vertex = compiled['vertex']
  assert (kfp_launcher.cache_key(vertex, GEN, _gen_input(vertex, 'r1')) ==
          kfp_launcher.cache_key(vertex, GEN, _gen_input(vertex, 'r2')))

  # The executor, run with no driver before it, reads span 2 and stamps it.
  result = kfp_launcher.run(kfp_launcher.command_lines(
      kfp_launcher.container_of(spec, GEN), gen_input), timeout=600)
  assert result.returncode == 0, result.stderr[-4000:]
  with open(gen_input['outputs']['outputFile'], encoding='utf-8') as f:
    (written,) = json.load(f)['artifacts']['examples']['artifacts']
  metadata = written['metadata']
  assert metadata.get('span', metadata.get('custom:span')) == 2
  uri = gen_input['outputs']['artifacts']['examples']['artifacts'][0]['uri']
  count = sum(
      1 for split in ('train', 'eval') for _ in tf.data.TFRecordDataset(
          tf.io.gfile.glob(os.path.join(uri, f'Split-{split}', '*')),
          compression_type='GZIP'))
  assert count == SPAN_ROWS[2]
