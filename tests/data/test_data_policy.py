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
  dense = tf.constant([[10.0], [250.0], [999.0], [-5.0]])
  kept = data_policy.numeric_in_domain(dense, {'min': 0, 'max': 300})
  assert isinstance(kept, tf.SparseTensor)
  np.testing.assert_array_equal(kept.indices.numpy(), [[0, 0], [1, 0]])
  np.testing.assert_allclose(kept.values.numpy(), [10.0, 250.0])
  sparse = tf.SparseTensor([[0, 0], [2, 0]], tf.constant([5, 500],
                                                         tf.int64), [3, 1])
  kept = data_policy.numeric_in_domain(sparse, {'min': 0, 'max': 100})
  np.testing.assert_array_equal(kept.indices.numpy(), [[0, 0]])
  assert data_policy.numeric_in_domain(dense, None) is dense


def test_categories_outside_the_domain_become_missing():
  values = tf.constant([['Dream'], ['Atlantis'], ['Biscoe']])
  out = data_policy.categorical_in_domain(
      values, {'values': ['Biscoe', 'Dream', 'Torgersen']})
  assert [v.decode() for v in out.numpy().ravel()] == ['Dream', '', 'Biscoe']


def test_pixels_are_clipped_into_the_domain():
  out = data_policy.clip_to_domain(tf.constant([[-1.0], [20.0], [5.0]]),
                                   {'min': 0, 'max': 16})
  np.testing.assert_allclose(out.numpy().ravel(), [0.0, 16.0, 5.0])


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
