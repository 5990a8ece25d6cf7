"""Generated spans with free text (and a date): issue 42's column figures.

A text-classification span like a ticket queue's: a short description (mean
~47 characters, commas and quotes inside, some non-ASCII words), a
``priority`` (categorical), a ``size`` (numeric) and, when asked, an
``opened`` ISO 8601 timestamp and a ``ticket_id`` (an identifier, distinct
per row); the label ``category`` has 8 classes.

The description's words come from class-conditional distributions over one
shared vocabulary: about half the words are common to every class ("the",
"please", "order", ...); the rest are drawn from the content vocabulary with
Zipf weights over a class's own random order of it, so every content word
occurs in every class, just more often in some. The priority and the size
carry a little signal; the text carries most. Nothing is downloaded; the
same seed and size give the same bytes.

  write_span(directory, rows, seed) -> directory/span-1/data.csv

  python -m benchmarks.column_spans --out DIR --rows 50000 [--date] [--id]
"""
import argparse
import csv
import datetime
import os
from typing import Dict, List, Sequence

import numpy as np

SEED = 20261207
LABEL = 'category'
TEXT = 'description'
CATEGORICAL = 'priority'
NUMERIC = 'size'
DATE = 'opened'
DATE_FORMAT = '%Y-%m-%dT%H:%M:%S%z'
IDENTIFIER = 'ticket_id'
CLASSES = ('billing', 'shipping', 'returns', 'account', 'technical',
           'warranty', 'sales', 'feedback')
_COMMON = (
    'the', 'a', 'my', 'i', 'is', 'it', 'to', 'and', 'of', 'for', 'on', 'in',
    'with', 'not', 'was', 'please', 'help', 'order', 'need', 'can', 'you',
    'this', 'have', 'no', 'again', 'still', 'today', 'new', 'our', 'why')
_PRIORITIES = ('low', 'medium', 'high', 'urgent')
_SYLLABLES = ('ka', 'lo', 'mi', 'ne', 'ru', 'ta', 'vo', 'shi', 'pe', 'da',
              'gri', 'bel', 'mon', 'tek', 'sar', 'fu', 'zé', 'ñu', 'ør', 'kü')
# Content words and how concentrated a class's word use is: Zipf exponent
# of its word ranks (0.9 leaves a TF-IDF + logistic regression at ~0.85-0.9
# on 50k rows, like issue 42's real span, 0.870).
_CONTENT_WORDS = 3000
_ZIPF = 0.9
_COMMON_SHARE = 0.45


def _vocabulary(rng: np.random.Generator) -> List[str]:
  words = set()
  while len(words) < _CONTENT_WORDS:
    parts = rng.choice(_SYLLABLES, size=rng.integers(2, 4))
    words.add(''.join(parts))
  return sorted(words)


def _class_weights(rng: np.random.Generator, size: int) -> np.ndarray:
  """One Zipf distribution per class over its own random order of words."""
  ranks = np.arange(1, size + 1, dtype=np.float64) ** -_ZIPF
  weights = np.empty((len(CLASSES), size))
  for c in range(len(CLASSES)):
    weights[c, rng.permutation(size)] = ranks
  return weights / weights.sum(axis=1, keepdims=True)


def _text(rng, words: Sequence[str], weights: np.ndarray) -> str:
  count = int(np.clip(rng.poisson(7.8), 1, 30))
  out = []
  for _ in range(count):
    if rng.random() < _COMMON_SHARE:
      out.append(_COMMON[rng.integers(len(_COMMON))])
    else:
      out.append(words[rng.choice(len(words), p=weights)])
  if count > 2 and rng.random() < 0.3:
    i = int(rng.integers(count))
    out[i] = f'"{out[i]}"'
  if count > 3 and rng.random() < 0.4:
    i = int(rng.integers(1, count - 1))
    out[i] += ','
  text = ' '.join(out)
  return text[0].upper() + text[1:]


def rows(count: int, seed: int = SEED, date: bool = False,
         identifier: bool = False) -> List[Dict[str, str]]:
  """``count`` generated rows as {column: value as written}.

  The words and each class's distribution over them are fixed (drawn from
  SEED); ``seed`` draws the rows, so spans of different seeds are fresh
  rows of the same classes.
  """
  world = np.random.default_rng(SEED)
  words = _vocabulary(world)
  weights = _class_weights(world, len(words))
  rng = np.random.default_rng(seed)
  labels = rng.integers(len(CLASSES), size=count)
  start = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
  out = []
  for i, label in enumerate(labels):
    row = {IDENTIFIER: f'T-{seed % 1000:03d}-{i:07d}'} if identifier else {}
    row[TEXT] = _text(rng, words, weights[label])
    # A little signal in the priority and the size; most is in the text.
    shift = label % len(_PRIORITIES)
    row[CATEGORICAL] = _PRIORITIES[(shift + rng.integers(0, 3)) %
                                   len(_PRIORITIES)]
    row[NUMERIC] = f'{rng.gamma(2.0, 10.0 + 3.0 * label):.1f}'
    if date:
      opened = start + datetime.timedelta(
          days=int(rng.integers(0, 365)), hours=int(8 + label + rng.integers(
              0, 6)), minutes=int(rng.integers(0, 60)))
      row[DATE] = opened.strftime('%Y-%m-%dT%H:%M:%SZ')
    row[LABEL] = CLASSES[label]
    out.append(row)
  return out


def write_span(directory: str, count: int, seed: int = SEED,
               date: bool = False, identifier: bool = False) -> str:
  """Writes ``count`` rows to directory/span-1/data.csv; returns the file."""
  span = os.path.join(directory, 'span-1')
  os.makedirs(span, exist_ok=True)
  path = os.path.join(span, 'data.csv')
  generated = rows(count, seed, date, identifier)
  with open(path, 'w', newline='', encoding='utf-8') as f:
    writer = csv.DictWriter(f, fieldnames=list(generated[0]))
    writer.writeheader()
    writer.writerows(generated)
  return path


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--out', required=True, help='the data root to write')
  parser.add_argument('--rows', type=int, default=50_000)
  parser.add_argument('--seed', type=int, default=SEED)
  parser.add_argument('--date', action='store_true',
                      help=f'add the {DATE!r} ISO 8601 timestamp column')
  parser.add_argument('--id', action='store_true',
                      help=f'add the {IDENTIFIER!r} identifier column')
  args = parser.parse_args(argv)
  print(write_span(args.out, args.rows, args.seed, args.date, args.id))


if __name__ == '__main__':
  main()
