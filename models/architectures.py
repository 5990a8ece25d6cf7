"""The model architectures the Trainer can build, chosen by TrainingConfig.

  mlp              Dense layers over the tabular features (and flattened
                   pixels); the cost-effective default for tabular data.
  cnn              a small CNN: Conv2D blocks with max pooling, then the MLP
                   head.
  mobilenet_v2     tf_keras.applications.MobileNetV2 (inverted residuals,
                   depthwise convolutions), weights=None, alpha = width.
  efficientnet_b0  tf_keras.applications EfficientNet with B0's compound
                   scaling (width 1.0, depth 1.0) times the multipliers,
                   weights=None.
  bag_of_ngrams    the text family's fast default, what 'auto' picks for
                   data with free-text columns: each text column's
                   TF-IDF-weighted sum of word and word-pair embeddings
                   (models/bag_of_ngrams.py), concatenated with the tabular
                   features, then the MLP head.

Text columns go through the embedding bag and date columns' calendar blocks
(models/date_features.py) join the tabular features whatever the
architecture, so no column the roles made a feature is left out.

Nothing is downloaded: the applications start from random weights. Every
architecture ends in the MLP head (hidden_units x width, repeated by depth),
dropout, the Dense layer named 'logits' and a float32 softmax named
'probabilities' (the Format-Keras contract of models/model_layout.py). A
regression ends instead in a one-unit linear Dense 'logits' and a fixed
float32 rescaling named 'predictions' (x * std + mean of the train split's
target): the layers learn a unit-scale target, and every consumer of the
model (TFMA, serving) sees target units, with nothing to invert.

width_multiplier scales units and filters; depth_multiplier scales the
number of layers of each stage, rounded up (EfficientNet's round_repeats).
tf_keras's MobileNetV2 has a fixed depth, so depth_multiplier applies to its
head only.
"""
import math
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import tensorflow as tf
import tf_keras
from tf_keras.src.applications import efficientnet

from leantfx import config as config_lib
from leantfx.errors import ConfigError
from leantfx.models import bag_of_ngrams
from leantfx.models import date_features
from leantfx.models import features
from leantfx.models import model_layout
from leantfx.models.training import accumulation
from leantfx.models.training import precision
from leantfx.models.training import recompute as recompute_lib
from leantfx.models.training import schedules

MLP = 'mlp'
CNN = 'cnn'
MOBILENET_V2 = 'mobilenet_v2'
EFFICIENTNET_B0 = 'efficientnet_b0'
BAG_OF_NGRAMS = 'bag_of_ngrams'
APPLICATIONS = (MOBILENET_V2, EFFICIENTNET_B0)
# The smallest input side tf_keras.applications accept (obtain_input_shape).
MIN_APPLICATION_SIZE = 32
# tf_keras's MobileNetV2 keeps its BatchNormalization statistics with
# momentum 0.999, made for ImageNet's long runs: after 900 steps 41% of them
# is still the initial mean 0 / variance 1, and the product's mobilenet_v2
# on the digits (32 px, 900 steps) scored 0.075 on the eval split while its
# train accuracy reached 0.93; at 0.9 it scored 0.95
# (benchmarks/bench_optimize.py, figure 6). weights=None always trains from
# scratch, often for a few thousand steps: 0.9 forgets the start in ~50.
MOBILENET_BN_MOMENTUM = 0.9


def resolve(spec: config_lib.DatasetSpec,
            training: config_lib.TrainingConfig) -> str:
  """The architecture to build: the configured one, or the dataset's kind.

  Raises:
    ConfigError: for an image architecture on data without images, or
      recompute with an application model.
  """
  name = spec.model if training.architecture == 'auto' else (
      training.architecture)
  if training.architecture == 'auto' and spec.text_features:
    name = BAG_OF_NGRAMS
  if name == BAG_OF_NGRAMS and not spec.text_features:
    raise ConfigError(
        f'architecture {BAG_OF_NGRAMS!r} needs free-text columns, and '
        f'dataset {spec.name!r} has none (no column of role text). Use '
        'architecture auto, or --column-role COL=text for a text column.')
  has_images = bool(spec.image_features) or bool(
      getattr(spec, 'image_key', None))
  if name in (CNN,) + APPLICATIONS and not has_images:
    raise ConfigError(
        f'architecture {name!r} needs image data, and dataset {spec.name!r} '
        'has no image features. Use architecture mlp (or auto) for tabular '
        'data.')
  if name in APPLICATIONS and training.recompute:
    raise ConfigError(
        f'recompute is not available for {name}: its blocks hold '
        'BatchNormalization layers, whose moving statistics would be updated '
        'twice when the block is recomputed. Use recompute with the mlp or '
        'cnn architectures.')
  return name


