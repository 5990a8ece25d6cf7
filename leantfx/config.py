"""Typed, frozen configuration objects, one per concern.

The CLI builds them, ``pipeline.create_pipeline`` consumes them, and the parts
that TFX components need travel as JSON through ``custom_config``. Each object
validates its own values so a bad option fails before any component runs.
"""
import dataclasses
import json
import re
from typing import Any, Dict, Optional, Tuple

from tensorflow_metadata.proto.v0 import anomalies_pb2

from leantfx.errors import ConfigError

_NAME_RE = re.compile(r'^[A-Za-z][A-Za-z0-9_-]{0,62}$')
MODEL_KINDS = ('mlp', 'cnn')
NOISY_ROW_POLICIES = ('impute', 'drop')
DATA_FORMATS = ('csv', 'tfrecord', 'images')
BAD_IMAGE_POLICIES = ('fail', 'skip')
OVERSAMPLING_METHODS = ('none', 'random', 'smote')
CLASS_WEIGHT_MODES = ('none', 'auto')
TASKS = ('classification', 'regression')
# The Kubeflow Pipelines backends a compiled spec can target: the open-source
# backend (Argo; runs no resolver task) and Vertex AI Pipelines.
KFP_BACKENDS = ('oss', 'vertex')


def _check(condition: bool, message: str) -> None:
  if not condition:
    raise ConfigError(message)


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
  """What the data looks like: label, feature groups and the model to fit.

  Attributes:
    name: model and dataset name; names the serving directory too.
    label: the label column.
    classes: label values in class-id order (the model's output order);
      empty for regression.
    task: 'classification' (the label is a class) or 'regression' (the
      label is a number to predict; leantfx/task.py decides which).
    numeric_features: columns scaled to z-scores (missing values take the mean).
    categorical_features: columns turned into vocabulary ids (missing -> OOV).
    image_features: pixel columns in row-major order, for image datasets.
    image_shape: (height, width, channels) of the image the pixels make up.
    image_max_value: the largest pixel value; pixels are divided by it.
    model: 'mlp' for tabular data, 'cnn' for images.
    schema_file: a curated schema.pbtxt to import, or None to infer one.
    image_key: the feature holding one encoded PNG/JPEG image per example
      (the images format), instead of pixel columns; image_shape is the size
      the image is decoded and resized to.
    noisy_rows: what training does with a row that has a missing or
      out-of-domain value (schema domains): 'impute' (numbers take the mean,
      categories the OOV bucket) or 'drop' (the Augment step removes it from
      the train split). Counted and reported either way.
    column_names: (feature key, name as written) of every column whose
      feature key differs from its name in the file (leantfx/columns.py);
      label, feature lists and classes above use the keys.
    text_features: free-text columns (role 'text'): tokenized, a vocabulary
      of words and word pairs with a frequency floor, TF-IDF weights
      (models/text_features.py).
    date_features: date or timestamp columns (role 'date'): calendar
      features computed from the string as written (models/date_features.py).
    date_formats: (feature key, format) of every date feature: a strptime
      pattern ('%Y-%m-%d', '%Y-%m-%dT%H:%M:%S%z', '%d/%m/%Y', ...), the one
      format every value of the column follows (leantfx/column_roles.py).
    identifier_columns: columns of role 'identifier' (near-unique per row):
      not features, but carried through scoring (leantfx score's output).
    missing_markers: values read as missing in numeric columns besides the
      empty field ('NA', 'n/a', 'null', '-', ...; leantfx/column_roles.py).
    column_roles: (feature key, role, reason) of every column but the label,
      as decided and stated (leantfx/column_roles.py).
  """
  name: str
  label: str
  classes: Tuple[str, ...]
  task: str = 'classification'
  numeric_features: Tuple[str, ...] = ()
  categorical_features: Tuple[str, ...] = ()
  image_features: Tuple[str, ...] = ()
  image_shape: Tuple[int, ...] = ()
  image_max_value: float = 255.0
  model: str = 'mlp'
  schema_file: Optional[str] = None
  image_key: Optional[str] = None
  noisy_rows: str = 'impute'
  column_names: Tuple[Tuple[str, str], ...] = ()
  text_features: Tuple[str, ...] = ()
  date_features: Tuple[str, ...] = ()
  date_formats: Tuple[Tuple[str, str], ...] = ()
  identifier_columns: Tuple[str, ...] = ()
  missing_markers: Tuple[str, ...] = ()
  column_roles: Tuple[Tuple[str, str, str], ...] = ()

  def __post_init__(self):
    # From JSON the pairs arrive as lists; tuples keep the spec hashable.
    for name in ('column_names', 'date_formats', 'column_roles'):
      object.__setattr__(self, name,
                         tuple(tuple(item) for item in getattr(self, name)))
    for name in ('text_features', 'date_features', 'identifier_columns',
                 'missing_markers'):
      object.__setattr__(self, name, tuple(getattr(self, name)))
    _check(all(len(pair) == 2 for pair in self.column_names),
           f'column_names must be (feature key, name) pairs, got '
           f'{self.column_names}.')
    _check(bool(_NAME_RE.match(self.name)),
           f'Dataset name {self.name!r} is not usable as a model name: use '
           'letters, digits, "_" or "-", starting with a letter (at most 63).')
    _check(self.task in TASKS,
           f'Unknown task {self.task!r}; use one of {TASKS}.')
    if self.task == 'regression':
      _check(not self.classes,
             f'Dataset {self.name!r} is a regression on {self.label!r} and '
             f'lists classes {self.classes}; a regression has none.')
      _check(not (self.image_key or self.image_features),
             f'Dataset {self.name!r}: regression is for tabular data; image '
             'datasets are classified by their class folders or label.')
    else:
      _check(len(self.classes) >= 2,
             f'Dataset {self.name!r} has {len(self.classes)} label class(es) '
             f'in column {self.label!r}; classification needs at least 2.')
    _check(len(set(self.classes)) == len(self.classes),
           f'Dataset {self.name!r} lists a label class twice: {self.classes}.')
    _check(self.model in MODEL_KINDS,
           f'Unknown model kind {self.model!r}; use one of {MODEL_KINDS}.')
    features = self.feature_columns
    _check(bool(features), f'Dataset {self.name!r} has no feature columns.')
    _check(len(set(features)) == len(features),
           f'Dataset {self.name!r} names a feature column twice.')
    _check(self.label not in features,
           f'The label {self.label!r} is also listed as a feature.')
    _check(set(dict(self.date_formats)) == set(self.date_features),
           f'Dataset {self.name!r}: every date feature needs one format and '
           f'only date features have one: {self.date_features} vs '
           f'{self.date_formats}.')
    _check(not set(self.identifier_columns) & set(features + (self.label,)),
           f'Dataset {self.name!r}: identifier columns '
           f'{self.identifier_columns} are not features and not the label.')
    _check(self.noisy_rows in NOISY_ROW_POLICIES,
           f'Unknown noisy-row policy {self.noisy_rows!r}; use one of '
           f'{NOISY_ROW_POLICIES}.')
    if self.image_key:
      _check(not self.image_features and len(self.image_shape) == 3 and
             all(d >= 1 for d in self.image_shape) and
             self.image_shape[2] in (1, 3),
             f'Dataset {self.name!r} reads encoded images from '
             f'{self.image_key!r}: it needs image_shape (height, width, 1 or '
             f'3 channels) and no pixel columns, got {self.image_shape}.')
    elif self.model == 'cnn' or self.image_features:
      _check(
          len(self.image_shape) == 3 and
          _product(self.image_shape) == len(self.image_features),
          f'image_shape {self.image_shape} does not match the '
          f'{len(self.image_features)} pixel columns of {self.name!r}.')
      _check(self.image_max_value > 0, 'image_max_value must be > 0.')

  @property
  def is_regression(self) -> bool:
    return self.task == 'regression'

  def original_name(self, key: str) -> str:
    """A column's name as written in the data, from its feature key."""
    return dict(self.column_names).get(key, key)

  @property
  def original_names(self) -> Dict[str, str]:
    """{name as written: feature key} of the label and feature columns."""
    return {self.original_name(k): k
            for k in (self.label,) + self.feature_columns}

  @property
  def feature_columns(self) -> Tuple[str, ...]:
    image = (self.image_key,) if self.image_key else ()
    return (self.numeric_features + self.categorical_features +
            self.text_features + self.date_features + self.image_features +
            image)

  @property
  def date_format(self) -> Dict[str, str]:
    """{date feature key: its strptime format}."""
    return dict(self.date_formats)


