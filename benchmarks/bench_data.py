"""Figures of the data side, measured side by side in one run:

1. Augment throughput (input examples/s) of the real Augment executor on a
   generated image dataset (8x8 grey PNGs in tf.Examples, one augmented copy
   each), Beam DirectRunner multi_processing with 1 and with 2 workers, and
   the scaling ratio (target >= 1.6x on 2 cores).
2. TFDV statistics + validation (schema and drift against a previous span)
   time on a generated tabular dataset (penguins-like rows, CSV).
3. Penguins (Adelie 152, Chinstrap 68, Gentoo 124 rows): balanced accuracy
   and per-class recall on the eval split without rebalancing, with class
   weights and with SMOTE oversampling: same seed, same training budget, the
   real `leantfx run`.

The targets are set on 200k images and 1M rows; those are the defaults. Both
datasets are generated in a temporary folder at run time. On a shared,
loaded machine the whole run can exceed 10 minutes: --images, --rows and
--figures make it smaller (the notes print the sizes used).

  python -m benchmarks.bench_data [--images N] [--rows N] [--figures 1,2,3]
"""
import argparse
import csv
import gzip
import json
import os
import statistics as stats_lib
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks import harness

TRAIN_STEPS = 1000  # leantfx's default for penguins (cli/build.py).
SEED = 42


