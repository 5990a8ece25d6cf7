"""A generated tabular CSV span: 20 numeric and 2 categorical columns, 4 classes.

The shape of the user's span the training budgets were measured on (the
`segment` label: four classes that a linear mix of the numeric columns and
the two categories separates, with label noise so no model reaches 100%).
Used by `python -m benchmarks.tabular_span --rows N --out DIR` to write
DIR/span-1/data.csv for `leantfx run --data-root DIR --label segment`.
"""
import argparse
import csv
import os

import numpy as np

NUMERIC = [f'x{i:02d}' for i in range(20)]
CATEGORICAL = {'region': ['north', 'south', 'east', 'west', 'centre'],
               'channel': ['web', 'store', 'phone']}
LABEL = 'segment'
CLASSES = ['bronze', 'silver', 'gold', 'platinum']


def write_span(root: str, rows: int, seed: int = 0) -> str:
  """Writes root/span-1/data.csv with `rows` rows; returns its path.

  Args:
    root: the --data-root directory (created if missing).
    rows: number of data rows.
    seed: numpy seed, so two runs write the same bytes.

  Returns:
    The CSV file's path.
  """
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(rows, len(NUMERIC)))
  cats = {name: rng.integers(0, len(values), size=rows)
          for name, values in CATEGORICAL.items()}
  weights = rng.normal(size=(len(NUMERIC), len(CLASSES)))
  # Scaled so that the Gumbel label noise leaves ~95% of the labels to the
  # features (the Bayes accuracy; a model above the default 0.9 gate).
  logits = 3.0 * (x @ weights)
  logits += 2.0 * np.eye(len(CLASSES))[cats['region'] % len(CLASSES)]
  logits += rng.gumbel(size=logits.shape)  # label noise
  label = logits.argmax(axis=1)
  span = os.path.join(root, 'span-1')
  os.makedirs(span, exist_ok=True)
  path = os.path.join(span, 'data.csv')
  with open(path, 'w', newline='', encoding='utf-8') as f:
    writer = csv.writer(f)
    writer.writerow(NUMERIC + list(CATEGORICAL) + [LABEL])
    for i in range(rows):
      writer.writerow([f'{v:.4f}' for v in x[i]]
                      + [CATEGORICAL[n][cats[n][i]] for n in CATEGORICAL]
                      + [CLASSES[label[i]]])
  return path


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--rows', type=int, default=150_000)
  parser.add_argument('--out', required=True)
  parser.add_argument('--seed', type=int, default=0)
  args = parser.parse_args(argv)
  print(write_span(args.out, args.rows, args.seed))
  return 0


if __name__ == '__main__':
  raise SystemExit(main())
