"""Every compiled task, two runs in a row, as the open-source backend runs them.

No KFP cluster exists here, so the test plays its driver and launcher
(tests/orchestration/kfp_launcher.py) for every task of the compiled
pipeline (``--kfp-backend oss``, no ModelOptimizer): run 1 on span 1, then
run 2 after span 2 landed. Before each task of run 2 it computes the task's
cache key as the backend's driver does, and reuses run 1's outputs where the
key is the same, as KFP's cache would.

What it shows: the last blessed model crosses from run 1 to run 2 without
ML Metadata or a resolver. Run 1's LastBlessedModel finds no record and the
Evaluator runs without a baseline; run 1's Pusher records the model it
pushed under the pipeline root; run 2's LastBlessedModel copies that model
and run 2's Evaluator compares against it (the blessing names it as the
baseline). And the new span reaches ExampleGen: its key changes, the schema
import's does not.
"""
import concurrent.futures
import csv
import dataclasses
import json
import os

import pytest
from tfx.components.evaluator import constants as evaluator_constants

from leantfx import config as config_lib
from leantfx import datasets
from leantfx import schemas
from leantfx import span_scoring
from leantfx import versioned_push
from leantfx.components.blessed_model import records
from leantfx.kubeflow import compiler
from tests.orchestration import kfp_launcher
from tests.orchestration.conftest import IMAGE

PIPELINE_NAME = 'leantfx-penguins'
# What TFX's Evaluator records on its blessing when it had a baseline.
BASELINE_URI = evaluator_constants.ARTIFACT_PROPERTY_BASELINE_MODEL_URI_KEY


@pytest.fixture(scope='module')
def kfp(tmp_path_factory):
  """The compiled spec (oss) over local folders, and penguins rows."""
  root = tmp_path_factory.mktemp('kfp_two_runs')
  source = datasets.prepare('penguins', str(root / 'bundled'))
  with open(source, newline='', encoding='utf-8') as f:
    rows = list(csv.DictReader(f))
  spec = dataclasses.replace(datasets.BUNDLED['penguins'],
                             schema_file=schemas.bundled_schema('penguins'))
  pipeline_root = str(root / 'pipeline_root')
  config = config_lib.PipelineConfig(
      pipeline_name=PIPELINE_NAME,
      pipeline_root=str(root / 'local_root'),
      data_root=str(root / 'data'),
      serving_model_dir=str(root / 'serving'),
      dataset=spec,
      # Few steps keep the two runs short; a 0 accuracy bound blesses run
      # 1's model, whatever it learned, so that run 2 has a baseline.
      training=config_lib.TrainingConfig(train_steps=20, epochs=1,
                                         eval_steps=2),
      evaluation=config_lib.EvaluationConfig(min_accuracy=0.0,
                                             max_accuracy_drop=1.0,
                                             baseline_margin=None),
      validation=config_lib.ValidationConfig(check_drift=False),
      optimization=None,
      orchestration=config_lib.OrchestrationConfig(bulk_score=True),
      beam_pipeline_args=('--direct_num_workers=1',))
  config = compiler.kubeflow_pipeline_config(config, pipeline_root)
  out = str(root / 'pipeline.yaml')
  compiler.compile_pipeline(config, IMAGE, out)
  return {'spec': compiler.load_spec(out), 'root': root, 'rows': rows,
          'pipeline_root': pipeline_root}


def _write_span(root, span, rows):
  folder = root / 'data' / f'span-{span}'
  folder.mkdir(parents=True)
  with open(folder / 'penguins.csv', 'w', newline='', encoding='utf-8') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)


