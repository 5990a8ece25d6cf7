"""Retraining figures: warm vs cold start on a new span, and cached re-runs.

1. A new span lands: time from its _SUCCESS marker to a pushed model, as
   `leantfx watch --once` (the same `leantfx run` path) measures it, and the
   eval accuracy reached, warm-started from the blessed span-1 model vs
   trained from scratch, both with the same small step budget on the same
   span. Two output folders are prepared identically (span 1, BASE_STEPS
   steps, pushed), then span 2 lands in both.
2. Re-running an unchanged pipeline: wall time of the first run vs the
   second and third identical runs, with the cache counts each run reports.

Penguins (344 rows, the bundled data) on LocalDagRunner, DirectRunner
in_memory. The spans hold the same rows, so the warm start starts from a
model that already fits them: the accuracy gap is the effect of starting
from trained weights with a small budget, not of new data.

  python -m benchmarks.bench_orchestration [--base-steps N] [--span-steps N]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

from benchmarks import harness

BASE_STEPS = 300  # Enough for ~0.98 eval accuracy on penguins (README).
SPAN_STEPS = 20  # A small budget, where the starting weights matter.


def _env():
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')


def _leantfx(args, expect=(0,)):
  cmd = [os.path.join(os.path.dirname(sys.executable), 'leantfx')] + args
  start = time.perf_counter()
  result = subprocess.run(cmd, env=_env(), capture_output=True, text=True,
                          check=False)
  seconds = time.perf_counter() - start
  if result.returncode not in expect:
    sys.stderr.write(result.stdout[-4000:] + result.stderr[-4000:])
    raise SystemExit(f'{" ".join(args[:2])} failed: exit {result.returncode}')
  return seconds, result.stdout


def _summary(output):
  from leantfx.pipeline import run_summary  # pylint: disable=g-import-not-at-top
  return run_summary.summarize(
      os.path.join(output, 'metadata.sqlite'), 'leantfx-penguins')


def _land(data_root, span):
  from leantfx import datasets  # pylint: disable=g-import-not-at-top
  datasets.prepare('penguins', data_root, span)
  open(os.path.join(data_root, f'span-{span}', '_SUCCESS'), 'w').close()


def _warm_vs_cold(scratch, base_steps, span_steps):
  rows = []
  for mode in ('cold', 'warm'):
    data = os.path.join(scratch, f'{mode}-data')
    out = os.path.join(scratch, f'{mode}-out')
    os.makedirs(data)
    common = ['watch', '--data-root', data, '--output', out, '--dataset',
              'penguins', '--once', '--epochs', '1',
              # Both must push so the time to a pushed model exists; the
              # gate itself is measured by the e2e test.
              '--min-accuracy', '0', '--max-accuracy-drop', '1',
              '--baseline-margin', 'off']
    _land(data, 1)
    _leantfx(common + ['--train-steps', str(base_steps)])
    _land(data, 2)
    extra = ['--warm-start'] if mode == 'warm' else []
    landed = time.perf_counter()
    _, log = _leantfx(common + ['--train-steps', str(span_steps)] + extra)
    seconds = time.perf_counter() - landed
    if 'span 2: result pushed' not in log:
      sys.stderr.write(log[-4000:])
      raise SystemExit(f'{mode}: span 2 was not pushed')
    summary = _summary(out)
    rows.append({'start': mode, 'span_2_steps': span_steps,
                 'landed_to_pushed_s': seconds,
                 'eval_accuracy': summary.accuracy,
                 'eval_examples': summary.example_count})
  cold, warm = rows
  rows.append({'start': 'ratio warm / cold',
               'landed_to_pushed_s':
                   warm['landed_to_pushed_s'] / cold['landed_to_pushed_s'],
               'eval_accuracy': warm['eval_accuracy'] - cold['eval_accuracy']})
  return rows


def _cached(scratch, base_steps):
  out = os.path.join(scratch, 'cache-out')
  args = ['run', '--dataset', 'penguins', '--output', out, '--train-steps',
          str(base_steps), '--epochs', '1']
  rows = []
  first = None
  for name in ('first', 'second', 'third'):
    seconds, log = _leantfx(args)
    first = first or seconds
    # What the run itself reports: '(N components: R ran, C from cache)'.
    counts = [line[line.index('('):] for line in log.splitlines()
              if line.startswith('leantfx run finished')]
    rows.append({'run': name, 'seconds': seconds,
                 'ratio_to_first': seconds / first,
                 'components': counts[0] if counts else '?',
                 # Which nodes executed (not from cache), read from ML
                 # Metadata right after this run.
                 'executed': ' '.join(sorted(
                     node for node, e in _summary(out).executions.items()
                     if e.state == 'complete'))})
  return rows


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--base-steps', type=int, default=BASE_STEPS)
  parser.add_argument('--span-steps', type=int, default=SPAN_STEPS)
  args = parser.parse_args(argv)
  with tempfile.TemporaryDirectory(prefix='bench-orchestration-') as scratch:
    warm_rows = _warm_vs_cold(scratch, args.base_steps, args.span_steps)
    cache_rows = _cached(scratch, args.base_steps)
  harness.report(
      'orchestration_warm_start',
      'New span landed -> pushed model: warm start vs cold start (penguins)',
      warm_rows,
      notes=[
          f'Span 1 trained {args.base_steps} steps and pushed in both output '
          f'folders; span 2 then trains {args.span_steps} steps, warm-started '
          'from the blessed span-1 model or from scratch.',
          'landed_to_pushed_s: `leantfx watch --once` started right after the '
          '_SUCCESS marker, until it recorded the push (one process each).',
          'The ratio row gives warm/cold time and the accuracy difference '
          '(warm - cold) on the 66-example eval split.',
      ])
  harness.report(
      'orchestration_cache',
      'Re-running an unchanged pipeline: cached vs first run (penguins)',
      cache_rows,
      notes=[
          'Same command three times on one output folder (LocalDagRunner).',
          'components: what each run reports about itself (ran / from '
          'cache; resolvers always run). Which components re-run depends on '
          'the graph: the Evaluator re-runs once the first model becomes the '
          'blessed baseline, and a node whose inputs change each run (e.g. '
          "the ValidationGate's drift baseline of earlier reports) re-runs "
          'every time.',
      ])
  return 0


if __name__ == '__main__':
  sys.exit(main())
