"""Baselines: what a model on this data should at least reach, measured in the run.

On ExampleGen's own train/eval split (the rows the Trainer and the Evaluator
see; Augment's copies are not fit on), it fits the trivial baseline (the
majority class, a regression's mean), a linear model and a strong
off-the-shelf learner (fits.py) and records each one's eval-split figure and
fit time. Large splits are read as an even sample of at most ``max_rows``
rows each (rows.py), and the document says so. The relative gate
(components/relative_gate) blesses a model against these figures.
"""
import json

from tfx import types
from tfx.dsl.components.base import base_component
from tfx.dsl.components.base import executor_spec

from leantfx import config as config_lib
from leantfx.components.baselines import executor
from leantfx.components.baselines import spec as spec_lib

# Per split. On benchmarks/scale_data.py's 1M-row span (22 columns, 2
# cores; `python -m benchmarks.bench_baselines --time-rows 1000000
# [--max-rows N]`, 2026-12-07) the component took 88.4 s with 200,000 rows
# (strong accuracy 0.9033), 0.117 of the default 1M-row run's 12.6 min, over
# issue 43's 10%; with 100,000, 65.6 s (0.087; strong accuracy 0.9016).
DEFAULT_MAX_ROWS = 100_000


class Baselines(base_component.BaseComponent):
  """Examples + Schema -> Baselines (baselines.json, and as a property).

  Outputs:
    baselines: Baselines; custom property ``figures``: the JSON document
      (report.py).
  """

  SPEC_CLASS = spec_lib.BaselinesSpec
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

  def __init__(self, examples: types.BaseChannel, schema: types.BaseChannel,
               dataset: config_lib.DatasetSpec,
               max_rows: int = DEFAULT_MAX_ROWS):
    """Builds the component.

    Args:
      examples: ExampleGen's Examples ('train' and 'eval' splits).
      schema: the Schema (each column's type, to parse the examples).
      dataset: the DatasetSpec (label, task and each column's role).
      max_rows: at most this many rows of each split are read.
    """
    super().__init__(spec=spec_lib.BaselinesSpec(
        examples=examples, schema=schema,
        dataset=json.dumps(config_lib.to_json_dict(dataset), sort_keys=True),
        max_rows=max_rows,
        baselines=types.Channel(type=spec_lib.Baselines)))
