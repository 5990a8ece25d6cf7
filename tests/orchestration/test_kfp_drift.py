"""The ValidationGate's drift check on Kubeflow: the compiled tasks, really run.

No KFP cluster exists here, so the test plays KFP's backend for two runs of
the compiled pipeline, one after the other (span 1, then a drifted span 2
that landed since). For each task from ResolveSpan to the ValidationGate, in
dependency order, it builds the ExecutorInput the KFP driver makes and the
launcher substitutes for ``{{$}}``: the task's parameters (constants,
pipeline parameters at their defaults, upstream output parameters), its input
artifacts as the producing tasks of the same run recorded them in their
ExecutorOutput (name, type, uri, metadata), and fresh output URIs under
``<pipeline root>/<run>/<task>/``. It then runs the task's own command lines
with this Python in place of the image's. The spec is the open-source
backend's: CsvExampleGen runs no driver hook, and takes its span, input
fingerprint and input config from ResolveSpan's output parameters.

Before each task the test computes its cache key as the backend's driver
does (kfp_launcher.cache_key) and reuses the first run's outputs where the
key is the same, as KFP's cache would: only ImportSchemaGen (same parameters,
no inputs). CsvExampleGen's key differs, since ResolveSpan found span 2.

The compiled pipeline has no resolver task for the drift baseline (TFX's
LatestArtifact query cannot find a custom artifact type, and the open-source
KFP backend runs no resolver task): the gate reads the baseline folder under
the compiled pipeline root, where span 1's passing gate kept its statistics
(components/validation_gate/component.py). To stay within a few minutes,
the two runs' ResolveSpan tasks run in a row (run 2's after span 2 landed),
then the other tasks before the gate run side by side; run 1's gate runs
before run 2's.
"""
import concurrent.futures
import csv
import dataclasses
import glob
import json
import os

import pytest

from leantfx import config as config_lib
from leantfx import datasets
from leantfx import schemas
from leantfx.kubeflow import compiler
from tests.orchestration import kfp_launcher
from tests.orchestration.conftest import IMAGE

GATE = 'ValidationGate'
PIPELINE_NAME = 'leantfx-penguins'
# Every task the gate's inputs come from, and nothing else.
GATE_ANCESTORS = {'ResolveSpan', 'CsvExampleGen', 'ImportSchemaGen',
                  'StatisticsGen', 'ExampleValidator'}


@pytest.fixture(scope='module')
def kfp(tmp_path_factory):
  """The pipeline compiled for Kubeflow (drift on) and its folders."""
  root = tmp_path_factory.mktemp('kfp_drift')
  data_root = root / 'data'
  source = datasets.prepare('penguins', str(root / 'bundled'))
  with open(source, newline='', encoding='utf-8') as f:
    rows = list(csv.DictReader(f))
  spec = dataclasses.replace(datasets.BUNDLED['penguins'],
                             schema_file=schemas.bundled_schema('penguins'))
  pipeline_root = str(root / 'pipeline_root')
  config = config_lib.PipelineConfig(
      pipeline_name=PIPELINE_NAME,
      pipeline_root=str(root / 'local_root'),
      data_root=str(data_root),
      serving_model_dir=str(root / 'serving'),
      dataset=spec,
      optimization=None,
      beam_pipeline_args=('--direct_num_workers=1',))
  assert config.validation.check_drift
  config = compiler.kubeflow_pipeline_config(config, pipeline_root)
  out = str(root / 'pipeline.yaml')
  compiler.compile_pipeline(config, IMAGE, out)
  return {
      'spec': compiler.load_spec(out),
      'rows': rows,
      'data_root': data_root,
      'pipeline_root': pipeline_root,
      'baselines': os.path.join(pipeline_root, PIPELINE_NAME, GATE,
                                'drift_baselines'),
  }


def _write_span(data_root, span, rows):
  folder = data_root / f'span-{span}'
  folder.mkdir(parents=True)
  with open(folder / 'penguins.csv', 'w', newline='',
            encoding='utf-8') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)


