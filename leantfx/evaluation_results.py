"""The Evaluator's figures from TFMA's output: each slice's candidate metrics.

One reader for everything that reports the Evaluator's results (the run
summary, the model card). Every slice TFMA wrote is read, whatever the
EvalConfig's slicing specs were: the overall slice is ``OVERALL``, a feature
slice TFMA's own name of it (``species:Adelie``, ``sex:female_X_island:Dream``
for a cross).
"""
from typing import Dict

# TFMA's name of the slice of every example (slicer_lib.stringify_slice_key
# of the empty key).
OVERALL = 'Overall'
# TFMA metrics of a two-class label, computed for class id 1.
BINARY_METRICS = ('auc', 'precision', 'recall')


def metrics_by_slice(evaluation_uri: str) -> Dict[str, Dict[str, float]]:
  """Each slice's candidate metrics, by TFMA metric name.

  Per-class values are left out, but for the binary metrics of a two-class
  label (class id 1: see pipeline._eval_config); so are the baseline's
  values and the differences to it.

  Args:
    evaluation_uri: the Evaluator's ModelEvaluation artifact's uri.

  Returns:
    slice name -> {metric name: value}; OVERALL is the whole eval split.
  """
  # pylint: disable=g-import-not-at-top
  # Lazy: TFMA loads TensorFlow, and the CLI imports the run summary early.
  import tensorflow_model_analysis as tfma
  from tensorflow_model_analysis.slicer import slicer_lib
  # pylint: enable=g-import-not-at-top
  found: Dict[str, Dict[str, float]] = {}
  for metrics in tfma.load_metrics(evaluation_uri):
    name = slicer_lib.stringify_slice_key(
        slicer_lib.deserialize_slice_key(metrics.slice_key))
    values = found.setdefault(name, {})
    for entry in metrics.metric_keys_and_values:
      key = entry.key
      if key.is_diff or key.model_name not in ('', 'candidate'):
        continue
      if key.sub_key.ByteSize() and key.name not in BINARY_METRICS:
        continue
      if entry.value.HasField('double_value'):
        values[key.name] = entry.value.double_value.value
  return found
