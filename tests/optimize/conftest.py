"""Fixtures for the optimization-technique tests: digits data and a tiny CNN.

scikit-learn's ``load_digits`` (1797 8x8 grey images, 10 classes) ships with
scikit-learn, so the tests need no download. Pixels are scaled by 1/16 (their
range is 0..16) and flattened into the contract's dict input
{'image_xf': float32 [64]}; labels are int64.

The teacher fits types.py's trained-model contract: a functional tf_keras
model whose last Dense layer is named 'logits' and whose last layer is
Activation('softmax', name='probabilities'). Its second convolution is 1x1 so
that low-rank factorization has a convolution to factorize.
"""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from leantfx.components.optimize.techniques import _keras_utils
from tests.optimize import raw_fixture

FEATURE = 'image_xf'
# 1400 train / 397 eval of the 1797 digits; a fixed permutation (seed 0).
NUM_TRAIN = 1400
BATCH_SIZE = 32
SEED = 0
# Measured on this fixture: 4 epochs at Adam 3e-3 reach 0.985 eval accuracy;
# the fixture insists on 0.9 so every technique starts from a good model.
TEACHER_EPOCHS = 4
TEACHER_LEARNING_RATE = 3e-3
TEACHER_MIN_ACCURACY = 0.9


def build_digits_cnn(conv_filters=(16, 32), dense_units=64, num_classes=10):
  """The tiny contract-shaped CNN: 34,186 parameters with the defaults."""
  image = tf_keras.Input(shape=(64,), name=FEATURE)
  x = tf_keras.layers.Reshape((8, 8, 1), name='to_image')(image)
  x = tf_keras.layers.Conv2D(
      conv_filters[0], 3, padding='same', activation='relu', name='conv3x3')(x)
  x = tf_keras.layers.Conv2D(
      conv_filters[1], 1, activation='relu', name='conv1x1')(x)
  x = tf_keras.layers.MaxPooling2D(2, name='pool')(x)
  x = tf_keras.layers.Flatten(name='flatten')(x)
  x = tf_keras.layers.Dense(dense_units, activation='relu', name='hidden')(x)
  x = tf_keras.layers.Dropout(0.2, name='dropout')(x)
  x = tf_keras.layers.Dense(num_classes, name='logits')(x)
  probabilities = tf_keras.layers.Activation(
      'softmax', name='probabilities')(x)
  return tf_keras.Model({FEATURE: image}, probabilities, name='digits_cnn')


class Digits:
  """Train/eval datasets of the digits, batched as the techniques expect."""

  def __init__(self):
    from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top
    digits = load_digits()
    order = np.random.default_rng(SEED).permutation(len(digits.target))
    self.x = (digits.data[order] / 16.0).astype(np.float32)
    self.y = digits.target[order].astype(np.int64)

  def train_ds(self, batch_size=BATCH_SIZE):
    x, y = self.x[:NUM_TRAIN], self.y[:NUM_TRAIN]
    return tf.data.Dataset.from_tensor_slices(({
        FEATURE: x
    }, y)).shuffle(NUM_TRAIN, seed=SEED).batch(batch_size)

  def eval_ds(self, batch_size=128):
    x, y = self.x[NUM_TRAIN:], self.y[NUM_TRAIN:]
    return tf.data.Dataset.from_tensor_slices(({FEATURE: x}, y)).batch(batch_size)


@pytest.fixture(scope='session')
def digits():
  return Digits()


@pytest.fixture(scope='session')
def teacher(digits):
  """A trained digits CNN (shared: techniques must never modify it)."""
  tf_keras.utils.set_random_seed(SEED)
  model = build_digits_cnn()
  _keras_utils.compile_classifier(model, TEACHER_LEARNING_RATE)
  model.fit(digits.train_ds(), epochs=TEACHER_EPOCHS, verbose=0)
  accuracy = _keras_utils.accuracy(model, digits.eval_ds())
  assert accuracy > TEACHER_MIN_ACCURACY, accuracy
  return model


@pytest.fixture(scope='session')
def teacher_accuracy(teacher, digits):
  return _keras_utils.accuracy(teacher, digits.eval_ds())


@pytest.fixture
def teacher_weights_unchanged(teacher):
  """Asserts after the test that the shared teacher was not modified."""
  before = [w.copy() for w in teacher.get_weights()]
  yield
  after = teacher.get_weights()
  assert all(np.array_equal(b, a) for b, a in zip(before, after))


class ScaleLayer(tf_keras.layers.Layer):
  """A custom layer no tfmot registry knows (for unsupported-layer tests)."""

  def build(self, input_shape):
    self.scale = self.add_weight(
        name='scale', shape=(input_shape[-1],), initializer='ones')

  def call(self, inputs):
    return inputs * self.scale


def build_model_with_custom_layer():
  """A small trained-shape model with a custom layer named 'my_scale'."""
  image = tf_keras.Input(shape=(64,), name=FEATURE)
  x = tf_keras.layers.Dense(32, activation='relu', name='hidden')(image)
  x = ScaleLayer(name='my_scale')(x)
  x = tf_keras.layers.Dense(10, name='logits')(x)
  probabilities = tf_keras.layers.Activation(
      'softmax', name='probabilities')(x)
  return tf_keras.Model({FEATURE: image}, probabilities)


@pytest.fixture(scope='session')
def digits_fixture(tmp_path_factory):
  """A digits model on its real Transform (tests/optimize/raw_fixture.py)."""
  return raw_fixture.Fixture('digits', tmp_path_factory.mktemp('raw_digits'))


@pytest.fixture(scope='session')
def penguins_fixture(tmp_path_factory):
  """A penguins model on its real Transform (vocabularies and gaps)."""
  return raw_fixture.Fixture('penguins',
                             tmp_path_factory.mktemp('raw_penguins'))


@pytest.fixture(scope='session')
def text_fixture(tmp_path_factory):
  """A text + date model on its real Transform (raw_fixture.text_spec)."""
  return raw_fixture.Fixture('tickets', tmp_path_factory.mktemp('raw_text'),
                             spec=raw_fixture.text_spec(),
                             columns=raw_fixture.text_columns())
