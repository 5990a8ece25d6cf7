"""models/data_policy.py: the impute side of the noisy-row policy, image
decoding in the graph, and class weights (eager TensorFlow, no pipeline)."""
import os

import numpy as np
import pytest
import tensorflow as tf

from leantfx import data_formats
from leantfx.models import data_policy

pytestmark = pytest.mark.unit


def test_numeric_values_outside_the_domain_become_missing():
  nan = float('nan')
  block = tf.constant([[10.0, 5.0, 1e6], [250.0, -7.0, nan],
                       [999.0, 3.0, -1e6], [-5.0, nan, 0.0]])
  kept = data_policy.numeric_in_domain(
      block, [{'min': 0, 'max': 300}, {'min': 0}, None])
  np.testing.assert_array_equal(
      kept.numpy(), [[10.0, 5.0, 1e6], [250.0, nan, nan],
                     [nan, 3.0, -1e6], [nan, nan, 0.0]])
  # A vocabulary domain bounds nothing; no bounds leave the block as is.
  assert data_policy.numeric_in_domain(
      block, [None, {'values': ['a']}, {}]) is block


def test_numeric_domains_are_one_test_per_bound_whatever_the_columns():
  domains = [{'min': 0, 'max': 300}] * 3 + [{'max': 9}] * 5
  graph = tf.function(lambda b: data_policy.numeric_in_domain(b, domains)
                     ).get_concrete_function(
                         tf.TensorSpec([None, 8], tf.float32)).graph
  ops = [op.type for op in graph.get_operations()]
  assert ops.count('Less') == 1 and ops.count('Greater') == 1
  assert ops.count('SelectV2') == 1


def test_categories_outside_the_domain_become_missing():
  values = tf.constant([['Dream'], ['Atlantis'], ['Biscoe']])
  out = data_policy.categorical_in_domain(
      values, {'values': ['Biscoe', 'Dream', 'Torgersen']})
  assert [v.decode() for v in out.numpy().ravel()] == ['Dream', '', 'Biscoe']


def test_pixels_are_clipped_into_the_domain():
  out = data_policy.clip_to_domain(tf.constant([[-1.0], [20.0], [5.0]]),
                                   [{'min': 0, 'max': 16}])
  np.testing.assert_allclose(out.numpy().ravel(), [0.0, 16.0, 5.0])


def test_each_pixel_column_is_clipped_into_its_own_domain_in_one_op():
  pixels = tf.constant([[-1.0, 20.0, 9.0, 3.0], [7.0, 5.0, -4.0, 99.0]])
  domains = [{'min': 0, 'max': 16}, {'min': 0, 'max': 8}, None,
             {'max': 50}]
  out = data_policy.clip_to_domain(pixels, domains)
  np.testing.assert_allclose(out.numpy(), [[0.0, 8.0, 9.0, 3.0],
                                           [7.0, 5.0, -4.0, 50.0]])
  # One Maximum and one Minimum whatever the column count.
  graph = tf.function(lambda p: data_policy.clip_to_domain(p, domains)
                     ).get_concrete_function(
                         tf.TensorSpec([None, 4], tf.float32)).graph
  ops = [op.type for op in graph.get_operations()]
  assert ops.count('Maximum') == 1 and ops.count('Minimum') == 1
  assert data_policy.clip_to_domain(pixels, [None] * 4) is pixels


def test_png_bytes_decode_to_the_pixel_vector():
  pixels = [(i * 5) % 17 for i in range(64)]
  png = data_formats.digit_png(pixels)
  out = data_policy.decode_images(tf.constant([[png], [b'']]), (8, 8, 1))
  assert out.shape == (2, 64)
  # digit_png scales 0..16 to 0..255 and rounds; decode divides by 255.
  expected = np.round(np.array(pixels) * 255.0 / 16) / 255.0
  np.testing.assert_allclose(out.numpy()[0], expected, atol=1e-6)
  np.testing.assert_array_equal(out.numpy()[1], np.zeros(64))  # Missing.


def test_inverse_frequency_weights():
  # Penguins' train split in the pipeline: Adelie 121, Chinstrap 58,
  # Gentoo 99 (Transform's label count file of a real run).
  weights = data_policy.inverse_frequency_weights({0: 121, 1: 58, 2: 99})
  total = 121 + 58 + 99
  assert weights[1] == pytest.approx(total / (3 * 58))
  # Every class then weighs the same in the loss: n / k.
  for c, n in ((0, 121), (1, 58), (2, 99)):
    assert weights[c] * n == pytest.approx(total / 3)
  assert data_policy.inverse_frequency_weights({0: 5, 1: 0})[1] == 1.0


def test_label_counts_read_transforms_frequency_file(tmp_path):
  class FakeOutput:  # Only the vocabulary path is needed.

    def vocabulary_file_by_name(self, name):
      assert name == data_policy.LABEL_COUNTS_VOCABULARY
      return str(tmp_path / 'counts')

  # The 'count value' lines tft.vocabulary(store_frequency=True) writes.
  (tmp_path / 'counts').write_text('121 0\n99 2\n58 1\n')
  assert data_policy.label_counts(FakeOutput(), 3) == {0: 121, 1: 58, 2: 99}
  assert data_policy.class_weights({'class_weights': 'none'}, FakeOutput(),
                                   3) is None
  assert data_policy.class_weights({'class_weights': 'auto'}, FakeOutput(),
                                   3)[1] == pytest.approx(278 / (3 * 58))