def _product(values) -> int:
  result = 1
  for v in values:
    result *= v
  return result


# The command line's training budget (cli/build.py training_config): one
# pass over the train split, at least the floor (the bundled datasets keep
# their 1,000 steps, a user's data 2,000) and at most this many steps.
DEFAULT_TRAIN_PASSES = 1.0
DEFAULT_MAX_TRAIN_STEPS = 20_000


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
  """How the Trainer fits the model.

  Attributes:
    train_steps: optimizer steps in total; with train_passes, the most the
      Trainer may take (its TrainArgs num_steps, a Kubeflow runtime
      parameter).
    train_passes: None: train exactly train_steps. A number: the Trainer's
      steps are this many passes over the train split, whose rows run_fn
      counts at run time (models/training/budget.py), at least
      min_train_steps and at most train_steps.
    min_train_steps: with train_passes, the fewest steps (small splits keep
      this floor: one pass over 1,400 rows is 45 steps of 32).
    eval_steps: validation batches per epoch (Keras validation, not TFMA).
    epochs: the steps are split into this many epochs (logging, callbacks).
    batch_size: examples per replica per (micro-)batch; the global batch is
      batch_size x replicas (x accumulation_steps per optimizer step).
    learning_rate: Adam learning rate (the peak, after any warm-up).
    hidden_units: Dense layer widths of the MLP (and of the CNN's head).
    conv_filters: filters per convolution block of the CNN.
    dropout: dropout rate before the output layer.
    seed: seed for initialisation and shuffling.
    architecture: 'auto' (the dataset's model kind) or one of ARCHITECTURES.
    width_multiplier: scales layer widths (units, filters; alpha or
      width_coefficient of the applications).
    depth_multiplier: scales the number of layers per stage (rounded up).
    image_size: side in pixels images are resized to for mobilenet_v2 and
      efficientnet_b0 (0: the data's own size, raised to their 32 px minimum).
    precision: 'auto' or one of PRECISIONS' policies (see
      models/training/precision.py).
    precision_cache: JSON file caching auto's probe decisions (None: the
      user cache folder, ~/.cache/leantfx/precision_probe.json).
    strategy: 'auto' or one of STRATEGIES (see
      models/training/distribution.py).
    global_batch_size: when set, the global batch per micro-batch step, split
      across replicas (must divide evenly); batch_size is then ignored.
    accumulation_steps: micro-batches whose gradients are averaged into one
      optimizer step.
    recompute: recompute block activations in the backward pass
      (tf.recompute_grad) instead of keeping them.
    l2: L2 weight penalty on Dense/Conv kernels (0: off).
    early_stopping_patience: epochs without a lower validation loss before
      training stops, restoring the best weights (0: off).
    warmup_steps: optimizer steps of linear learning-rate warm-up from 0.
    lr_decay: after warm-up: 'constant', 'linear' (to 0 at the last step) or
      'cosine'; 'auto': cosine for the text family (bag_of_ngrams), whose
      many rarely seen embedding rows need the rate lowered at the end,
      constant for every other architecture.
    regression_loss: regression only: 'mse' or 'huber' (on the target
      scaled to unit standard deviation, so Huber's delta is one standard
      deviation).
    tune: run the TFX Tuner first and train with its best hyperparameters.
    tune_auto: with tune, ``--tune auto``: the Tuner probes the untuned
      network first and searches (tuner_trials, AUTO_TUNER_TRIALS) only
      when it trails the run's strong baseline by more than the margin
      (models/auto_tune.py); otherwise the Trainer trains untuned.
    tuner_algorithm: one of TUNER_ALGORITHMS.
    tuner_trials: the tuner's trial budget.
    tuner_steps: training steps per trial.
    tuner_epochs: epochs per trial (Hyperband's max_epochs).
    model_family: which family the Trainer exports (models/model_family.py):
      'auto' trains gradient-boosted trees beside the network on tabular
      data and exports the better on the eval split; 'network' trains no
      trees; 'trees' exports the trees (tabular data only).
  """
  train_steps: int = 2000
  train_passes: Optional[float] = None
  min_train_steps: int = 1
  eval_steps: int = 10
  epochs: int = 10
  batch_size: int = 32
  learning_rate: float = 3e-3
  hidden_units: Tuple[int, ...] = (64, 32)
  conv_filters: Tuple[int, ...] = (32, 64)
  dropout: float = 0.1
  seed: int = 42
  architecture: str = 'auto'
  width_multiplier: float = 1.0
  depth_multiplier: float = 1.0
  image_size: int = 0
  precision: str = 'auto'
  precision_cache: Optional[str] = None
  strategy: str = 'auto'
  global_batch_size: Optional[int] = None
  accumulation_steps: int = 1
  recompute: bool = False
  l2: float = 0.0
  early_stopping_patience: int = 0
  warmup_steps: int = 0
  lr_decay: str = 'auto'
  regression_loss: str = 'mse'
  tune: bool = False
  tune_auto: bool = False
  tuner_algorithm: str = 'random'
  tuner_trials: int = 10
  tuner_steps: int = 200
  tuner_epochs: int = 2
  model_family: str = 'auto'

  def __post_init__(self):
    _check(self.train_steps >= 1, f'train_steps must be >= 1, got '
           f'{self.train_steps}.')
    _check(self.eval_steps >= 1, f'eval_steps must be >= 1, got '
           f'{self.eval_steps}.')
    _check(self.train_passes is None or self.train_passes > 0,
           f'train_passes must be > 0 (passes over the train split), got '
           f'{self.train_passes}.')
    _check(1 <= self.min_train_steps <= self.train_steps,
           f'min_train_steps must be between 1 and the step cap train_steps '
           f'({self.train_steps}), got {self.min_train_steps}.')
    # The fewest steps the Trainer can take: every epoch needs one.
    fewest = (self.train_steps if self.train_passes is None
              else self.min_train_steps)
    _check(1 <= self.epochs <= fewest,
           f'epochs must be between 1 and the fewest train steps ({fewest}), '
           f'got {self.epochs}.')
    _check(self.batch_size >= 1, f'batch_size must be >= 1, got '
           f'{self.batch_size}.')
    _check(self.learning_rate > 0, 'learning_rate must be > 0.')
    _check(all(u >= 1 for u in self.hidden_units), 'hidden_units must be >= 1.')
    _check(all(f >= 1 for f in self.conv_filters), 'conv_filters must be >= 1.')
    _check(0.0 <= self.dropout < 1.0, f'dropout must be in [0, 1), got '
           f'{self.dropout}.')
    _check_training_extensions(self)


