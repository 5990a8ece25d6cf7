"""Figure: the network, the trees and HistGradientBoosting on one split.

Writes benchmarks/tree_data.py's span (default 12,000 rows: 8 numeric
features, 3 classes of axis-aligned rules, 3% of labels redrawn), runs the
default ``leantfx run`` on it (``--model-family auto``, the ModelOptimizer
off: it has nothing to do with the choice), and reads:

- the Trainer's family record (models/model_family.py): the network's and
  the trees' accuracy on the same eval rows, the family exported and why,
  the trees' seconds;
- the Evaluator's accuracy of the pushed model (TFMA, the whole eval split);
- scikit-learn's HistGradientBoostingClassifier (defaults, random_state 0)
  fitted on exactly the rows of ExampleGen's train split, scored on its eval
  split: the same rows the pipeline trained and evaluated on.

  python -m benchmarks.bench_trees [--rows 12000] [--model-family auto]

``--time-read N`` writes N transformed rows of 22 columns and times the
sampled read the family choice makes of them (models/split_arrays.py).

``--time-rows N`` (no pipeline run) times the trees alone at the sizes a
1M-row default run hands them: N train rows (the sample cap,
models/model_family.TREES_MAX_TRAIN_ROWS) of benchmarks/scale_data.py's
columns (20 numeric, 2 categorical ids, 4 classes), then the prediction of
EVAL_MAX_ROWS rows.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, Tuple

import numpy as np

from benchmarks import harness
from benchmarks import tree_data

NAME = 'graded'


def _split_rows(examples_uri: str, split: str) -> Tuple[np.ndarray, np.ndarray]:
  """(features [n, 8], class ids [n]) of an ExampleGen split's raw rows."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  files = glob.glob(os.path.join(examples_uri, f'Split-{split}', '*'))
  rows, labels = [], []
  for record in tf.data.TFRecordDataset(files, compression_type='GZIP'):
    feature = tf.train.Example.FromString(record.numpy()).features.feature
    rows.append([feature[n].float_list.value[0] for n in tree_data.NUMERIC])
    labels.append(tree_data.CLASSES.index(
        feature[tree_data.LABEL].bytes_list.value[0].decode()))
  return np.array(rows), np.array(labels)


def _hist_gradient_boosting(train, evaluation) -> Dict[str, float]:
  from sklearn.ensemble import HistGradientBoostingClassifier  # pylint: disable=g-import-not-at-top
  started = time.monotonic()
  model = HistGradientBoostingClassifier(random_state=0).fit(*train)
  seconds = time.monotonic() - started
  accuracy = float(np.mean(model.predict(evaluation[0]) == evaluation[1]))
  return {'accuracy': accuracy, 'seconds': seconds}


def pipeline_rows(rows: int, family: str, train_steps) -> Dict[str, Any]:
  """One default run on the span and HistGradientBoosting on its split."""
  from leantfx.models.training import callbacks  # pylint: disable=g-import-not-at-top
  from leantfx.pipeline import run_summary  # pylint: disable=g-import-not-at-top
  leantfx = os.path.join(os.path.dirname(sys.executable), 'leantfx')
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  with tempfile.TemporaryDirectory() as scratch:
    tree_data.write_span(os.path.join(scratch, 'data'), rows)
    out = os.path.join(scratch, 'out')
    argv = [leantfx, 'run', '--data-root', os.path.join(scratch, 'data'),
            '--label', tree_data.LABEL, '--name', NAME, '--output', out,
            '--no-optimize', '--model-family', family]
    if train_steps:
      argv += ['--train-steps', str(train_steps)]
    started = time.monotonic()
    result = subprocess.run(argv, env=env, capture_output=True, text=True,
                            check=False)
    run_seconds = time.monotonic() - started
    if result.returncode not in (0, 4):
      sys.stderr.write(result.stdout[-3000:] + result.stderr[-3000:])
      raise SystemExit(f'leantfx run failed ({result.returncode})')
    summary = run_summary.summarize(os.path.join(out, 'metadata.sqlite'),
                                    f'leantfx-{NAME}')
    model_run = summary.executions['Trainer'].outputs['model_run'][0].uri
    with open(os.path.join(model_run, callbacks.RECORD_FILE)) as f:
      record = json.load(f)
    uri = summary.executions['CsvExampleGen'].outputs['examples'][0].uri
    train, evaluation = _split_rows(uri, 'train'), _split_rows(uri, 'eval')
  family_record = record.get('model_family') or {}
  hgb = _hist_gradient_boosting(train, evaluation)
  return {
      'rows': rows, 'train_rows': len(train[1]),
      'eval_rows': len(evaluation[1]),
      'train_steps': (record.get('budget') or {}).get('steps'),
      'network_accuracy': family_record.get('network'),
      'trees_accuracy': family_record.get('trees'),
      'hist_gradient_boosting_accuracy': hgb['accuracy'],
      'exported': family_record.get('chosen'),
      'evaluator_accuracy': summary.accuracy,
      'pushed_within_1pt_of_hgb': (summary.accuracy is not None and
                                   summary.accuracy >= hgb['accuracy'] - 0.01),
      'trees_seconds': family_record.get('trees_seconds'),
      'choice_seconds': family_record.get('seconds'),
      'hgb_seconds': round(hgb['seconds'], 2),
      'run_seconds': round(run_seconds, 1),
      'blessed': summary.blessed,
      'reason': family_record.get('reason'),
  }


