"""Knowledge distillation: train a smaller student on a trained teacher's soft targets.

The loss follows Hinton et al., "Distilling the Knowledge in a Neural Network"
(2015), as in the Keras "Knowledge Distillation" example:

  loss = alpha * CE(labels, student)
         + (1 - alpha) * T^2 * KL(softmax(teacher_logits / T)
                                  || softmax(student_logits / T))

The T^2 factor keeps the soft-target gradients on the same scale as the hard
ones when T changes. Teacher logits are the output of the contract's 'logits'
layer (models/model_layout.py); a model without one contributes
log(probabilities), which equals its logits up to a per-example constant that
softmax ignores.

By default the student is the teacher's own architecture with every Dense
width and convolution filter count divided (the output layer keeps its
classes), which keeps the input dict and the 'logits'/'probabilities' names of
the contract. ``train_from_scratch`` trains the same student with labels only
and the same budget (seed, epochs, batches, optimizer), so a benchmark can
tell what the teacher adds.
"""
import dataclasses
import math
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import tensorflow as tf
import tf_keras

from leantfx.components.optimize.techniques import _keras_utils
from leantfx.components.optimize.types import OptimizationResult
from leantfx.errors import ConfigError
from leantfx.models.model_layout import LOGITS_LAYER

TECHNIQUE = 'distillation'
SCRATCH_TECHNIQUE = 'student_from_scratch'
# Layer config keys holding the width the default student divides.
_WIDTH_KEYS = ('units', 'filters')
# Largest divisor tried when width_divisor is None.
_MAX_AUTO_DIVISOR = 64
# Probabilities are clipped before log() so a zero does not give -inf.
_MIN_PROBABILITY = 1e-7

StudentBuilder = Callable[[], tf_keras.Model]


@dataclasses.dataclass(frozen=True)
class DistillationConfig:
  """How to distill.

  Attributes:
    temperature: softmax temperature T > 0 for the soft targets (Hinton et
      al. use 1-20; 4 is a common middle).
    alpha: weight of the hard-label loss in [0, 1]; 1 - alpha weighs the
      distillation term (0.1 as in the Keras example).
    width_divisor: divide every Dense width and conv filter count of the
      teacher by this (rounding up) to get the student; None = the smallest
      divisor from 2 up whose student has at least ``min_compression`` times
      fewer parameters.
    min_compression: required teacher/student parameter ratio (>= 1); a
      student that misses it is a ConfigError.
    epochs: passes over the training data (the Keras example uses 3).
    learning_rate: Adam learning rate; the student starts from scratch, so
      Adam's default 1e-3.
    seed: seeds Python, NumPy and TF before the student is built and trained
      (tf_keras.utils.set_random_seed), so the distilled and from-scratch
      students start from identical weights.
    mixup: > 0 trains on mixup (Zhang et al. 2018) of each batch with a
      shuffled copy of itself, lambda ~ Beta(mixup, mixup) per example:
      float inputs are mixed, other inputs keep the first example's. The
      teacher labels the mixed inputs it never saw (Beyer et al. 2022,
      "Knowledge distillation: a good teacher is patient and consistent":
      teacher and student see the same view); the hard-label term mixes
      the two labels with lambda. The from-scratch control trains on the
      same mixed batches with the mixed labels. 0 = off.
    max_steps: at most this many optimizer steps (shorter epochs when the
      passes would take more); None: the epochs decide. The ModelOptimizer
      sets it to twice the Trainer's steps (config.tie_to_trainer).
  """
  temperature: float = 4.0
  alpha: float = 0.1
  width_divisor: Optional[int] = None
  min_compression: float = 4.0
  epochs: int = 3
  learning_rate: float = 1e-3
  seed: int = 0
  mixup: float = 0.0
  max_steps: Optional[int] = None

  def __post_init__(self):
    _keras_utils.check_float(
        self, 'temperature', 0.0, 1e3, low_inclusive=False)
    _keras_utils.check_float(self, 'alpha', 0.0, 1.0)
    if self.width_divisor is not None:
      _keras_utils.check_int(self, 'width_divisor', 1)
    _keras_utils.check_float(self, 'min_compression', 1.0, 1e6)
    _keras_utils.check_int(self, 'epochs', 1)
    _keras_utils.check_learning_rate(self)
    _keras_utils.check_int(self, 'seed', 0)
    _keras_utils.check_float(self, 'mixup', 0.0, 100.0)
    _keras_utils.check_max_steps(self)

  def to_dict(self) -> Dict[str, Any]:
    """Returns the fields as a JSON-serialisable dict."""
    return _keras_utils.config_to_dict(self)

  @classmethod
  def from_dict(cls, data: Mapping[str, Any]) -> 'DistillationConfig':
    """Builds a config from ``to_dict`` output (unknown keys are an error)."""
    return _keras_utils.config_from_dict(cls, data)


