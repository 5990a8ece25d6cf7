"""Which model family the Trainer exports: the network or the trees.

run_fn (models/model.py) trains the network, then calls ``choose``: on
tabular data (no image, no text columns) and with TrainingConfig.model_family
'auto' or 'trees', gradient-boosted trees (models/trees.py) train on the same
transformed train split (a uniform sample of TREES_MAX_TRAIN_ROWS rows past
that size) and both families are scored on the same rows of the eval split
(EVAL_MAX_ROWS at most): accuracy, or a regression's RMSE in target units.

'auto' exports the trees only when they beat the network by more than a
margin (ACCURACY_MARGIN of accuracy, or an RMSE RMSE_MARGIN lower) and
significantly on the paired eval rows (McNemar's exact test, or a paired
t-test on squared errors, one-sided p < SIGNIFICANCE): a network keeps every
runtime (TFLite, ONNX, OpenVINO) and the ModelOptimizer, which trees lose,
so a tie, or a lead within the noise, goes to the network. 'trees'
exports the trees whatever the figures; 'network' trains no trees. Either
way the record says which family won and why, with both figures; the
network's Format-Keras is written as always (the optimizer's input when the
network is pushed, the next run's warm start).
"""
import dataclasses
import time
from typing import Any, Dict, Optional

from absl import logging
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
from tfx import v1 as tfx

from leantfx import config as config_lib
from leantfx.models import features
from leantfx.models import split_arrays
from leantfx.models import trees as trees_lib

NETWORK = 'network'
TREES = 'trees'
# The trees train on at most about this many rows (a uniform sample past it),
# so that a default 1M-row run (12.6 min) spends at most about a tenth more on
# them: on a loaded 2-core machine 100,000 rows of its 22 columns took 63 s to
# train, 50,000 took 19 s (benchmarks/bench_trees.py --time-rows;
# docs/training.md).
TREES_MAX_TRAIN_ROWS = 50_000
# Both families are scored on at most about this many eval rows: the standard
# error of an accuracy near 0.9 on 50,000 rows is 0.0013, under the margin.
EVAL_MAX_ROWS = 50_000
# 'auto' takes the trees only past these margins (see the module docstring).
ACCURACY_MARGIN = 0.005
RMSE_MARGIN = 0.01
# ... and only when the lead is significant on the paired eval rows
# (_p_value): a lead of one row on 70 eval rows is no reason to give up the
# optimizer and the runtimes.
SIGNIFICANCE = 0.05


def not_tabular_reason(spec: config_lib.DatasetSpec) -> Optional[str]:
  """Why the trees are no candidate for a dataset (None: tabular data)."""
  if spec.image_features or spec.image_key:
    return 'image data: the network (a CNN) is the family for pixels'
  if spec.text_features:
    return (f'text columns ({", ".join(spec.text_features)}): the trees are '
            'a candidate for numeric, categorical and date columns only')
  return None


@dataclasses.dataclass
class FamilyChoice:
  """The family to export, the trees if they trained, and the record.

  Attributes:
    family: NETWORK or TREES.
    trees: the trained trees (None: none trained).
    record: what the run record keeps (see ``choose``).
  """
  family: str
  trees: Optional[trees_lib.TrainedTrees]
  record: Dict[str, Any]

  def serving_model(self, network):
    """The model the serving signatures wrap: the network or the trees."""
    return self.trees.model if self.family == TREES else network

  def cleanup(self) -> None:
    """Removes the trees' scratch files (after the SavedModel copied them)."""
    if self.trees is not None:
      self.trees.cleanup()


def _row_scores(outputs: np.ndarray, labels: np.ndarray,
                is_regression: bool) -> np.ndarray:
  """Per eval row: 1/0 for a right/wrong class, or the squared error."""
  if is_regression:
    error = outputs.reshape(-1).astype(np.float64) - labels.reshape(-1)
    return error ** 2
  return (np.argmax(outputs, axis=1) == labels.reshape(-1)).astype(np.float64)


def _figure(rows: np.ndarray, is_regression: bool) -> float:
  """Accuracy, or RMSE, of per-row scores."""
  return float(np.sqrt(rows.mean()) if is_regression else rows.mean())


def _p_value(network_rows: np.ndarray, trees_rows: np.ndarray,
             is_regression: bool) -> float:
  """One-sided p-value of 'the trees are better' on the paired eval rows.

  Classification: McNemar's exact test (a binomial test on the rows exactly
  one family gets right). Regression: a paired t-test on the rows' squared
  errors.
  """
  from scipy import stats  # pylint: disable=g-import-not-at-top
  if is_regression:
    difference = network_rows - trees_rows
    if not np.any(difference):
      return 1.0
    return float(stats.ttest_1samp(difference, 0.0,
                                   alternative='greater').pvalue)
  trees_only = int(np.sum((trees_rows == 1) & (network_rows == 0)))
  network_only = int(np.sum((trees_rows == 0) & (network_rows == 1)))
  if trees_only + network_only == 0:
    return 1.0
  return float(stats.binomtest(trees_only, trees_only + network_only, 0.5,
                               alternative='greater').pvalue)


def _trees_better(network: float, trees: float, p_value: float,
                  is_regression: bool) -> bool:
  """Better past the margin, and significantly (p < SIGNIFICANCE)."""
  if p_value >= SIGNIFICANCE:
    return False
  if is_regression:
    return trees < network * (1.0 - RMSE_MARGIN)
  return trees > network + ACCURACY_MARGIN


