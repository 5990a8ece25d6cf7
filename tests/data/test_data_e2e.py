"""End to end: every bad data input stops the real `leantfx run` before
training, with exit != 0, nothing pushed, and a message naming the feature.

To keep CI time bounded the penguins tests share one data root and output:
span 1 is the good bundled data (a full run with few train steps, so the gate
publishes the drift baseline), and each bad input is written as the next span
(the newest span is the one a run ingests). Bad inputs the CSV/TFRecord/image
pre-flight checks catch cost one CLI start; the others run ExampleGen,
StatisticsGen, ExampleValidator and the ValidationGate, then stop.
"""
import csv
import glob
import io
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from leantfx import data_formats
from leantfx import datasets
from leantfx.pipeline import run_summary
from tests.helpers import run_cli

pytestmark = pytest.mark.e2e

# Few steps: these runs check the data path, not the model (the accuracy bar
# is tests/e2e/test_pipeline_e2e.py's), so both gates are open.
FAST = ['--train-steps', '20', '--epochs', '1', '--min-accuracy', '0',
        '--baseline-margin', 'off']


def _versions(serving_dir):
  if not os.path.isdir(serving_dir):
    return []
  return sorted(d for d in os.listdir(serving_dir) if d.isdigit())


class Penguins:
  """The shared data root and output folder of the penguins tests."""

  def __init__(self, root):
    self.data_root = os.path.join(root, 'data')
    self.output = os.path.join(root, 'out')
    self.serving = os.path.join(self.output, 'serving', 'penguins')
    path = datasets.prepare('penguins', self.data_root, 1)
    with open(path, newline='', encoding='utf-8') as f:
      self.rows = list(csv.DictReader(f))
    self.header = list(self.rows[0])
    self.next_span = 2

  def write_span(self, rows, header=None, name='penguins.csv'):
    header = header or self.header
    span_dir = os.path.join(self.data_root, f'span-{self.next_span}')
    os.makedirs(span_dir)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator='\n')
    writer.writerow(header)
    writer.writerows([[r.get(c, '') for c in header] for r in rows])
    with open(os.path.join(span_dir, name), 'w', encoding='utf-8') as f:
      f.write(buf.getvalue())
    self.next_span += 1
    return span_dir

  def run(self, *extra):
    return run_cli(['run', '--dataset', 'penguins', '--data-root',
                    self.data_root, '--output', self.output, *FAST, *extra])


@pytest.fixture(scope='module')
def penguins(tmp_path_factory):
  data = Penguins(str(tmp_path_factory.mktemp('penguins-data')))
  # Span 1, good: the gate passes and keeps span 1's statistics for drift.
  result = data.run('--allow-anomalies', 'SCHEMA_NEW_COLUMN')
  assert result.returncode == 0, result.stdout + result.stderr
  data.first_run = result
  return data


def _stopped_before_training(result, penguins, versions_before):
  output = result.stdout + result.stderr
  assert result.returncode != 0, output
  assert not re.search(r'\] (Transform|Trainer) +running', result.stdout)
  assert _versions(penguins.serving) == versions_before
  assert 'Traceback' not in result.stderr
  return output


def _gate_report(output):
  match = re.search(r'report: (\S+report\.txt)', output)
  assert match, output
  with open(match.group(1), encoding='utf-8') as f:
    return f.read()


def test_good_span_passes_the_gate_and_is_reported(penguins):
  out = penguins.first_run.stdout
  assert 'data validation: passed' in out
  assert 'augment (train examples per class, before->after)' in out
  assert 'noisy rows:' in out and 'sex:' in out  # 11 rows lack sex.
  assert _versions(penguins.serving)
  summary = run_summary.summarize(
      os.path.join(penguins.output, 'metadata.sqlite'), 'leantfx-penguins')
  gate = summary.executions['ValidationGate']
  report = gate.outputs['report'][0]
  assert report.custom_properties['passed'].int_value == 1
  assert os.path.isfile(os.path.join(report.uri, 'report.txt'))
  # The escape hatch is recorded in ML Metadata with the execution.
  store = run_summary.open_store(
      os.path.join(penguins.output, 'metadata.sqlite'))
  execution = store.get_executions_by_id([gate.execution_id])[0]
  assert 'SCHEMA_NEW_COLUMN' in execution.custom_properties[
      'allow_anomalies'].string_value


def test_new_category_value(penguins):
  before = _versions(penguins.serving)
  rows = [dict(r) for r in penguins.rows]
  for r in rows[:30]:
    r['island'] = 'Atlantis'
  penguins.write_span(rows)
  output = _stopped_before_training(penguins.run(), penguins, before)
  assert "'island' ENUM_TYPE_UNEXPECTED_STRING_VALUES" in output
  report = _gate_report(output)
  assert 'island' in report and 'Atlantis' in report
  assert f'span {penguins.next_span - 1}' in report


def test_thirty_percent_missing_in_a_required_feature(penguins):
  before = _versions(penguins.serving)
  rows = [dict(r) for r in penguins.rows]
  for r in rows[:104]:  # 30% of 344.
    r['bill_length_mm'] = ''
  penguins.write_span(rows)
  output = _stopped_before_training(penguins.run(), penguins, before)
  assert "'bill_length_mm' FEATURE_TYPE_LOW_FRACTION_PRESENT" in output
  assert 'presence.min_fraction 0.95' in _gate_report(output)


def test_label_distribution_drift(penguins):
  before = _versions(penguins.serving)
  adelie = [r for r in penguins.rows if r['species'] == 'Adelie']
  others = [r for r in penguins.rows if r['species'] != 'Adelie']
  penguins.write_span(adelie + others[:40])  # 79% Adelie instead of 44%.
  output = _stopped_before_training(penguins.run(), penguins, before)
  assert "'species' COMPARATOR_L_INFTY_HIGH" in output
  # Compared with span 1, the last span that passed (not the failed ones).
  assert 'Compared with span 1' in _gate_report(output)


