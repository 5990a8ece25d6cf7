"""Figure: ingestion and the tabular Beam stages at scale, per span size.

Per size (rows of benchmarks/scale_data.py: 20 numbers, 2 categories, a
4-class text label, cut into SCALE_FILES CSV files), side by side in one run:

1. reference: the same files read with pyarrow, encoded with tfx_bsl's
   RecordBatchToExamplesEncoder and written as one gzipped TFRecord file,
   in this one process (one core): what the hardware does without Beam;
2. examplegen: leantfx's CSV ExampleGen executor alone (a fresh process,
   timed around its Do) in Beam's in_memory mode and in multi_processing
   with 2 workers (what `--beam-mode auto` picks from 500k rows on), with
   the peak RSS of that process and of its tree (its Beam workers) polled
   as for the run;
3. run: the default ``leantfx run --data-root DIR --label segment`` end to
   end (a subprocess), with every component's seconds from ML Metadata
   (its execution's last update minus its creation), rows/s of the data
   stages, the peak RSS of the run and of each Beam worker process
   (the process tree polled every 0.5 s), and the pushed model's eval
   accuracy beside scikit-learn's HistGradientBoostingClassifier trained on
   the same train split and scored on the same eval split (both read from
   the ExampleGen's output).

Sizes and stages come from the environment, as `make bench` passes no
arguments: SCALE_ROWS (default 250000,500000,1000000; 20000 is a smoke
check), SCALE_FILES (default 5), SCALE_STAGES (default
reference,examplegen,run), SCALE_RUN_ARGS (more `leantfx run` options, e.g.
"--no-optimize" to stop after the push on a busy machine; default none).

  SCALE_ROWS=20000 make bench BENCH_ARGS=scale
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List

import psutil

from benchmarks import harness
from benchmarks import scale_data

LEANTFX = os.path.join(os.path.dirname(sys.executable), 'leantfx')
POLL_S = 0.5

# Runs leantfx's CSV ExampleGen executor in a fresh process, timed around Do.
_EXAMPLEGEN_CODE = '''
import json, sys, time
from tfx.proto import example_gen_pb2
from tfx.types import standard_artifacts
from tfx.utils import proto_utils
from leantfx.components.csv_example_gen import executor, options
data_root, out, beam_args = sys.argv[1], sys.argv[2], sys.argv[3:]
split = example_gen_pb2.SplitConfig.Split
properties = {
    'input_base': data_root,
    'input_config': proto_utils.proto_to_json(example_gen_pb2.Input(splits=[
        example_gen_pb2.Input.Split(name='single_split',
                                    pattern='span-1/*')])),
    'output_config': proto_utils.proto_to_json(example_gen_pb2.Output(
        split_config=example_gen_pb2.SplitConfig(splits=[
            split(name='train', hash_buckets=4),
            split(name='eval', hash_buckets=1)]))),
    'output_data_format': example_gen_pb2.FORMAT_TF_EXAMPLE,
    'output_file_format': example_gen_pb2.FORMAT_TFRECORDS_GZIP,
    'custom_config': proto_utils.proto_to_json(options.custom_config(
        options.CsvReadOptions(label=%(label)r))),
    'span': 1,
}
examples = standard_artifacts.Examples(); examples.uri = out
context = executor.Executor.Context(beam_pipeline_args=beam_args,
                                    tmp_dir=out + '.tmp')
start = time.perf_counter()
executor.Executor(context).Do({}, {'examples': [examples]}, properties)
print('SECONDS', time.perf_counter() - start)
'''


def cpu() -> Dict[str, object]:
  """The CPU model, logical cores and the vector/matrix flags it has."""
  model, flags = 'unknown', set()
  with open('/proc/cpuinfo', encoding='utf-8') as f:
    for line in f:
      key, _, value = line.partition(':')
      if key.strip() == 'model name':
        model = value.strip()
      elif key.strip() == 'flags':
        flags = set(value.split())
  wanted = ('avx2', 'avx512f', 'avx512_vnni', 'avx512_bf16', 'amx_tile',
            'amx_int8', 'amx_bf16')
  return {'model': model, 'cores': os.cpu_count(),
          'flags': [f for f in wanted if f in flags]}


class PeakRss:
  """Polls a process tree: peak RSS of the root, of the tree, per child."""

  def __init__(self, pid: int):
    self._root = psutil.Process(pid)
    self.root_mb = self.tree_mb = 0.0
    self.children_mb: Dict[int, float] = {}
    self.samples: List[tuple] = []  # (epoch seconds, root MB, tree MB)
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._poll, daemon=True)
    self._thread.start()

  def _poll(self):
    while not self._stop.is_set():
      try:
        root = self._root.memory_info().rss / 2**20
        children = self._root.children(recursive=True)
      except psutil.Error:
        return
      total = root
      for child in children:
        try:
          mb = child.memory_info().rss / 2**20
        except psutil.Error:
          continue
        total += mb
        self.children_mb[child.pid] = max(self.children_mb.get(child.pid, 0),
                                          mb)
      self.root_mb = max(self.root_mb, root)
      self.tree_mb = max(self.tree_mb, total)
      self.samples.append((time.time(), root, total))
      self._stop.wait(POLL_S)

  def stop(self):
    self._stop.set()
    self._thread.join()


def _monitored(cmd: List[str], log_path: str):
  """Runs cmd with its output in log_path; (seconds, stdout, PeakRss)."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  start = time.perf_counter()
  with open(log_path, 'w', encoding='utf-8') as log:
    process = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                               stderr=log, text=True)
    rss = PeakRss(process.pid)
    stdout, _ = process.communicate()
    rss.stop()
  seconds = time.perf_counter() - start
  if process.returncode:
    sys.stderr.write(stdout[-3000:])
    raise SystemExit(f'{cmd[:4]} failed ({process.returncode}); see '
                     f'{log_path}')
  return seconds, stdout, rss


