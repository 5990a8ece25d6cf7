"""The gate's bound written into the Evaluator's EvalConfig, as TFMA's own threshold.

TFMA fixes a threshold when the pipeline is built; the baselines are measured
in the run. So the Evaluator's executor moves the overall value threshold of
the gated metric (accuracy's lower bound, RMSE's upper bound) to the gate's
bound before TFMA runs: TFMA then validates the model, writes the blessing
and records the threshold it used, as for any other bound.
"""
from typing import Optional

import tensorflow_model_analysis as tfma

from leantfx.components.relative_gate import rule

# The TFMA metric the gate bounds, by the gate's metric.
METRIC_CLASSES = {rule.ACCURACY: 'SparseCategoricalAccuracy',
                  rule.RMSE: 'RootMeanSquaredError'}


def _overall_threshold(eval_config: tfma.EvalConfig, metric: str):
  """The gated metric's overall MetricThreshold inside eval_config.

  Raises:
    ValueError: the EvalConfig has no such metric, or no threshold on it.
  """
  class_name = METRIC_CLASSES[metric]
  for metrics_spec in eval_config.metrics_specs:
    for config in metrics_spec.metrics:
      if config.class_name != class_name:
        continue
      if config.HasField('threshold'):
        return config.threshold
      for per_slice in config.per_slice_thresholds:
        if any(not s.ByteSize() for s in per_slice.slicing_specs):
          return per_slice.threshold
  raise ValueError(
      f'The EvalConfig has no overall threshold on {class_name}: the relative '
      'gate has nothing to bound.')


def absolute_bound(eval_config: tfma.EvalConfig,
                   metric: str) -> Optional[float]:
  """The bound the pipeline was built with (--min-accuracy, --max-rmse)."""
  threshold = _overall_threshold(eval_config, metric).value_threshold
  field = 'lower_bound' if metric == rule.ACCURACY else 'upper_bound'
  return getattr(threshold, field).value if threshold.HasField(field) else None


def with_gate(eval_config: tfma.EvalConfig, gate: rule.Gate
             ) -> tfma.EvalConfig:
  """A copy of eval_config whose overall value threshold is the gate's bound.

  The change threshold (no worse than the last blessed model) is kept.
  """
  result = tfma.EvalConfig()
  result.CopyFrom(eval_config)
  bound = gate.combined
  if bound is None:
    return result
  threshold = _overall_threshold(result, gate.metric).value_threshold
  if gate.higher_is_better:
    threshold.lower_bound.value = bound
  else:
    threshold.upper_bound.value = bound
  return result