def test_value_outside_the_domain_in_tfrecord_files(penguins):
  """Also the TFRecord path: ImportExampleGen ingests the span."""
  before = _versions(penguins.serving)
  rows = [dict(r) for r in penguins.rows]
  rows[3]['flipper_length_mm'] = '999'  # Domain 150..260 mm.
  table = [penguins.header] + [[r[c] for c in penguins.header] for r in rows]
  span_dir = os.path.join(penguins.data_root, f'span-{penguins.next_span}')
  os.makedirs(span_dir)
  with open(os.path.join(span_dir, 'penguins.tfrecord'), 'wb') as f:
    f.write(data_formats.tfrecord_bytes(data_formats.rows_to_examples(table)))
  penguins.next_span += 1
  result = penguins.run()
  output = _stopped_before_training(result, penguins, before)
  assert re.search(r'\] ImportExampleGen +running', result.stdout)
  assert "'flipper_length_mm' INT_TYPE_BIG_INT" in output


def test_dropped_column(penguins):
  before = _versions(penguins.serving)
  header = [c for c in penguins.header if c != 'bill_depth_mm']
  penguins.write_span(penguins.rows, header=header)
  result = penguins.run()
  output = _stopped_before_training(result, penguins, before)
  assert result.returncode == 2  # Caught before any component ran.
  assert "'bill_depth_mm'" in output and 'not in the header' in output


def test_number_column_turned_string(penguins):
  before = _versions(penguins.serving)
  rows = [dict(r) for r in penguins.rows]
  for r in rows[::2]:
    r['body_mass_g'] = 'heavy'
  penguins.write_span(rows)
  result = penguins.run()
  output = _stopped_before_training(result, penguins, before)
  assert result.returncode == 2
  assert "'body_mass_g'" in output and "'heavy'" in output


def test_empty_span(penguins):
  before = _versions(penguins.serving)
  penguins.write_span([])  # A header line and no rows.
  result = penguins.run()
  output = _stopped_before_training(result, penguins, before)
  assert result.returncode == 2 and 'no data rows' in output


def test_file_that_is_not_tfrecord(penguins):
  before = _versions(penguins.serving)
  span_dir = os.path.join(penguins.data_root, f'span-{penguins.next_span}')
  os.makedirs(span_dir)
  with open(os.path.join(span_dir, 'part-0.tfrecord'), 'wb') as f:
    f.write(b'species,island\n' + b'Adelie,Dream\n' * 50)
  penguins.next_span += 1
  result = penguins.run('--format', 'tfrecord')
  output = _stopped_before_training(result, penguins, before)
  assert result.returncode == 2
  assert 'part-0.tfrecord' in output and 'not a readable TFRecord' in output


@pytest.fixture(scope='module')
def digit_images(tmp_path_factory):
  root = str(tmp_path_factory.mktemp('digit-images'))
  data_root = os.path.join(root, 'data')
  datasets.prepare('digits', data_root, 1, 'images')
  output = os.path.join(root, 'out')
  result = run_cli(['run', '--dataset', 'digits', '--format', 'images',
                    '--data-root', data_root, '--output', output, *FAST])
  return data_root, output, result


def test_digit_png_folders_train_and_push_end_to_end(digit_images):
  _, output, result = digit_images
  assert result.returncode == 0, result.stdout + result.stderr
  assert re.search(r'\] ImageExampleGen +done', result.stdout)
  assert 'images: 1797 ingested; bad images left out: none' in result.stdout
  # Augmentation is on by default for images: one copy per train image.
  match = re.search(r'augment \(train examples per class, before->after\): '
                    r'(\d+)->(\d+)', result.stdout)
  assert match and int(match.group(2)) == 2 * int(match.group(1))
  summary = run_summary.summarize(os.path.join(output, 'metadata.sqlite'),
                                  'leantfx-digits-images')
  assert summary.pushed
  # The pushed model takes PNG bytes, as the images arrive.
  model = tf.saved_model.load(summary.pushed_path)
  serving = model.signatures['serving_default']
  png = data_formats.digit_png([0] * 64)
  outputs = serving(image=tf.constant([png, png]))
  probabilities = outputs['probabilities'].numpy()
  assert probabilities.shape == (2, 10)
  np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-4)


def test_corrupt_and_wrong_channel_images(digit_images, tmp_path):
  data_root, output, _ = digit_images
  span_dir = os.path.join(data_root, 'span-2')
  for path in glob.glob(os.path.join(data_root, 'span-1', '*', '*.png')):
    target = path.replace('span-1', 'span-2')
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(path, 'rb') as src, open(target, 'wb') as dst:
      dst.write(src.read())
  with open(os.path.join(span_dir, '3', 'corrupt.png'), 'wb') as f:
    f.write(b'\x89PNG\r\n\x1a\nthis is not an image')
  from PIL import Image  # pylint: disable=g-import-not-at-top
  Image.new('RGB', (8, 8)).save(os.path.join(span_dir, '5', 'colour.png'))
  serving = os.path.join(output, 'serving', 'digits-images')
  before = _versions(serving)
  result = run_cli(['run', '--dataset', 'digits', '--format', 'images',
                    '--data-root', data_root, '--output', output, *FAST])
  assert result.returncode == 2, result.stdout + result.stderr
  assert '2 bad image(s) in span 2' in result.stderr
  assert '1 corrupt' in result.stderr and '1 wrong channels' in result.stderr
  assert 'corrupt.png' in result.stderr and 'colour.png' in result.stderr
  assert '3 channel(s)' in result.stderr
  assert _versions(serving) == before
