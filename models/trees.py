"""Gradient-boosted trees on the transformed features: the tree family.

``train`` fits a gradient-boosted trees model with YDF (the learning library
under TensorFlow Decision Forests, which TF-DF 1.9 trains through) on numpy
columns of the transformed features, and wraps it as a ``TreeModel``: a
``tf.Module`` that takes the same dict of transformed features as the
network and returns what the network returns (class probabilities
[batch, classes] in class-id order, or a regression's [batch, 1]
predictions), so the serving signatures of models/model.py wrap either the
same way. Inside the graph the trees run on TF-DF's inference op
(``SimpleMLInferenceOp...``): a process loads such a SavedModel only after
``leantfx.decision_forests.load_ops()``.

The trees' time is bounded by ``TreeSettings``: at most ``num_trees``
boosting iterations (past EARLY_STOPPING_MIN_ROWS train rows, early
stopping on YDF's own validation share of them usually stops sooner) on
numerical columns discretized to 255 bins, the histogram split search of scikit-learn's HistGradientBoosting.
The row sample that bounds the rows is models/split_arrays.py's.
"""
import dataclasses
import shutil
import tempfile
import time
from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from leantfx.models import features

# ydf's GradientBoostedTreesLearner defaults, except num_trees (300), with
# the numerical columns discretized: 255 bins, as HistGradientBoosting's.
NUM_TREES = 200
MAX_DEPTH = 6
SHRINKAGE = 0.1
NUM_BINS = 255
# Early stopping holds out YDF's 10% validation share only past this many
# train rows, as HistGradientBoosting's early_stopping='auto' does: on a
# small span the holdout costs more than it saves (the users-CSV span's 466
# train rows: 0.9417 eval accuracy with the holdout, 17 to 61 trees, vs
# 0.9612 without, 200 trees, 3 seeds each; HistGradientBoosting 0.9709).
EARLY_STOPPING_MIN_ROWS = 10_000
VALIDATION_RATIO = 0.1


@dataclasses.dataclass(frozen=True)
class TreeSettings:
  """What bounds the trees' training.

  Attributes:
    num_trees: boosting iterations at most (a multi-class model grows one
      tree per class and iteration).
    max_depth: depth of every tree.
    shrinkage: learning rate of the boosting.
    seed: YDF's random seed.
  """
  num_trees: int = NUM_TREES
  max_depth: int = MAX_DEPTH
  shrinkage: float = SHRINKAGE
  seed: int = 42


def feature_columns(arrays: Mapping[str, np.ndarray]
                   ) -> Dict[str, Tuple[str, int]]:
  """{column the trees see: (transformed feature, index)} of dense features.

  A [rows] or [rows, 1] feature is one column of its own name; a [rows, k]
  feature (k > 1) is k columns '<name>.<i>'. The label is not a feature.
  """
  columns = {}
  for name in sorted(arrays):
    if name == features.LABEL_KEY:
      continue
    width = 1 if arrays[name].ndim == 1 else int(arrays[name].shape[1])
    if width == 1:
      columns[name] = (name, 0)
    else:
      columns.update({f'{name}.{i}': (name, i) for i in range(width)})
  return columns


def _column(array: np.ndarray, index: int) -> np.ndarray:
  return array if array.ndim == 1 else array[:, index]


def _ydf_data(arrays: Mapping[str, np.ndarray],
              columns: Mapping[str, Tuple[str, int]]) -> Dict[str, np.ndarray]:
  """The columns as YDF takes them: one 1-D array each, label included."""
  data = {column: _column(arrays[name], index)
          for column, (name, index) in columns.items()}
  data[features.LABEL_KEY] = np.asarray(arrays[features.LABEL_KEY]).reshape(-1)
  return data


class TreeModel(tf.Module):
  """The trees as the network is called: transformed features -> outputs.

  Attributes:
    forest: the TF-DF module YDF exported (its op model's files are assets).
    num_trees: trees in the model (all classes).
  """

  def __init__(self, forest: tf.Module, columns: Mapping[str, Tuple[str, int]],
               dtypes: Mapping[str, tf.DType],
               class_order: Optional[Sequence[int]], num_classes: int,
               num_trees: int):
    super().__init__(name='gradient_boosted_trees')
    self.forest = forest
    self.num_trees = num_trees
    self._columns = dict(columns)
    self._dtypes = dict(dtypes)
    # For each class id, the forest's output column (YDF orders classes by
    # their own label values), or -1 for a class the train rows lacked.
    self._class_order = (None if class_order is None else
                         tf.constant(list(class_order), tf.int32))
    self._num_classes = num_classes

  def __call__(self, transformed: Mapping[str, tf.Tensor]) -> tf.Tensor:
    """Class probabilities [batch, classes], or predictions [batch, 1]."""
    inputs = {}
    for column, (name, index) in self._columns.items():
      value = transformed[name]
      value = tf.reshape(value, [tf.shape(value)[0], -1])[:, index]
      inputs[column] = tf.cast(value, self._dtypes[column])
    outputs = self.forest(inputs)
    if self._class_order is None:
      return tf.reshape(outputs, [-1, 1])
    # A class missing from the train rows gets probability 0.
    padded = tf.concat([outputs, tf.zeros_like(outputs[:, :1])], axis=1)
    order = tf.where(self._class_order < 0, tf.shape(outputs)[1],
                     self._class_order)
    return tf.gather(padded, order, axis=1)


