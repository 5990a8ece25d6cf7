"""The held-out README rows of bench_compression and bench_regression.

Runs both benches' ``readme_rows`` in one process and prints them as a
Markdown table (what | figure | command), with the total run time:

  .venv/bin/python -m benchmarks.heldout_table [--seeds N]

Results: ``results/heldout_table.json``.
"""
import argparse
import os
import time

from benchmarks import bench_compression
from benchmarks import bench_regression
from benchmarks import harness
from benchmarks import heldout


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--seeds', type=int, default=3)
  args = parser.parse_args(argv)
  start = time.perf_counter()
  rows = bench_compression.readme_rows(args.seeds)
  compression = time.perf_counter() - start
  rows += bench_regression.readme_rows(args.seeds)
  seconds = time.perf_counter() - start
  print('| what | figure | command |\n|---|---|---|')
  for row in rows:
    print(f"| {row['what']} | {row['figure']} | `{row['command']}` |")
  harness.report('heldout_table', 'Held-out README rows', rows, [
      heldout.RULE,
      f'Run time {seconds:.0f} s (compression {compression:.0f} s, '
      f'regression {seconds - compression:.0f} s); load average '
      f'{os.getloadavg()[0]:.1f} at the end (2 shared cores).'])


if __name__ == '__main__':
  main()
