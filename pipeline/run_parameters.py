"""Names and values of the pipeline's runtime parameters (no TFX import).

``pipeline/retraining.py`` declares them in the graph; the Kubeflow
submission code and the watcher fill them in per run. Kept free of TFX and
TensorFlow imports so ``leantfx kfp ...`` starts in a second.
"""
import json
from typing import Optional

DATA_ROOT_PARAMETER = 'data_root'
# RangeConfig JSON for ExampleGen ('' = the newest span); the Kubeflow
# watcher pins each run to its span with it.
RANGE_CONFIG_PARAMETER = 'range_config'
# TrainArgs JSON, e.g. '{"num_steps": 1000}': TFX's Kubeflow V2 compiler
# only turns a RuntimeParameter into a pipeline parameter when it is the whole
# execution property, not a field inside the train_args proto.
TRAIN_ARGS_PARAMETER = 'train_args'
# An int: how many spans (the newest included) the Kubeflow ExampleGen reads
# (components/span_window_example_gen).
SPAN_WINDOW_PARAMETER = 'span_window'


def pinned_span_json(span: Optional[int]) -> str:
  """The RangeConfig JSON that pins ExampleGen to one span ('' for newest)."""
  if span is None:
    return ''
  return json.dumps({
      'static_range': {
          'start_span_number': span,
          'end_span_number': span
      }
  }, sort_keys=True)


def train_args_json(train_steps: int) -> str:
  """The TrainArgs JSON the train_args parameter takes."""
  return json.dumps({'num_steps': int(train_steps)}, sort_keys=True)