def _run_two_spans(kfp, write_span_2):
  """Run 1 (span 1, the newest) and run 2 (span 2, landed since) to the gates.

  Args:
    kfp: the fixture.
    write_span_2: writes span 2 into the data root.

  Returns:
    (the two runs' produced artifacts and parameters, the two gates'
    processes, {task: (run 1's cache key, run 2's)}).
  """
  spec = kfp['spec']
  produced = ({}, {})
  keys = {}
  resolve = 'ResolveSpan'
  rest = kfp_launcher.ancestors(spec, GATE) - {resolve}
  for index in (0, 1):
    if index == 1:
      write_span_2()
    result = kfp_launcher.run_task(spec, resolve, _run_dir(kfp, index),
                                   produced[index], {})
    assert result.returncode == 0, (index, result.stderr[-4000:])

  def key(index, name):
    return kfp_launcher.cache_key(spec, name, kfp_launcher.executor_input(
        spec, name, _run_dir(kfp, index), produced[index], {}))

  def run(job):
    index, name = job
    if index == 1 and keys[name][0] == keys[name][1]:
      # A KFP cache hit: run 2 takes run 1's outputs.
      for (task, output), value in produced[0].items():
        if task == name:
          produced[1][(task, output)] = value
      return
    result = kfp_launcher.run_task(spec, name, _run_dir(kfp, index),
                                   produced[index], {})
    assert result.returncode == 0, (index, name, result.stderr[-4000:])

  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    for level in kfp_launcher.levels(spec, rest):
      for name in level:
        keys[name] = (key(0, name), key(1, name))
      # Run 1's tasks first: a cache hit of run 2 needs run 1's outputs.
      list(pool.map(run, [(0, n) for n in level]))
      list(pool.map(run, [(1, n) for n in level]))
  gates = [
      kfp_launcher.run_task(spec, GATE, _run_dir(kfp, i), produced[i], {})
      for i in (0, 1)
  ]
  return produced, gates, keys


def _span(examples):
  """The span on an Examples artifact as KFP recorded it (ExecutorOutput
  metadata; 'custom:' marks a custom property whose name is also a property
  of the type)."""
  metadata = examples['metadata']
  return metadata.get('span', metadata.get('custom:span'))


def _run_dir(kfp, index):
  return os.path.join(kfp['pipeline_root'], f'run-{index + 1}')


@pytest.mark.e2e
def test_drift_stops_the_compiled_pipeline_at_the_gate(kfp):
  spec = kfp['spec']
  tasks = spec.root.dag.tasks
  # The baseline is no resolver task: the gate depends only on its data.
  assert kfp_launcher.ancestors(spec, GATE) == GATE_ANCESTORS
  assert not any('resolver' in t and 'validation' in t for t in tasks), tasks
  gate_params = kfp_launcher.task_parameters(spec, GATE)
  assert gate_params['check_drift'] == 1
  assert gate_params['baseline_dir'] == kfp['baselines']

  # Span 1: the bundled penguins. Span 2: Adelie are 79% of the penguins
  # instead of 44%.
  _write_span(kfp['data_root'], 1, kfp['rows'])
  adelie = [r for r in kfp['rows'] if r['species'] == 'Adelie']
  others = [r for r in kfp['rows'] if r['species'] != 'Adelie']
  produced, (gate_1, gate_2), keys = _run_two_spans(
      kfp, lambda: _write_span(kfp['data_root'], 2, adelie + others[:40]))

  # KFP's cache: the schema import is the same task in both runs; the new
  # span changed ExampleGen's key (through ResolveSpan), and so every key
  # downstream of it.
  assert produced[0][('ResolveSpan', 'span')] == 1
  assert produced[1][('ResolveSpan', 'span')] == 2
  same = {name for name, (first, second) in keys.items() if first == second}
  assert same == {'ImportSchemaGen'}, keys

  # Run 1 passes span 1 and keeps its statistics as the baseline.
  assert _span(produced[0][('CsvExampleGen', 'examples')]) == 1
  assert gate_1.returncode == 0, gate_1.stderr[-4000:]
  report = produced[0][(GATE, 'report')]
  assert report['metadata']['span'] == 1
  assert report['metadata']['passed'] == 1
  assert report['metadata']['drift_baseline_span'] == -1
  with open(os.path.join(report['uri'], 'report.txt'), encoding='utf-8') as f:
    text = f.read()
  assert 'result: PASSED' in text
  assert 'no earlier span has passed validation yet' in text
  assert os.path.isfile(os.path.join(kfp['baselines'], 'span-1',
                                     'statistics.pb'))

  # Run 2 stops at the gate on span 2's drift against span 1.
  assert _span(produced[1][('CsvExampleGen', 'examples')]) == 2
  assert gate_2.returncode != 0
  assert "'species' COMPARATOR_L_INFTY_HIGH" in gate_2.stderr
  assert 'Data validation stopped the run on span 2' in gate_2.stderr
  assert (GATE, 'report') not in produced[1]  # Failed: no output recorded.
  (failed,) = glob.glob(os.path.join(_run_dir(kfp, 1), 'failed_reports', '*',
                                     'report.json'))
  with open(failed, encoding='utf-8') as f:
    failed_report = json.load(f)
  assert failed_report['drift_baseline_span'] == 1
  assert not failed_report['passed']
  assert sorted(os.listdir(kfp['baselines'])) == ['span-1']  # Not span 2.

  # Nothing downstream runs: KFP starts a task only once every task it
  # depends on succeeded; Augment waits for the gate, Transform for Augment,
  # and so on down to the Pusher.
  assert GATE in tasks['Augment'].dependent_tasks
  assert 'Augment' in tasks['Transform'].dependent_tasks
  for name in ('Augment', 'Transform', 'Trainer', 'Evaluator', 'Pusher'):
    assert GATE in kfp_launcher.ancestors(spec, name), name


