"""Which task the label asks for: classification or regression.

``decide`` looks at the label column's distinct values (as the data checks
read them, before anything runs) and returns the task and the reason, which
the CLI prints and records. ``--task auto`` follows these rules:

* any value that is not a number (strings, booleans) -> classification;
* any number written as a float (a decimal point, an exponent) -> regression;
* integers with at most ``MAX_AUTO_CLASSES`` distinct values ->
  classification;
* integers with more distinct values than that and at least
  ``MIN_REGRESSION_DISTINCT_SHARE`` of the rows -> regression;
* anything between (say 40 distinct integers in 200 rows) is not decided: the
  user is asked for ``--task``.

An explicit ``--task`` is checked against the values: regression needs
numbers, classification refuses fractional numbers (a classifier on a
continuous target is never built silently).
"""
import dataclasses
import math
import re
from typing import Optional, Sequence

from leantfx.errors import ConfigError, InputDataError

TASKS = ('classification', 'regression')
TASK_OPTIONS = ('auto',) + TASKS
# 20 distinct integer labels is the most a user is likely to mean as classes
# (digits have 10); more is decided by the share below, or asked for.
MAX_AUTO_CLASSES = 20
# Integer labels whose distinct values are at least 30% of the rows repeat
# too rarely to be classes: diabetes' target has 214 values in 442 rows.
MIN_REGRESSION_DISTINCT_SHARE = 0.3
_INT_RE = re.compile(r'^[+-]?[0-9]+$')
_MAX_SHOWN = 5


@dataclasses.dataclass(frozen=True)
class TaskDecision:
  """The task and why.

  Attributes:
    task: 'classification' or 'regression'.
    reason: one sentence for the console and the run record.
    requested: the --task value ('auto', 'classification', 'regression').
  """
  task: str
  reason: str
  requested: str = 'auto'


def _number(text: str) -> Optional[float]:
  try:
    return float(text)
  except ValueError:
    return None


def _shown(values: Sequence[str]) -> str:
  shown = ', '.join(repr(v) for v in list(values)[:_MAX_SHOWN])
  return shown + (', ...' if len(values) > _MAX_SHOWN else '')


def decide(label: str, label_values: Sequence[str], num_rows: int,
           requested: str = 'auto') -> TaskDecision:
  """Decides (or checks) the task from the label's distinct values.

  Args:
    label: the label column's name (for messages).
    label_values: its distinct values as text, as read from the data.
    num_rows: the rows they come from.
    requested: 'auto', 'classification' or 'regression' (--task).

  Returns:
    The TaskDecision.

  Raises:
    ConfigError: an unknown task, a task the values cannot have (regression on
      text, classification on fractional numbers), or auto on a label it
      cannot decide.
  """
  if requested not in TASK_OPTIONS:
    raise ConfigError(f'Unknown task {requested!r}; use one of {TASK_OPTIONS}.')
  values = list(label_values)
  numbers = [_number(v) for v in values]
  text = [v for v, n in zip(values, numbers) if n is None]
  distinct = len(values)
  if text:
    if requested == 'regression':
      raise ConfigError(
          f'--task regression needs a numeric label, and {label!r} holds '
          f'text ({_shown(text)}). Pass --task classification (or auto), or '
          'name a numeric column with --label.')
    return TaskDecision(
        'classification',
        f'{label!r} holds text values ({_shown(text)}): {distinct} classes',
        requested)
  fractional = [v for v, n in zip(values, numbers)
                if math.isfinite(n) and n != math.floor(n)]
  if requested == 'classification':
    if fractional:
      raise ConfigError(
          f'--task classification on {label!r}, whose values have a '
          f'fractional part ({_shown(fractional)}): a classifier would treat '
          f'each of its {distinct} distinct numbers as a class. Use --task '
          'regression (or auto) to predict the number.')
    return TaskDecision('classification',
                        f'--task classification: {distinct} classes',
                        requested)
  if requested == 'regression':
    return TaskDecision('regression',
                        f'--task regression: {distinct} distinct values',
                        requested)
  written_as_float = [v for v in values if not _INT_RE.match(v.strip())]
  if written_as_float:
    return TaskDecision(
        'regression',
        f'{label!r} is a float column ({_shown(written_as_float)}; '
        f'{distinct} distinct values in {num_rows} rows)', requested)
  if distinct <= MAX_AUTO_CLASSES:
    return TaskDecision(
        'classification',
        f'{label!r} holds {distinct} distinct integers (at most '
        f'{MAX_AUTO_CLASSES}): {distinct} classes', requested)
  if distinct >= MIN_REGRESSION_DISTINCT_SHARE * num_rows:
    return TaskDecision(
        'regression',
        f'{label!r} holds {distinct} distinct integers in {num_rows} rows '
        f'(at least {MIN_REGRESSION_DISTINCT_SHARE:.0%} of the rows)',
        requested)
  raise ConfigError(
      f'Cannot tell whether {label!r} is a class or a number to predict: it '
      f'holds {distinct} distinct integers in {num_rows} rows (more than '
      f'{MAX_AUTO_CLASSES} classes, fewer than '
      f'{MIN_REGRESSION_DISTINCT_SHARE:.0%} of the rows). Pass --task '
      'classification or --task regression.')


def check_regression_target(label: str, not_finite: Sequence[tuple],
                            not_finite_count: int) -> None:
  """Refuses a regression target with NaN or infinite values.

  Args:
    label: the label column.
    not_finite: (file, line, value) of the first rows whose label is NaN or
      infinite.
    not_finite_count: how many rows in all.

  Raises:
    InputDataError: naming the rows.
  """
  if not not_finite_count:
    return
  where = '; '.join(f'{path} line {line}: {value!r}'
                    for path, line, value in not_finite)
  more = (f' and {not_finite_count - len(not_finite)} more'
          if not_finite_count > len(not_finite) else '')
  raise InputDataError(
      f'The regression target {label!r} is NaN or infinite in '
      f'{not_finite_count} row(s): {where}{more}. A model cannot learn from '
      'or be measured on them: fix the values or delete those rows.')
