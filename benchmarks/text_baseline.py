"""The text baseline on a run's own rows: TF-IDF (1-2-grams) + logistic
regression in scikit-learn, trained on the run's train split and scored on
its eval split (the CsvExampleGen's Examples), so it and leantfx's eval
accuracy are measured on the same rows.

  python -m benchmarks.text_baseline --output RUN_OUTPUT --text description \
      --label category
"""
import argparse
import glob
import os
import time
from typing import Dict, List, Tuple

import numpy as np


def read_split(output: str, split: str, columns: List[str]
              ) -> Dict[str, List[str]]:
  """{column: values as written} of one split of the run's raw Examples.

  Raises:
    FileNotFoundError: the run output holds no CsvExampleGen examples.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  pattern = os.path.join(output, 'tfx', 'CsvExampleGen', 'examples', '*',
                         f'Split-{split}', '*.gz')
  files = sorted(glob.glob(pattern))
  if not files:
    raise FileNotFoundError(f'No raw examples match {pattern}.')
  # The newest execution's files (by its number: '10' after '9'): one
  # Examples artifact a run.
  newest = max({os.path.dirname(os.path.dirname(f)) for f in files},
               key=lambda d: int(os.path.basename(d)))
  files = [f for f in files if f.startswith(newest + os.sep)]
  values: Dict[str, List[str]] = {c: [] for c in columns}
  for record in tf.data.TFRecordDataset(files, compression_type='GZIP'):
    example = tf.train.Example.FromString(record.numpy())
    for column in columns:
      feature = example.features.feature[column]
      raw = list(feature.bytes_list.value) or [
          str(v).encode() for v in feature.int64_list.value] or [
              str(v).encode() for v in feature.float_list.value]
      values[column].append(raw[0].decode('utf-8') if raw else '')
  return values


def tfidf_logistic_regression(output: str, text: str, label: str
                             ) -> Tuple[float, float, int, int]:
  """(eval accuracy, fit seconds, train rows, eval rows) of the baseline."""
  # Lazy: only the benchmark needs scikit-learn.
  from sklearn.feature_extraction.text import TfidfVectorizer  # pylint: disable=g-import-not-at-top
  from sklearn.linear_model import LogisticRegression  # pylint: disable=g-import-not-at-top
  train = read_split(output, 'train', [text, label])
  evaluation = read_split(output, 'eval', [text, label])
  start = time.perf_counter()
  vectorizer = TfidfVectorizer(ngram_range=(1, 2))
  model = LogisticRegression(max_iter=1000).fit(
      vectorizer.fit_transform(train[text]), train[label])
  seconds = time.perf_counter() - start
  predicted = model.predict(vectorizer.transform(evaluation[text]))
  accuracy = float(np.mean(predicted == np.asarray(evaluation[label])))
  return accuracy, seconds, len(train[label]), len(evaluation[label])


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--output', required=True,
                      help='the leantfx run --output folder')
  parser.add_argument('--text', required=True)
  parser.add_argument('--label', required=True)
  args = parser.parse_args(argv)
  accuracy, seconds, n_train, n_eval = tfidf_logistic_regression(
      args.output, args.text, args.label)
  print(f'TF-IDF (1-2-grams) + LogisticRegression: eval accuracy '
        f'{accuracy:.4f} on {n_eval} rows (trained on {n_train} in '
        f'{seconds:.1f} s)')


if __name__ == '__main__':
  main()