ARCHITECTURES = ('auto', 'mlp', 'cnn', 'mobilenet_v2', 'efficientnet_b0',
                 'bag_of_ngrams')
PRECISIONS = ('auto', 'float32', 'mixed_float16', 'mixed_bfloat16')
STRATEGIES = ('auto', 'one_device', 'mirrored', 'multi_worker')
LR_DECAYS = ('auto', 'constant', 'linear', 'cosine')
TUNER_ALGORITHMS = ('random', 'hyperband', 'bayesian')
# --tune auto's trial budget: 8 trials of tuner_steps (200) steps each, about
# 8 short trainings beside the probe of the untuned network, searched only
# when that probe trails the strong baseline (models/auto_tune.py).
AUTO_TUNER_TRIALS = 8
REGRESSION_LOSSES = ('mse', 'huber')
MODEL_FAMILIES = ('auto', 'network', 'trees')


def _check_training_extensions(t: 'TrainingConfig') -> None:
  """Validates the precision, distribution, memory and tuning options."""
  for field, allowed in (('architecture', ARCHITECTURES),
                         ('precision', PRECISIONS),
                         ('strategy', STRATEGIES), ('lr_decay', LR_DECAYS),
                         ('tuner_algorithm', TUNER_ALGORITHMS),
                         ('regression_loss', REGRESSION_LOSSES),
                         ('model_family', MODEL_FAMILIES)):
    _check(getattr(t, field) in allowed,
           f'Unknown {field} {getattr(t, field)!r}; use one of {allowed}.')
  for field in ('width_multiplier', 'depth_multiplier'):
    _check(0 < getattr(t, field) <= 8,
           f'{field} must be in (0, 8], got {getattr(t, field)}.')
  _check(t.image_size == 0 or t.image_size >= 32,
         f'image_size must be 0 (the data\'s own size) or >= 32 (the '
         f'smallest input MobileNetV2/EfficientNet accept), got '
         f'{t.image_size}.')
  _check(t.global_batch_size is None or t.global_batch_size >= 1,
         f'global_batch_size must be >= 1, got {t.global_batch_size}.')
  _check(isinstance(t.accumulation_steps, int) and t.accumulation_steps >= 1,
         f'accumulation_steps must be a whole number >= 1 (1 = no '
         f'accumulation), got {t.accumulation_steps!r}: it is how many '
         'micro-batches make one optimizer step.')
  _check(t.l2 >= 0, f'l2 must be >= 0, got {t.l2}.')
  _check(t.early_stopping_patience >= 0,
         f'early_stopping_patience must be >= 0 (0 = off), got '
         f'{t.early_stopping_patience}.')
  fewest = t.train_steps if t.train_passes is None else t.min_train_steps
  _check(0 <= t.warmup_steps < fewest,
         f'warmup_steps must be in [0, {fewest}) (the fewest train steps), '
         f'got {t.warmup_steps}.')
  _check(t.tune or not t.tune_auto,
         'tune_auto is a mode of the Tuner: set tune too (--tune auto).')
  if t.tune:
    _check(t.tuner_trials >= 1,
           f'The tuner budget is {t.tuner_trials} trials; it must be at '
           'least 1 (e.g. --tune 10), or leave tuning off.')
    _check(t.tuner_steps >= 1 and 1 <= t.tuner_epochs <= t.tuner_steps,
           f'tuner_steps must be >= 1 and tuner_epochs in [1, tuner_steps], '
           f'got {t.tuner_steps} and {t.tuner_epochs}.')


