"""The span window on Kubeflow: the compiled ExampleGen task, really run.

No KFP cluster exists here, so these tests do what its launcher does for the
compiled ResolveSpan and CsvExampleGen tasks: build the ExecutorInput from
the task's inputs in the compiled PipelineSpec (constants, pipeline
parameters at their defaults or overridden as `kfp submit --param` would,
and ResolveSpan's output parameters), substitute it for ``{{$}}`` in the
task's own command line, and run it, with this Python in place of the
image's. What they write is then read back: the Examples artifact must hold
exactly the rows of the newest K spans.
"""
import csv
import glob
import os

import pytest
import tensorflow as tf

from leantfx import datasets
from leantfx.components.csv_example_gen import executor as csv_executor
from leantfx.components.csv_example_gen import options as csv_options
from leantfx.components.span_window_example_gen import executor
from leantfx.kubeflow import compiler
from tests.helpers import run_cli
from tests.orchestration import kfp_launcher
from tests.orchestration.conftest import IMAGE

# Rows per span: distinct counts, so the total names the spans that were read.
SPAN_ROWS = {1: 40, 2: 50, 3: 60}


def _write_spans(root):
  """span-1..3 of penguins rows (header + SPAN_ROWS[span] rows each)."""
  datasets.prepare('penguins', str(root / 'bundled'))
  (source,) = glob.glob(str(root / 'bundled' / 'span-1' / '*.csv'))
  with open(source, newline='', encoding='utf-8') as f:
    header, *rows = list(csv.reader(f))
  start = 0
  for span, count in SPAN_ROWS.items():
    folder = root / 'data' / f'span-{span}'
    folder.mkdir(parents=True)
    with open(folder / 'part.csv', 'w', newline='', encoding='utf-8') as f:
      csv.writer(f).writerows([header] + rows[start:start + count])
    start += count
  return str(root / 'data')


@pytest.fixture(scope='module')
def window_spec(tmp_path_factory):
  """A compiled spec (--span-window 2) whose data root is a local folder."""
  root = tmp_path_factory.mktemp('kfp_window')
  data_root = _write_spans(root)
  out = str(root / 'pipeline.yaml')
  result = run_cli([
      'compile', '--target', 'kubeflow', '--image', IMAGE, '--dataset',
      'penguins', '--data-root', data_root, '--pipeline-root',
      str(root / 'pipeline_root'), '--serving-dir', str(root / 'serving'),
      '--span-window', '2', '--no-optimize', '--out', out
  ], timeout=600)
  assert result.returncode == 0, result.stdout + result.stderr
  return compiler.load_spec(out), root


def _run_example_gen_task(spec, workdir, overrides=None):
  """Runs the compiled ResolveSpan task, then the CsvExampleGen task.

  Returns:
    (the Examples artifact's folder, ResolveSpan's output parameters: the
    span and fingerprint ExampleGen takes as inputs).
  """
  resolved = kfp_launcher.run_output_parameters(
      spec, 'ResolveSpan', os.path.join(workdir, 'resolve'), overrides)
  container = kfp_launcher.container_of(spec, 'CsvExampleGen')
  examples_uri = os.path.join(workdir, 'examples')
  output_file = os.path.join(workdir, 'task', 'executor_output.json')
  executor_input = {
      'inputs': {
          'parameterValues':
              kfp_launcher.task_parameters(spec, 'CsvExampleGen', overrides,
                                           resolved)
      },
      'outputs': {
          'artifacts': {
              'examples': {
                  'artifacts': [{
                      'name': 'examples-1',
                      'type': {'schemaTitle': 'tfx.Examples'},
                      'uri': examples_uri,
                      'metadata': {},
                  }]
              }
          },
          'outputFile': output_file,
      },
  }
  # The open-source backend runs no driver hook before the executor.
  (executor_line,) = kfp_launcher.command_lines(container, executor_input)
  result = kfp_launcher.run([executor_line], timeout=600)
  assert result.returncode == 0, result.stderr[-4000:]
  return examples_uri, {key: value for (_, key), value in resolved.items()}


def _count(examples_uri):
  counts = {}
  for split in ('train', 'eval'):
    files = glob.glob(os.path.join(examples_uri, f'Split-{split}', '*'))
    counts[split] = sum(
        1 for _ in tf.data.TFRecordDataset(files, compression_type='GZIP'))
  return counts


@pytest.mark.e2e
def test_compiled_example_gen_task_reads_the_newest_k_spans(window_spec,
                                                            tmp_path):
  spec, _ = window_spec
  assert compiler.parameters_of(spec)['span_window'] == 2
  task = spec.root.dag.tasks['CsvExampleGen']
  assert task.inputs.parameters['span_window'].component_input_parameter == (
      'span_window')
  label = spec.components[task.component_ref.name].executor_label
  args = list(spec.deployment_spec['executors'][label]['container']['args'])
  assert args[args.index('--executor_class_path') + 1] == (
      'leantfx.components.span_window_example_gen.executor.Executor')

  examples_uri, output = _run_example_gen_task(spec, str(tmp_path / 'k2'))
  counts = _count(examples_uri)
  # ResolveSpan resolved span 3; the window adds span 2, and not span 1.
  assert sum(counts.values()) == SPAN_ROWS[2] + SPAN_ROWS[3]
  assert counts['train'] > counts['eval'] > 0
  assert output['span'] == 3


@pytest.mark.e2e
def test_span_window_is_a_run_parameter(window_spec, tmp_path):
  """`kfp submit --param span_window=3` reads every span; 1 only the newest."""
  spec, _ = window_spec
  for window, expected in ((3, sum(SPAN_ROWS.values())), (1, SPAN_ROWS[3])):
    examples_uri, _ = _run_example_gen_task(
        spec, str(tmp_path / f'k{window}'), {'span_window': window})
    assert sum(_count(examples_uri).values()) == expected, window


@pytest.mark.unit
def test_window_spans_stop_at_span_zero():
  assert executor.window_spans(5, 3) == [3, 4, 5]
  assert executor.window_spans(1, 3) == [0, 1]
  with pytest.raises(ValueError, match='span_window must be >= 1'):
    executor.window_spans(5, 0)


@pytest.mark.unit
def test_window_files_skip_missing_spans_and_need_the_newest(tmp_path):
  for span in (1, 3):
    (tmp_path / f'span-{span}').mkdir()
    (tmp_path / f'span-{span}' / 'a.csv').write_text('x,y\n1,2\n')
  found = executor.window_files(str(tmp_path), 'span-{SPAN}/*.csv', 3, 3)
  assert [span for span, _ in found] == [1, 3]
  with pytest.raises(ValueError, match='newest span 4 has no file'):
    executor.window_files(str(tmp_path), 'span-{SPAN}/*.csv', 4, 2)
  with pytest.raises(ValueError, match='exactly once'):
    executor.window_files(str(tmp_path), 'span-{SPAN:2}/*.csv', 3, 2)


@pytest.mark.unit
def test_a_header_change_inside_the_window_is_named(tmp_path):
  for span, header in ((1, 'x,y'), (2, 'x,z')):
    (tmp_path / f'span-{span}').mkdir()
    (tmp_path / f'span-{span}' / 'a.csv').write_text(f'{header}\n1,2\n')
  found = executor.window_files(str(tmp_path), 'span-{SPAN}/*', 2, 2)
  files = [path for _, paths in found for path in paths]
  with pytest.raises(ValueError, match=r"span-2/a.csv: its header \['x', 'z'\] "
                     'differs'):
    csv_executor.scan_files(files, csv_options.CsvReadOptions(label='x'))