def _reason(mode: str, record: Dict[str, Any], is_regression: bool) -> str:
  metric = record['metric']
  figures = (f"trees {metric} {record['trees']:.4f}, network "
             f"{record['network']:.4f} on {record['eval_rows']:,} eval rows, "
             f"p={record['p_value']:.2g}")
  if mode == TREES:
    return f'--model-family trees ({figures})'
  if record['chosen'] == TREES:
    if is_regression:
      lead = f'the trees\' RMSE is more than {RMSE_MARGIN:.0%} lower'
    else:
      lead = (f'the trees are '
              f'{100 * (record["trees"] - record["network"]):.1f} points '
              f'better (more than the {100 * ACCURACY_MARGIN:g}-point margin)')
    return f'{figures}: {lead}, significantly (p < {SIGNIFICANCE:g})'
  return (f'{figures}: the trees are not better by the margin and '
          f'significantly (p < {SIGNIFICANCE:g}), and the network keeps the '
          'ModelOptimizer and every runtime')


def _network_only(mode: str, reason: str) -> FamilyChoice:
  return FamilyChoice(NETWORK, None,
                      {'mode': mode, 'chosen': NETWORK, 'reason': reason})


def choose(training: config_lib.TrainingConfig,
           spec: config_lib.DatasetSpec, network,
           fn_args: tfx.components.FnArgs,
           tf_transform_output: tft.TFTransformOutput) -> FamilyChoice:
  """Trains the trees when they are a candidate and picks the family.

  Args:
    training: model_family ('auto', 'network' or 'trees') and the seed.
    spec: the dataset (tabular or not; the task and classes).
    network: the trained network (called on a dict of transformed features).
    fn_args: the Trainer's arguments (its train and eval files).
    tf_transform_output: the Transform's output.

  Returns:
    The family to export; its record has mode, chosen, reason and, when the
    trees trained, metric ('accuracy' or 'rmse'), network, trees (the two
    figures), p_value (one-sided, the trees better), eval_rows,
    eval_split_rows, trees_train_rows,
    trees_train_split_rows, trees_seconds, num_trees, margin and seconds
    (the whole choice: reads, trees, scoring).

  Raises:
    ValueError: model_family 'trees' on data the trees cannot take, or the
      trees failed to train with model_family 'trees'.
  """
  mode = training.model_family
  if mode == NETWORK:
    return _network_only(mode, '--model-family network')
  started = time.monotonic()
  unsuitable = not_tabular_reason(spec)
  if unsuitable:
    if mode == TREES:
      raise ValueError(f'--model-family trees cannot train on {spec.name!r}: '
                       f'{unsuitable}. Use --model-family auto or network.')
    return _network_only(mode, f'no trees: {unsuitable}')
  train = split_arrays.read(fn_args.train_files, tf_transform_output,
                            TREES_MAX_TRAIN_ROWS, training.seed)
  try:
    trees = trees_lib.train(
        train.arrays, spec.is_regression, len(spec.classes),
        [features.transformed_name(c) for c in spec.categorical_features],
        trees_lib.TreeSettings(seed=training.seed))
  except (ValueError, RuntimeError, tf.errors.OpError) as e:
    if mode == TREES:
      raise ValueError(f'--model-family trees: the trees failed to train: '
                       f'{e}') from e
    logging.warning('The trees failed to train (%s); the network is exported.',
                    e)
    return _network_only(mode, f'the trees failed to train: {e}')
  train_split_rows = train.split_rows
  del train  # The eval rows come next; the train columns are not needed.
  evaluation = split_arrays.read(fn_args.eval_files, tf_transform_output,
                                 EVAL_MAX_ROWS, training.seed + 1)
  labels = evaluation.arrays[features.LABEL_KEY]
  network_rows = _row_scores(trees_lib.predict(network, evaluation.arrays),
                             labels, spec.is_regression)
  trees_rows = _row_scores(trees_lib.predict(trees.model, evaluation.arrays),
                           labels, spec.is_regression)
  record: Dict[str, Any] = {
      'mode': mode,
      'metric': 'rmse' if spec.is_regression else 'accuracy',
      'network': _figure(network_rows, spec.is_regression),
      'trees': _figure(trees_rows, spec.is_regression),
      'p_value': _p_value(network_rows, trees_rows, spec.is_regression),
      'eval_rows': evaluation.rows,
      'eval_split_rows': evaluation.split_rows,
      'trees_train_rows': trees.train_rows,
      'trees_train_split_rows': train_split_rows,
      'trees_seconds': round(trees.seconds, 2),
      'num_trees': trees.num_trees,
      'margin': RMSE_MARGIN if spec.is_regression else ACCURACY_MARGIN,
  }
  better = _trees_better(record['network'], record['trees'],
                         record['p_value'], spec.is_regression)
  record['chosen'] = TREES if mode == TREES or better else NETWORK
  # Reading both splits, training the trees, scoring both families.
  record['seconds'] = round(time.monotonic() - started, 2)
  record['reason'] = _reason(mode, record, spec.is_regression)
  logging.info('Model family: %s (%s).', record['chosen'], record['reason'])
  return FamilyChoice(record['chosen'], trees, record)


def save_serving(exported, path: str, signatures: Dict[str, Any]) -> None:
  """Writes the serving SavedModel of the network or of the trees."""
  if isinstance(exported, trees_lib.TreeModel):
    tf.saved_model.save(exported, path, signatures=signatures)
  else:
    exported.save(path, save_format='tf', signatures=signatures)