# The fewest eval examples a slice needs to be gated (the Evaluator's
# per-slice thresholds, the ModelOptimizer's per-slice budget); a smaller
# slice is reported with its count only. At 10 examples one example is 0.1
# of the slice's accuracy, about one binomial standard error of an accuracy
# near 0.9 (sqrt(0.9 * 0.1 / 10) = 0.095): below that a slice's figure says
# little about the model (docs/training.md, "Slices").
DEFAULT_MIN_SLICE_SIZE = 10


def check_slices(slices) -> Tuple[Tuple[str, ...], ...]:
  """Slicing specs as a tuple of tuples of distinct, non-empty names.

  Raises:
    ConfigError: an empty spec, an empty name, a name twice in one spec, or
      the same spec twice.
  """
  result = []
  for spec in slices or ():
    spec = (spec,) if isinstance(spec, str) else tuple(spec)
    _check(bool(spec) and all(isinstance(c, str) and c for c in spec),
           f'A slice is one or more column names, got {spec!r}.')
    _check(len(set(spec)) == len(spec),
           f'The slice {",".join(spec)!r} names a column twice.')
    _check(spec not in result,
           f'The slice {",".join(spec)!r} is given twice.')
    result.append(spec)
  return tuple(result)


@dataclasses.dataclass(frozen=True)
class ModelCardConfig:
  """What the model card of each push prices (leantfx/compute_cost.py).

  Attributes:
    target_qps: the predictions per second the deployment must serve; the
      card then says how many cores each pushed model needs for it, from its
      measured served throughput. None: the card says no target was given.
    core_hour_price: the price of one core for one hour (any currency);
      with target_qps, the card prices a million predictions and the run's
      training. None: no prices.
  """
  target_qps: Optional[float] = None
  core_hour_price: Optional[float] = None

  def __post_init__(self):
    if self.target_qps is not None:
      _check(self.target_qps > 0 and self.target_qps != float('inf'),
             f'--target-qps must be a number of predictions per second > 0, '
             f'got {self.target_qps}.')
    if self.core_hour_price is not None:
      _check(0 <= self.core_hour_price < float('inf'),
             f'--core-hour-price must be a price >= 0, got '
             f'{self.core_hour_price}.')
      _check(self.target_qps is not None,
             '--core-hour-price prices the cores a load needs, and no load '
             'was given: pass --target-qps N (predictions per second) too, '
             'or drop --core-hour-price.')


