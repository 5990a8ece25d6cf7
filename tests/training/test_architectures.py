"""The architectures by config: MLP, small CNN, MobileNetV2, EfficientNetB0,
with width and depth multipliers, L2 and dropout."""
import dataclasses

import numpy as np
import pytest
import tf_keras

from leantfx.errors import ConfigError
from leantfx.models import architectures
from leantfx.models import bag_of_ngrams
from leantfx.models import features
from tests.training import helpers

pytestmark = pytest.mark.unit


def _build(spec, **changes):
  tf_keras.utils.set_random_seed(1)
  return architectures.build_compiled(spec, helpers.training(**changes), {})


def _dense_widths(model):
  return [l.units for l in model.layers
          if isinstance(l, tf_keras.layers.Dense) and l.name != 'logits']


def test_default_digits_model_is_the_foundation_cnn():
  """architecture 'auto' on digits: the original digits CNN, unchanged.

  Conv2D(32) -> pool -> Conv2D(64) -> pool -> Flatten -> Dense(64) ->
  Dense(32) -> Dropout -> logits(10) -> softmax: 37,674 parameters, as
  models/model.py built it before this issue (checked against that code).
  """
  model = architectures.build_compiled(
      helpers.DIGITS, helpers.training(hidden_units=(64, 32), dropout=0.1),
      {})
  kinds = [type(l).__name__ for l in model.layers]
  assert kinds == ['InputLayer', 'Reshape', 'Conv2D', 'MaxPooling2D',
                   'Conv2D', 'MaxPooling2D', 'Flatten', 'Dense', 'Dense',
                   'Dropout', 'Dense', 'Activation']
  assert model.count_params() == 37674
  assert model.layers[-2].name == 'logits'
  assert model.layers[-1].name == 'probabilities'


def test_width_and_depth_multipliers_on_the_mlp():
  base = _build(helpers.TABULAR)
  assert _dense_widths(base) == [16, 8]
  wide = _build(helpers.TABULAR, width_multiplier=2.0)
  assert _dense_widths(wide) == [32, 16]
  deep = _build(helpers.TABULAR, depth_multiplier=1.5)  # ceil(1.5) = 2
  assert _dense_widths(deep) == [16, 16, 8, 8]


def test_multipliers_on_the_cnn():
  base = _build(helpers.DIGITS, conv_filters=(8, 16))
  convs = lambda m: [l.filters for l in m.layers
                     if isinstance(l, tf_keras.layers.Conv2D)]
  assert convs(base) == [8, 16]
  assert convs(_build(helpers.DIGITS, conv_filters=(8, 16),
                      width_multiplier=0.5, depth_multiplier=2.0)) == [
                          4, 4, 8, 8]


def _train_one_step(model, rows=8):
  x, y = helpers.digits_arrays(rows)
  # Eagerly: tracing a 150-layer graph for one step costs more than the step.
  model.run_eagerly = True
  before = [w.numpy().copy() for w in model.trainable_weights[:4]]
  loss = model.train_on_batch(x, y)[0]
  assert np.isfinite(loss)
  assert any(not np.array_equal(b, w.numpy())
             for b, w in zip(before, model.trainable_weights[:4]))
  out = model(x, training=False).numpy()
  assert out.shape == (rows, 10)
  np.testing.assert_allclose(out.sum(axis=1), 1.0, atol=1e-5)


def _backbone(model):
  return next(l for l in model.layers if isinstance(l, tf_keras.Model))


def test_mobilenet_v2_with_width_multiplier():
  small = _build(helpers.DIGITS, architecture='mobilenet_v2',
                 width_multiplier=0.35)
  full = tf_keras.applications.MobileNetV2(
      input_shape=(32, 32, 1), alpha=1.0, include_top=False, weights=None,
      pooling='avg')
  assert _backbone(small).name.startswith('mobilenetv2_0.35')
  # alpha scales every layer's channels, so parameters shrink ~alpha^2.
  assert _backbone(small).count_params() < 0.3 * full.count_params()
  # 8x8 digits are resized to the applications' 32x32 minimum.
  assert small.get_layer('resize').output_shape[1:3] == (32, 32)
  # Trained from scratch for thousands of steps, not ImageNet's millions:
  # tf_keras's 0.999 left the digits model at chance (architectures.py).
  norms = [l for l in _backbone(small).layers
           if isinstance(l, tf_keras.layers.BatchNormalization)]
  assert norms and {l.momentum for l in norms} == {
      architectures.MOBILENET_BN_MOMENTUM}
  _train_one_step(small)


def test_efficientnet_b0_with_width_and_depth_multipliers():
  model = _build(helpers.DIGITS, architecture='efficientnet_b0',
                 width_multiplier=0.25, depth_multiplier=0.5)
  backbone = _backbone(model)
  assert backbone.name == 'efficientnetb0'
  # B0's seven stages repeat 1, 2, 2, 3, 3, 4, 1 blocks (16; Tan & Le 2019,
  # Table 1); round_repeats = ceil(0.5 x r) keeps 1, 1, 1, 2, 2, 2, 1 = 10.
  blocks = {l.name.split('_')[0] for l in backbone.layers
            if l.name.startswith('block')}
  assert len(blocks) == 10
  # Width 0.25 rounds the stem's 32 filters to 8 (round_filters, divisor 8).
  assert backbone.get_layer('stem_conv').filters == 8
  _train_one_step(model)


def test_l2_adds_a_penalty_per_kernel():
  model = _build(helpers.TABULAR, l2=0.01)
  # Two hidden Dense kernels and the logits kernel.
  assert len(model.losses) == 3


def test_image_architectures_need_images():
  with pytest.raises(ConfigError, match='needs image data'):
    _build(helpers.TABULAR, architecture='cnn')


def test_recompute_is_refused_for_applications():
  with pytest.raises(ConfigError, match='BatchNormalization'):
    _build(helpers.DIGITS, architecture='mobilenet_v2', recompute=True)


def test_inputs_are_the_transformed_features():
  model = _build(helpers.DIGITS)
  assert set(model.input) == {features.IMAGE_KEY}


def test_text_family_decays_its_rate_and_penalises_its_embedding():
  """lr_decay 'auto': cosine for bag_of_ngrams, constant elsewhere; the
  text embedding carries bag_of_ngrams.EMBEDDING_L2 (both chosen on a
  validation slice of the Debian span's train split)."""
  text = dataclasses.replace(helpers.TABULAR, text_features=('note',))
  auto = helpers.training(lr_decay='auto')
  assert architectures.lr_decay(text, auto) == 'cosine'
  assert architectures.lr_decay(helpers.TABULAR, auto) == 'constant'
  assert architectures.lr_decay(text, helpers.training(
      lr_decay='linear')) == 'linear'
  model = architectures.build_compiled(text, auto, {'note': 50})
  embedding = model.get_layer('note_embedding')
  assert embedding.embeddings_regularizer.get_config()['l2'] == (
      pytest.approx(bag_of_ngrams.EMBEDDING_L2))
  # The penalty reaches the loss: one term, the embedding's.
  assert len(model.losses) == 1
