"""Tests for figure 3 of benchmarks/bench_compression.py (``transfer_rows``).

The section runs on the real digits split with tiny settings (1 teacher
epoch, 1 student epoch, one seed, one fraction: ~30 s of CPU, half of it
TensorFlow's first fit in the process). Spies around
``distillation.distill`` and ``train_from_scratch`` record what reaches each
arm; a scripted ``_keras_utils.accuracy`` gives every arm's student known
accuracies, so the rows must be computed from the arms to come out right.
"""
import collections
import functools

import numpy as np
import pytest

from benchmarks import bench_compression
from leantfx.components.optimize.techniques import _keras_utils
from leantfx.components.optimize.techniques import distillation
from leantfx.components.optimize.evaluation import measure

pytestmark = pytest.mark.unit

FRACTION = 0.1
SEEDS = 1
# Scripted report-half accuracies per arm and seed.
DISTILLED = (0.85,)
SCRATCH_SUBSET = (0.60,)
SCRATCH_ALL = (0.90,)
TEACHER = 0.99


@pytest.fixture(scope='module')
def data():
  return bench_compression._digits()  # pylint: disable=protected-access


def _examples(dataset):
  """(labels, images) of one pass (each pass is shuffled anew)."""
  batches = list(dataset.as_numpy_iterator())
  return (np.concatenate([labels for _, labels in batches]),
          np.concatenate([features[bench_compression.FEATURE]
                          for features, _ in batches]))


def test_stratified_subset_is_fixed_stratified_and_nested(data):
  labels = data['train'].labels
  subset = bench_compression.stratified_subset(labels, FRACTION)
  np.testing.assert_array_equal(
      subset, bench_compression.stratified_subset(labels, FRACTION))
  assert len(np.unique(subset)) == len(subset)
  per_class = np.bincount(labels)
  kept = np.bincount(labels[subset], minlength=10)
  np.testing.assert_array_equal(kept, np.round(FRACTION * per_class))
  larger = bench_compression.stratified_subset(labels, 0.25)
  assert set(subset) <= set(larger)


def test_transfer_set_carries_no_label(data):
  train = data['train']
  transfer = bench_compression.transfer_set(train)
  np.testing.assert_array_equal(transfer.features[bench_compression.FEATURE],
                                train.features[bench_compression.FEATURE])
  assert set(transfer.labels) == {bench_compression.UNLABELED}
  # The hidden labels changed: the transfer set does not change with them.
  shuffled = measure.LabeledData(
      train.features, np.random.default_rng(1).permutation(train.labels))
  np.testing.assert_array_equal(
      bench_compression.transfer_set(shuffled).labels, transfer.labels)


def test_transfer_rows_from_the_arms_without_hidden_labels(data, monkeypatch):
  train = data['train']
  subset = bench_compression.stratified_subset(train.labels, FRACTION)
  arms = {}  # id(student) -> (arm, seed)
  calls = collections.defaultdict(list)
  real_distill = distillation.distill
  real_scratch = distillation.train_from_scratch
  real_accuracy = _keras_utils.accuracy

  # functools.wraps keeps the annotations config.technique_config_class
  # reads from distillation.distill.
  @functools.wraps(real_distill)
  def distill(teacher, train_ds, config, *args, **kwargs):
    calls['distilled'].append((config, *_examples(train_ds)))
    result = real_distill(teacher, train_ds, config, *args, **kwargs)
    arms[id(result.model)] = ('distilled', config.seed)
    calls['distilled_steps'].append(result.details['optimizer_steps'])
    return result

  @functools.wraps(real_scratch)
  def train_from_scratch(teacher, train_ds, config, *args, **kwargs):
    labels, images = _examples(train_ds)
    arm = 'all' if len(labels) == len(train) else 'subset'
    calls[arm].append((config, labels, images))
    result = real_scratch(teacher, train_ds, config, *args, **kwargs)
    arms[id(result.model)] = (arm, config.seed)
    calls[arm + '_steps'].append(result.details['optimizer_steps'])
    return result

  def accuracy(model, dataset):
    if dataset is not data['report_ds']:
      return real_accuracy(model, dataset)
    arm, seed = arms.get(id(model), ('teacher', None))
    return {'distilled': DISTILLED, 'subset': SCRATCH_SUBSET,
            'all': SCRATCH_ALL}[arm][seed] if seed is not None else TEACHER

  monkeypatch.setattr(distillation, 'distill', distill)
  monkeypatch.setattr(distillation, 'train_from_scratch', train_from_scratch)
  monkeypatch.setattr(_keras_utils, 'accuracy', accuracy)
  rows = bench_compression.transfer_rows(
      data, SEEDS, fractions=(FRACTION,), teacher_epochs=1, student_epochs=1)

  assert [row['figure'] for row in rows] == [
      f'transfer, student labels on 10% of train ({len(subset)} rows): '
      'distilled on all images - scratch on the labeled rows (mean of seeds)',
      'transfer: teacher - distilled student (mean of seeds)',
      'transfer, reference: scratch student on all train labels (mean of '
      'seeds)',
  ]
  assert rows[0]['target'] == '>= +0.003'
  assert rows[0]['anchor source'] == "leantfx's target"
  assert rows[1]['target'] == '<= 0.01'
  gain, behind, reference = (row['measured'] for row in rows)
  assert gain == pytest.approx(np.mean(DISTILLED) - np.mean(SCRATCH_SUBSET))
  assert behind == pytest.approx(TEACHER - np.mean(DISTILLED))
  assert reference == pytest.approx(np.mean(SCRATCH_ALL))
  assert 'distilled 0.8500 +- 0.0000 (0.8500)' in rows[0]['detail']
  assert 'scratch 0.6000 +- 0.0000 (0.6000)' in rows[0]['detail']

  # Every arm once per seed, the same student seeds.
  for arm in ('distilled', 'subset', 'all'):
    assert [config.seed for config, _, _ in calls[arm]] == list(range(SEEDS))
  # (b): soft targets only, on every train image, with no label at all.
  for config, labels, images in calls['distilled']:
    assert config.alpha == 0.0
    assert set(labels) == {bench_compression.UNLABELED}
    np.testing.assert_array_equal(
        np.sort(images, axis=0),
        np.sort(train.features[bench_compression.FEATURE], axis=0))
  # (a): only the labeled rows, with their true labels, as many steps as (b).
  expected = train.features[bench_compression.FEATURE][subset]
  for _, labels, images in calls['subset']:
    assert len(images) == len(subset)
    rows_of = {image.tobytes(): i for i, image in zip(subset, expected)}
    np.testing.assert_array_equal(
        labels, train.labels[[rows_of[image.tobytes()] for image in images]])
  # As many steps in whole passes over the labeled rows: at least (b)'s,
  # less than one pass more.
  per_pass = -(-len(subset) // bench_compression.BATCH_SIZE)
  for subset_steps, distilled_steps in zip(calls['subset_steps'],
                                           calls['distilled_steps']):
    assert 0 <= subset_steps - distilled_steps < per_pass
  assert calls['distilled_steps'] == [34] * SEEDS  # 1 epoch of 1077 / 32
  # (c): all train rows and labels, the default candidate's recipe.
  for _, labels, _ in calls['all']:
    np.testing.assert_array_equal(np.sort(labels), np.sort(train.labels))
