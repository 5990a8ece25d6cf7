"""Figure: the diabetes regression against scikit-learn's Ridge.

Runs `leantfx run --dataset diabetes` (the bundled 442 rows, leantfx's
default 1000 train steps, the ModelOptimizer on), reads the Evaluator's RMSE
and R² on the eval split from ML Metadata/TFMA, and fits scikit-learn's
RidgeCV (standardized features, alpha chosen by cross-validation on the train
split only) on exactly the same train split ExampleGen wrote, scored on the
same eval split. The target: leantfx's RMSE within 5% of Ridge's, or
better.

Beside it, the ModelOptimizer's TFLite variants (float32, float16,
dynamic_range, int8 of the trained model) and the trained float Keras
model (the Trainer's, loaded with tf_keras) are run on the whole transformed eval split (the optimizer itself reports on
its halves), side by side: each one's RMSE and its increase over the float
model's.

  python -m benchmarks.bench_regression [--train-steps N] [--seeds S ...]

Held out (``--heldout``, in-process, no pipeline run): diabetes' default
model kind (linear, ``hidden_units=()``, cli/build.py) chosen and reported
on separate data. The rows are the pipeline's own ExampleGen split
(``leantfx.splits.split_of`` on the bundled CSV's records: 350 train, 92
eval). Each candidate is leantfx's model code (``models.model.build_model``
on z-scored features and the train target's scale, as the Transform and
run_fn give it; 1000 steps of 32, Adam 3e-3) fitted on NumPy rows instead of
TFRecords. The choice is made on CV_FOLDS folds of the train split only
(mean RMSE over folds and seeds); the eval split, which this choice never
scores, reports the chosen default against the other candidate, paired by
seed, with ``benchmarks.heldout``'s noise rule, and against scikit-learn's
RidgeCV fitted on the same train split.

  python -m benchmarks.bench_regression --heldout [--heldout-seeds N]
  python -m benchmarks.bench_regression --readme [--heldout-seeds N]
"""
import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from benchmarks import harness
from benchmarks import heldout

TRAIN_STEPS = 1000  # leantfx's default for diabetes (cli/build.py).
# Held out: the default's candidates, hidden layer widths. () is diabetes'
# default (cli/build.py); (64, 32) every other dataset's (TrainingConfig);
# (16,) the middle one tried when the default was first chosen.
DEFAULT_HIDDEN = ()
OTHER_HIDDEN = (64, 32)
CANDIDATES = (DEFAULT_HIDDEN, (16,), OTHER_HIDDEN)
CV_FOLDS = 5
HELDOUT_SEEDS = 3
# The pipeline's epochs for a 1000-step run (TrainingConfig's default 10).
EPOCHS = 10


