"""Augment's Beam stages (beam.Create + assert_that) and its executor.

Expected counts come from the inputs: copies per image, the oversampling
target ceil(ratio * largest class), the rows made noisy on purpose.
"""
import collections
import math
import os

import apache_beam as beam
from apache_beam.testing import util as beam_util
from apache_beam.testing.test_pipeline import TestPipeline
import numpy as np
import pytest
import tensorflow as tf

from leantfx import config as config_lib
from leantfx import datasets
from leantfx.components.augment import examples as examples_lib
from leantfx.components.augment import images
from leantfx.components.augment import stages
from leantfx.components.augment import tabular

pytestmark = pytest.mark.unit

DIGITS = datasets.BUNDLED['digits']
PENGUINS = datasets.BUNDLED['penguins']


def _digit_example(label: int, seed: int) -> bytes:
  rng = np.random.default_rng(seed)
  example = tf.train.Example()
  for name in DIGITS.image_features:
    example.features.feature[name].int64_list.value.append(
        int(rng.integers(0, 17)))
  example.features.feature['digit'].int64_list.value.append(label)
  return example.SerializeToString(deterministic=True)


def _penguin(species: str, length: float, mass: int, island: str = 'Dream',
             missing=()) -> bytes:
  example = tf.train.Example()
  f = example.features.feature
  values = {'bill_length_mm': length, 'bill_depth_mm': 17.0,
            'flipper_length_mm': 200, 'body_mass_g': mass}
  for name, value in values.items():
    if name in missing:
      f[name].float_list.value[:] = []  # Present with no value, as in CSV.
    elif isinstance(value, int):
      f[name].int64_list.value.append(value)
    else:
      f[name].float_list.value.append(value)
  f['island'].bytes_list.value.append(island.encode())
  f['sex'].bytes_list.value.append(b'male')
  f['species'].bytes_list.value.append(species.encode())
  return example.SerializeToString(deterministic=True)


def _labels(serialized, label):
  return collections.Counter(
      examples_lib.label_of(tf.train.Example.FromString(s), label)
      for s in serialized)


def test_augmented_copies_are_deterministic_and_in_domain():
  cfg = config_lib.AugmentConfig(copies=3, seed=7)
  original = _digit_example(3, 0)
  first = stages.augmented_copies(original, DIGITS, cfg)
  again = stages.augmented_copies(original, DIGITS, cfg)
  assert first == again  # Same seed, same bytes: same copies.
  assert first[0] == original and len(first) == 4
  assert len(set(first)) == 4  # Each copy differs from the others.
  for serialized in first[1:]:
    example = tf.train.Example.FromString(serialized)
    assert examples_lib.label_of(example, 'digit') == '3'
    pixels = [examples_lib.numeric_value(example, c)
              for c in DIGITS.image_features]
    assert all(0 <= p <= 16 and float(p).is_integer() for p in pixels)
  other_seed = stages.augmented_copies(
      original, DIGITS, config_lib.AugmentConfig(copies=3, seed=8))
  assert other_seed[1:] != first[1:]


def test_zero_parameters_leave_the_image_unchanged():
  cfg = config_lib.AugmentConfig(
      copies=1, rotation_degrees=0, shift_fraction=0, zoom_fraction=0,
      brightness=0, contrast=0, noise_stddev=0)
  image = np.random.default_rng(1).random((8, 8, 1))
  out = images.augment_image(image, np.random.default_rng(2), cfg)
  np.testing.assert_allclose(out, image, atol=1e-12)


def test_rotation_by_90_degrees_turns_the_image():
  image = np.zeros((5, 5, 1))
  image[0, 2, 0] = 1.0  # Top centre.
  cfg = config_lib.AugmentConfig(copies=1, rotation_degrees=90,
                                 shift_fraction=0, zoom_fraction=0,
                                 brightness=0, contrast=0, noise_stddev=0)

  class Fixed:  # Draws 90 degrees, then neutral values, in the fixed order.
    def uniform(self, low, high):
      return high if high == 90 else (low + high) / 2

    def random(self):
      return 1.0

    def normal(self, mean, std, size):
      return np.zeros(size)

  out = images.augment_image(image, Fixed(), cfg)
  # Rotating the top-centre pixel by +90 degrees about the centre (rows
  # down, columns right) brings it to the middle of a side column.
  assert out[2, 0, 0] == pytest.approx(1.0) or out[2, 4, 0] == pytest.approx(
      1.0)
  assert out[0, 2, 0] == pytest.approx(0.0)


