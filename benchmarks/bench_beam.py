"""Figure: StatisticsGen + Transform on the portable runner, 1 vs 2 SDK workers.

Generated penguins-like rows (bench_data's generator: the bundled 344 rows
resampled with noise) are written once as an Examples artifact (gzipped
tf.Example shards, 90% train, 10% eval). Then, each in a fresh process, the
real TFX StatisticsGen executor and Transform executor (leantfx's
preprocessing_fn: mean imputation, z-scores, vocabularies) run on them with
the beam_pipeline_args of:

1. ``--beam-runner portable``: ``leantfx beam job-server`` + an EXTERNAL
   ``leantfx beam worker-pool`` (both started here), ``--beam-workers 1``;
2. the same with ``--beam-workers 2`` (--sdk_worker_parallelism=2);
3. the DirectRunner, multi_processing with 2 workers, for comparison.

Printed: wall time of each executor's Do (start-up included), rows/s over
both, and the speed-up of 2 SDK workers over 1 (target >= 1.6x on 2 cores,
which only holds when both cores are free). The target is set on 1,000,000
rows, the default; --rows makes it smaller on a shared machine (the notes
print the size used and the load average).

  python -m benchmarks.bench_beam [--rows N]
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from benchmarks import bench_data
from benchmarks import harness

LEANTFX = os.path.join(os.path.dirname(sys.executable), 'leantfx')
SHARDS = 16  # Files per split: what Beam can spread over workers.
EVAL_FRACTION = 0.1
# Transform's own pre/post-transform statistics are off: StatisticsGen
# already measures TFDV, and Transform's analyzers are what is timed here.
DISABLE_TRANSFORM_STATISTICS = 1


def _write_examples(directory: str, rows: int) -> None:
  """Writes Split-train and Split-eval of penguins-like tf.Examples."""
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  import tensorflow_data_validation as tfdv
  from tensorflow_metadata.proto.v0 import schema_pb2
  from leantfx import schemas
  # pylint: enable=g-import-not-at-top
  schema = tfdv.load_schema_text(schemas.bundled_schema('penguins'))
  kinds = {f.name: f.type for f in schema.feature}
  eval_every = round(1 / EVAL_FRACTION)
  writers = {}
  for split in ('train', 'eval'):
    os.makedirs(os.path.join(directory, f'Split-{split}'))
    writers[split] = [tf.io.TFRecordWriter(
        os.path.join(directory, f'Split-{split}', f'data-{i:02d}.gz'),
        options='GZIP') for i in range(SHARDS)]
  for i, (_, row) in enumerate(bench_data.penguin_like_rows(rows, 13)):
    example = tf.train.Example()
    for name, value in row.items():
      if value == '' or name not in kinds:
        continue  # Missing: the feature is absent, as CsvExampleGen writes.
      feature = example.features.feature[name]
      if kinds[name] == schema_pb2.FLOAT:
        feature.float_list.value.append(float(value))
      elif kinds[name] == schema_pb2.INT:
        feature.int64_list.value.append(int(float(value)))
      else:
        feature.bytes_list.value.append(value.encode())
    split = 'eval' if i % eval_every == 0 else 'train'
    writers[split][i % SHARDS].write(example.SerializeToString())
  for shards in writers.values():
    for writer in shards:
      writer.close()


# Runs in a fresh process: both executors, each timed around its Do().
_RUN_CODE = '''
import json, os, shutil, sys, time
from tfx.components.statistics_gen import executor as stats_executor
from tfx.components.transform import executor as transform_executor
from tfx.types import artifact_utils, standard_artifacts
from tfx.types import standard_component_specs as keys
from leantfx import config as config_lib, datasets, schemas
examples_dir, work, beam_args = sys.argv[1], sys.argv[2], sys.argv[3:]
examples = standard_artifacts.Examples(); examples.uri = examples_dir
examples.split_names = artifact_utils.encode_split_names(['train', 'eval'])
examples.set_string_custom_property('payload_format', 'FORMAT_TF_EXAMPLE')
schema = standard_artifacts.Schema(); schema.uri = os.path.join(work, 'schema')
os.makedirs(schema.uri)
shutil.copy(schemas.bundled_schema('penguins'),
            os.path.join(schema.uri, 'schema.pbtxt'))
def out(kind, name):
  artifact = kind(); artifact.uri = os.path.join(work, name)
  os.makedirs(artifact.uri); return artifact
def context(name):
  return stats_executor.Executor.Context(
      beam_pipeline_args=beam_args, tmp_dir=os.path.join(work, 'tmp', name))
statistics = out(standard_artifacts.ExampleStatistics, 'statistics')
statistics.split_names = examples.split_names
start = time.perf_counter()
stats_executor.Executor(context('stats')).Do(
    {keys.EXAMPLES_KEY: [examples], keys.SCHEMA_KEY: [schema]},
    {keys.STATISTICS_KEY: [statistics]},
    {keys.EXCLUDE_SPLITS_KEY: json.dumps([])})
stats_s = time.perf_counter() - start
custom_config = {'dataset': config_lib.to_json_dict(
    datasets.BUNDLED['penguins']), 'domains': {}}
start = time.perf_counter()
transform_executor.Executor(context('transform')).Do(
    {keys.EXAMPLES_KEY: [examples], keys.SCHEMA_KEY: [schema]},
    {keys.TRANSFORM_GRAPH_KEY: [out(standard_artifacts.TransformGraph,
                                    'graph')],
     keys.TRANSFORMED_EXAMPLES_KEY: [out(standard_artifacts.Examples,
                                         'transformed')]},
    {keys.PREPROCESSING_FN_KEY: 'leantfx.models.preprocessing.preprocessing_fn',
     keys.CUSTOM_CONFIG_KEY: json.dumps(custom_config),
     keys.DISABLE_STATISTICS_KEY: %(disable)d})
transform_s = time.perf_counter() - start
print('TIMES', json.dumps({'statistics_s': stats_s,
                           'transform_s': transform_s}))
'''


def _run(examples_dir: str, work: str, beam_args) -> dict:
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  code = _RUN_CODE % {'disable': DISABLE_TRANSFORM_STATISTICS}
  result = subprocess.run(
      [sys.executable, '-c', code, examples_dir, work, *beam_args], env=env,
      capture_output=True, text=True, check=False)
  match = re.search(r'^TIMES (.*)$', result.stdout, re.MULTILINE)
  if result.returncode or not match:
    sys.stderr.write(result.stderr[-4000:])
    raise SystemExit(f'StatisticsGen + Transform failed with {beam_args}')
  return json.loads(match.group(1))


class _Server:
  """`leantfx beam worker-pool|job-server`, stopped with SIGTERM."""

  def __init__(self, args, log_path):
    self._log = open(log_path, 'w', encoding='utf-8')
    self.process = subprocess.Popen(
        [LEANTFX, 'beam', *args, '--verbose'], stdout=self._log,
        stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while True:
      with open(log_path, encoding='utf-8') as f:
        match = re.search(r'ready at (\S+)', f.read())
      if match:
        self.address = match.group(1)
        return
      if self.process.poll() is not None or time.monotonic() > deadline:
        raise SystemExit(f'leantfx beam {args[0]} did not start: see '
                         f'{log_path}')
      time.sleep(0.2)

  def stop(self):
    self.process.send_signal(signal.SIGTERM)
    self.process.wait(timeout=60)
    self._log.close()


def _load() -> str:
  return ', '.join(f'{x:.2f}' for x in os.getloadavg())


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--rows', type=int, default=1_000_000)
  args = parser.parse_args(argv)
  # pylint: disable=g-import-not-at-top
  from leantfx.pipeline import beam_presets
  # pylint: enable=g-import-not-at-top
  scratch = tempfile.mkdtemp(prefix='bench-beam-')
  rows, notes = [], []
  load_before = _load()
  try:
    examples_dir = os.path.join(scratch, 'examples')
    started = time.perf_counter()
    _write_examples(examples_dir, args.rows)
    generation = time.perf_counter() - started
    pool = _Server(['worker-pool', '--port', '0', '--workers', '2'],
                   os.path.join(scratch, 'pool.log'))
    job_server = _Server(['job-server', '--port', '0'],
                         os.path.join(scratch, 'job-server.log'))
    environment = beam_presets.parse_environment(f'external:{pool.address}')
    configs = [
        ('portable, external pool', 1, beam_presets.beam_pipeline_args(
            'portable', workers=1, job_endpoint=job_server.address,
            environment=environment)),
        ('portable, external pool', 2, beam_presets.beam_pipeline_args(
            'portable', workers=2, job_endpoint=job_server.address,
            environment=environment)),
        ('direct multi_processing', 2, beam_presets.beam_pipeline_args(
            'direct', 'multi_processing', 2)),
    ]
    try:
      for name, workers, beam_args in configs:
        work = os.path.join(scratch, f'run-{len(rows)}')
        times = _run(examples_dir, work, beam_args)
        shutil.rmtree(work, ignore_errors=True)
        total = times['statistics_s'] + times['transform_s']
        rows.append({'runner': name, 'workers': workers, 'rows': args.rows,
                     'statistics_s': times['statistics_s'],
                     'transform_s': times['transform_s'], 'total_s': total,
                     'rows_per_s': args.rows / total, 'load': _load()})
    finally:
      job_server.stop()
      pool.stop()
  finally:
    shutil.rmtree(scratch, ignore_errors=True)
  speedup = rows[0]['total_s'] / rows[1]['total_s']
  rows.append({'runner': 'portable 2 vs 1 SDK workers', 'speedup': speedup,
               'target': 1.6})
  notes += [
      f'{args.rows} generated penguins-like rows ({1 - EVAL_FRACTION:.0%} '
      f'train, {EVAL_FRACTION:.0%} eval, {SHARDS} gzipped TFRecord shards '
      f'per split; generated in {generation:.0f}s). Each row: the real TFX '
      'StatisticsGen then Transform executor (leantfx preprocessing_fn; '
      'Transform\'s own statistics off) in a fresh process; seconds = '
      'Executor.Do, Beam start-up and SDK worker start-up included.',
      'portable: `leantfx beam job-server` (FnApiRunner with '
      '--sdk_worker_parallelism workers) + `leantfx beam worker-pool '
      '--workers 2`, --environment external; Beam\'s embedded job service '
      'would run one worker whatever the option says.',
      f'CPUs: {os.cpu_count()}; load average (1, 5, 15 min) before: '
      f'{load_before}, per row after it ran: see "load". The speed-up is '
      'only as good as the second core is free.',
  ]
  harness.report('beam', 'Beam portable runner: StatisticsGen + Transform, '
                 '1 vs 2 SDK workers', rows, notes)
  return 0


if __name__ == '__main__':
  sys.exit(main())