# One accuracy point behind the strong baseline (issue 43); for a
# regression, 1% of its RMSE.
DEFAULT_BASELINE_MARGIN = 0.01


@dataclasses.dataclass(frozen=True)
class EvaluationConfig:
  """The Evaluator's gate.

  Classification gates on accuracy (and, for two classes, optionally on
  AUC); regression on R² (absolute), optionally RMSE (absolute) and RMSE's
  relative increase against the last blessed model. Both, by default, also
  against the run's own baselines (components/relative_gate/rule.py): the
  model must beat the trivial baseline significantly and be at most
  baseline_margin behind the strong one.

  Attributes:
    min_accuracy: absolute lower bound on eval-split accuracy (None: none,
      the baselines set the bar).
    baseline_margin: how far behind the strong baseline a model may be and
      still be blessed: accuracy points, or for a regression the fraction
      by which its RMSE may exceed the strong baseline's. None turns the
      relative gate off (only the absolute bounds and the last blessed
      model gate).
    max_accuracy_drop: how much lower than the last blessed model's accuracy a
      new model may be and still be blessed (ignored on the first run).
    min_auc: two-class labels: absolute lower bound on eval-split AUC (None:
      AUC is reported, not gated).
    min_r2: regression: lower bound on eval-split R² (0: no worse than
      predicting the mean).
    max_rmse: regression: upper bound on eval-split RMSE in target units
      (None: no bound).
    max_rmse_increase: regression: how much higher, as a fraction, RMSE may
      be than the last blessed model's (ignored on the first run).
    slices: the slicing specs, each a tuple of feature keys of the raw
      Examples (one key: a slice per value; several: a cross); () reports
      and gates the whole eval split only.
    min_slice_size: a slice of fewer eval examples is reported, not gated.
    min_slice_accuracy: classification: lower bound on the accuracy of each
      slice (None: not bounded).
    max_slice_accuracy_drop: classification: how much lower than the last
      blessed model's a slice's accuracy may be.
    max_slice_rmse_increase: regression: how much higher, as a fraction, a
      slice's RMSE may be than the last blessed model's.
  """
  min_accuracy: Optional[float] = None
  max_accuracy_drop: float = 0.01
  baseline_margin: Optional[float] = DEFAULT_BASELINE_MARGIN
  min_auc: Optional[float] = None
  min_r2: float = 0.0
  max_rmse: Optional[float] = None
  max_rmse_increase: float = 0.05
  slices: Tuple[Tuple[str, ...], ...] = ()
  min_slice_size: int = DEFAULT_MIN_SLICE_SIZE
  min_slice_accuracy: Optional[float] = None
  max_slice_accuracy_drop: float = 0.1
  max_slice_rmse_increase: float = 0.2

  def __post_init__(self):
    object.__setattr__(self, 'slices', check_slices(self.slices))
    _check(isinstance(self.min_slice_size, int) and self.min_slice_size >= 1,
           f'min_slice_size must be a whole number >= 1, got '
           f'{self.min_slice_size!r}.')
    _check(self.min_slice_accuracy is None or
           0.0 <= self.min_slice_accuracy <= 1.0,
           f'min_slice_accuracy must be in [0, 1], got '
           f'{self.min_slice_accuracy}.')
    _check(0.0 <= self.max_slice_accuracy_drop <= 1.0,
           f'max_slice_accuracy_drop must be in [0, 1], got '
           f'{self.max_slice_accuracy_drop}.')
    _check(self.max_slice_rmse_increase >= 0,
           f'max_slice_rmse_increase must be >= 0, got '
           f'{self.max_slice_rmse_increase}.')
    _check(self.min_accuracy is None or 0.0 <= self.min_accuracy <= 1.0,
           f'min_accuracy must be in [0, 1], got {self.min_accuracy}.')
    _check(self.baseline_margin is None or 0.0 <= self.baseline_margin <= 1.0,
           f'baseline_margin must be in [0, 1], got {self.baseline_margin}.')
    _check(0.0 <= self.max_accuracy_drop <= 1.0,
           f'max_accuracy_drop must be in [0, 1], got '
           f'{self.max_accuracy_drop}.')
    _check(self.min_auc is None or 0.0 <= self.min_auc <= 1.0,
           f'min_auc must be in [0, 1], got {self.min_auc}.')
    _check(self.min_r2 <= 1.0, f'min_r2 must be <= 1, got {self.min_r2}.')
    _check(self.max_rmse is None or self.max_rmse > 0,
           f'max_rmse must be > 0, got {self.max_rmse}.')
    _check(self.max_rmse_increase >= 0,
           f'max_rmse_increase must be >= 0, got {self.max_rmse_increase}.')


