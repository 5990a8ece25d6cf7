"""Bulk scoring at a user's size: `leantfx score` on a generated span.

One run, side by side, on the same files:
1. the scale benchmark's generator (benchmarks/scale_data.py) writes
   SCORE_ROWS rows in 5 CSV files; the first SCORE_TRAIN_ROWS rows of them
   are a span of their own;
2. `leantfx run --techniques none --min-accuracy 0 --baseline-margin off`
   on that small span
   pushes the trained SavedModel and the ModelOptimizer's pick for TFLite,
   OpenVINO and ONNX (the gate is off: this measures scoring, not the
   model; its accuracy is reported);
3. `leantfx score --label segment` scores the big span with each push, on
   the DirectRunner in_memory (one core) and multi_processing with one
   worker per core: seconds, rows/s, peak RSS of the command and of its
   process tree, and accuracy (all rows; the first SCORE_TRAIN_ROWS of them
   were the small span's, 80% of which trained).

Arguments (environment): SCORE_ROWS (default 1000000; 20000 is a smoke
check), SCORE_TRAIN_ROWS (default 20000), SCORE_RUNTIMES (default
serving,tflite,openvino,onnx), SCORE_MODES (default
in_memory,multi_processing).

  make bench BENCH_ARGS=score
  SCORE_ROWS=200000 make bench BENCH_ARGS=score
"""
import json
import os
import shutil
import sys
import tempfile
import time

from benchmarks import bench_scale
from benchmarks import harness
from benchmarks import scale_data

LEANTFX = os.path.join(os.path.dirname(sys.executable), 'leantfx')


def _small_span(big_root: str, small_root: str, rows: int) -> None:
  """The first ``rows`` rows of the big span's first file, as a span."""
  source = os.path.join(big_root, 'span-1', 'part-00.csv')
  span = os.path.join(small_root, 'span-1')
  os.makedirs(span)
  with open(source, encoding='utf-8') as f, open(
      os.path.join(span, 'part-00.csv'), 'w', encoding='utf-8') as out:
    out.write(f.readline())
    for _ in range(rows):
      line = f.readline()
      if not line:
        raise SystemExit(f'{source} has fewer than {rows} rows: raise '
                         'SCORE_ROWS or lower SCORE_TRAIN_ROWS.')
      out.write(line)


def main() -> int:
  rows = int(os.environ.get('SCORE_ROWS', '1000000'))
  train_rows = int(os.environ.get('SCORE_TRAIN_ROWS', '20000'))
  runtimes = os.environ.get('SCORE_RUNTIMES',
                            'serving,tflite,openvino,onnx').split(',')
  modes = os.environ.get('SCORE_MODES', 'in_memory,multi_processing').split(
      ',')
  cores = len(os.sched_getaffinity(0))
  work = tempfile.mkdtemp(prefix=f'bench-score-{rows}-')
  results = []
  try:
    big, small = os.path.join(work, 'big'), os.path.join(work, 'small')
    started = time.perf_counter()
    scale_data.write_span(big, rows, files=5)
    _small_span(big, small, train_rows)
    print(f'wrote {rows:,} rows in {time.perf_counter() - started:.1f} s',
          flush=True)
    output = os.path.join(work, 'out')
    seconds, _, _ = bench_scale._monitored(  # pylint: disable=protected-access
        [LEANTFX, 'run', '--data-root', small, '--label', scale_data.LABEL,
         '--name', 'score', '--techniques', 'none', '--min-accuracy', '0',
         '--baseline-margin', 'off',
         '--output', output],
        os.path.join(work, 'run.log'))
    print(f'trained and pushed on {train_rows:,} rows in {seconds:.0f} s',
          flush=True)
    for runtime in runtimes:
      for mode in modes:
        out = os.path.join(work, f'scores-{runtime}-{mode}')
        cmd = [LEANTFX, 'score', '--model-base-path',
               os.path.join(output, runtime, 'score'), '--data-root', big,
               '--out', out, '--label', scale_data.LABEL, '--beam-mode', mode]
        if mode == 'multi_processing':
          cmd += ['--beam-workers', str(cores)]
        seconds, _, rss = bench_scale._monitored(  # pylint: disable=protected-access
            cmd, os.path.join(work, f'score-{runtime}-{mode}.log'))
        with open(os.path.join(out, 'summary.json'), encoding='utf-8') as f:
          summary = json.load(f)
        assert summary['rows_scored'] == rows, summary
        results.append({
            'runtime': runtime, 'beam mode': mode,
            'workers': cores if mode == 'multi_processing' else 1,
            'rows': rows, 'seconds': round(seconds, 1),
            'rows/s': round(rows / seconds),
            'peak RSS MB (command)': round(rss.root_mb),
            'peak RSS MB (tree)': round(rss.tree_mb),
            'accuracy': round(summary['accuracy'], 4)})
        print(results[-1], flush=True)
        shutil.rmtree(out)
  finally:
    shutil.rmtree(work, ignore_errors=True)
  cpu = bench_scale.cpu()
  harness.report(
      'score', f'leantfx score: {rows:,} generated rows, 5 CSV files',
      results, notes=[
          f'CPU: {cpu["model"]}, {cpu["cores"]} logical cores, flags '
          f'{", ".join(cpu["flags"]) or "none of AVX2/AVX-512/AMX"}',
          f'model: `leantfx run --techniques none` on the first '
          f'{train_rows:,} rows; each runtime\'s push as the run chose it',
          'seconds: the whole command (TensorFlow import, the span counted '
          'once, Beam, the parts joined); every row scored, with its '
          'PredictionLog',
          f'command: SCORE_ROWS={rows} SCORE_TRAIN_ROWS={train_rows} '
          f'SCORE_RUNTIMES={",".join(runtimes)} SCORE_MODES={",".join(modes)} '
          'make bench BENCH_ARGS=score'])
  return 0


if __name__ == '__main__':
  sys.exit(main())
