"""Generated tabular spans with an identifier and dates: issue 42's second case.

Eight numeric features, a ``customer_id`` near-unique per row (10,000
distinct values in 12,000 rows: a repeat customer now and then), an
``order_date`` (``2024-03-01``) and a ``paid_at`` ISO timestamp
(``2024-03-01T12:34:56Z``), and a 3-class ``segment`` label. The label is
a nonlinear function of the features (products, thresholds, a sine) plus
the order's month and weekday (a seasonal effect a model sees only through
the date's calendar features) and noise (no learner reaches 1.0; the
identifier carries nothing). Some amounts are written ``NA``.
Nothing is downloaded; the same seed and size give the same bytes.

  write_span(directory, rows, seed) -> directory/span-1/data.csv
  python -m benchmarks.tabular_spans --out DIR --rows 12000
"""
import argparse
import csv
import datetime
import os
from typing import List

import numpy as np

SEED = 20261207
LABEL = 'segment'
IDENTIFIER = 'customer_id'
DATE = 'order_date'
TIMESTAMP = 'paid_at'
NUMERIC = tuple(f'f{i}' for i in range(8))
MARKED = 'f7'  # written 'NA' in ~5% of rows
CLASSES = ('bronze', 'silver', 'gold')
_EPOCH = datetime.datetime(2022, 1, 1, tzinfo=datetime.timezone.utc)
_DAYS = 3 * 365


def _scores(x: np.ndarray, when: List[datetime.datetime],
            rng: np.random.Generator) -> np.ndarray:
  """A nonlinear score per row; its terciles are the classes."""
  month = np.array([d.month for d in when])
  weekday = np.array([d.weekday() for d in when])
  score = (np.sin(2.0 * x[:, 0]) + x[:, 1] * x[:, 2] + (x[:, 3] > 0.5) * 1.2
           - np.abs(x[:, 4]) + 0.5 * x[:, 5] ** 2 - 0.3 * x[:, 6]
           + 0.8 * np.cos(2 * np.pi * month / 12) + 0.4 * (weekday >= 5))
  return score + rng.normal(scale=0.35, size=len(score))


def rows(count: int, seed: int = SEED) -> List[List[str]]:
  """The span's rows, header first."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(count, len(NUMERIC)))
  seconds = rng.integers(0, _DAYS * 86400, size=count)
  when = [_EPOCH + datetime.timedelta(seconds=int(s)) for s in seconds]
  score = _scores(x, when, rng)
  cuts = np.quantile(score, [1 / 3, 2 / 3])
  label = np.searchsorted(cuts, score)
  customers = rng.integers(0, max(1, int(count * 10 / 12)) * 4, size=count)
  out = [[IDENTIFIER, *NUMERIC, DATE, TIMESTAMP, LABEL]]
  for i in range(count):
    values = [f'{v:.4f}' for v in x[i]]
    if rng.random() < 0.05:
      values[NUMERIC.index(MARKED)] = 'NA'
    paid = when[i] + datetime.timedelta(minutes=int(rng.integers(0, 600)))
    out.append([f'C{customers[i]:07d}', *values,
                when[i].strftime('%Y-%m-%d'),
                paid.strftime('%Y-%m-%dT%H:%M:%SZ'), CLASSES[label[i]]])
  return out


def write_span(directory: str, count: int, seed: int = SEED) -> str:
  """Writes DIRECTORY/span-1/data.csv; returns DIRECTORY."""
  span = os.path.join(directory, 'span-1')
  os.makedirs(span, exist_ok=True)
  with open(os.path.join(span, 'data.csv'), 'w', newline='',
            encoding='utf-8') as f:
    csv.writer(f).writerows(rows(count, seed))
  return directory


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--out', required=True)
  parser.add_argument('--rows', type=int, default=12_000)
  parser.add_argument('--seed', type=int, default=SEED)
  args = parser.parse_args(argv)
  print(write_span(args.out, args.rows, args.seed))


if __name__ == '__main__':
  main()