@dataclasses.dataclass(frozen=True)
class OrchestrationConfig:
  """How runs build on earlier runs (continuous retraining).

  Attributes:
    span: the span ExampleGen ingests (a static range of one span); None
      means the newest span-<N>/ folder.
    span_window: Transform and Trainer see the newest ``span_window`` spans
      (a Resolver with SpanRangeStrategy over every span ExampleGen has
      ingested); 1 trains on the newest span only.
    warm_start: the Trainer starts from the weights of the latest blessed
      model (its ``base_model``) when one exists and its layers match.
    runtime_parameters: expose the data root, pinned span and train steps as
      RuntimeParameters (the Kubeflow compile sets it; values here become
      their defaults).
    window_in_example_gen: read the window in ExampleGen itself
      (SpanWindowCsvExampleGen reads spans N-K+1..N) instead of resolving
      earlier runs' spans from ML Metadata; the Kubeflow compile sets it,
      since TFX 1.16's V2 compiler cannot compile SpanRangeStrategy. With
      runtime_parameters, K is then a pipeline parameter too.
    kfp_backend: the Kubeflow Pipelines backend compiled for ('oss' or
      'vertex'), None for the local runners. On 'oss' no ML Metadata resolver
      runs: the last blessed model comes from the records the Pusher keeps
      under the pipeline root (components/blessed_model/).
    bulk_score: after the Pusher, score the run's span with the newest
      pushed version (leantfx/span_scoring.py): the local runners after
      the run, Kubeflow in a BulkScore task.
  """
  span: Optional[int] = None
  span_window: int = 1
  warm_start: bool = False
  runtime_parameters: bool = False
  window_in_example_gen: bool = False
  kfp_backend: Optional[str] = None
  bulk_score: bool = False

  def __post_init__(self):
    _check(
        isinstance(self.span_window, int) and 1 <= self.span_window <= 1000,
        f'span_window must be a whole number from 1 to 1000, got '
        f'{self.span_window!r}.')
    _check(self.span is None or (isinstance(self.span, int) and self.span >= 1),
           f'span must be a span number >= 1, got {self.span!r}.')
    _check(self.kfp_backend is None or self.kfp_backend in KFP_BACKENDS,
           f'Unknown Kubeflow Pipelines backend {self.kfp_backend!r}; use one '
           f'of {KFP_BACKENDS}.')

  @property
  def blessed_model_from_records(self) -> bool:
    """The last blessed model comes from the Pusher's records, not MLMD."""
    return self.kfp_backend == 'oss'


@dataclasses.dataclass(frozen=True)
class IngestionConfig:
  """How ExampleGen reads the span folders.

  Attributes:
    data_format: 'csv' (CsvExampleGen), 'tfrecord' (ImportExampleGen, files of
      serialized tf.Examples) or 'images' (span-N/<class name>/*.png|jpg).
    bad_images: for the images format, what a file that does not decode or has
      the wrong channel count does: 'fail' stops the run before anything is
      trained, 'skip' leaves it out; both count and name them.
    normalize_labels: strip leading and trailing white space from the
      labels of a CSV span (``--normalize-labels``); without it labels that
      differ only so are refused before anything runs.
    min_rows_per_class: the CSV ExampleGen drops the rows of every class
      with fewer rows in the span (``--min-rows-per-class``); None: none.
  """
  data_format: str = 'csv'
  bad_images: str = 'fail'
  normalize_labels: bool = False
  min_rows_per_class: Optional[int] = None

  def __post_init__(self):
    _check(self.data_format in DATA_FORMATS,
           f'Unknown data format {self.data_format!r}; use one of '
           f'{DATA_FORMATS}.')
    _check(self.bad_images in BAD_IMAGE_POLICIES,
           f'Unknown bad-image policy {self.bad_images!r}; use one of '
           f'{BAD_IMAGE_POLICIES}.')
    _check(self.min_rows_per_class is None or self.min_rows_per_class >= 1,
           f'min_rows_per_class is {self.min_rows_per_class}; it must be at '
           'least 1 (e.g. --min-rows-per-class 5), or None.')
    _check(self.min_rows_per_class is None or self.data_format == 'csv',
           '--min-rows-per-class drops rows as the CSV ExampleGen reads '
           f'them; the data format is {self.data_format!r}.')


