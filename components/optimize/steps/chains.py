"""Run one candidate's technique chain on the trained model.

Each technique (techniques/) takes the model the previous one returned; the
trained model itself is never modified.
"""
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from absl import logging
import tensorflow as tf
import tf_keras

from leantfx.components.optimize import config as config_lib
from leantfx.components.optimize import types as types_lib


def run_chain(model: tf_keras.Model, candidate: config_lib.Candidate,
              train_ds: tf.data.Dataset, eval_ds: tf.data.Dataset,
              record: Callable[[str, Optional[str], Exception], None]
             ) -> Optional[Tuple[tf_keras.Model,
                                 List[types_lib.OptimizationResult]]]:
  """The candidate's model after its chain, and each technique's result.

  A technique that raises (e.g. a layer tfmot cannot wrap, in a user's
  architecture) is passed to ``record`` as (candidate, technique, error),
  inside its except block so the log keeps its traceback, and the candidate
  gives None.
  """
  current, results, stage = model, [], None
  try:
    for step in candidate.steps:
      stage = step.technique
      logging.info('Candidate %s: running %s', candidate.name,
                   step.technique)
      result = config_lib.technique_function(step.technique)(
          current, train_ds, step.config, eval_ds)
      results.append(result)
      current = result.model
  except Exception as e:  # pylint: disable=broad-except
    record(candidate.name, stage, e)
    return None
  return current, results


def chain_name(results: List[types_lib.OptimizationResult]) -> str:
  """'pruning+qat', or 'baseline' for an empty chain."""
  return '+'.join(r.technique for r in results) or config_lib.BASELINE


def chain_details(results) -> Dict[str, Any]:
  history = {}
  for result in results:
    for key, values in (result.details.get('history') or {}).items():
      history[f'{result.technique}/{key}'] = values
  return {
      'technique_chain': [r.technique for r in results],
      'steps': [{'technique': r.technique, 'details': r.details}
                for r in results],
      'history': history,
  }


def technique_steps(details: Mapping[str, Any]) -> int:
  """The optimizer steps a technique trained for (0: none recorded)."""
  return int(details.get('training_steps') or
             details.get('optimizer_steps') or 0)