def distillation_loss(labels: tf.Tensor, teacher_logits: tf.Tensor,
                      student_logits: tf.Tensor, temperature: float,
                      alpha: float) -> tf.Tensor:
  """Hinton et al.'s loss, averaged over the batch.

  Args:
    labels: int class ids, shape [batch].
    teacher_logits: shape [batch, classes].
    student_logits: shape [batch, classes].
    temperature: T > 0.
    alpha: weight of the hard-label cross-entropy.

  Returns:
    alpha * CE(labels, softmax(student_logits)) + (1 - alpha) * T^2 *
    KL(softmax(teacher_logits / T) || softmax(student_logits / T)).
  """
  return tf.reduce_mean(
      _per_example_loss(labels, teacher_logits, student_logits, temperature,
                        alpha))


def _per_example_loss(labels: tf.Tensor, teacher_logits: tf.Tensor,
                      student_logits: tf.Tensor, temperature: float,
                      alpha: float) -> tf.Tensor:
  """``distillation_loss`` before the batch mean, shape [batch]."""
  hard = tf_keras.losses.sparse_categorical_crossentropy(
      labels, student_logits, from_logits=True)
  soft_teacher = tf.nn.softmax(teacher_logits / temperature, axis=-1)
  log_soft_student = tf.nn.log_softmax(student_logits / temperature, axis=-1)
  # KL(p || q) = sum p (log p - log q); xlogy gives 0 where p == 0.
  kl = tf.reduce_sum(
      tf.math.xlogy(soft_teacher, soft_teacher) -
      soft_teacher * log_soft_student,
      axis=-1)
  return alpha * hard + (1.0 - alpha) * temperature**2 * kl


def _mixup(features: Any, labels: tf.Tensor, concentration: float):
  """Mixes a batch with a shuffled copy of itself.

  Returns:
    (mixed features, the shuffled labels, lambda of shape [batch]).
  """
  batch = tf.shape(labels)[0]
  partner = tf.random.shuffle(tf.range(batch))
  # Beta(a, a) as the ratio of two Gamma(a) draws.
  first = tf.random.gamma([batch], concentration)
  second = tf.random.gamma([batch], concentration)
  lam = first / (first + second)

  def mix(value):
    if not value.dtype.is_floating:
      return value
    shape = tf.concat([[batch], tf.ones([tf.rank(value) - 1], tf.int32)], 0)
    weight = tf.cast(tf.reshape(lam, shape), value.dtype)
    return weight * value + (1.0 - weight) * tf.gather(value, partner)

  return tf.nest.map_structure(mix, features), tf.gather(labels,
                                                         partner), lam


def _logits_and_probabilities(model: tf_keras.Model
                             ) -> Tuple[tf_keras.Model, str]:
  """A model sharing ``model``'s layers that outputs (logits, probabilities).

  Returns:
    (model, source) where source says where the logits come from.
  """
  probabilities = model.output
  try:
    logits = model.get_layer(LOGITS_LAYER).output
    source = f"layer '{LOGITS_LAYER}'"
  except ValueError:
    logits = tf.math.log(
        tf.clip_by_value(probabilities, _MIN_PROBABILITY, 1.0))
    source = 'log(probabilities)'
  return tf_keras.Model(model.input, [logits, probabilities]), source


class _Distiller(tf_keras.Model):
  """Trains ``student`` against a frozen teacher's logits."""

  def __init__(self, student: tf_keras.Model, teacher: tf_keras.Model,
               temperature: float, alpha: float, mixup: float = 0.0):
    super().__init__()
    self.student = student
    self._student_heads, self.student_logits_source = (
        _logits_and_probabilities(student))
    teacher_heads, self.teacher_logits_source = _logits_and_probabilities(
        teacher)
    # Not marked trainable=False: that flag would propagate to the caller's
    # teacher layers. Only student variables get gradients (train_step).
    self._teacher_logits = tf_keras.Model(teacher_heads.input,
                                          teacher_heads.output[0])
    self._temperature = float(temperature)
    self._alpha = float(alpha)
    self._mixup = float(mixup)
    self._loss_tracker = tf_keras.metrics.Mean(name='loss')

  @property
  def metrics(self):
    return [self._loss_tracker] + self.compiled_metrics.metrics

  def call(self, inputs, training=False):
    return self.student(inputs, training=training)

  def train_step(self, data):
    features, labels = data
    if self._mixup > 0:
      features, partner_labels, lam = _mixup(features, labels, self._mixup)
    teacher_logits = self._teacher_logits(features, training=False)
    with tf.GradientTape() as tape:
      student_logits, probabilities = self._student_heads(
          features, training=True)
      per_example = _per_example_loss(labels, teacher_logits, student_logits,
                                      self._temperature, self._alpha)
      if self._mixup > 0:
        # The teacher term does not depend on the labels, so mixing the
        # whole loss with lambda mixes the label term only.
        per_example = lam * per_example + (1.0 - lam) * _per_example_loss(
            partner_labels, teacher_logits, student_logits,
            self._temperature, self._alpha)
      loss = tf.reduce_mean(per_example)
      # The student's own regularization (e.g. the l2 its layers were built
      # with), as Keras adds it in the from-scratch control's fit().
      if self.student.losses:
        loss += tf.add_n(self.student.losses)
    variables = self.student.trainable_variables
    self.optimizer.apply_gradients(zip(tape.gradient(loss, variables),
                                       variables))
    self._loss_tracker.update_state(loss)
    self.compiled_metrics.update_state(labels, probabilities)
    return {m.name: m.result() for m in self.metrics}