def _run(kfp, index, earlier=None):
  """Runs every task of one run, level by level, two at a time.

  Args:
    kfp: the fixture.
    index: 0 or 1.
    earlier: (run 1's produced, run 1's keys) for cache hits, or None.

  Returns:
    (produced: (task, key) -> artifact or parameter, keys: task -> cache
    key, ran: the tasks that ran).
  """
  spec = kfp['spec']
  run_dir = os.path.join(kfp['pipeline_root'], f'run-{index + 1}')
  produced, keys, ran = {}, {}, set()

  def one(name):
    keys[name] = kfp_launcher.cache_key(spec, name, kfp_launcher.executor_input(
        spec, name, run_dir, produced, {}))
    enabled = spec.root.dag.tasks[name].caching_options.enable_cache
    if earlier and enabled and earlier[1].get(name) == keys[name]:
      for (task, key), value in earlier[0].items():
        if task == name:
          produced[(task, key)] = value
      return
    result = kfp_launcher.run_task(spec, name, run_dir, produced, {},
                                   timeout=1200)
    assert result.returncode == 0, (index, name, result.stderr[-4000:])
    ran.add(name)

  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    for level in kfp_launcher.levels(spec, set(spec.root.dag.tasks)):
      list(pool.map(one, level))
  return produced, keys, ran


def _check_bulk_score(kfp, produced, span, rows):
  scored_dir = produced[('BulkScore', 'scored_dir')]
  assert produced[('BulkScore', 'rows_scored')] == rows
  version = versioned_push.list_versions(
      os.path.join(kfp['root'], 'serving'))[-1]
  assert scored_dir == span_scoring.scored_dir(kfp['pipeline_root'], span,
                                               version)
  with open(os.path.join(scored_dir, 'summary.json'), encoding='utf-8') as f:
    summary = json.load(f)
  assert summary['rows_read'] == summary['rows_scored'] == rows
  assert summary['labeled_rows'] == rows and 0 <= summary['accuracy'] <= 1
  with open(os.path.join(scored_dir, 'predictions.csv'), encoding='utf-8',
            newline='') as f:
    assert sum(1 for _ in csv.reader(f)) == rows + 1  # And the header.


def _metadata(artifact, name):
  metadata = artifact['metadata']
  return metadata.get(name, metadata.get(f'custom:{name}'))


@pytest.mark.e2e
def test_two_runs_pass_the_blessed_model_through_the_pusher_records(kfp):
  rows, root = kfp['rows'], kfp['root']
  records_dir = records.records_dir(kfp['pipeline_root'], PIPELINE_NAME)
  _write_span(root, 1, rows[0::2])
  first, first_keys, first_ran = _run(kfp, 0)
  assert first_ran == set(kfp['spec'].root.dag.tasks)
  assert _metadata(first[('LastBlessedModel', 'model')],
                   'blessed_model_found') == 0
  blessing = first[('Evaluator', 'blessing')]
  assert _metadata(blessing, 'blessed') == 1
  assert _metadata(blessing, BASELINE_URI) is None  # No baseline.
  record = records.latest_record(records_dir)
  assert record[records.MODEL_URI] == first[('Trainer', 'model')]['uri']
  # BulkScore scored span 1's rows, every one, with the version the Pusher
  # just pushed, below the pipeline root.
  _check_bulk_score(kfp, first, span=1, rows=len(rows[0::2]))

  _write_span(root, 2, rows[1::2])
  second, second_keys, second_ran = _run(kfp, 1, (first, first_keys))
  # The cache: the schema import is run 1's; the new span re-ran ExampleGen
  # and everything below it.
  assert 'ImportSchemaGen' not in second_ran
  assert {'ResolveSpan', 'CsvExampleGen', 'Trainer', 'LastBlessedModel',
          'Evaluator', 'Pusher'} <= second_ran
  assert second_keys['CsvExampleGen'] != first_keys['CsvExampleGen']
  assert _metadata(second[('CsvExampleGen', 'examples')], 'span') == 2
  # Run 2's baseline is run 1's blessed model, found through the record.
  baseline = second[('LastBlessedModel', 'model')]
  assert _metadata(baseline, 'blessed_model_found') == 1
  assert _metadata(baseline, 'blessed_model_uri') == (
      first[('Trainer', 'model')]['uri'])
  assert _metadata(second[('Evaluator', 'blessing')],
                   BASELINE_URI) == baseline['uri']
  # Span 2's rows, scored with the newest version after run 2's push.
  assert 'BulkScore' in second_ran
  _check_bulk_score(kfp, second, span=2, rows=len(kfp['rows'][1::2]))
