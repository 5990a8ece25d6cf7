"""Tests for leantfx.components.optimize.techniques.distillation on the digits CNN fixture."""
import json

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from leantfx.components.optimize.techniques import _keras_utils
from leantfx.components.optimize.techniques import distillation
from leantfx.errors import ConfigError
from tests.optimize import conftest

# The default student of conftest.build_digits_cnn (34,186 parameters):
# divisor 2 gives 8,778 parameters (3.9x, short of 4x), so the default picks
# divisor 3: widths ceil(16/3)=6, ceil(32/3)=11, ceil(64/3)=22, logits kept
# at 10 -> 60 + 77 + 3,894 + 230 = 4,261 parameters (8.0x).
STUDENT_WIDTHS = {'conv3x3': 6, 'conv1x1': 11, 'hidden': 22, 'logits': 10}
STUDENT_PARAMS = 4261
# Measured on this fixture after 3 epochs at Adam 3e-3 (132 steps): distilled
# student 0.87, same student from scratch 0.90 (at 10 epochs: 0.94 vs 0.96;
# on these easy digits the soft targets do not beat labels). 0.8 is far above
# chance (0.1) and catches a student that does not learn.
MIN_STUDENT_ACCURACY = 0.8


@pytest.mark.unit
def test_loss_matches_hinton_formula():
  labels = tf.constant([0, 2])
  teacher_logits = tf.constant([[2.0, 1.0, 0.1], [0.3, 0.2, 3.0]])
  student_logits = tf.constant([[1.0, 1.5, 0.0], [0.0, 0.5, 1.0]])
  t, alpha = 4.0, 0.1

  def softmax(z):
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)

  p = softmax(teacher_logits.numpy() / t)
  q = softmax(student_logits.numpy() / t)
  kl = np.sum(p * np.log(p / q), axis=-1)
  ce = -np.log(softmax(student_logits.numpy())[[0, 1], [0, 2]])
  expected = np.mean(alpha * ce + (1 - alpha) * t**2 * kl)

  loss = distillation.distillation_loss(labels, teacher_logits,
                                        student_logits, t, alpha)
  assert float(loss) == pytest.approx(expected, rel=1e-5)
  # Identical logits leave only the label term (KL = 0 up to float32
  # round-off, which T^2 = 16 scales to ~1e-6).
  same = distillation.distillation_loss(labels, teacher_logits,
                                        teacher_logits, t, alpha)
  ce_teacher = -np.log(softmax(teacher_logits.numpy())[[0, 1], [0, 2]])
  assert float(same) == pytest.approx(alpha * np.mean(ce_teacher), abs=1e-5)


@pytest.mark.unit
def test_default_student_is_at_least_4x_smaller(teacher):
  student = distillation.build_student(teacher, 3)
  assert _keras_utils.count_params(student) == STUDENT_PARAMS
  assert student.input_names == teacher.input_names
  assert student.get_layer('logits').units == 10
  assert student.layers[-1].name == 'probabilities'


@pytest.mark.unit
def test_distilled_student_is_smaller_and_learns(
    teacher, teacher_accuracy, digits, teacher_weights_unchanged):
  config = distillation.DistillationConfig(epochs=3, learning_rate=3e-3)

  result = distillation.distill(teacher, digits.train_ds(), config,
                                digits.eval_ds())

  assert result.technique == 'distillation'
  json.dumps(result.details)  # types.py: details are JSON-serialisable
  assert result.details['teacher_params'] == 34186
  assert result.details['student_params'] == STUDENT_PARAMS
  assert result.details['compression'] >= 4.0
  assert result.details['student_layer_widths'] == STUDENT_WIDTHS
  assert result.details['optimizer_steps'] == 132  # 3 epochs x 44 batches
  assert result.details['teacher_logits'] == "layer 'logits'"
  assert result.details['accuracy_before'] == pytest.approx(teacher_accuracy)
  assert result.details['accuracy_after'] > MIN_STUDENT_ACCURACY
  # The student is returned as a plain probabilities model.
  assert result.model.count_params() == STUDENT_PARAMS
  features, _ = _keras_utils.first_examples(digits.eval_ds(), 16)
  np.testing.assert_allclose(
      np.sum(result.model(features).numpy(), -1), 1.0, atol=1e-5)


@pytest.mark.unit
def test_alpha_one_reduces_to_training_from_scratch(teacher, digits):
  # With alpha = 1 the teacher term vanishes, so the same seed, batches and
  # steps must give (nearly) the same student as train_from_scratch: the
  # comparison a benchmark makes is fair. Only the loss numerics differ
  # (cross-entropy from logits vs from probabilities).
  config = distillation.DistillationConfig(
      alpha=1.0, epochs=1, learning_rate=3e-3)

  distilled = distillation.distill(teacher, digits.train_ds().take(15),
                                   config)
  scratch = distillation.train_from_scratch(teacher,
                                            digits.train_ds().take(15), config)

  assert scratch.technique == 'student_from_scratch'
  json.dumps(scratch.details)
  assert scratch.details['optimizer_steps'] == 15
  assert distilled.details['optimizer_steps'] == 15
  assert scratch.details['student_params'] == STUDENT_PARAMS
  features, _ = _keras_utils.first_examples(digits.eval_ds(), 397)
  np.testing.assert_allclose(
      distilled.model(features).numpy(), scratch.model(features).numpy(),
      atol=1e-3)