def reference(files: List[str], out_dir: str) -> float:
  """Seconds to read, encode and write the files in this process."""
  # pylint: disable=g-import-not-at-top
  import pyarrow as pa
  from pyarrow import csv as pa_csv
  import tensorflow as tf
  from tfx_bsl.coders import example_coder
  # pylint: enable=g-import-not-at-top
  os.makedirs(out_dir, exist_ok=True)
  start = time.perf_counter()
  encoder = example_coder.RecordBatchToExamplesEncoder()
  with tf.io.TFRecordWriter(os.path.join(out_dir, 'data.gz'),
                            options='GZIP') as writer:
    for path in files:
      for batch in pa_csv.open_csv(path):
        lists = [pa.ListArray.from_arrays(
            pa.array(range(batch.num_rows + 1), pa.int32()),
            column.cast(pa.float32()) if pa.types.is_floating(column.type)
            else column.cast(pa.binary()) if pa.types.is_string(column.type)
            else column) for column in batch.columns]
        for record in encoder.encode(
            pa.RecordBatch.from_arrays(lists, batch.schema.names)):
          writer.write(record)
  return time.perf_counter() - start


def examplegen(data_root: str, work: str, beam_args: List[str]):
  """(seconds of Do, PeakRss) of the CSV ExampleGen in a fresh process."""
  out = os.path.join(work, 'examples')
  code = _EXAMPLEGEN_CODE % {'label': scale_data.LABEL}
  _, stdout, rss = _monitored([sys.executable, '-c', code, data_root, out,
                               *beam_args], work + '.log')
  seconds = float(re.search(r'^SECONDS (\S+)$', stdout, re.M).group(1))
  shutil.rmtree(work, ignore_errors=True)
  return seconds, rss


