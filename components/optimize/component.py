"""ModelOptimizer: builds optimized TFLite variants, gates them, pushes the chosen one."""
import json
from typing import Optional, Sequence

from tfx import types
from tfx.dsl.components.base import base_component
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_artifacts

from leantfx.components.optimize import executor
from leantfx.components.optimize import spec as spec_lib
from leantfx.components.optimize.config import OptimizationConfig
from leantfx.errors import ConfigError


class ModelOptimizer(base_component.BaseComponent):
  """Runs the configured technique chains and ships the best variant in budget.

  For each candidate chain (e.g. pruning, then prune-preserving QAT) it
  fine-tunes the trained Keras model, exports every configured TFLite mode,
  measures each variant in the TFLite interpreter, blesses the variants
  within the budget, selects one by the policy and pushes it to
  ``<tflite_push_base>/<model_name>/<version>/``. When nothing is blessed it
  still writes the report, marks the blessing ``blessed=0`` and pushes
  nothing; the run does not fail.

  Outputs:
    optimized_model: Model holding Format-TFLite/model.tflite and
      manifest.json of the selected variant (empty when nothing is blessed).
    blessing: ModelBlessing with custom property blessed = 1 or 0.
    report: OptimizationReport with report.html, report.md, the plots,
      variants.json and every variant's .tflite.
  """

  SPEC_CLASS = spec_lib.OptimizeSpec
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

  def __init__(self,
               model: types.BaseChannel,
               transformed_examples: types.BaseChannel,
               transform_graph: types.BaseChannel,
               tflite_push_base: str,
               model_name: str,
               optimization_config: Optional[OptimizationConfig] = None,
               examples: Optional[types.BaseChannel] = None,
               raw_label: Optional[str] = None,
               classes: Sequence[str] = (),
               calibration_examples: Optional[types.BaseChannel] = None,
               serve_args: Sequence[str] = (),
               identifiers: Sequence[str] = ()):
    """Builds the component.

    Args:
      model: the Trainer's Model (its Format-Keras SavedModel is optimized).
      transformed_examples: Transform's Examples with 'train' and 'eval'.
      transform_graph: Transform's TransformGraph (parses the examples).
      tflite_push_base: directory under which versions are pushed.
      model_name: the model's directory name under tflite_push_base.
      optimization_config: what to run; None = OptimizationConfig().
      examples: the raw Examples the Transform read. With raw_label, the
        TFLite pick is pushed taking raw features (the request of the
        Trainer's serving_default); without, it takes the transformed ones.
      raw_label: the raw label column.
      classes: class names in class-id order (empty for a regression).
      calibration_examples: the Examples as the data arrived (before
        Augment); raw int8 exports calibrate on their train split (default:
        the train split of ``examples``).
      serve_args: the ``leantfx serve`` options of the deployment; the
        raw-column picks are served with them before their push.
      identifiers: identifier columns of the raw Examples: not features, so
        no raw-column export takes them.
    """
    config = optimization_config or OptimizationConfig()
    if (examples is None) != (raw_label is None):
      raise ConfigError(
          'ModelOptimizer takes examples and raw_label together (the raw '
          'Examples the Transform read, and their label column), or neither.')
    raw_serving = (json.dumps({'label': raw_label, 'classes': list(classes),
                               'serve_args': list(serve_args),
                               'identifiers': list(identifiers)})
                   if raw_label is not None else None)
    component_spec = spec_lib.OptimizeSpec(
        model=model,
        transformed_examples=transformed_examples,
        transform_graph=transform_graph,
        optimization_config=config.to_json(),
        tflite_push_base=tflite_push_base,
        model_name=model_name,
        examples=examples,
        calibration_examples=calibration_examples,
        raw_serving=raw_serving,
        optimized_model=types.Channel(type=standard_artifacts.Model),
        blessing=types.Channel(type=standard_artifacts.ModelBlessing),
        report=types.Channel(type=spec_lib.OptimizationReport))
    super().__init__(spec=component_spec)