def test_flips_only_when_asked():
  image = np.zeros((4, 4, 1))
  image[:, 0, 0] = 1.0
  neutral = dict(rotation_degrees=0, shift_fraction=0, zoom_fraction=0,
                 brightness=0, contrast=0, noise_stddev=0)
  flipped = 0
  for seed in range(20):
    out = images.augment_image(
        image, np.random.default_rng(seed),
        config_lib.AugmentConfig(copies=1, **neutral))
    np.testing.assert_allclose(out, image)  # Flips off by default.
    out = images.augment_image(
        image, np.random.default_rng(seed),
        config_lib.AugmentConfig(copies=1, horizontal_flip=True, **neutral))
    flipped += int(out[0, 3, 0] == 1.0)
  assert 0 < flipped < 20  # About half of the 20 draws.


def test_augment_images_stage_makes_n_copies_per_example():
  cfg = config_lib.AugmentConfig(copies=2, seed=1)
  inputs = [_digit_example(d % 3, d) for d in range(6)]
  expected = [c for s in inputs for c in stages.augmented_copies(s, DIGITS,
                                                                 cfg)]
  with TestPipeline() as p:
    out = (p | beam.Create(inputs) | stages.AugmentImages(DIGITS, cfg))
    beam_util.assert_that(out, beam_util.equal_to(expected))
  assert len(expected) == 18  # 6 originals + 2 copies each.


def test_encoded_png_images_are_augmented_too():
  from leantfx import data_formats  # pylint: disable=g-import-not-at-top
  spec = data_formats.DIGITS_IMAGES
  example = tf.train.Example()
  example.features.feature['image'].bytes_list.value.append(
      data_formats.digit_png([i % 17 for i in range(64)]))
  example.features.feature['digit'].bytes_list.value.append(b'5')
  out = stages.augmented_copies(example.SerializeToString(deterministic=True), spec,
                                config_lib.AugmentConfig(copies=1))
  copy = tf.train.Example.FromString(out[1])
  decoded = images.decode_png_or_jpeg(
      copy.features.feature['image'].bytes_list.value[0])
  assert decoded.shape == (8, 8, 1)
  assert copy.features.feature['digit'].bytes_list.value[0] == b'5'


def _imbalanced():
  rows = [_penguin('Adelie', 38.0 + i * 0.1, 3500 + i) for i in range(12)]
  rows += [_penguin('Chinstrap', 48.0 + i, 3700 + 10 * i) for i in range(4)]
  return rows


@pytest.mark.parametrize('method', ['random', 'smote'])
def test_oversampling_reaches_the_target_ratio(method):
  cfg = config_lib.AugmentConfig(oversample=method, target_ratio=0.75, seed=3)
  rows = _imbalanced()
  with TestPipeline() as p:
    out = (p | beam.Create(rows)
           | stages.Oversample(PENGUINS, cfg, {})
           | beam.Map(lambda s: examples_lib.label_of(
               tf.train.Example.FromString(s), 'species'))
           | beam.combiners.Count.PerElement())
    # ceil(0.75 * 12) = 9 Chinstrap rows; Adelie unchanged.
    beam_util.assert_that(out, beam_util.equal_to([('Adelie', 12),
                                                    ('Chinstrap', 9)]))


