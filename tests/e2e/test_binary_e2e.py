"""End to end: a user's two-class CSV, gated on AUC, precision and recall.

The README's first job on a team's own file: `leantfx run --data-root DIR
--label COLUMN`, here on the Adelie and Chinstrap rows of the bundled penguins
(two classes, so the Evaluator adds AUC, precision and recall and gates on
--min-auc). The pushed model's own predictions on the eval split must give
the AUC, precision and recall the run reports.
"""
import csv
import glob
import os
import re

import numpy as np
import pytest
from sklearn import metrics as sk_metrics
import tensorflow as tf

from leantfx import datasets
from leantfx.pipeline import run_summary
from tests.helpers import run_cli

pytestmark = pytest.mark.e2e

CLASSES = ('Adelie', 'Chinstrap')


def _two_class_csv(tmp_path) -> str:
  """The bundled penguins' Adelie and Chinstrap rows as span-1 of a root."""
  source = datasets.prepare('penguins', str(tmp_path / 'bundled'))
  with open(source, encoding='utf-8', newline='') as f:
    rows = list(csv.DictReader(f))
  kept = [r for r in rows if r['species'] in CLASSES]
  root = tmp_path / 'data'
  (root / 'span-1').mkdir(parents=True)
  with open(root / 'span-1' / 'penguins.csv', 'w', encoding='utf-8',
            newline='') as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(kept)
  return str(root)


def test_two_class_csv_reports_and_gates_on_auc(tmp_path):
  data_root, output = _two_class_csv(tmp_path), str(tmp_path / 'out')
  result = run_cli(['run', '--data-root', data_root, '--label', 'species',
                    '--output', output, '--train-steps', '300',
                    '--min-auc', '0.9', '--name', 'twoclass'])
  assert result.returncode == 0, result.stdout + result.stderr
  summary = run_summary.summarize(
      os.path.join(output, 'metadata.sqlite'), 'leantfx-twoclass')
  assert summary.blessed and summary.pushed
  for name in ('auc', 'precision', 'recall'):
    assert name in summary.metrics, summary.metrics
  assert summary.metrics['auc'] >= 0.9
  found = re.search(r"binary, class '(\w+)' positive: auc ([0-9.]+), "
                    r'precision ([0-9.]+), recall ([0-9.]+) '
                    r'\(gate: auc >= 0.9\)', result.stdout)
  assert found, result.stdout
  positive = found.group(1)
  assert positive in CLASSES
  assert float(found.group(2)) == pytest.approx(summary.metrics['auc'],
                                                abs=5e-5)

  # The pushed model's probabilities of the positive class on the eval split
  # give the reported figures (precision and recall at 0.5; TFMA's AUC is
  # a sum over 10,000 thresholds, so it agrees to about 1e-3).
  uri = summary.executions['CsvExampleGen'].outputs['examples'][0].uri
  serialized = [r.numpy() for r in tf.data.TFRecordDataset(
      glob.glob(os.path.join(uri, 'Split-eval', '*')),
      compression_type='GZIP')]
  labels = np.array([
      tf.train.Example.FromString(r).features.feature['species']
      .bytes_list.value[0].decode() == positive for r in serialized])
  assert len(labels) == summary.example_count and 0 < labels.sum() < len(
      labels)
  model = tf.saved_model.load(summary.pushed_path)
  probabilities = model.signatures['predict_examples'](
      examples=tf.constant(serialized))['probabilities'].numpy()
  # Column i is the class the model's vocabulary puts at id i; the summary
  # names id 1 the positive class.
  score = probabilities[:, 1]
  assert sk_metrics.roc_auc_score(labels, score) == pytest.approx(
      summary.metrics['auc'], abs=2e-3)
  predicted = score >= 0.5
  assert sk_metrics.precision_score(labels, predicted) == pytest.approx(
      summary.metrics['precision'], abs=1e-6)
  assert sk_metrics.recall_score(labels, predicted) == pytest.approx(
      summary.metrics['recall'], abs=1e-6)