def _product(values: Sequence[int]) -> int:
  return int(math.prod(values))


def _repeats(depth_multiplier: float, base: int = 1) -> int:
  """EfficientNet's round_repeats: ceil(depth x base)."""
  return int(math.ceil(depth_multiplier * base))


def _width(value: int, width_multiplier: float) -> int:
  return max(1, int(round(value * width_multiplier)))


def _regularizer(training: config_lib.TrainingConfig):
  return tf_keras.regularizers.L2(training.l2) if training.l2 > 0 else None


def _add_dates_and_texts(spec: config_lib.DatasetSpec,
                         vocabulary_sizes: Mapping[str, int],
                         training: config_lib.TrainingConfig,
                         inputs: Dict[str, tf_keras.Input],
                         parts: List[tf.Tensor]) -> None:
  """Adds the date blocks and the text columns' embedding bags."""
  for column in spec.date_features:
    name = features.transformed_name(column)
    inputs[name] = tf_keras.Input(shape=(len(date_features.PARTS),),
                                  name=name, dtype=tf.float32)
    parts.append(inputs[name])
  if spec.text_features:
    text_inputs = bag_of_ngrams.text_inputs(spec.text_features)
    inputs.update(text_inputs)
    parts.extend(bag_of_ngrams.text_vectors(
        text_inputs, spec.text_features, vocabulary_sizes,
        _width(bag_of_ngrams.DIMENSIONS, training.width_multiplier)))


def _inputs(spec: config_lib.DatasetSpec, vocabulary_sizes: Mapping[str, int],
            training: config_lib.TrainingConfig
           ) -> Tuple[Dict[str, tf_keras.Input], List[tf.Tensor], Optional[
               tf.Tensor]]:
  """Keras inputs per transformed feature: tabular parts and the image."""
  inputs: Dict[str, tf_keras.Input] = {}
  parts = []
  for column in spec.numeric_features:
    name = features.transformed_name(column)
    inputs[name] = tf_keras.Input(shape=(1,), name=name, dtype=tf.float32)
    parts.append(inputs[name])
  for column in spec.categorical_features:
    name = features.transformed_name(column)
    inputs[name] = tf_keras.Input(shape=(1,), name=name, dtype=tf.int64)
    # An embedding, not CategoryEncoding's one-hot: that lowers to
    # DenseBincount, which TFLite cannot run, so the model could not ship as
    # TFLite. With as many dimensions as tokens (up to 8) it has one-hot's
    # capacity; TFLite runs it as a GATHER.
    vocabulary = vocabulary_sizes[column]
    embedded = tf_keras.layers.Embedding(
        vocabulary, min(vocabulary, 8),
        name=f'{column}_embedding')(inputs[name])
    parts.append(tf_keras.layers.Flatten(name=f'{column}_flat')(embedded))
  _add_dates_and_texts(spec, vocabulary_sizes, training, inputs, parts)
  image = None
  if spec.image_features or getattr(spec, 'image_key', None):
    # Pixel columns, or an encoded image Transform decodes to image_shape.
    size = len(spec.image_features) or _product(spec.image_shape)
    inputs[features.IMAGE_KEY] = tf_keras.Input(
        shape=(size,), name=features.IMAGE_KEY, dtype=tf.float32)
    image = tf_keras.layers.Reshape(spec.image_shape)(
        inputs[features.IMAGE_KEY])
  return inputs, parts, image


def _cnn_blocks(training: config_lib.TrainingConfig) -> List[List[
    tf_keras.layers.Layer]]:
  """Conv2D block(s) per conv_filters entry; pooling is added per shape."""
  blocks = []
  for filters in training.conv_filters:
    blocks.append([
        tf_keras.layers.Conv2D(
            _width(filters, training.width_multiplier), 3, padding='same',
            activation='relu', kernel_regularizer=_regularizer(training))
        for _ in range(_repeats(training.depth_multiplier))
    ])
  return blocks


