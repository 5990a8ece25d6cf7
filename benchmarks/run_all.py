"""Runs every benchmarks/bench_<name>.py (or those named) in its own process.

Usage: python -m benchmarks.run_all [NAME ...]   (e.g. `make bench BENCH_ARGS=pipeline`)
"""
import glob
import os
import subprocess
import sys


def main(argv=None) -> int:
  names = list(sys.argv[1:] if argv is None else argv)
  here = os.path.dirname(os.path.abspath(__file__))
  available = sorted(
      os.path.basename(p)[len('bench_'):-len('.py')]
      for p in glob.glob(os.path.join(here, 'bench_*.py')))
  unknown = sorted(set(names) - set(available))
  if unknown:
    print(f'unknown benchmark(s) {unknown}; available: {available}',
          file=sys.stderr)
    return 2
  failed = []
  for name in names or available:
    print(f'\n### benchmarks.bench_{name}', flush=True)
    code = subprocess.call([sys.executable, '-m', f'benchmarks.bench_{name}'],
                           cwd=os.path.dirname(here))
    if code:
      failed.append(name)
  if failed:
    print(f'\nbenchmarks that failed: {failed}', file=sys.stderr)
    return 1
  return 0


if __name__ == '__main__':
  sys.exit(main())