def _split_rows(examples_uri: str, split: str):
  """(features [n, 10], target [n]) of an ExampleGen split, column-sorted."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  files = glob.glob(os.path.join(examples_uri, f'Split-{split}', '*'))
  features, targets = [], []
  for record in tf.data.TFRecordDataset(files, compression_type='GZIP'):
    feature = tf.train.Example.FromString(record.numpy()).features.feature
    targets.append(feature['target'].float_list.value[0])
    features.append([feature[n].float_list.value[0]
                     for n in sorted(feature) if n != 'target'])
  return np.array(features), np.array(targets)


def _ridge(train, evaluation):
  # pylint: disable=g-import-not-at-top
  from sklearn.linear_model import RidgeCV
  from sklearn.pipeline import make_pipeline
  from sklearn.preprocessing import StandardScaler
  # pylint: enable=g-import-not-at-top
  model = make_pipeline(StandardScaler(),
                        RidgeCV(alphas=np.logspace(-3, 3, 13)))
  model.fit(*train)
  predicted = model.predict(evaluation[0])
  return _scores(predicted, evaluation[1])


def _scores(predicted, target):
  errors = predicted - target
  rmse = float(np.sqrt(np.mean(errors**2)))
  r2 = 1.0 - float(np.sum(errors**2)) / float(
      np.sum((target - target.mean())**2))
  return rmse, r2


def diabetes_split() -> Dict[str, Any]:
  """The bundled diabetes rows and the pipeline's ExampleGen split of them.

  Each row's CSV record is encoded as the CSV ExampleGen encodes it and
  split by its hash rule (``leantfx.splits.split_of``), so 'train' and
  'eval' are the rows the pipeline trains and evaluates on.

  Returns:
    {'x': float32 [442, 10] (spec.numeric_features order), 'y': float32
    [442], 'train': row indices, 'eval': row indices}.
  """
  # pylint: disable=g-import-not-at-top
  from sklearn import datasets as sk_datasets
  from leantfx import csv_format
  from leantfx import datasets
  from leantfx import splits
  # pylint: enable=g-import-not-at-top
  with tempfile.TemporaryDirectory() as root:
    path = datasets.prepare('diabetes', root)
    names = np.array([splits.split_of(record) for record in
                      csv_format.encode_files([path], ())])
  raw = sk_datasets.load_diabetes(scaled=False)
  # The CSV holds the rows in scikit-learn's order (leantfx/datasets.py).
  return {'x': raw.data.astype(np.float32), 'y': raw.target.astype(np.float32),
          'train': np.flatnonzero(names == 'train'),
          'eval': np.flatnonzero(names == 'eval')}


def cv_folds(train: np.ndarray, folds: int = CV_FOLDS
            ) -> List[Tuple[np.ndarray, np.ndarray]]:
  """(fit rows, score rows) per fold of the train rows; fixed permutation."""
  order = np.random.default_rng(0).permutation(train)
  parts = np.array_split(order, folds)
  return [(np.sort(np.concatenate(parts[:i] + parts[i + 1:])),
           np.sort(parts[i])) for i in range(folds)]


def leantfx_rmse(split: Dict[str, Any], fit_rows: np.ndarray,
                 score_rows: np.ndarray, hidden_units: Tuple[int, ...],
                 seed: int, steps: int = TRAIN_STEPS) -> float:
  """RMSE on score_rows of leantfx's diabetes model fitted on fit_rows.

  The features are z-scored with fit_rows' statistics (the Transform's
  scale_to_z_score), the output is scaled by fit_rows' target mean and
  standard deviation (run_fn's target scale), and the model trains
  ``steps`` batches of 32 in EPOCHS epochs under ``seed`` (weights and
  shuffle), as the Trainer does.
  """
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  import tf_keras
  from leantfx import config as config_lib
  from leantfx import datasets
  from leantfx.models import model as model_lib
  # pylint: enable=g-import-not-at-top
  spec = datasets.BUNDLED['diabetes']
  x, y = split['x'], split['y']
  mean, std = x[fit_rows].mean(axis=0), x[fit_rows].std(axis=0)
  std[std == 0] = 1.0

  def features(rows):
    z = (x[rows] - mean) / std
    return {f'{name}_xf': z[:, [i]]
            for i, name in enumerate(spec.numeric_features)}

  training = config_lib.TrainingConfig(
      train_steps=steps, epochs=EPOCHS, seed=seed, hidden_units=hidden_units)
  target = y[fit_rows].astype(np.float64)
  tf_keras.backend.clear_session()
  tf_keras.utils.set_random_seed(seed)
  model = model_lib.build_model(spec, training, {},
                                (float(target.mean()), float(target.std())))
  data = tf.data.Dataset.from_tensor_slices((features(fit_rows), y[fit_rows]))
  data = data.shuffle(len(fit_rows), seed=seed).repeat().batch(
      training.batch_size)
  model.fit(data, epochs=EPOCHS, steps_per_epoch=steps // EPOCHS, verbose=0)
  predicted = model(features(score_rows), training=False).numpy()
  return _scores(predicted.reshape(-1), y[score_rows])[0]


def _hidden(units: Tuple[int, ...]) -> str:
  return 'linear (hidden_units=())' if not units else f'MLP {units}'


def select_default(split: Dict[str, Any], seeds: int,
                   candidates: Sequence[Tuple[int, ...]] = CANDIDATES,
                   folds: int = CV_FOLDS, steps: int = TRAIN_STEPS
                  ) -> Tuple[Tuple[int, ...], List[Dict[str, Any]]]:
  """The candidate with the lowest mean CV RMSE on the train split's folds.

  Returns:
    (chosen hidden units, one row per candidate). The eval split is not
    touched.
  """
  rows, means = [], {}
  for units in candidates:
    rmses = [leantfx_rmse(split, fit, score, units, seed, steps)
             for seed in range(seeds) for fit, score in cv_folds(
                 split['train'], folds)]
    means[units] = statistics.mean(rmses)
    rows.append({
        'figure': f'selection: {_hidden(units)}, mean RMSE over {folds} CV '
                  f'folds of the train split x {seeds} seeds',
        'measured': means[units],
        'detail': (f'min {min(rmses):.2f}, max {max(rmses):.2f}; fold sizes '
                   f"{len(split['train']) - len(split['train']) // folds}"
                   f"/{len(split['train']) // folds}"),
    })
  chosen = min(candidates, key=lambda units: means[units])
  for row, units in zip(rows, candidates):
    row['chosen'] = units == chosen
  return chosen, rows


def _ridge_rmse(split: Dict[str, Any]) -> float:
  train, evaluation = split['train'], split['eval']
  return _ridge((split['x'][train], split['y'][train]),
                (split['x'][evaluation], split['y'][evaluation]))[0]


def heldout_rows(split: Dict[str, Any], seeds: int,
                 default: Tuple[int, ...] = DEFAULT_HIDDEN,
                 other: Tuple[int, ...] = OTHER_HIDDEN,
                 only: Optional[str] = None) -> List[Dict[str, Any]]:
  """The default against the other candidate and RidgeCV on the eval split.

  Every model is fitted on the whole train split and scored on the eval
  split, which no choice scored; the two leantfx models share each seed.

  Args:
    split: diabetes_split().
    seeds: leantfx seeds 0 .. seeds - 1.
    default: the default's hidden units.
    other: the candidate it is compared with.
    only: 'vs_other' or 'vs_ridge' for one row; None for both.

  Returns:
    README rows ({'what', 'figure', 'values', 'command'}).
  """
  train, evaluation = split['train'], split['eval']
  mine = [leantfx_rmse(split, train, evaluation, default, seed)
          for seed in range(seeds)]
  rows = []
  steps = (f'{TRAIN_STEPS} steps of 32 as the pipeline trains, {seeds} '
           f'seeds (3 take 44 s niced beside other work), {len(train)} '
           f'train / {len(evaluation)} eval rows')
  command = ('.venv/bin/python -m benchmarks.bench_regression --readme '
             f'--heldout-seeds {seeds} --readme-row ')
  if only in (None, 'vs_other'):
    theirs = [leantfx_rmse(split, train, evaluation, other, seed)
              for seed in range(seeds)]
    result = heldout.compare([a - b for a, b in zip(mine, theirs)],
                             higher_is_better=False)
    rows.append({
        'what': (f'diabetes eval RMSE, default {_hidden(default)} - '
                 f'{_hidden(other)} (leantfx model code, {steps}; paired '
                 'seeds; the eval split untouched by the choice)'),
        'figure': (f'{statistics.mean(mine):.2f} vs '
                   f'{statistics.mean(theirs):.2f}: '
                   + heldout.figure(result, unit='RMSE')),
        'values': {'default_rmse': mine, 'other_rmse': theirs, **result},
        'command': command + 'vs_other',
    })
  if only in (None, 'vs_ridge'):
    ridge = _ridge_rmse(split)
    result = heldout.compare([a - ridge for a in mine],
                             higher_is_better=False)
    rows.append({
        'what': (f'diabetes eval RMSE, default {_hidden(default)} - '
                 'scikit-learn RidgeCV (standardized, alpha by CV on the '
                 f'train split) ({steps})'),
        'figure': (f'{statistics.mean(mine):.2f} vs {ridge:.2f} (ratio '
                   f'{statistics.mean(mine) / ridge:.4f}): '
                   + heldout.figure(result, unit='RMSE')),
        'values': {'default_rmse': mine, 'ridge_rmse': ridge, **result},
        'command': command + 'vs_ridge',
    })
  return rows


def readme_rows(seeds: int = HELDOUT_SEEDS, only: Optional[str] = None
               ) -> List[Dict[str, Any]]:
  """README rows: the default model vs the other candidate, and vs RidgeCV.

  Args:
    seeds: leantfx seeds per arm.
    only: 'vs_other' or 'vs_ridge' for one row; None for both.
  """
  return heldout_rows(diabetes_split(), seeds, only=only)


def _heldout_main(args) -> int:
  start = time.perf_counter()
  split = diabetes_split()
  seconds = {}
  if args.readme:
    rows = readme_rows(args.heldout_seeds, args.readme_row)
    seconds['readme'] = time.perf_counter() - start
    name = 'regression_readme'
  else:
    chosen, rows = select_default(split, args.heldout_seeds)
    seconds['selection'] = time.perf_counter() - start
    others = [units for units in CANDIDATES if units != chosen]
    reported = heldout_rows(split, args.heldout_seeds, default=chosen,
                            other=OTHER_HIDDEN if chosen != OTHER_HIDDEN
                            else others[0])
    if chosen != DEFAULT_HIDDEN:
      reported += heldout_rows(split, args.heldout_seeds, only='vs_other')
    rows += [{'figure': r['what'], 'measured': r['values']['mean'],
              'detail': r['figure']} for r in reported]
    seconds['report'] = time.perf_counter() - start - seconds['selection']
    name = 'regression_heldout'
  harness.report(name, 'diabetes default model: chosen on train-split CV '
                 'folds, reported on the untouched eval split', rows, [
                     heldout.RULE,
                     'Run time ' + ', '.join(f'{k} {v:.0f} s'
                                             for k, v in seconds.items()) +
                     f'; load average {os.getloadavg()[0]:.1f} at the end.'])
  return 0


def _variant_rmse(summary):
  """{name: (RMSE, MAE)} of the float model and each TFLite variant."""
  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  from leantfx.components.optimize.evaluation import measure
  from leantfx.components.optimize.evaluation import quality
  from leantfx.models.model_layout import KERAS_MODEL_DIR
  # pylint: enable=g-import-not-at-top
  transformed = summary.executions['Transform'].outputs[
      'transformed_examples'][0].uri
  files = glob.glob(os.path.join(transformed, 'Split-eval', '*'))
  features, labels = {}, []
  for record in tf.data.TFRecordDataset(files, compression_type='GZIP'):
    feature = tf.train.Example.FromString(record.numpy()).features.feature
    labels.append(feature.pop('label_xf').float_list.value[0])
    for name, value in feature.items():
      features.setdefault(name, []).append([value.float_list.value[0]])
  data = measure.LabeledData(
      {n: np.array(v, np.float32) for n, v in features.items()},
      np.array(labels, np.float32))
  model_dir = os.path.join(
      summary.executions['Trainer'].outputs['model'][0].uri, KERAS_MODEL_DIR)
  scores = {'float Keras model': measure.scores_on(model_dir, data,
                                                  quality.RMSE)}
  report = summary.executions['ModelOptimizer'].outputs['report'][0].uri
  for mode in ('float32', 'float16', 'dynamic_range', 'int8'):
    path = os.path.join(report, 'variants', 'baseline', f'{mode}.tflite')
    scores[f'tflite {mode}'] = measure.scores_on(path, data, quality.RMSE)
  return scores


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--train-steps', type=int, default=TRAIN_STEPS)
  parser.add_argument('--seeds', type=int, nargs='+', default=[42])
  parser.add_argument('--heldout', action='store_true',
                      help='choose the default model kind on CV folds of '
                      'the train split, report it on the eval split (no '
                      'pipeline run)')
  parser.add_argument('--readme', action='store_true',
                      help='only the README rows of the held-out comparison')
  parser.add_argument('--readme-row', choices=('vs_other', 'vs_ridge'))
  parser.add_argument('--heldout-seeds', type=int, default=HELDOUT_SEEDS)
  args = parser.parse_args(argv)
  if args.heldout or args.readme:
    return _heldout_main(args)
  # pylint: disable=g-import-not-at-top
  from leantfx.pipeline import run_summary
  # pylint: enable=g-import-not-at-top
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  leantfx = os.path.join(os.path.dirname(sys.executable), 'leantfx')
  rows, notes = [], []
  with tempfile.TemporaryDirectory() as scratch:
    for seed in args.seeds:
      out = os.path.join(scratch, f'diabetes-{seed}')
      result = subprocess.run(
          [leantfx, 'run', '--dataset', 'diabetes', '--output', out,
           '--train-steps', str(args.train_steps), '--seed', str(seed)],
          env=env, capture_output=True, text=True, check=False)
      if result.returncode not in (0, 4):
        sys.stderr.write(result.stdout[-3000:] + result.stderr[-3000:])
        raise SystemExit(f'leantfx run failed ({result.returncode})')
      summary = run_summary.summarize(os.path.join(out, 'metadata.sqlite'),
                                      'leantfx-diabetes')
      uri = summary.executions['CsvExampleGen'].outputs['examples'][0].uri
      train, evaluation = _split_rows(uri, 'train'), _split_rows(uri, 'eval')
      ridge_rmse, ridge_r2 = _ridge(train, evaluation)
      rmse = summary.metrics['root_mean_squared_error']
      variants = _variant_rmse(summary)
      reference = variants['float Keras model']['rmse']
      for name, scores in variants.items():
        rows.append({
            'seed': seed, 'model': name, 'eval_rmse': scores['rmse'],
            'eval_mae': scores['mae'],
            'rmse_increase_vs_float': scores['rmse'] / reference - 1.0,
        })
      rows.append({
          'seed': seed, 'train_rows': len(train[1]),
          'eval_rows': len(evaluation[1]),
          'leantfx_rmse': rmse, 'leantfx_r2': summary.metrics['r2_score'],
          'leantfx_mae': summary.metrics['mean_absolute_error'],
          'ridge_rmse': ridge_rmse, 'ridge_r2': ridge_r2,
          'rmse_vs_ridge': rmse / ridge_rmse,
          'blessed': summary.blessed,
      })
  notes.append(f'leantfx run --dataset diabetes --train-steps '
               f'{args.train_steps}; RidgeCV(alphas=1e-3..1e3) '
               'on standardized features, same ExampleGen train/eval split.')
  notes.append('model rows: the trained SavedModel and the ModelOptimizer\'s '
               'TFLite variants on the whole transformed eval split.')
  notes.append('target: rmse_vs_ridge <= 1.05.')
  harness.report('regression', 'diabetes regression vs scikit-learn Ridge',
                 rows, notes)
  return 0


if __name__ == '__main__':
  sys.exit(main())