def _apply_cnn(x: tf.Tensor, training: config_lib.TrainingConfig) -> tf.Tensor:
  for layers in _cnn_blocks(training):
    # Pool while the feature map is still at least 4x4 (8x8 digits: twice).
    if x.shape[1] >= 4 and x.shape[2] >= 4:
      layers.append(tf_keras.layers.MaxPooling2D(2))
    x = recompute_lib.apply_block(layers, x, training.recompute)
  return tf_keras.layers.Flatten()(x)


def _application(name: str, x: tf.Tensor, spec: config_lib.DatasetSpec,
                 training: config_lib.TrainingConfig) -> tf.Tensor:
  """Runs the image through a tf_keras.applications backbone (weights=None)."""
  height, width, channels = spec.image_shape
  size = training.image_size or max(height, width, MIN_APPLICATION_SIZE)
  if (height, width) != (size, size):
    x = tf_keras.layers.Resizing(size, size, name='resize')(x)
  # Transform scales pixels to [0, 1] (image_max_value).
  if name == MOBILENET_V2:
    x = tf_keras.layers.Rescaling(2.0, offset=-1.0, name='to_pm1')(x)
    backbone = tf_keras.applications.MobileNetV2(
        input_shape=(size, size, channels), alpha=training.width_multiplier,
        include_top=False, weights=None, pooling='avg')
    for layer in backbone.layers:
      if isinstance(layer, tf_keras.layers.BatchNormalization):
        layer.momentum = MOBILENET_BN_MOMENTUM
  else:
    # EfficientNet rescales 0..255 inputs itself (Rescaling(1/255) inside).
    x = tf_keras.layers.Rescaling(255.0, name='to_0_255')(x)
    # The public module only exports B0..B7; their common builder takes the
    # width and depth coefficients. B0 is EfficientNet(1.0, 1.0, 224, 0.2).
    backbone = efficientnet.EfficientNet(
        width_coefficient=training.width_multiplier,
        depth_coefficient=training.depth_multiplier,
        default_size=224,
        dropout_rate=0.2,
        model_name='efficientnetb0',
        include_top=False,
        weights=None,
        input_shape=(size, size, channels),
        pooling='avg')
  return backbone(x)


def _head(x: tf.Tensor, training: config_lib.TrainingConfig) -> tf.Tensor:
  """The Dense stack, grouped into sqrt(n) recompute blocks when asked."""
  layers = [
      tf_keras.layers.Dense(
          _width(units, training.width_multiplier), activation='relu',
          kernel_regularizer=_regularizer(training))
      for units in training.hidden_units
      for _ in range(_repeats(training.depth_multiplier))
  ]
  if not training.recompute:
    for layer in layers:
      x = layer(x)
    return x
  for block in recompute_lib.sqrt_blocks(layers):
    x = recompute_lib.apply_block(block, x, True)
  return x


def build(spec: config_lib.DatasetSpec, training: config_lib.TrainingConfig,
          vocabulary_sizes: Mapping[str, int],
          target_scale: Optional[Tuple[float, float]] = None
         ) -> Tuple[Dict[str, tf_keras.Input], tf.Tensor]:
  """Builds the architecture's graph under the current dtype policy.

  Args:
    spec: the dataset (inputs, classes, image shape, task).
    training: architecture, multipliers, widths, dropout, l2, recompute.
    vocabulary_sizes: vocabulary size (OOV bucket included) per categorical
      and text column.
    target_scale: regression only: (mean, standard deviation) of the train
      split's target; (0, 1) when not given.

  Returns:
    (inputs, output): a dict of Keras inputs by transformed feature name,
    and the float32 softmax output (classification) or the float32
    [batch, 1] prediction in target units (regression).

  Raises:
    ConfigError: see resolve().
  """
  name = resolve(spec, training)
  inputs, parts, image = _inputs(spec, vocabulary_sizes, training)
  if image is not None:
    if name == CNN:
      parts.append(_apply_cnn(image, training))
    elif name in APPLICATIONS:
      parts.append(_application(name, image, spec, training))
    else:
      parts.append(tf_keras.layers.Flatten()(image))
  x = parts[0] if len(parts) == 1 else tf_keras.layers.Concatenate()(parts)
  x = _head(x, training)
  if training.dropout > 0:
    x = tf_keras.layers.Dropout(training.dropout)(x)
  if spec.is_regression:
    return inputs, _regression_head(x, training, target_scale or (0.0, 1.0))
  logits = tf_keras.layers.Dense(
      len(spec.classes), name=model_layout.LOGITS_LAYER,
      kernel_regularizer=_regularizer(training))(x)
  # The output computes in float32 whatever the policy: a bf16/fp16 softmax
  # loses the small probabilities the loss and TFMA need.
  probabilities = tf_keras.layers.Activation(
      'softmax', dtype='float32',
      name=model_layout.PROBABILITIES_LAYER)(logits)
  return inputs, probabilities


