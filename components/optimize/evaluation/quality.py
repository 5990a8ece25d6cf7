"""The quality metric the ModelOptimizer measures, gates and reports on.

A classifier is measured by top-1 accuracy, and a variant may lose at most
``Budget.max_accuracy_drop`` of it (absolute). A regression model is measured
by RMSE in the target's units (MAE beside it, for the report), and a variant's
RMSE may rise at most ``Budget.max_rmse_increase`` of the baseline's RMSE
(relative, the meaning of the Evaluator's ``--max-rmse-increase``).

``Quality`` holds what differs between the two, so measuring, the gate, the
policy, the report and the manifest follow one code path: the names of the
metric and of its drop (which are also the field names on VariantMetrics,
GateDecision and HeldOut), which direction is better, and the Budget field
bounding the drop. The task comes from the pipeline config
(``OptimizationConfig.task``), never from the model's outputs.
"""
import dataclasses
from typing import Dict

import numpy as np

from leantfx.errors import ConfigError

CLASSIFICATION = 'classification'
REGRESSION = 'regression'
TASKS = (CLASSIFICATION, REGRESSION)


def _accuracy(predictions: np.ndarray, labels: np.ndarray) -> float:
  return float(np.mean(np.argmax(predictions, axis=-1) == labels.reshape(-1)))


def _errors(predictions: np.ndarray, labels: np.ndarray) -> np.ndarray:
  predictions = np.asarray(predictions, np.float64).reshape(-1)
  labels = np.asarray(labels, np.float64).reshape(-1)
  if predictions.shape != labels.shape:
    raise ConfigError(
        f'A regression model gave {predictions.size} predictions for '
        f'{labels.size} labels; it must output one number per example '
        '(shape [batch] or [batch, 1]).')
  return predictions - labels


@dataclasses.dataclass(frozen=True)
class Quality:
  """One task's quality metric.

  Attributes:
    task: 'classification' or 'regression'.
    name: the metric ('accuracy', 'rmse'): the VariantMetrics and HeldOut
      field holding it, and the manifest key.
    drop_name: the field/key of the variant's loss against the baseline
      ('accuracy_drop', 'rmse_increase'); positive is worse.
    budget_field: the Budget field bounding that drop.
    higher_is_better: whether a larger value of the metric is better.
    label: how the report's prose names the drop.
    fields: every metric ``scores`` returns (the first is ``name``).
    title: the metric's name in captions ('Accuracy', 'RMSE').
  """
  task: str
  name: str
  drop_name: str
  budget_field: str
  higher_is_better: bool
  label: str
  fields: tuple
  title: str

  def scores(self, predictions: np.ndarray,
             labels: np.ndarray) -> Dict[str, float]:
    """The metric (and, for a regression, MAE) of predictions vs labels.

    Args:
      predictions: class scores [n, classes] or predictions [n] / [n, 1] in
        the target's units.
      labels: class ids or targets, [n].

    Returns:
      {name: value, ...}: keys are VariantMetrics/HeldOut field names.
    """
    if self.task == CLASSIFICATION:
      return {'accuracy': _accuracy(predictions, labels)}
    errors = _errors(predictions, labels)
    return {'rmse': float(np.sqrt(np.mean(errors ** 2))),
            'mae': float(np.mean(np.abs(errors)))}

  def drop(self, baseline: float, value: float) -> float:
    """How much worse value is than baseline (positive: worse).

    Accuracy: baseline - value (absolute). RMSE: (value - baseline) /
    baseline, relative (a baseline RMSE of 0 makes any increase infinite).
    """
    if self.higher_is_better:
      return float(baseline - value)
    if baseline == 0:
      return 0.0 if value == 0 else float('inf')
    return float((value - baseline) / baseline)

  def better_first(self, value: float) -> float:
    """A sort key that puts better values first."""
    return -value if self.higher_is_better else value

  def value(self, record) -> float:
    """The metric of a VariantMetrics or HeldOut (or a dict of one)."""
    if isinstance(record, dict):
      return record[self.name]
    return getattr(record, self.name)


ACCURACY = Quality(task=CLASSIFICATION, name='accuracy',
                   drop_name='accuracy_drop', budget_field='max_accuracy_drop',
                   higher_is_better=True, label='accuracy drop',
                   fields=('accuracy',), title='Accuracy')
RMSE = Quality(task=REGRESSION, name='rmse', drop_name='rmse_increase',
               budget_field='max_rmse_increase', higher_is_better=False,
               label='RMSE increase', fields=('rmse', 'mae'),
               title='RMSE')
_BY_TASK = {CLASSIFICATION: ACCURACY, REGRESSION: RMSE}


def for_task(task: str) -> Quality:
  """The Quality of a task.

  Raises:
    ConfigError: an unknown task.
  """
  if task not in _BY_TASK:
    raise ConfigError(f'Unknown task {task!r} for the ModelOptimizer; use one '
                      f'of {TASKS}.')
  return _BY_TASK[task]
