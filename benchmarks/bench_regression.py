"""Figure: the diabetes regression against scikit-learn's Ridge.

Runs `leantfx run --dataset diabetes` (the bundled 442 rows, leantfx's
default 1000 train steps, the ModelOptimizer on), reads the Evaluator's RMSE
and R² on the eval split from ML Metadata/TFMA, and fits scikit-learn's
RidgeCV (standardized features, alpha chosen by cross-validation on the train
split only) on exactly the same train split ExampleGen wrote, scored on the
same eval split. The target: leantfx's RMSE within 5% of Ridge's, or
better.

Beside it, the ModelOptimizer's TFLite variants (float32, float16,
dynamic_range, int8 of the trained model) and the trained float SavedModel
are run on the whole transformed eval split (the optimizer itself reports on
its halves), side by side: each one's RMSE and its increase over the float
model's.

  python -m benchmarks.bench_regression [--train-steps N] [--seeds S ...]
"""
import argparse
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np

from benchmarks import harness

TRAIN_STEPS = 1000  # leantfx's default for diabetes (cli/build.py).


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
  scores = {'float SavedModel': measure.scores_on(model_dir, data,
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
  args = parser.parse_args(argv)
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
      reference = variants['float SavedModel']['rmse']
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