def _regression_head(x: tf.Tensor, training: config_lib.TrainingConfig,
                     target_scale: Tuple[float, float]) -> tf.Tensor:
  """A linear unit, rescaled to target units; float32 under any policy."""
  mean, std = target_scale
  unit = tf_keras.layers.Dense(
      1, name=model_layout.LOGITS_LAYER,
      kernel_regularizer=_regularizer(training))(x)
  # float32 like the softmax: a target of, say, 30000 has a step of 16 in
  # float16 and of 128 in bfloat16.
  return tf_keras.layers.Rescaling(
      scale=float(std), offset=float(mean), dtype='float32',
      name=model_layout.PREDICTIONS_LAYER)(unit)


def _loss_and_metrics(spec: config_lib.DatasetSpec,
                      training: config_lib.TrainingConfig,
                      target_scale: Optional[Tuple[float, float]]):
  if not spec.is_regression:
    return (tf_keras.losses.SparseCategoricalCrossentropy(),
            [tf_keras.metrics.SparseCategoricalAccuracy(name='accuracy')])
  std = (target_scale or (0.0, 1.0))[1]
  if training.regression_loss == 'huber':
    # delta in target units: one standard deviation of the target.
    loss = tf_keras.losses.Huber(delta=float(std))
  else:
    loss = tf_keras.losses.MeanSquaredError()
  return loss, [tf_keras.metrics.RootMeanSquaredError(name='rmse'),
                tf_keras.metrics.MeanAbsoluteError(name='mae')]


def lr_decay(spec: config_lib.DatasetSpec,
             training: config_lib.TrainingConfig) -> str:
  """The configured decay; 'auto' is cosine for bag_of_ngrams, else
  constant (TrainingConfig.lr_decay says why)."""
  if training.lr_decay != 'auto':
    return training.lr_decay
  return 'cosine' if resolve(spec, training) == BAG_OF_NGRAMS else 'constant'


def build_compiled(spec: config_lib.DatasetSpec,
                   training: config_lib.TrainingConfig,
                   vocabulary_sizes: Mapping[str, int],
                   target_scale: Optional[Tuple[float, float]] = None
                  ) -> tf_keras.Model:
  """The Trainer's compiled model (models.model.build_model's body).

  Args:
    spec: the dataset.
    training: architecture and training options.
    vocabulary_sizes: vocabulary size (OOV bucket included) per categorical
      column.
    target_scale: regression only: the train target's (mean, std).

  Returns:
    The model (accumulating micro-batch gradients when accumulation_steps >
    1), compiled with Adam (warm-up/decay schedule; a loss-scale optimizer
    under mixed_float16), sparse categorical cross-entropy and accuracy (a
    regression: MSE or Huber, RMSE and MAE). It computes in the current global dtype policy and is built in the current
    strategy scope.
  """
  inputs, outputs = build(spec, training, vocabulary_sizes, target_scale)
  model = accumulation.make_model(inputs, outputs,
                                  training.accumulation_steps)
  learning_rate = schedules.learning_rate(training.learning_rate,
                                          training.warmup_steps,
                                          training.train_steps,
                                          lr_decay(spec, training))
  loss, metrics = _loss_and_metrics(spec, training, target_scale)
  model.compile(
      optimizer=precision.wrap_optimizer(
          tf_keras.optimizers.Adam(learning_rate),
          tf_keras.mixed_precision.global_policy().name),
      loss=loss, metrics=metrics)
  return model


def count_layers(model: tf_keras.Model, layer_type: type) -> int:
  """Counts layers of a type, looking inside nested models and blocks."""
  count = 0
  for layer in model.layers:
    if isinstance(layer, layer_type):
      count += 1
    inner: Sequence = getattr(layer, 'layers', None) or getattr(
        layer, 'block_layers', None) or ()
    for sub in inner:
      if isinstance(sub, layer_type):
        count += 1
      elif hasattr(sub, 'layers'):
        count += count_layers(sub, layer_type)
  return count