def stage_seconds(metadata_path: str) -> Dict[str, float]:
  """{node: seconds} of the run's executions, from ML Metadata."""
  # pylint: disable=g-import-not-at-top
  from leantfx.pipeline import run_summary
  # pylint: enable=g-import-not-at-top
  store = run_summary.open_store(metadata_path)
  seconds = {}
  for context in store.get_contexts_by_type('node'):
    for execution in store.get_executions_by_context(context.id):
      node = context.name.split('.', 1)[-1]
      seconds[node] = round((execution.last_update_time_since_epoch -
                             execution.create_time_since_epoch) / 1000, 1)
  return seconds


def _stage_peaks(metadata_path: str, samples: List[tuple]
                 ) -> Dict[str, List[int]]:
  """{node: [peak MB of the run process, of its tree]} while it ran."""
  # pylint: disable=g-import-not-at-top
  from leantfx.pipeline import run_summary
  # pylint: enable=g-import-not-at-top
  store = run_summary.open_store(metadata_path)
  peaks = {}
  for context in store.get_contexts_by_type('node'):
    for execution in store.get_executions_by_context(context.id):
      start = execution.create_time_since_epoch / 1000
      end = execution.last_update_time_since_epoch / 1000
      inside = [(root, tree) for when, root, tree in samples
                if start <= when <= end]
      if inside and end - start >= 1:
        peaks[context.name.split('.', 1)[-1]] = [
            round(max(r for r, _ in inside)), round(max(t for _, t in inside))]
  return peaks


def _examples_uri(metadata_path: str) -> str:
  # pylint: disable=g-import-not-at-top
  from leantfx.pipeline import run_summary
  # pylint: enable=g-import-not-at-top
  store = run_summary.open_store(metadata_path)
  uris = [a.uri for a in store.get_artifacts_by_type('Examples')
          if '/CsvExampleGen/' in a.uri]
  return sorted(uris)[-1]


def _split_table(examples_uri: str, split: str):
  """(numeric matrix, labels) of a split, decoded with tfx_bsl."""
  # pylint: disable=g-import-not-at-top
  import numpy as np
  import pyarrow as pa
  import pyarrow.compute as pc
  import tensorflow as tf
  from tfx_bsl.coders import example_coder
  # pylint: enable=g-import-not-at-top
  files = sorted(glob.glob(os.path.join(examples_uri, f'Split-{split}', '*')))
  records = [r.numpy() for r in tf.data.TFRecordDataset(
      files, compression_type='GZIP').batch(65536)]
  decoder = example_coder.ExamplesToRecordBatchDecoder()
  table = pa.Table.from_batches([decoder.DecodeBatch(list(r))
                                 for r in records])

  def first_values(name, fill=None):
    # Each row's first value (fill: a missing value), vectorized.
    column = table.column(name).combine_chunks()
    rows = pc.list_parent_indices(column).to_numpy(zero_copy_only=False)
    values = column.flatten().to_numpy(zero_copy_only=False)
    out = np.full(len(column), fill, dtype=object)
    out[rows[::-1]] = values[::-1]
    return out

  columns = [first_values(name, np.nan).astype(np.float64)
             for name in scale_data.NUMERIC]
  for name in scale_data.CATEGORICAL:
    values = first_values(name)
    levels = {v: i for i, v in enumerate(sorted(set(values) - {None}))}
    columns.append(np.array([levels.get(v, np.nan) for v in values],
                            dtype=np.float64))
  labels = np.array([v.decode() for v in first_values(scale_data.LABEL)])
  return np.column_stack(columns), labels


def sklearn_accuracy(examples_uri: str) -> float:
  """HistGradientBoosting's eval accuracy on the run's own split."""
  # pylint: disable=g-import-not-at-top
  from sklearn.ensemble import HistGradientBoostingClassifier
  # pylint: enable=g-import-not-at-top
  x_train, y_train = _split_table(examples_uri, 'train')
  x_eval, y_eval = _split_table(examples_uri, 'eval')
  categorical = [False] * len(scale_data.NUMERIC) + [True] * len(
      scale_data.CATEGORICAL)
  model = HistGradientBoostingClassifier(categorical_features=categorical,
                                         random_state=0)
  model.fit(x_train, y_train)
  return float(model.score(x_eval, y_eval))