def test_smote_rows_lie_between_same_class_neighbours():
  rows = _imbalanced()
  cfg = config_lib.AugmentConfig(oversample='smote', seed=3, smote_neighbors=2)
  chinstrap = [r for r in rows if b'Chinstrap' in r]
  synthetic = tabular.oversample_class('Chinstrap', chinstrap, 8, cfg,
                                       PENGUINS, {})
  assert len(synthetic) == 8
  lengths = [examples_lib.numeric_value(tf.train.Example.FromString(s),
                                        'bill_length_mm') for s in synthetic]
  # Chinstrap lengths are 48..51: interpolations stay within that range and
  # are not all copies of existing rows.
  assert all(48.0 <= v <= 51.0 for v in lengths)
  assert len(set(lengths) - {48.0, 49.0, 50.0, 51.0}) >= 1
  masses = [examples_lib.numeric_value(tf.train.Example.FromString(s),
                                       'body_mass_g') for s in synthetic]
  assert all(float(m).is_integer() for m in masses)  # INT stays INT.
  # Reversed input order, same rows: the same synthetic rows.
  assert tabular.oversample_class('Chinstrap', chinstrap[::-1], 8, cfg,
                                  PENGUINS, {}) == synthetic


def test_jitter_changes_numbers_within_the_domain():
  rows = [r for r in _imbalanced() if b'Chinstrap' in r]
  # Chinstrap lengths here are 48..51 (std 1.1): 10 std devs of jitter
  # reach past a 47..52 domain, so values get clipped to it.
  domains = {'bill_length_mm': examples_lib.Domain(minimum=47, maximum=52)}
  cfg = config_lib.AugmentConfig(oversample='random', jitter_stddev=10.0,
                                 seed=1)
  synthetic = tabular.oversample_class('Chinstrap', rows, 20, cfg, PENGUINS,
                                       domains)
  lengths = [examples_lib.numeric_value(tf.train.Example.FromString(s),
                                        'bill_length_mm') for s in synthetic]
  assert all(47 <= v <= 52 for v in lengths)
  assert any(v in (47, 52) for v in lengths)
  assert len(set(lengths) - {48.0, 49.0, 50.0, 51.0}) >= 3  # Jittered.


def test_targets():
  assert tabular.targets({'a': 10, 'b': 3}, 1.0) == {'a': 0, 'b': 7}
  assert tabular.targets({'a': 10, 'b': 3}, 0.5) == {'a': 0, 'b': 2}
  assert tabular.targets({'a': 10, 'b': 8}, 0.5) == {'a': 0, 'b': 0}


def test_clean_rows_counts_and_drops_by_policy():
  domains = {'flipper_length_mm': examples_lib.Domain(minimum=150,
                                                      maximum=260),
             'island': examples_lib.Domain(values=frozenset({'Dream'}))}
  good = _penguin('Adelie', 39.0, 3500)
  missing = _penguin('Adelie', 39.0, 3500, missing=('bill_length_mm',))
  new_island = _penguin('Gentoo', 45.0, 5000, island='Atlantis')
  for drop, kept in ((False, [good, missing, new_island]), (True, [good])):
    with TestPipeline() as p:
      out = (p | beam.Create([good, missing, new_island])
             | stages.CleanRows(PENGUINS, domains, drop=drop))
      beam_util.assert_that(out[stages.KEPT_TAG], beam_util.equal_to(kept),
                            label='kept')
      beam_util.assert_that(
          out[stages.PROBLEMS_TAG],
          beam_util.equal_to([('bill_length_mm', 'missing'),
                              ('island', 'out_of_domain')]),
          label='problems')
      beam_util.assert_that(
          out[stages.DROPPED_TAG] | beam.CombineGlobally(sum),
          beam_util.equal_to([2 if drop else 0]), label='dropped')


def test_counts_to_report_folds_entries():
  report = stages.counts_to_report([
      ('train', 'class_counts_before', 'a', 3),
      ('train', 'class_counts_after', 'a', 5),
      ('train', 'problems', ('x', 'missing'), 2),
      ('train', 'noisy_rows', None, 2),
      ('eval', 'dropped_rows', None, 0),
  ])
  assert report['train']['class_counts_after'] == {'a': 5}
  assert report['train']['problems'] == {'x': {'missing': 2,
                                               'out_of_domain': 0}}
  assert report['eval']['dropped_rows'] == 0


