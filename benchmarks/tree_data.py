"""A tabular span whose label is a set of axis-aligned rules: trees' ground.

Eight numeric features (standard normal, fixed seed) and a 3-class label
``grade`` (``low``, ``mid``, ``high``) scored from thresholds and one
interaction: the step functions a tree splits on in a few levels and a
small network rounds off, so gradient-boosted trees lead a network trained
for the same budget (issue 43: 0.819 vs HistGradientBoosting's 0.910 at
12,000 rows). ``flip`` of the labels are redrawn at random, so the best
reachable accuracy is about 1 - flip * 2/3. Nothing is downloaded; the same
seed and size give the same bytes.

  write_span(directory, rows) -> directory/span-1/rows.csv
"""
import os
from typing import Tuple

import numpy as np

SEED = 43
NUMERIC = tuple(f'x{i}' for i in range(8))
LABEL = 'grade'
CLASSES = ('low', 'mid', 'high')
FLIP = 0.03


def columns(rows: int, seed: int = SEED, flip: float = FLIP
           ) -> Tuple[np.ndarray, np.ndarray]:
  """(features [rows, 8] float, class ids [rows]) of the rule."""
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(rows, len(NUMERIC)))
  score = ((x[:, 0] > 0.4).astype(int) + (x[:, 1] < -0.3) +
           ((x[:, 2] > 0) & (x[:, 3] > 0.5)) +
           (np.abs(x[:, 4]) > 1.2) - (x[:, 5] > 1.0))
  label = np.clip(score, 0, 2).astype(int)
  redraw = rng.random(rows) < flip
  label[redraw] = rng.integers(0, len(CLASSES), size=int(redraw.sum()))
  return x, label


def write_span(directory: str, rows: int, seed: int = SEED,
               flip: float = FLIP) -> str:
  """Writes ``rows`` rows to ``directory/span-1/rows.csv``.

  Args:
    directory: the data root (created if missing).
    rows: rows to write.
    seed: the generator's seed.
    flip: share of labels redrawn at random.

  Returns:
    The span folder.
  """
  x, label = columns(rows, seed, flip)
  span = os.path.join(directory, 'span-1')
  os.makedirs(span, exist_ok=True)
  with open(os.path.join(span, 'rows.csv'), 'w', encoding='utf-8') as f:
    f.write(','.join(NUMERIC + (LABEL,)) + '\n')
    for row, y in zip(x, label):
      f.write(','.join(f'{v:.5f}' for v in row) + f',{CLASSES[y]}\n')
  return span