@pytest.mark.unit
def test_teacher_without_logits_layer_uses_log_probabilities():
  image = tf_keras.Input(shape=(64,), name=conftest.FEATURE)
  hidden = tf_keras.layers.Dense(32, activation='relu', name='hidden')(image)
  out = tf_keras.layers.Dense(10, activation='softmax', name='out')(hidden)
  teacher = tf_keras.Model({conftest.FEATURE: image}, out)

  heads, source = distillation._logits_and_probabilities(teacher)
  logits, probabilities = heads(
      {conftest.FEATURE: np.random.default_rng(0).random((4, 64))})
  assert source == 'log(probabilities)'
  np.testing.assert_allclose(logits, np.log(probabilities), atol=1e-6)
  # 'out' keeps its 10 classes; hidden 32 -> ceil(32/5) = 7 is the first
  # divisor reaching 4x: 2,410 -> 535 parameters.
  student = distillation._default_student_builder(
      teacher, distillation.DistillationConfig())()
  assert student.get_layer('hidden').units == 7
  assert student.get_layer('out').units == 10
  assert _keras_utils.count_params(student) == 535


@pytest.mark.unit
def test_too_large_student_is_a_config_error(teacher, digits):
  config = distillation.DistillationConfig(width_divisor=2)  # 3.9x only
  with pytest.raises(ConfigError, match='min_compression'):
    distillation.distill(teacher, digits.train_ds(), config)


@pytest.mark.unit
def test_custom_student_must_read_the_same_inputs(teacher, digits):

  def wrong_inputs():
    pixels = tf_keras.Input(shape=(64,), name='pixels')
    out = tf_keras.layers.Dense(10, activation='softmax')(pixels)
    return tf_keras.Model({'pixels': pixels}, out)

  with pytest.raises(ConfigError, match=r"\['pixels'\].*\['image_xf'\]"):
    distillation.distill(teacher, digits.train_ds(),
                         distillation.DistillationConfig(),
                         student_builder=wrong_inputs)


@pytest.mark.unit
@pytest.mark.parametrize('field, value', [
    ('temperature', 0.0),
    ('alpha', 1.5),
    ('width_divisor', 0),
    ('min_compression', 0.5),
    ('epochs', 0),
    ('learning_rate', 0.0),
    ('seed', -1),
    ('mixup', -0.1),
])
def test_invalid_config_values_raise(field, value):
  with pytest.raises(ConfigError, match=f'DistillationConfig.{field}'):
    distillation.DistillationConfig(**{field: value})


@pytest.mark.unit
def test_config_round_trips_through_dict():
  config = distillation.DistillationConfig(
      temperature=2.0, alpha=0.5, width_divisor=3, min_compression=2.0,
      epochs=5, learning_rate=3e-3, seed=7, mixup=0.4)
  assert distillation.DistillationConfig.from_dict(config.to_dict()) == config
  with pytest.raises(ConfigError, match='temp'):
    distillation.DistillationConfig.from_dict({'temp': 2.0})


@pytest.mark.unit
def test_mixup_mixes_float_inputs_and_keeps_the_others():
  tf_keras.utils.set_random_seed(0)
  features = {'x': tf.reshape(tf.range(12, dtype=tf.float32), (4, 3)),
              'id': tf.constant([[1], [2], [3], [4]], tf.int64)}
  labels = tf.constant([0, 1, 2, 3], tf.int64)

  mixed, partner_labels, lam = distillation._mixup(features, labels, 0.4)

  lam = lam.numpy()
  assert np.all((lam >= 0) & (lam <= 1))
  partner = partner_labels.numpy()  # labels 0..3 are the example indices
  assert sorted(partner.tolist()) == [0, 1, 2, 3]
  x = features['x'].numpy()
  np.testing.assert_allclose(
      mixed['x'].numpy(), lam[:, None] * x + (1 - lam[:, None]) * x[partner],
      rtol=1e-6)
  np.testing.assert_array_equal(mixed['id'].numpy(), features['id'].numpy())


@pytest.mark.unit
def test_mixup_trains_both_students_on_the_same_mixed_batches(teacher, digits):
  config = distillation.DistillationConfig(epochs=1, mixup=0.4,
                                           learning_rate=3e-3)

  distilled = distillation.distill(teacher, digits.train_ds().take(15),
                                   config)
  scratch = distillation.train_from_scratch(teacher,
                                            digits.train_ds().take(15), config)

  for result in (distilled, scratch):
    assert result.details['optimizer_steps'] == 15
    assert result.details['config']['mixup'] == 0.4
    assert np.isfinite(result.details['history']['loss']).all()
  # Identical seeds and batches; only the teacher term differs, so the two
  # students differ (a teacher that were ignored would leave them equal).
  features, _ = _keras_utils.first_examples(digits.eval_ds(), 64)
  assert np.max(np.abs(distilled.model(features).numpy() -
                       scratch.model(features).numpy())) > 1e-3
