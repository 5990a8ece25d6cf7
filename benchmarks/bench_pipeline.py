"""Figure: wall time of `leantfx run --dataset penguins` vs the hand-wired
7-component TFX penguin pipeline (benchmarks/baseline_penguin.py), measured
in one run, alternating, each in a fresh process on a fresh output folder.

Both train the same number of steps (leantfx's penguins default, 1000). The
leantfx run does much more (validation gate, augmentation, Evaluator gate,
model optimization and TFLite push); the ratio says what that costs in time.

  python -m benchmarks.bench_pipeline [--repeats N]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks import harness

TRAIN_STEPS = 1000  # leantfx's default for penguins (leantfx/cli.py).


def _timed(cmd, env) -> float:
  start = time.perf_counter()
  result = subprocess.run(cmd, env=env, capture_output=True, text=True,
                          check=False)
  seconds = time.perf_counter() - start
  if result.returncode != 0:
    sys.stderr.write(result.stdout[-3000:] + result.stderr[-3000:])
    raise SystemExit(f'{cmd[:3]} failed with exit code {result.returncode}')
  return seconds


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--repeats', type=int, default=2)
  args = parser.parse_args(argv)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  leantfx = os.path.join(os.path.dirname(sys.executable), 'leantfx')
  times = {'leantfx': [], 'baseline': []}
  with tempfile.TemporaryDirectory() as scratch:
    for i in range(args.repeats):
      out = os.path.join(scratch, f'leantfx-{i}')
      times['leantfx'].append(_timed(
          [leantfx, 'run', '--dataset', 'penguins', '--output', out,
           '--train-steps', str(TRAIN_STEPS), '--no-cache'], env))
      out = os.path.join(scratch, f'baseline-{i}')
      times['baseline'].append(_timed(
          [sys.executable, '-m', 'benchmarks.baseline_penguin', out,
           str(TRAIN_STEPS)], env))
  rows = []
  for name, label in (('baseline', 'TFX penguin shape, 7 components'),
                      ('leantfx', 'leantfx run --dataset penguins')):
    rows.append({
        'pipeline': label,
        'runs': len(times[name]),
        'median_s': statistics.median(times[name]),
        'min_s': min(times[name]),
        'max_s': max(times[name]),
    })
  ratio = statistics.median(times['leantfx']) / statistics.median(
      times['baseline'])
  rows.append({'pipeline': 'ratio leantfx / baseline (median)',
               'median_s': ratio})
  harness.report(
      'pipeline', 'Pipeline wall time on penguins (LocalDagRunner, '
      'DirectRunner in_memory)', rows,
      notes=[
          f'{TRAIN_STEPS} train steps each; runs alternate; fresh output '
          'folder and process per run; caching off.',
          'leantfx runs its whole default job (validation gate, '
          'augmentation, precision probe, Evaluator gate with baseline, '
          'ModelOptimizer and TFLite push); the baseline runs 7 components.',
      ])
  return 0


if __name__ == '__main__':
  sys.exit(main())
