"""Per-slice gate metrics for the Evaluator: a slice too small is not judged.

TFMA gates slices with per-slice thresholds, but it cannot leave a small
slice out of them: its own ``Options.min_slice_size`` replaces a small
slice's metrics with an error, and the validator then counts every
threshold of that slice as failed ("Metric not found"), so one slice below
the size would never let a model be blessed (tensorflow_model_analysis
0.47: slicer_lib.FilterOutSlices, metrics_validator.validate_metrics).

These metrics carry the minimum slice size themselves. On a slice of at
least ``min_slice_size`` examples (example weights summed) each is its plain
figure, top-1 accuracy or RMSE; on a smaller slice it reads
``NOT_JUDGED`` (1.0) for the candidate and the baseline alike, so no bound
or change threshold of it can fail there: a change of 0, a ratio of 0. The
Evaluator reports the slice's real accuracy or RMSE and example count
beside them (pipeline.py's eval config), so nothing about a small slice is
hidden; it is only not gated.

The Evaluator names them by module and class (pipeline.py's eval config), so
this module must import without the rest of the pipeline.
"""
import dataclasses
import math
from typing import Iterable, Optional

import apache_beam as beam
import numpy as np
from tensorflow_model_analysis.metrics import metric_types
from tensorflow_model_analysis.metrics import metric_util
from tensorflow_model_analysis.proto import config_pb2

SLICE_ACCURACY_NAME = 'slice_gate_accuracy'
SLICE_RMSE_NAME = 'slice_gate_rmse'
# What a slice below the minimum size reads, for every model.
NOT_JUDGED = 1.0


class SliceGateAccuracy(metric_types.Metric):
  """Top-1 accuracy of a slice of at least min_slice_size examples."""

  def __init__(self, min_slice_size: int = 1,
               name: str = SLICE_ACCURACY_NAME):
    super().__init__(
        metric_util.merge_per_key_computations(_computations),
        min_slice_size=min_slice_size, kind='accuracy', name=name)


class SliceGateRmse(metric_types.Metric):
  """RMSE of a slice of at least min_slice_size examples."""

  def __init__(self, min_slice_size: int = 1, name: str = SLICE_RMSE_NAME):
    super().__init__(
        metric_util.merge_per_key_computations(_computations),
        min_slice_size=min_slice_size, kind='rmse', name=name)


def _computations(
    name: str,
    min_slice_size: int,
    kind: str,
    eval_config: Optional[config_pb2.EvalConfig] = None,
    model_name: str = '',
    output_name: str = '',
    example_weighted: bool = False,
    sub_key: Optional[metric_types.SubKey] = None,
) -> metric_types.MetricComputations:
  key = metric_types.MetricKey(
      name=name, model_name=model_name, output_name=output_name,
      sub_key=sub_key, example_weighted=example_weighted)
  return [
      metric_types.MetricComputation(
          keys=[key], preprocessors=None,
          combiner=_SliceCombiner(eval_config, key, example_weighted,
                                  min_slice_size, kind))
  ]


@dataclasses.dataclass
class _Sums:
  weight: float = 0.0
  right: float = 0.0
  squared_error: float = 0.0


class _SliceCombiner(beam.CombineFn):
  """Sums the weight and the right answers (or squared errors) of a slice."""

  def __init__(self, eval_config: Optional[config_pb2.EvalConfig],
               key: metric_types.MetricKey, example_weighted: bool,
               min_slice_size: int, kind: str):
    self._eval_config = eval_config
    self._key = key
    self._example_weighted = example_weighted
    self._min_slice_size = min_slice_size
    self._kind = kind

  def create_accumulator(self) -> _Sums:
    return _Sums()

  def add_input(self, sums: _Sums,
                element: metric_types.StandardMetricInputs) -> _Sums:
    for label, prediction, weight in (
        metric_util.to_label_prediction_example_weight(
            element, eval_config=self._eval_config,
            model_name=self._key.model_name,
            output_name=self._key.output_name,
            example_weighted=self._example_weighted,
            sub_key=self._key.sub_key, flatten=False)):
      weight = metric_util.safe_to_scalar(weight)
      sums.weight += weight
      if self._kind == 'accuracy':
        right = int(np.argmax(prediction)) == int(np.reshape(label, [-1])[0])
        sums.right += weight * right
      else:
        error = (metric_util.safe_to_scalar(prediction) -
                 metric_util.safe_to_scalar(label))
        sums.squared_error += weight * error * error
    return sums

  def merge_accumulators(self, accumulators: Iterable[_Sums]) -> _Sums:
    merged = _Sums()
    for sums in accumulators:
      merged.weight += sums.weight
      merged.right += sums.right
      merged.squared_error += sums.squared_error
    return merged

  def extract_output(self, sums: _Sums) -> metric_types.MetricsDict:
    if sums.weight < self._min_slice_size or sums.weight <= 0:
      return {self._key: NOT_JUDGED}
    if self._kind == 'accuracy':
      return {self._key: float(sums.right / sums.weight)}
    return {self._key: float(math.sqrt(sums.squared_error / sums.weight))}


metric_types.register_metric(SliceGateAccuracy)
metric_types.register_metric(SliceGateRmse)