def optimizer_candidate_times(metadata_path: str) -> Dict[str, dict]:
  """{candidate: {techniques_s, tflite_s, train_steps}} the ModelOptimizer
  recorded on its output (custom property candidate_times): each candidate's
  technique training and its TFLite exports apart; empty without one."""
  # pylint: disable=g-import-not-at-top
  from leantfx.pipeline import run_summary
  # pylint: enable=g-import-not-at-top
  store = run_summary.open_store(metadata_path)
  for artifact in store.get_artifacts():
    if 'candidate_times' in artifact.custom_properties:
      return json.loads(
          artifact.custom_properties['candidate_times'].string_value)
  return {}


def optimizer_split(candidates: Dict[str, dict], optimizer_s: float,
                    trainer_s: float) -> Dict[str, float]:
  """The ModelOptimizer's time in three parts, and its training vs the
  Trainer's: technique training (every candidate but the baseline), TFLite
  exports (every candidate), and the rest (OpenVINO/ONNX exports, raw-column
  folds, scoring, timing, pushes)."""
  training = sum(t.get('techniques_s', 0) for name, t in candidates.items()
                 if name != 'baseline')
  tflite = sum(t.get('tflite_s', 0) for t in candidates.values())
  return {
      'optimizer_training_s': round(training, 1),
      'optimizer_tflite_s': round(tflite, 1),
      'optimizer_rest_s': round(optimizer_s - training - tflite, 1),
      'techniques_vs_trainer': round(training / trainer_s, 2),
  }


def leantfx_run(data_root: str, output: str,
                extra: List[str]) -> Dict[str, object]:
  """The default `leantfx run` on the span: seconds, stages, RSS, accuracy."""
  seconds, stdout, rss = _monitored(
      [LEANTFX, 'run', '--data-root', data_root, '--label', scale_data.LABEL,
       '--output', output, *extra],
      os.path.join(os.path.dirname(output), 'run.log'))
  record = json.load(open(sorted(glob.glob(os.path.join(
      output, 'logs', 'run-*.json')))[-1], encoding='utf-8'))
  metadata = os.path.join(output, 'metadata.sqlite')
  workers = sorted(rss.children_mb.values(), reverse=True)
  return {
      'seconds': seconds,
      'stages': stage_seconds(metadata),
      'stage_rss_mb': _stage_peaks(metadata, rss.samples),
      'accuracy': record.get('accuracy'),
      'examples_uri': _examples_uri(metadata),
      'rss_run_mb': rss.root_mb,
      'rss_tree_mb': rss.tree_mb,
      'rss_worker_mb': workers[:4],
      'optimizer_candidates': optimizer_candidate_times(metadata),
  }