@dataclasses.dataclass(frozen=True)
class ValidationConfig:
  """The validation gate between ExampleValidator and Transform.

  Attributes:
    allow_anomalies: anomaly kinds (tensorflow_metadata AnomalyInfo.Type
      names, e.g. ENUM_TYPE_UNEXPECTED_STRING_VALUES) that are reported but do
      not stop the run. Recorded as an execution property in ML Metadata.
    check_drift: compare the span with the previous validated span through
      the schema's drift comparators.
    expected_rows: (span-N/file, rows) the pre-flight counted, which the
      gate compares with the rows ExampleGen read and the splits hold
      (leantfx/row_counts.py); None when no pre-flight ran (compile).
  """
  allow_anomalies: Tuple[str, ...] = ()
  check_drift: bool = True
  expected_rows: Optional[Tuple[Tuple[str, int], ...]] = None

  def __post_init__(self):
    if self.expected_rows is not None:
      object.__setattr__(self, 'expected_rows',
                         tuple((str(f), int(n)) for f, n in self.expected_rows))
    known = set(anomalies_pb2.AnomalyInfo.Type.keys()) | set(
        EXTRA_ANOMALY_KINDS)
    unknown = [k for k in self.allow_anomalies if k not in known]
    _check(not unknown,
           f'--allow-anomalies names unknown anomaly kind(s) {unknown}. Use '
           'the kind printed in the validation report (e.g. '
           'ENUM_TYPE_UNEXPECTED_STRING_VALUES, FEATURE_TYPE_LOW_FRACTION_'
           'PRESENT, COMPARATOR_L_INFTY_HIGH).')


# Kinds the validation gate reports besides TFDV's AnomalyInfo.Type names.
EXTRA_ANOMALY_KINDS = ('EMPTY_SPLIT',)


@dataclasses.dataclass(frozen=True)
class AugmentConfig:
  """The Augment component: image augmentation and minority oversampling.

  Only the train split changes; the eval split is copied byte for byte. Image
  parameters apply to image datasets (pixel columns or encoded images),
  oversampling to any dataset (SMOTE needs numeric features).

  Attributes:
    copies: augmented copies per train image (0: images are not augmented).
    rotation_degrees: rotation drawn uniformly from [-r, r].
    shift_fraction: shift in each axis, a fraction of the side, from [-s, s].
    zoom_fraction: scale drawn from [1 - z, 1 + z].
    brightness: added offset, a fraction of the pixel range, from [-b, b].
    contrast: contrast factor drawn from [1 - c, 1 + c] around the mean.
    noise_stddev: Gaussian noise, a fraction of the pixel range.
    horizontal_flip: flip left-right with probability 1/2 (off: a flipped 2
      is no 2).
    vertical_flip: flip upside down with probability 1/2.
    oversample: 'none', 'random' (duplicates) or 'smote' (interpolation
      between an example and a same-class neighbour, numeric features).
    target_ratio: oversampling raises every class to at least this share of
      the largest class.
    smote_neighbors: neighbours SMOTE chooses from.
    jitter_stddev: Gaussian jitter on numeric features of oversampled rows, in
      units of the class's standard deviation of that feature (0: none).
    seed: the seed; the output is the same for a seed whatever the number of
      Beam workers.
  """
  copies: int = 0
  rotation_degrees: float = 10.0
  shift_fraction: float = 0.1
  zoom_fraction: float = 0.1
  brightness: float = 0.1
  contrast: float = 0.1
  noise_stddev: float = 0.02
  horizontal_flip: bool = False
  vertical_flip: bool = False
  oversample: str = 'none'
  target_ratio: float = 1.0
  smote_neighbors: int = 5
  jitter_stddev: float = 0.0
  seed: int = 42

  def __post_init__(self):
    _check(isinstance(self.copies, int) and 0 <= self.copies <= 100,
           f'augmentation copies must be a whole number from 0 to 100, got '
           f'{self.copies!r}.')
    _check(0.0 <= self.rotation_degrees <= 180.0,
           f'rotation must be in [0, 180] degrees, got '
           f'{self.rotation_degrees}.')
    for name in ('shift_fraction', 'zoom_fraction', 'brightness', 'contrast'):
      value = getattr(self, name)
      _check(0.0 <= value < 1.0, f'{name} must be in [0, 1), got {value}.')
    _check(0.0 <= self.noise_stddev <= 1.0,
           f'noise_stddev must be in [0, 1], got {self.noise_stddev}.')
    _check(self.oversample in OVERSAMPLING_METHODS,
           f'Unknown oversampling {self.oversample!r}; use one of '
           f'{OVERSAMPLING_METHODS}.')
    _check(0.0 < self.target_ratio <= 1.0,
           f'target_ratio must be in (0, 1], got {self.target_ratio}.')
    _check(1 <= self.smote_neighbors <= 100,
           f'smote_neighbors must be in [1, 100], got {self.smote_neighbors}.')
    _check(0.0 <= self.jitter_stddev <= 10.0,
           f'jitter_stddev must be in [0, 10], got {self.jitter_stddev}.')

  @property
  def changes_anything(self) -> bool:
    return self.copies > 0 or self.oversample != 'none'


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
  """Everything create_pipeline needs; paths are resolved by the runner.

  Attributes:
    pipeline_name: TFX pipeline name (the MLMD context).
    pipeline_root: where component outputs go.
    data_root: the folder with span-<N>/ sub-folders of CSV files.
    serving_model_dir: Pusher's base directory; versions go below it.
    dataset: the DatasetSpec.
    training: the TrainingConfig.
    evaluation: the EvaluationConfig.
    metadata_path: SQLite ML Metadata file, or None when the orchestrator
      provides metadata (Kubeflow).
    beam_pipeline_args: passed to every Beam-based component.
    enable_cache: reuse outputs of executions with identical inputs.
    orchestration: span window, warm start, runtime parameters.
    ingestion: data format and bad-image policy.
    validation: the validation gate's options.
    augment: the Augment component's options.
    optimization: the ModelOptimizer's OptimizationConfig, or None to skip it.
    tflite_push_base: where the selected TFLite model's versions go.
    class_weights: 'auto' weighs the loss by inverse class frequency of the
      train split (an alternative to oversampling), 'none' does not.
    serve_args: the ``leantfx serve`` options the deployment runs with
      (``--workers 2``, ``--batching off``): the InfraValidator and the
      ModelOptimizer's serve check serve each candidate with them.
    model_card_base: where each push's model card goes
      (<base>/<model name>/<version>/model_card.{json,md,html}); None: no
      ModelCardGenerator.
    model_card: what the model card prices.
  """
  pipeline_name: str
  pipeline_root: str
  data_root: str
  serving_model_dir: str
  dataset: DatasetSpec
  training: TrainingConfig = TrainingConfig()
  evaluation: EvaluationConfig = EvaluationConfig()
  metadata_path: Optional[str] = None
  beam_pipeline_args: Tuple[str, ...] = ()
  enable_cache: bool = True
  orchestration: OrchestrationConfig = OrchestrationConfig()
  ingestion: IngestionConfig = IngestionConfig()
  validation: ValidationConfig = ValidationConfig()
  augment: AugmentConfig = AugmentConfig()
  class_weights: str = 'none'
  serve_args: Tuple[str, ...] = ()
  # The ModelOptimizer's components.optimize.config.OptimizationConfig (kept
  # untyped here so this module does not import TensorFlow), or None to skip
  # optimization; TFLite versions go to tflite_push_base/<model name>/.
  optimization: Optional[Any] = None
  tflite_push_base: Optional[str] = None
  model_card_base: Optional[str] = None
  model_card: ModelCardConfig = ModelCardConfig()

  def __post_init__(self):
    _check(self.class_weights in CLASS_WEIGHT_MODES,
           f'Unknown class-weights mode {self.class_weights!r}; use one of '
           f'{CLASS_WEIGHT_MODES}.')
    _check(bool(_NAME_RE.match(self.pipeline_name)),
           f'Pipeline name {self.pipeline_name!r} is not valid: use letters, '
           'digits, "_" or "-", starting with a letter.')
    if self.dataset.is_regression:
      _check_regression_options(self)
    check_model_family(self.dataset, self.training)