def build_student(teacher: tf_keras.Model, width_divisor: int) -> tf_keras.Model:
  """The teacher's architecture with Dense widths and conv filters divided.

  Every layer with a 'units' or 'filters' setting gets ceil(width /
  width_divisor), except the 'logits' layer and the layers producing the
  model outputs (they keep the number of classes). Inputs, layer names and
  everything else are unchanged; weights are freshly initialised.

  Args:
    teacher: a functional or Sequential tf_keras model.
    width_divisor: integer >= 1.

  Returns:
    The untrained student.

  Raises:
    ConfigError: the teacher is not a functional/Sequential tf_keras model,
      or dividing its widths breaks it (e.g. a residual Add or a fixed
      Reshape needs the original width); pass a ``student_builder`` then.
  """
  _keras_utils.ensure_graph_model(teacher, 'building a student model')
  keep = {LOGITS_LAYER, *teacher.output_names}

  def shrink(layer):
    config = layer.get_config()
    if layer.name not in keep:
      for key in _WIDTH_KEYS:
        if isinstance(config.get(key), int):
          config[key] = max(1, math.ceil(config[key] / width_divisor))
    return layer.__class__.from_config(config)

  try:
    return tf_keras.models.clone_model(teacher, clone_function=shrink)
  except (ValueError, TypeError) as error:
    raise ConfigError(
        f'Cannot derive a student from model {teacher.name!r} by dividing its '
        f'widths by {width_divisor}: {error}. Pass student_builder= with a '
        'function that builds the student explicitly.') from error


def _default_student_builder(teacher: tf_keras.Model,
                             config: DistillationConfig) -> StudentBuilder:
  """Picks the width divisor and returns a builder for that student."""
  teacher_params = _keras_utils.count_params(teacher)
  divisor = config.width_divisor
  if divisor is None:
    for candidate in range(2, _MAX_AUTO_DIVISOR + 1):
      student = build_student(teacher, candidate)
      if teacher_params / _keras_utils.count_params(
          student) >= config.min_compression:
        divisor = candidate
        break
    else:
      raise ConfigError(
          f'No width divisor up to {_MAX_AUTO_DIVISOR} makes a student of '
          f'{teacher.name!r} {config.min_compression}x smaller (the layers '
          'whose width is kept dominate). Lower '
          'DistillationConfig.min_compression or pass student_builder=.')
  return lambda: build_student(teacher, divisor)


def _seeded_student(teacher: tf_keras.Model, config: DistillationConfig,
                    student_builder: Optional[StudentBuilder]
                   ) -> Tuple[tf_keras.Model, Dict[str, Any]]:
  """Seeds, builds and checks the student; returns it with size facts."""
  builder = student_builder or _default_student_builder(teacher, config)
  tf_keras.utils.set_random_seed(config.seed)
  student = builder()
  _keras_utils.ensure_graph_model(student, 'training a student')
  if sorted(student.input_names) != sorted(teacher.input_names):
    raise ConfigError(
        f'The student takes inputs {sorted(student.input_names)} but the '
        f'teacher takes {sorted(teacher.input_names)}; both must read the '
        'same transformed features. Fix the student_builder.')
  if student.output_shape[-1] != teacher.output_shape[-1]:
    raise ConfigError(
        f'The student predicts {student.output_shape[-1]} classes but the '
        f'teacher {teacher.output_shape[-1]}. Fix the student_builder.')
  teacher_params = _keras_utils.count_params(teacher)
  student_params = _keras_utils.count_params(student)
  compression = teacher_params / student_params
  if compression < config.min_compression:
    raise ConfigError(
        f'The student has {student_params} parameters, only '
        f'{compression:.2f}x fewer than the teacher\'s {teacher_params}; '
        f'DistillationConfig.min_compression asks for '
        f'{config.min_compression}x. Raise width_divisor (or leave it None), '
        'or lower min_compression.')
  facts = {
      'teacher_params': teacher_params,
      'student_params': student_params,
      'compression': compression,
      'student_layer_widths': {
          layer.name: layer.get_config()[key]
          for layer in student.layers
          for key in _WIDTH_KEYS
          if isinstance(layer.get_config().get(key), int)
      },
  }
  return student, facts