def _gate(tmp_path, name, rows, span, baseline_dir):
  """Runs the gate's executor in-process on rows as span (None: no span)."""
  # pylint: disable=g-import-not-at-top
  import tensorflow_data_validation as tfdv
  from tfx.types import artifact_utils
  from tfx.types import standard_artifacts
  from leantfx.components.validation_gate import executor
  from leantfx.components.validation_gate import spec as spec_lib
  from tests.data import helpers
  # pylint: enable=g-import-not-at-top
  schema = helpers.schema('penguins')
  stats = helpers.statistics(rows, schema)

  def artifact(cls, key, splits=()):
    made = cls()
    made.uri = str(tmp_path / name / key)
    os.makedirs(made.uri, exist_ok=True)
    if splits:
      made.split_names = artifact_utils.encode_split_names(list(splits))
    return made

  examples = artifact(standard_artifacts.Examples, 'examples')
  if span is not None:
    examples.set_int_custom_property('span', span)
  statistics = artifact(standard_artifacts.ExampleStatistics, 'statistics',
                        ['train'])
  anomalies = artifact(standard_artifacts.ExampleAnomalies, 'anomalies',
                       ['train'])
  os.makedirs(os.path.join(statistics.uri, 'Split-train'))
  with open(os.path.join(statistics.uri, 'Split-train', 'FeatureStats.pb'),
            'wb') as f:
    f.write(stats.SerializeToString())
  os.makedirs(os.path.join(anomalies.uri, 'Split-train'))
  with open(os.path.join(anomalies.uri, 'Split-train', 'SchemaDiff.pb'),
            'wb') as f:
    f.write(tfdv.validate_statistics(stats, schema).SerializeToString())
  schema_artifact = artifact(standard_artifacts.Schema, 'schema')
  tfdv.write_schema_text(schema, os.path.join(schema_artifact.uri,
                                              'schema.pbtxt'))
  report = artifact(spec_lib.DataValidationReport, 'gate/report')
  executor.Executor().Do(
      {spec_lib.EXAMPLES_KEY: [examples], spec_lib.STATISTICS_KEY: [statistics],
       spec_lib.SCHEMA_KEY: [schema_artifact],
       spec_lib.ANOMALIES_KEY: [anomalies]},
      {spec_lib.REPORT_KEY: [report]},
      {spec_lib.ALLOW_ANOMALIES_KEY: '[]', spec_lib.CHECK_DRIFT_KEY: 1,
       spec_lib.BASELINE_DIR_KEY: baseline_dir})
  with open(os.path.join(report.uri, 'report.txt'), encoding='utf-8') as f:
    return report.get_int_custom_property('drift_baseline_span'), f.read()


@pytest.mark.unit
def test_baseline_folder_is_never_the_span_itself(tmp_path):
  """Re-runs of a span compare with the span below, not with themselves."""
  source = datasets.prepare('penguins', str(tmp_path / 'data'))
  with open(source, newline='', encoding='utf-8') as f:
    rows = list(csv.DictReader(f))
  folder = str(tmp_path / 'drift_baselines')
  assert _gate(tmp_path, 'a', rows, 1, folder)[0] == -1
  first = os.path.join(folder, 'span-1', 'statistics.pb')
  written = os.stat(first).st_mtime_ns
  assert _gate(tmp_path, 'b', rows, 1, folder)[0] == -1  # Not span 1.
  assert os.stat(first).st_mtime_ns == written  # The first pass stays.
  assert _gate(tmp_path, 'c', rows, 2, folder)[0] == 1
  assert _gate(tmp_path, 'd', rows, 2, folder)[0] == 1  # Not span 2.
  assert _gate(tmp_path, 'e', rows, 3, folder)[0] == 2
  assert sorted(os.listdir(folder)) == ['span-1', 'span-2', 'span-3']
  # An Examples artifact without a span: drift is not checked, and nothing
  # is kept (it would be filed under a made-up span).
  baseline, text = _gate(tmp_path, 'f', rows, None, folder)
  assert baseline == -1
  assert 'drift: not checked (ExampleGen recorded no span' in text
  assert sorted(os.listdir(folder)) == ['span-1', 'span-2', 'span-3']
