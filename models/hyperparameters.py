"""The tuner's hyperparameters and how their values reach the TrainingConfig.

The search space has four names: the width of the first hidden layer
('units', later layers halve it), the number of hidden layers ('depth'),
Adam's learning rate and the dropout rate. The Tuner declares them
(models/tuning.py) and each trial builds its model from them; the Trainer's
run_fn (models/model.py) trains with the best values the Tuner wrote. Both
turn values into a TrainingConfig here, so a trial and the Trainer build the
same model from the same values. Nothing here imports keras_tuner (it loads
Keras 3), so run_fn does not need it.
"""
import dataclasses
from typing import Any, Dict, Mapping, Optional

from leantfx import config as config_lib

UNITS = 'units'
DEPTH = 'depth'
LEARNING_RATE = 'learning_rate'
DROPOUT = 'dropout'
# The smallest hidden layer 'units' halving may produce.
MIN_UNITS = 8


def hidden_units(units: int, depth: int) -> tuple:
  """depth layers starting at `units`, each half the previous (>= MIN_UNITS)."""
  return tuple(max(MIN_UNITS, int(units) // (2**i)) for i in range(int(depth)))


def apply_hyperparameters(
    training: config_lib.TrainingConfig,
    hyperparameters: Optional[Mapping[str, Any]]
) -> config_lib.TrainingConfig:
  """The training config with the tuner's values in place.

  Args:
    training: the configured TrainingConfig.
    hyperparameters: fn_args.hyperparameters: a KerasTuner HyperParameters
      config ({'space': [...], 'values': {...}}), a plain {name: value} dict,
      or None (no tuning: training is returned unchanged).

  Returns:
    A TrainingConfig with hidden_units, learning_rate and dropout replaced by
    the values present.
  """
  if not hyperparameters:
    return training
  values = hyperparameters.get('values', hyperparameters)
  changes: Dict[str, Any] = {}
  if UNITS in values or DEPTH in values:
    units = values.get(UNITS, training.hidden_units[0] if
                       training.hidden_units else 64)
    depth = values.get(DEPTH, len(training.hidden_units) or 1)
    changes['hidden_units'] = hidden_units(units, depth)
  if LEARNING_RATE in values:
    changes['learning_rate'] = float(values[LEARNING_RATE])
  if DROPOUT in values:
    changes['dropout'] = float(values[DROPOUT])
  return dataclasses.replace(training, **changes)
