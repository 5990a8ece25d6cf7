"""The Evaluator's model loader: a tree model gets TF-DF's ops first.

TFX's Evaluator builds each model's EvalSharedModel with the module's
``custom_eval_shared_model`` (the pipeline passes this module as the
Evaluator's module_path). It is TFMA's default one; for a SavedModel that
runs TensorFlow Decision Forests' ops (models/trees.py) its loader first
registers them (leantfx/decision_forests.py), in the executor and in every
Beam worker that loads the model (multi_processing or portable workers
unpickle the loader and run it there).
"""
import functools
from typing import Any, Callable

import tensorflow_model_analysis as tfma

from leantfx import decision_forests


def _load_with_ops(construct_fn: Callable[[], Any], model_path: str) -> Any:
  """Registers TF-DF's ops in this process, then loads as TFMA does."""
  decision_forests.ensure_ops(model_path)
  return construct_fn()


# TFX Evaluator will call this function.
def custom_eval_shared_model(eval_saved_model_path: str, model_name: str,
                             eval_config: tfma.EvalConfig,
                             **kwargs) -> tfma.types.EvalSharedModel:
  """TFMA's default EvalSharedModel; a tree model's loads TF-DF's ops.

  Args:
    eval_saved_model_path: the model's SavedModel (Format-Serving).
    model_name: the ModelSpec's name ('' for one model, or the candidate's
      and baseline's names).
    eval_config: the Evaluator's EvalConfig.
    **kwargs: the rest of tfma.default_eval_shared_model's arguments.

  Returns:
    The EvalSharedModel TFMA evaluates.
  """
  shared = tfma.default_eval_shared_model(
      eval_saved_model_path=eval_saved_model_path, model_name=model_name,
      eval_config=eval_config, **kwargs)
  if not decision_forests.ensure_ops(eval_saved_model_path):
    return shared
  loader = shared.model_loader
  return shared._replace(model_loader=tfma.types.ModelLoader(
      construct_fn=functools.partial(_load_with_ops, loader.construct_fn,
                                     eval_saved_model_path),
      tags=loader.tags))