def time_trees(rows: int) -> Dict[str, Any]:
  """The trees' training and eval-prediction seconds at a 1M-row run's sizes."""
  # pylint: disable=g-import-not-at-top
  from benchmarks import scale_data
  from leantfx.models import features
  from leantfx.models import model_family
  from leantfx.models import trees
  # pylint: enable=g-import-not-at-top
  eval_rows = model_family.EVAL_MAX_ROWS
  numeric, region, tier, labels = scale_data._columns(  # pylint: disable=protected-access
      rows + eval_rows, scale_data.SEED)
  numeric = ((numeric - numeric.mean(0)) / numeric.std(0)).astype(np.float32)
  columns = {f'{n}_xf': numeric[:, i:i + 1]
             for i, n in enumerate(scale_data.NUMERIC)}
  columns.update(region_xf=region.reshape(-1, 1).astype(np.int64),
                 tier_xf=tier.reshape(-1, 1).astype(np.int64))
  columns[features.LABEL_KEY] = labels.astype(np.int64)
  train = {k: v[:rows] for k, v in columns.items()}
  evaluation = {k: v[rows:] for k, v in columns.items()}
  trained = trees.train(train, False, scale_data.CLASSES,
                        ['region_xf', 'tier_xf'])
  started = time.monotonic()
  outputs = trees.predict(trained.model, evaluation)
  predict_seconds = time.monotonic() - started
  trained.cleanup()
  return {'train_rows': rows, 'eval_rows': eval_rows,
          'features': len(scale_data.NUMERIC) + 2,
          'classes': scale_data.CLASSES, 'num_trees': trained.num_trees,
          'train_seconds': round(trained.seconds, 1),
          'predict_seconds': round(predict_seconds, 1),
          'eval_accuracy': float(np.mean(np.argmax(outputs, 1) ==
                                         evaluation[features.LABEL_KEY]))}


def time_read(split_rows: int, max_rows: int) -> Dict[str, Any]:
  """Seconds split_arrays.read takes to sample a big transformed split.

  Writes ``split_rows`` tf.Examples of 22 float features and a label (a 1M-row
  span's train split is 800,000) as one gzipped TFRecord, then reads a
  sample of ``max_rows`` as the family choice does (count, draw, parse).
  """
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from leantfx.models import features
  from leantfx.models import split_arrays
  # pylint: enable=g-import-not-at-top
  names = [f'x{i:02d}_xf' for i in range(22)]
  spec = {n: tf.io.FixedLenFeature([1], tf.float32) for n in names}
  spec[features.LABEL_KEY] = tf.io.FixedLenFeature([], tf.int64)
  rng = np.random.default_rng(0)
  with tempfile.TemporaryDirectory() as scratch:
    path = os.path.join(scratch, 'part-0.gz')
    with tf.io.TFRecordWriter(path, options='GZIP') as writer:
      values = rng.normal(size=(split_rows, len(names))).astype(np.float32)
      for i, row in enumerate(values):
        feature = {n: tf.train.Feature(float_list=tf.train.FloatList(
            value=[v])) for n, v in zip(names, row)}
        feature[features.LABEL_KEY] = tf.train.Feature(
            int64_list=tf.train.Int64List(value=[i % 4]))
        writer.write(tf.train.Example(features=tf.train.Features(
            feature=feature)).SerializeToString())
    output = type('Output', (), {'transformed_feature_spec':
                                 lambda self: spec})()
    started = time.monotonic()
    read = split_arrays.read([path], output, max_rows, seed=0)
    seconds = time.monotonic() - started
  return {'split_rows': split_rows, 'max_rows': max_rows,
          'rows_kept': read.rows, 'read_seconds': round(seconds, 1)}


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--rows', type=int, default=12_000)
  parser.add_argument('--model-family', default='auto',
                      choices=('auto', 'network', 'trees'))
  parser.add_argument('--train-steps', type=int,
                      help="default: leantfx's own budget (one pass, at "
                      'least 2,000 steps)')
  parser.add_argument('--time-rows', type=int,
                      help='time the trees alone on this many train rows')
  parser.add_argument('--time-read', type=int, metavar='SPLIT_ROWS',
                      help='time the sampled read of a split this big')
  args = parser.parse_args(argv)
  if args.time_read:
    from leantfx.models import model_family  # pylint: disable=g-import-not-at-top
    row = time_read(args.time_read, model_family.TREES_MAX_TRAIN_ROWS)
    harness.report('trees_read', 'the sampled read of a big train split',
                   [row], ['python -m benchmarks.bench_trees --time-read '
                           f'{args.time_read}'])
    return 0
  if args.time_rows:
    row = time_trees(args.time_rows)
    harness.report('trees_time', 'the trees at a 1M-row run\'s sample sizes',
                   [row], ['python -m benchmarks.bench_trees --time-rows '
                           f'{args.time_rows}'])
    return 0
  row = pipeline_rows(args.rows, args.model_family, args.train_steps)
  harness.report(
      'trees', 'network vs gradient-boosted trees vs HistGradientBoosting',
      [row], [f'python -m benchmarks.bench_trees --rows {args.rows} '
              f'--model-family {args.model_family}',
              'network and trees: the Trainer\'s figures on the same eval '
              'rows; HistGradientBoosting: ExampleGen\'s train split, scored '
              'on its eval split; evaluator: TFMA on the pushed model.'])
  return 0


if __name__ == '__main__':
  sys.exit(main())