def _reordered(serialized: bytes) -> bytes:
  """The same tf.Example with its features serialized in reverse order.

  A tf.Example's features are a map, whose byte order protobuf does not fix
  (ExampleGen's bytes for the same rows differed between two runs):
  concatenated messages merge, so one message per feature, concatenated
  last to first, parses back to an equal Example.
  """
  example = tf.train.Example.FromString(serialized)
  parts = []
  for name in sorted(example.features.feature, reverse=True):
    single = tf.train.Example()
    single.features.feature[name].CopyFrom(example.features.feature[name])
    parts.append(single.SerializeToString())
  reordered = b''.join(parts)
  assert reordered != serialized
  assert tf.train.Example.FromString(reordered) == example
  return reordered


def _augmented_train_rows(p, rows, spec, cfg, name):
  """The train split's Augment stages on `rows`, as one sorted list."""
  kept = (p | f'Create[{name}]' >> beam.Create(rows)
          | f'Clean[{name}]' >> stages.CleanRows(spec, {}, drop=False)
         )[stages.KEPT_TAG]
  return (kept | f'Oversample[{name}]' >> stages.Oversample(spec, cfg, {})
          | f'Augment[{name}]' >> stages.AugmentImages(spec, cfg)
          | f'List[{name}]' >> beam.combiners.ToList()
          | f'Sort[{name}]' >> beam.Map(sorted))


@pytest.mark.parametrize('spec, rows, cfg', [
    (DIGITS, [_digit_example(i % 3, i) for i in range(6)] +
     [_digit_example(3, 9)], config_lib.AugmentConfig(
         copies=2, oversample='random', target_ratio=1.0, seed=5)),
    (PENGUINS, _imbalanced(), config_lib.AugmentConfig(
        oversample='smote', target_ratio=1.0, seed=3)),
])
def test_the_same_rows_in_other_bytes_are_augmented_the_same(spec, rows,
                                                             cfg):
  """Every seed and sort sees canonical bytes (CleanRows passes them on)."""
  with TestPipeline() as p:
    as_written = _augmented_train_rows(p, rows, spec, cfg, 'written')
    reordered = _augmented_train_rows(
        p, [_reordered(r) for r in rows], spec, cfg, 'reordered')
    compared = as_written | beam.Map(
        lambda a, b, n: (len(a) > n, a == b),
        b=beam.pvalue.AsSingleton(reordered), n=len(rows))
    beam_util.assert_that(compared, beam_util.equal_to([(True, True)]))


def test_oversampling_a_large_class_draws_from_a_bounded_sample(monkeypatch):
  # A bound of 3 rows stands in for MAX_CLASS_ROWS (20,000): the 4
  # Chinstrap rows are then a large class, oversampled from the 3 rows with
  # the smallest digests, and the counts still reach the target ratio.
  monkeypatch.setattr(tabular, 'MAX_CLASS_ROWS', 3)
  rows = _imbalanced()
  chinstrap = [r for r in rows if b'Chinstrap' in r]
  sample = sorted(chinstrap, key=tabular.row_digest)[:3]
  left_out = _length(sorted(chinstrap, key=tabular.row_digest)[3])
  cfg = config_lib.AugmentConfig(oversample='random', target_ratio=0.75,
                                 seed=3)
  with TestPipeline() as p:
    out = (p | beam.Create(rows)
           | stages.Oversample(PENGUINS, cfg, {})
           | beam.Filter(lambda s: b'Chinstrap' in s)
           | beam.Map(_length)
           | beam.combiners.Count.PerElement())
    # 9 Chinstrap rows: the 4 originals and 5 copies of the 3 sampled rows
    # (the row left out of the sample keeps its one original).
    def check(counts):
      counts = dict(counts)
      assert sum(counts.values()) == 9, counts
      assert counts[left_out] == 1, counts
      assert set(counts) == {_length(r) for r in chinstrap}, counts
    beam_util.assert_that(out, check)
  assert len(sample) == 3
  assert tabular.sampled_classes({'Adelie': 12, 'Chinstrap': 4}, 0.75) == {
      'Chinstrap': 4}
  assert tabular.sampled_classes({'Adelie': 2, 'Chinstrap': 1}, 0.75) == {}


def _length(serialized):
  return examples_lib.numeric_value(tf.train.Example.FromString(serialized),
                                    'bill_length_mm')
