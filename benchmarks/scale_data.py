"""The scale benchmark's data: a span of classification rows as CSV files.

scikit-learn's ``make_classification`` (fixed seed) gives 20 numeric
features and 4 classes; two categorical columns are cut from two more
informative directions, so they carry signal as text. The label is written
as text (``class_0`` .. ``class_3``). Nothing is downloaded; the same seed
and size give the same bytes.

  write_span(directory, rows, files) -> directory/span-1/part-00.csv ...
"""
import os
from typing import List

import numpy as np

SEED = 20240601
NUMERIC = tuple(f'x{i:02d}' for i in range(20))
CATEGORICAL = ('region', 'tier')
LABEL = 'segment'
CLASSES = 4
# Levels of the categorical columns (quantile bins of a hidden direction).
_REGIONS = ('north', 'south', 'east', 'west', 'central')
_TIERS = ('basic', 'plus', 'pro')


def _columns(rows: int, seed: int):
  # Lazy: only the benchmark needs scikit-learn.
  from sklearn.datasets import make_classification  # pylint: disable=g-import-not-at-top
  features, labels = make_classification(
      n_samples=rows, n_features=len(NUMERIC) + 2, n_informative=12,
      n_redundant=4, n_classes=CLASSES, n_clusters_per_class=2,
      class_sep=1.0, flip_y=0.02, random_state=seed)
  numeric = features[:, :len(NUMERIC)]
  hidden = features[:, len(NUMERIC):]
  region = np.digitize(hidden[:, 0], np.quantile(
      hidden[:, 0], np.linspace(0, 1, len(_REGIONS) + 1)[1:-1]))
  tier = np.digitize(hidden[:, 1], np.quantile(
      hidden[:, 1], np.linspace(0, 1, len(_TIERS) + 1)[1:-1]))
  return numeric, region, tier, labels


def write_span(directory: str, rows: int, files: int = 5,
               seed: int = SEED) -> str:
  """Writes ``rows`` rows as ``files`` CSV files of ``directory/span-1/``.

  Args:
    directory: the data root (created if missing).
    rows: rows in all.
    files: CSV files the rows are cut into (nearly equal parts, in order).
    seed: make_classification's random_state.

  Returns:
    The span folder.
  """
  numeric, region, tier, labels = _columns(rows, seed)
  span = os.path.join(directory, 'span-1')
  os.makedirs(span, exist_ok=True)
  header = ','.join(NUMERIC + CATEGORICAL + (LABEL,)) + '\n'
  regions = np.array(_REGIONS)[region]
  tiers = np.array(_TIERS)[tier]
  names = np.array([f'class_{c}' for c in range(CLASSES)])[labels]
  bounds = np.linspace(0, rows, files + 1).astype(int)
  for part in range(files):
    start, stop = bounds[part], bounds[part + 1]
    with open(os.path.join(span, f'part-{part:02d}.csv'), 'w',
              encoding='utf-8', newline='') as f:
      f.write(header)
      for i in range(start, stop, 10000):
        end = min(stop, i + 10000)
        text = np.char.mod('%.5f', numeric[i:end])
        lines = [','.join(row) for row in
                 np.column_stack([text, regions[i:end], tiers[i:end],
                                  names[i:end]]).tolist()]
        f.write('\n'.join(lines) + '\n')
  return span


def span_files(directory: str) -> List[str]:
  """The CSV files write_span wrote under directory, in order."""
  span = os.path.join(directory, 'span-1')
  return [os.path.join(span, n) for n in sorted(os.listdir(span))
          if n.endswith('.csv')]


def main(argv=None) -> int:
  """``python -m benchmarks.scale_data --rows N --out DIR [--files K]``."""
  import argparse  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--rows', type=int, required=True)
  parser.add_argument('--out', required=True, help='the data root')
  parser.add_argument('--files', type=int, default=5)
  parser.add_argument('--seed', type=int, default=SEED)
  args = parser.parse_args(argv)
  span = write_span(args.out, args.rows, args.files, args.seed)
  print(f'wrote {args.rows:,} rows to {span}: leantfx run --data-root '
        f'{args.out} --label {LABEL}')
  return 0


if __name__ == '__main__':
  raise SystemExit(main())