def check_model_family(spec: DatasetSpec, training: TrainingConfig) -> None:
  """Refuses --model-family trees on data the trees do not take.

  Raises:
    ConfigError: model_family 'trees' on image or text columns.
  """
  if training.model_family != 'trees':
    return
  kinds = [kind for kind, present in (
      ('image', spec.image_features or spec.image_key),
      ('text', spec.text_features)) if present]
  _check(not kinds,
         f'--model-family trees trains gradient-boosted trees on numeric, '
         f'categorical and date columns, and {spec.name!r} has '
         f'{" and ".join(kinds)} columns. Use --model-family auto (the '
         'network on such data) or network.')


def _check_regression_options(config: 'PipelineConfig') -> None:
  """Refuses the class-only options for a regression, naming them."""
  label = config.dataset.label
  _check(config.augment.oversample == 'none',
         f'--oversample {config.augment.oversample} adds rows of the smaller '
         f'classes, and {label!r} is a regression target with no classes. '
         'Drop --oversample (or pass --task classification if the label '
         'really is a class).')
  _check(config.class_weights == 'none',
         f'--class-weights {config.class_weights} weighs the loss by class '
         f'frequency, and {label!r} is a regression target with no classes. '
         'Drop --class-weights.')
  _check(not config.training.tune,
         '--tune searches hyperparameters on validation accuracy, which a '
         f'regression on {label!r} does not have. Drop --tune.')
  _check(config.optimization is None or
         getattr(config.optimization, 'task', None) == 'regression',
         'The ModelOptimizer is configured for a classifier (gating on '
         f'accuracy), and {label!r} is a regression target: build its '
         "OptimizationConfig with task='regression', or pass --no-optimize.")


def to_json_dict(obj: Any) -> Dict[str, Any]:
  """Returns a JSON-serialisable dict of a config dataclass (tuples as lists)."""
  return json.loads(json.dumps(dataclasses.asdict(obj)))


def _from_dict(cls, values: Dict[str, Any]):
  fields = {f.name: f for f in dataclasses.fields(cls)}
  unknown = set(values) - set(fields)
  _check(not unknown, f'Unknown {cls.__name__} keys: {sorted(unknown)}.')
  kwargs = {}
  for key, value in values.items():
    if isinstance(value, list):
      value = tuple(value)
    kwargs[key] = value
  return cls(**kwargs)


def dataset_from_dict(values: Dict[str, Any]) -> DatasetSpec:
  """Rebuilds a DatasetSpec from ``to_json_dict`` output."""
  return _from_dict(DatasetSpec, values)


def training_from_dict(values: Dict[str, Any]) -> TrainingConfig:
  """Rebuilds a TrainingConfig from ``to_json_dict`` output."""
  return _from_dict(TrainingConfig, values)
