"""Typed, frozen configuration objects, one per concern.

The CLI builds them, ``pipeline.create_pipeline`` consumes them, and the parts
that TFX components need travel as JSON through ``custom_config``. Each object
validates its own values so a bad option fails before any component runs.
"""
import dataclasses
import json
import re
from typing import Any, Dict, Optional, Tuple

from leantfx.errors import ConfigError

_NAME_RE = re.compile(r'^[A-Za-z][A-Za-z0-9_-]{0,62}$')
MODEL_KINDS = ('mlp', 'cnn')


def _check(condition: bool, message: str) -> None:
  if not condition:
    raise ConfigError(message)


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
  """What the data looks like: label, feature groups and the model to fit.

  Attributes:
    name: model and dataset name; names the serving directory too.
    label: the label column.
    classes: label values in class-id order (the model's output order).
    numeric_features: columns scaled to z-scores (missing values take the mean).
    categorical_features: columns turned into vocabulary ids (missing -> OOV).
    image_features: pixel columns in row-major order, for image datasets.
    image_shape: (height, width, channels) of the image the pixels make up.
    image_max_value: the largest pixel value; pixels are divided by it.
    model: 'mlp' for tabular data, 'cnn' for images.
    schema_file: a curated schema.pbtxt to import, or None to infer one.
  """
  name: str
  label: str
  classes: Tuple[str, ...]
  numeric_features: Tuple[str, ...] = ()
  categorical_features: Tuple[str, ...] = ()
  image_features: Tuple[str, ...] = ()
  image_shape: Tuple[int, ...] = ()
  image_max_value: float = 255.0
  model: str = 'mlp'
  schema_file: Optional[str] = None

  def __post_init__(self):
    _check(bool(_NAME_RE.match(self.name)),
           f'Dataset name {self.name!r} is not usable as a model name: use '
           'letters, digits, "_" or "-", starting with a letter (at most 63).')
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
    if self.model == 'cnn' or self.image_features:
      _check(
          len(self.image_shape) == 3 and
          _product(self.image_shape) == len(self.image_features),
          f'image_shape {self.image_shape} does not match the '
          f'{len(self.image_features)} pixel columns of {self.name!r}.')
      _check(self.image_max_value > 0, 'image_max_value must be > 0.')

  @property
  def feature_columns(self) -> Tuple[str, ...]:
    return (self.numeric_features + self.categorical_features +
            self.image_features)


def _product(values) -> int:
  result = 1
  for v in values:
    result *= v
  return result


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
  """How the Trainer fits the model.

  Attributes:
    train_steps: optimizer steps in total.
    eval_steps: validation batches per epoch (Keras validation, not TFMA).
    epochs: the steps are split into this many epochs (logging, callbacks).
    batch_size: global batch size.
    learning_rate: Adam learning rate.
    hidden_units: Dense layer widths of the MLP (and of the CNN's head).
    conv_filters: filters per convolution block of the CNN.
    dropout: dropout rate before the output layer.
    seed: seed for initialisation and shuffling.
  """
  train_steps: int = 2000
  eval_steps: int = 10
  epochs: int = 10
  batch_size: int = 32
  learning_rate: float = 3e-3
  hidden_units: Tuple[int, ...] = (64, 32)
  conv_filters: Tuple[int, ...] = (32, 64)
  dropout: float = 0.1
  seed: int = 42

  def __post_init__(self):
    _check(self.train_steps >= 1, f'train_steps must be >= 1, got '
           f'{self.train_steps}.')
    _check(self.eval_steps >= 1, f'eval_steps must be >= 1, got '
           f'{self.eval_steps}.')
    _check(1 <= self.epochs <= self.train_steps,
           f'epochs must be between 1 and train_steps ({self.train_steps}), '
           f'got {self.epochs}.')
    _check(self.batch_size >= 1, f'batch_size must be >= 1, got '
           f'{self.batch_size}.')
    _check(self.learning_rate > 0, 'learning_rate must be > 0.')
    _check(all(u >= 1 for u in self.hidden_units), 'hidden_units must be >= 1.')
    _check(all(f >= 1 for f in self.conv_filters), 'conv_filters must be >= 1.')
    _check(0.0 <= self.dropout < 1.0, f'dropout must be in [0, 1), got '
           f'{self.dropout}.')


@dataclasses.dataclass(frozen=True)
class EvaluationConfig:
  """The Evaluator's gate.

  Attributes:
    min_accuracy: absolute lower bound on eval-split accuracy.
    max_accuracy_drop: how much lower than the last blessed model's accuracy a
      new model may be and still be blessed (ignored on the first run).
  """
  min_accuracy: float = 0.9
  max_accuracy_drop: float = 0.01

  def __post_init__(self):
    _check(0.0 <= self.min_accuracy <= 1.0,
           f'min_accuracy must be in [0, 1], got {self.min_accuracy}.')
    _check(0.0 <= self.max_accuracy_drop <= 1.0,
           f'max_accuracy_drop must be in [0, 1], got '
           f'{self.max_accuracy_drop}.')


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
    runtime_parameters: expose the data root and train steps as
      RuntimeParameters (the Kubeflow compile sets it; values here become
      their defaults).
  """
  span: Optional[int] = None
  span_window: int = 1
  warm_start: bool = False
  runtime_parameters: bool = False

  def __post_init__(self):
    _check(
        isinstance(self.span_window, int) and 1 <= self.span_window <= 1000,
        f'span_window must be a whole number from 1 to 1000, got '
        f'{self.span_window!r}.')
    _check(self.span is None or (isinstance(self.span, int) and self.span >= 1),
           f'span must be a span number >= 1, got {self.span!r}.')


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

  def __post_init__(self):
    _check(bool(_NAME_RE.match(self.pipeline_name)),
           f'Pipeline name {self.pipeline_name!r} is not valid: use letters, '
           'digits, "_" or "-", starting with a letter.')


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