def _png_examples(count: int, seed: int):
  """Yields serialized tf.Examples of random 8x8 grey digit-like PNGs."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from leantfx import data_formats  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  for i in range(count):
    example = tf.train.Example()
    pixels = rng.integers(0, 17, size=64)
    example.features.feature['image'].bytes_list.value.append(
        data_formats.digit_png(pixels))
    example.features.feature['digit'].bytes_list.value.append(
        str(i % 10).encode())
    yield example.SerializeToString(deterministic=True)


def _write_examples(directory: str, count: int, seed: int, shards: int = 8):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  os.makedirs(directory, exist_ok=True)
  writers = [tf.io.TFRecordWriter(
      os.path.join(directory, f'data-{i:02d}.gz'), options='GZIP')
             for i in range(shards)]
  for i, record in enumerate(_png_examples(count, seed)):
    writers[i % shards].write(record)
  for w in writers:
    w.close()


def _augment_once(examples_dir: str, out_dir: str, workers: int) -> float:
  """Runs the Augment executor in a fresh process; returns seconds."""
  code = f'''
import json, os, time
from tfx.types import artifact_utils, standard_artifacts
from leantfx import config as config_lib, data_formats
from leantfx.components.augment import executor as ex, spec as sp
schema_dir = os.path.join({out_dir!r}, 'schema')
os.makedirs(schema_dir, exist_ok=True)
from leantfx import schemas
import shutil
shutil.copy(schemas.bundled_schema('digits', 'images'),
            os.path.join(schema_dir, 'schema.pbtxt'))
examples = standard_artifacts.Examples(); examples.uri = {examples_dir!r}
examples.split_names = artifact_utils.encode_split_names(['train', 'eval'])
examples.set_string_custom_property('payload_format', 'FORMAT_TF_EXAMPLE')
schema = standard_artifacts.Schema(); schema.uri = schema_dir
out = standard_artifacts.Examples(); out.uri = os.path.join({out_dir!r}, 'out')
os.makedirs(out.uri, exist_ok=True)
cfg = config_lib.AugmentConfig(copies=1, seed=1)
args = ['--direct_running_mode=multi_processing',
        '--direct_num_workers={workers}']
e = ex.Executor(ex.Executor.Context(beam_pipeline_args=args,
                                    tmp_dir=os.path.join({out_dir!r}, 'tmp')))
start = time.perf_counter()
e.Do({{sp.EXAMPLES_KEY: [examples], sp.SCHEMA_KEY: [schema]}},
     {{sp.AUGMENTED_EXAMPLES_KEY: [out]}},
     {{sp.AUGMENT_CONFIG_KEY: json.dumps(config_lib.to_json_dict(cfg)),
      sp.DATASET_KEY: json.dumps(config_lib.to_json_dict(
          data_formats.DIGITS_IMAGES))}})
print('SECONDS', time.perf_counter() - start)
print('AFTER', out.get_string_custom_property(sp.CLASS_COUNTS_AFTER_PROPERTY))
'''
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  result = subprocess.run([sys.executable, '-c', code], env=env,
                          capture_output=True, text=True, check=False)
  if result.returncode:
    sys.stderr.write(result.stderr[-4000:])
    raise SystemExit(f'augment with {workers} worker(s) failed')
  seconds = after = None
  for line in result.stdout.splitlines():
    if line.startswith('SECONDS'):
      seconds = float(line.split()[1])
    if line.startswith('AFTER'):
      after = json.loads(line.split(' ', 1)[1])
  return seconds, sum(after.values())


def figure_augment(scratch: str, count: int):
  small = max(1, min(500, count // 10))
  started = time.perf_counter()
  dirs = {}
  for size in (small, count):
    dirs[size] = os.path.join(scratch, f'images-{size}')
    _write_examples(os.path.join(dirs[size], 'Split-train'), size, 1)
    _write_examples(os.path.join(dirs[size], 'Split-eval'), 100, 2, shards=1)
  generation = time.perf_counter() - started
  rows, marginal = [], {}
  for workers in (1, 2):
    took = {}
    for size in (small, count):
      took[size], written = _augment_once(
          dirs[size], os.path.join(scratch, f'aug-{workers}-{size}'), workers)
      assert written == 2 * size, (written, size)  # Originals + one copy.
    # Start-up (worker processes, imports, pipeline set-up) is the time of
    # the small run; the marginal rate is what the extra examples cost.
    marginal[workers] = (count - small) / max(took[count] - took[small], 1e-9)
    rows.append({'figure': 'augment throughput', 'workers': workers,
                 'train_examples': count, 'seconds': took[count],
                 'examples_per_s': count / took[count],
                 'startup_s': took[small],
                 'marginal_examples_per_s': marginal[workers]})
  rows.append({'figure': 'augment scaling 2 vs 1 worker (marginal)',
               'ratio': marginal[2] / marginal[1]})
  return rows, [
      f'Augment: {count} generated 8x8 PNG examples (and {small} for the '
      f'start-up run; generated in {generation:.0f}s), one augmented copy '
      'each (decode, affine, colour, noise, re-encode); DirectRunner '
      'multi_processing; each run in a fresh process; seconds = '
      'Executor.Do, start-up included; marginal rate = extra examples / '
      'extra seconds over the start-up run.',
      f'CPUs on this machine: {os.cpu_count()}; the ratio is only as good as '
      'the second core is free (other jobs share it).']


def penguin_like_rows(count: int, seed: int):
  """Yields (header, row) of the bundled penguins resampled with noise."""
  from leantfx import datasets  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory() as tmp:
    path = datasets.prepare('penguins', tmp)
    with open(path, newline='', encoding='utf-8') as f:
      base = list(csv.DictReader(f))
  rng = np.random.default_rng(seed)
  header = list(base[0])
  picks = rng.integers(0, len(base), size=count)
  noise = rng.normal(0.0, 0.01, size=count)
  for i, j in enumerate(picks):
    row = dict(base[j])
    for column in ('bill_length_mm', 'bill_depth_mm'):
      if row[column]:
        row[column] = f'{float(row[column]) * (1 + noise[i]):.2f}'
    yield header, row


def figure_statistics(scratch: str, count: int):
  import tensorflow_data_validation as tfdv  # pylint: disable=g-import-not-at-top
  from leantfx import schemas  # pylint: disable=g-import-not-at-top
  path = os.path.join(scratch, 'tabular.csv')
  started = time.perf_counter()
  with open(path, 'w', newline='', encoding='utf-8') as f:
    writer = None
    for header, row in penguin_like_rows(count, 3):
      if writer is None:
        writer = csv.DictWriter(f, fieldnames=header, lineterminator='\n')
        writer.writeheader()
      writer.writerow(row)
  generation = time.perf_counter() - started
  schema = tfdv.load_schema_text(schemas.bundled_schema('penguins'))
  options = tfdv.StatsOptions(schema=schema)
  started = time.perf_counter()
  statistics = tfdv.generate_statistics_from_csv(path, stats_options=options)
  stats_seconds = time.perf_counter() - started
  started = time.perf_counter()
  anomalies = tfdv.validate_statistics(statistics, schema,
                                       previous_statistics=statistics)
  validate_seconds = time.perf_counter() - started
  return [{
      'figure': 'statistics + validation', 'rows': count,
      'statistics_s': stats_seconds, 'validation_s': validate_seconds,
      'total_s': stats_seconds + validate_seconds,
      'rows_per_s': count / (stats_seconds + validate_seconds),
      'anomalies': len(anomalies.anomaly_info),
  }], [f'Statistics: {count} penguins-like CSV rows (7 columns, '
       f'{os.path.getsize(path) / 1e6:.0f} MB, generated in '
       f'{generation:.0f}s); tfdv.generate_statistics_from_csv with the '
       'curated schema (Beam DirectRunner, default mode), then '
       'validate_statistics with drift against the same statistics.']


def _per_class_recall(model_uri: str, eval_files, classes):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  model = tf.saved_model.load(model_uri)
  records = [r.numpy() for r in tf.data.TFRecordDataset(
      eval_files, compression_type='GZIP')]
  labels = []
  for record in records:
    value = tf.train.Example.FromString(record).features.feature['species']
    labels.append(classes.index(value.bytes_list.value[0].decode()))
  probabilities = model.signatures['predict_examples'](
      examples=tf.constant(records))['probabilities'].numpy()
  predicted = probabilities.argmax(axis=1)
  labels = np.array(labels)
  recall = {c: float((predicted[labels == i] == i).mean())
            for i, c in enumerate(classes) if (labels == i).any()}
  counts = {c: int((labels == i).sum()) for i, c in enumerate(classes)}
  return recall, counts


def figure_rebalancing(scratch: str):
  import glob  # pylint: disable=g-import-not-at-top
  from leantfx import datasets  # pylint: disable=g-import-not-at-top
  from leantfx.models import model_layout  # pylint: disable=g-import-not-at-top
  from leantfx.pipeline import run_summary  # pylint: disable=g-import-not-at-top
  classes = list(datasets.BUNDLED['penguins'].classes)
  leantfx = os.path.join(os.path.dirname(sys.executable), 'leantfx')
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  output = os.path.join(scratch, 'penguins')
  rows = []
  for name, flags in (('none', []),
                      ('class weights (auto)', ['--class-weights', 'auto']),
                      ('SMOTE oversampling', ['--oversample', 'smote'])):
    since = int(time.time() * 1000)
    result = subprocess.run(
        [leantfx, 'run', '--dataset', 'penguins', '--output', output,
         '--train-steps', str(TRAIN_STEPS), '--seed', str(SEED),
         '--min-accuracy', '0', '--max-accuracy-drop', '1',
         '--baseline-margin', 'off', *flags],
        env=env, capture_output=True, text=True, check=False)
    if result.returncode not in (0, 4):
      sys.stderr.write(result.stdout[-3000:] + result.stderr[-3000:])
      raise SystemExit(f'penguins run ({name}) failed')
    summary = run_summary.summarize(os.path.join(output, 'metadata.sqlite'),
                                    'leantfx-penguins', since)
    model_uri = os.path.join(
        summary.executions['Trainer'].outputs['model'][0].uri,
        model_layout.SERVING_MODEL_DIR)
    eval_uri = run_summary.summarize(
        os.path.join(output, 'metadata.sqlite'),
        'leantfx-penguins').executions['CsvExampleGen'].outputs[
            'examples'][0].uri
    recall, counts = _per_class_recall(
        model_uri, sorted(glob.glob(os.path.join(eval_uri, 'Split-eval',
                                                 '*'))), classes)
    row = {'figure': 'penguins rebalancing', 'method': name,
           'balanced_accuracy': stats_lib.mean(recall.values())}
    row.update({f'recall_{c}': v for c, v in recall.items()})
    rows.append(row)
  return rows, [
      f'Penguins: {TRAIN_STEPS} train steps, seed {SEED}, same eval split '
      f'(eval examples per class: {counts}); balanced accuracy = mean '
      'per-class recall of the trained model (Trainer output) on it. SMOTE '
      'raises every class to the largest in the train split; class weights '
      'are n / (k * n_c) from Transform\'s count of the train split.']


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--images', type=int, default=200_000)
  parser.add_argument('--rows', type=int, default=1_000_000)
  parser.add_argument('--figures', default='1,2,3')
  args = parser.parse_args(argv)
  figures = set(args.figures.split(','))
  rows, notes = [], []
  started = time.perf_counter()
  with tempfile.TemporaryDirectory(prefix='bench-data-') as scratch:
    for number, run in (('1', lambda: figure_augment(scratch, args.images)),
                        ('2', lambda: figure_statistics(scratch, args.rows)),
                        ('3', lambda: figure_rebalancing(scratch))):
      if number in figures:
        figure_rows, figure_notes = run()
        rows += figure_rows
        notes += figure_notes
  notes.append(f'Total benchmark time {time.perf_counter() - started:.0f}s.')
  harness.report('data', 'Data: augment scaling, statistics + validation, '
                 'rebalancing on penguins', rows, notes)
  return 0


if __name__ == '__main__':
  sys.exit(main())