def distill(teacher: tf_keras.Model,
            train_ds: tf.data.Dataset,
            config: DistillationConfig,
            eval_ds: Optional[tf.data.Dataset] = None,
            student_builder: Optional[StudentBuilder] = None
           ) -> OptimizationResult:
  """Trains a smaller student on the teacher's temperature-softened outputs.

  The teacher is only read (its weights are frozen during training).

  Args:
    teacher: a trained functional/Sequential tf_keras classifier that outputs
      probabilities (see types.py).
    train_ds: finite dataset of (features, int64 labels) batches; one pass is
      one epoch.
    config: the distillation settings.
    eval_ds: optional held-out batches to measure accuracy.
    student_builder: optional zero-argument function returning an untrained
      student (same input names, same number of classes); by default the
      teacher's architecture with widths divided (``build_student``).

  Returns:
    OptimizationResult with technique 'distillation', the trained student
    (outputs probabilities), and details: config, teacher/student parameter
    counts and their ratio ('compression', checked against
    min_compression), student widths, where the logits came from, accuracy
    of the teacher ('accuracy_before') and the student ('accuracy_after'),
    optimizer steps and the training history.

  Raises:
    ConfigError: the student is not min_compression times smaller, does not
      match the teacher's inputs or classes, or cannot be derived.
  """
  student, facts = _seeded_student(teacher, config, student_builder)
  distiller = _Distiller(student, teacher, config.temperature, config.alpha,
                         config.mixup)
  distiller.compile(
      optimizer=tf_keras.optimizers.Adam(learning_rate=config.learning_rate),
      metrics=[tf_keras.metrics.SparseCategoricalAccuracy(name='accuracy')])
  history = _keras_utils.fit(distiller, train_ds, config.epochs,
                             max_steps=config.max_steps)
  details = {
      'config': config.to_dict(),
      **facts,
      'teacher_logits': distiller.teacher_logits_source,
      'student_logits': distiller.student_logits_source,
      'optimizer_steps': int(distiller.optimizer.iterations.numpy()),
      'accuracy_before': _keras_utils.accuracy(teacher, eval_ds),
      'accuracy_after': _keras_utils.accuracy(student, eval_ds),
      'history': history,
  }
  return OptimizationResult(technique=TECHNIQUE, model=student,
                            details=details)


def train_from_scratch(teacher: tf_keras.Model,
                       train_ds: tf.data.Dataset,
                       config: DistillationConfig,
                       eval_ds: Optional[tf.data.Dataset] = None,
                       student_builder: Optional[StudentBuilder] = None
                      ) -> OptimizationResult:
  """The control for ``distill``: the same student trained on labels only.

  Same architecture (same builder), same seed and so the same initial
  weights, same epochs over the same batches, same optimizer and learning
  rate; only the loss differs (plain cross-entropy). The teacher is used for
  the architecture and the size check, never for targets.

  Args:
    teacher: the model ``distill`` would distill.
    train_ds: the same training batches as given to ``distill``.
    config: the same config as given to ``distill``.
    eval_ds: optional held-out batches to measure accuracy.
    student_builder: the same builder as given to ``distill``, if any.

  Returns:
    OptimizationResult with technique 'student_from_scratch' and the same
    detail keys as ``distill`` (without the logits sources).

  Raises:
    ConfigError: as for ``distill``.
  """
  student, facts = _seeded_student(teacher, config, student_builder)
  if config.mixup > 0:
    # The same mixed batches as distill(), labels only (alpha = 1).
    trainer = _Distiller(student, teacher, config.temperature, 1.0,
                         config.mixup)
    trainer.compile(
        optimizer=tf_keras.optimizers.Adam(learning_rate=config.learning_rate),
        metrics=[tf_keras.metrics.SparseCategoricalAccuracy(name='accuracy')])
  else:
    trainer = student
    _keras_utils.compile_classifier(student, config.learning_rate)
  history = _keras_utils.fit(trainer, train_ds, config.epochs,
                             max_steps=config.max_steps)
  details = {
      'config': config.to_dict(),
      **facts,
      'optimizer_steps': int(trainer.optimizer.iterations.numpy()),
      'accuracy_before': _keras_utils.accuracy(teacher, eval_ds),
      'accuracy_after': _keras_utils.accuracy(student, eval_ds),
      'history': history,
  }
  return OptimizationResult(technique=SCRATCH_TECHNIQUE, model=student,
                            details=details)