def main() -> int:
  sizes = [int(s) for s in os.environ.get(
      'SCALE_ROWS', '250000,500000,1000000').split(',')]
  parts = int(os.environ.get('SCALE_FILES', '5'))
  stages = os.environ.get('SCALE_STAGES', 'reference,examplegen,run').split(
      ',')
  run_args = os.environ.get('SCALE_RUN_ARGS', '').split()
  # pylint: disable=g-import-not-at-top
  from leantfx.pipeline import beam_presets
  # pylint: enable=g-import-not-at-top
  machine = cpu()
  print(f'CPU: {machine["model"]}, {machine["cores"]} cores, flags '
        f'{", ".join(machine["flags"]) or "none of avx2/avx512/amx"}; load '
        f'{os.getloadavg()[0]:.2f}', flush=True)
  rows, notes = [], [f'cpu: {json.dumps(machine)}']
  for size in sizes:
    scratch = tempfile.mkdtemp(prefix=f'bench-scale-{size}-')
    try:
      data_root = os.path.join(scratch, 'data')
      scale_data.write_span(data_root, size, parts)
      files = scale_data.span_files(data_root)
      mb = sum(os.path.getsize(f) for f in files) / 2**20
      row = {'rows': size, 'files': parts, 'csv_mb': round(mb, 1),
             'load': round(os.getloadavg()[0], 2)}
      if 'reference' in stages:
        seconds = reference(files, os.path.join(scratch, 'reference'))
        row.update(reference_s=seconds, reference_rows_s=size / seconds)
      if 'examplegen' in stages:
        for name, args in (
            ('eg_in_memory', beam_presets.beam_pipeline_args(
                'direct', 'in_memory')),
            ('eg_multi2', beam_presets.beam_pipeline_args(
                'direct', 'multi_processing', 2))):
          seconds, rss = examplegen(data_root, os.path.join(scratch, name),
                                    args)
          row[f'{name}_s'] = seconds
          row[f'{name}_rows_s'] = size / seconds
          # [the executor's own process, its tree]: the same pair as a
          # run's stage_rss_mb; the workers are the tree's children.
          row[f'{name}_rss_mb'] = [round(rss.root_mb), round(rss.tree_mb)]
          row[f'{name}_rss_worker_mb'] = [
              round(m) for m in sorted(rss.children_mb.values(),
                                       reverse=True)[:4]]
        if 'reference_s' in row:
          row['eg_best_vs_reference'] = min(
              row['eg_in_memory_s'], row['eg_multi2_s']) / row['reference_s']
      if 'run' in stages:
        run = leantfx_run(data_root, os.path.join(scratch, 'run'), run_args)
        row['run_s'] = run['seconds']
        for node in ('CsvExampleGen', 'StatisticsGen', 'Augment',
                     'Transform', 'Trainer', 'Evaluator', 'ModelOptimizer'):
          if node in run['stages']:
            row[f'{node}_s'] = run['stages'][node]
            row[f'{node}_rows_s'] = round(
                size / max(run['stages'][node], 0.1))
        row.update(rss_run_mb=round(run['rss_run_mb']),
                   rss_tree_mb=round(run['rss_tree_mb']),
                   rss_worker_mb=[round(m) for m in run['rss_worker_mb']],
                   accuracy=run['accuracy'],
                   hgb_accuracy=sklearn_accuracy(run['examples_uri']))
        candidates = run['optimizer_candidates']
        if candidates and run['stages'].get('Trainer'):
          # Target: the techniques' training at most 3x the Trainer's; the
          # exports, folds and scoring are the rest of the optimizer's time.
          row.update(optimizer_split(
              candidates, run['stages'].get('ModelOptimizer', 0),
              run['stages']['Trainer']))
          notes.append(f'{size} rows: optimizer time per candidate (s): '
                       f'{json.dumps(candidates)}')
        notes.append(f'{size} rows: every stage (s): '
                     f'{json.dumps(run["stages"], sort_keys=True)}')
        notes.append(f'{size} rows: peak RSS MB per stage [run process, '
                     'tree]: '
                     f'{json.dumps(run["stage_rss_mb"], sort_keys=True)}')
      rows.append(row)
      print(json.dumps(row), flush=True)
    finally:
      shutil.rmtree(scratch, ignore_errors=True)
  notes += [
      'reference: pyarrow + tfx_bsl encoder + one gzip TFRecord file, one '
      'process; eg_*: leantfx CSV ExampleGen executor Do (fresh process, '
      'start-up of Beam included, TF import not; eg_*_rss_mb: [peak RSS of '
      'the executor process, of its process tree], eg_*_rss_worker_mb: the '
      'largest worker processes); run: default `leantfx '
      'run`, stage seconds from ML Metadata; rss_*: peak RSS polled every '
      f'{POLL_S} s (worker: the largest child processes).',
      f'SCALE_ROWS={",".join(map(str, sizes))} SCALE_FILES={parts} '
      f'SCALE_STAGES={",".join(stages)} SCALE_RUN_ARGS={" ".join(run_args)}',
  ]
  harness.report('scale', 'Ingestion and tabular stages at scale', rows,
                 notes)
  return 0


if __name__ == '__main__':
  sys.exit(main())