@dataclasses.dataclass
class TrainedTrees:
  """A trained tree model and what its training took."""
  model: TreeModel
  seconds: float
  train_rows: int
  num_trees: int
  # The folder holding YDF's files until the SavedModel copies them.
  files_dir: str

  def cleanup(self) -> None:
    shutil.rmtree(self.files_dir, ignore_errors=True)


def _class_order(label_classes: Sequence[str], num_classes: int):
  position = {str(value): i for i, value in enumerate(label_classes)}
  return [position.get(str(class_id), -1) for class_id in range(num_classes)]


def train(arrays: Mapping[str, np.ndarray], is_regression: bool,
          num_classes: int, categorical: Sequence[str],
          settings: TreeSettings = TreeSettings()) -> TrainedTrees:
  """Trains gradient-boosted trees on transformed train rows.

  Args:
    arrays: transformed feature name -> [rows] or [rows, k] array, the label
      (features.LABEL_KEY) among them.
    is_regression: a regression target instead of class ids.
    num_classes: classes of the label (ignored for a regression).
    categorical: transformed features that are vocabulary ids (categorical
      splits instead of thresholds).
    settings: the training bounds.

  Returns:
    The trees as a TreeModel, with the seconds and rows they took.

  Raises:
    ValueError: no rows, or no feature the trees can use.
  """
  import ydf  # pylint: disable=g-import-not-at-top
  columns = feature_columns(arrays)
  rows = int(np.asarray(arrays[features.LABEL_KEY]).size)
  if not rows or not columns:
    raise ValueError(f'The trees need rows and features; got {rows} rows and '
                     f'features {sorted(columns)}.')
  started = time.monotonic()
  learner = ydf.GradientBoostedTreesLearner(
      label=features.LABEL_KEY,
      task=ydf.Task.REGRESSION if is_regression else ydf.Task.CLASSIFICATION,
      num_trees=settings.num_trees,
      max_depth=settings.max_depth,
      shrinkage=settings.shrinkage,
      discretize_numerical_columns=True,
      num_discretized_numerical_bins=NUM_BINS,
      random_seed=settings.seed,
      validation_ratio=(VALIDATION_RATIO if rows > EARLY_STOPPING_MIN_ROWS
                        else 0.0),
      features=[ydf.Feature(c, ydf.Semantic.CATEGORICAL) for c in columns
                if columns[c][0] in set(categorical)],
      include_all_columns=True)
  forest = learner.train(_ydf_data(arrays, columns), verbose=0)
  files_dir = tempfile.mkdtemp(prefix='leantfx-trees-')
  module = forest.to_tensorflow_function(
      temp_dir=files_dir, can_be_saved=True,
      squeeze_binary_classification=False)
  dtypes = {c: tf.int64 if np.issubdtype(arrays[columns[c][0]].dtype,
                                         np.integer) else tf.float32
            for c in columns}
  order = None if is_regression else _class_order(forest.label_classes(),
                                                  num_classes)
  model = TreeModel(module, columns, dtypes, order, num_classes,
                    forest.num_trees())
  return TrainedTrees(model=model, seconds=time.monotonic() - started,
                      train_rows=rows, num_trees=forest.num_trees(),
                      files_dir=files_dir)


def predict(model, arrays: Mapping[str, np.ndarray],
            batch_size: int = 8192) -> np.ndarray:
  """The model's outputs on numpy features, batch by batch.

  Args:
    model: a TreeModel or the network (a callable on a dict of tensors).
    arrays: transformed feature name -> [rows, ...] array (the label, if
      present, is not passed).
    batch_size: rows per call.

  Returns:
    The outputs of every row, concatenated: [rows, classes] or [rows, 1].
  """
  names = [n for n in arrays if n != features.LABEL_KEY]
  rows = len(arrays[names[0]])
  outputs = []
  for start in range(0, rows, batch_size):
    batch = {n: tf.constant(arrays[n][start:start + batch_size])
             for n in names}
    outputs.append(np.asarray(model(batch)))
  return np.concatenate(outputs, axis=0)
