"""R², the coefficient of determination, as a TFMA metric for the Evaluator.

TFMA 0.47 has MAE and MSE of its own but no R², and tf_keras' R2Score does
not survive TFMA's Keras-metric wrapper (its weights are restored as one
list). R² = 1 - SSE / SST over the eval split, with SST the squared deviations
of the labels from their (weighted) mean: 1 is perfect, 0 is no better than
predicting the mean, below 0 is worse. One pass: the accumulator keeps the
weighted sums of the labels, their squares and the squared errors.

The Evaluator names it by module and class (pipeline.py's eval config), so
this module must import without the rest of the pipeline.
"""
import dataclasses
from typing import Iterable, Optional

import apache_beam as beam
from tensorflow_model_analysis.metrics import metric_types
from tensorflow_model_analysis.metrics import metric_util
from tensorflow_model_analysis.proto import config_pb2

R2_NAME = 'r2_score'


class CoefficientOfDetermination(metric_types.Metric):
  """R² = 1 - sum((label - prediction)²) / sum((label - mean label)²)."""

  def __init__(self, name: str = R2_NAME):
    super().__init__(
        metric_util.merge_per_key_computations(_r2_computations), name=name)


def _r2_computations(
    name: str = R2_NAME,
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
          combiner=_R2Combiner(eval_config, key, example_weighted))
  ]


@dataclasses.dataclass
class _Sums:
  weight: float = 0.0
  label: float = 0.0
  label_squared: float = 0.0
  squared_error: float = 0.0


class _R2Combiner(beam.CombineFn):
  """Accumulates the sums R² needs; extract_output divides them."""

  def __init__(self, eval_config: Optional[config_pb2.EvalConfig],
               key: metric_types.MetricKey, example_weighted: bool):
    self._eval_config = eval_config
    self._key = key
    self._example_weighted = example_weighted

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
            sub_key=self._key.sub_key)):
      label = metric_util.safe_to_scalar(label)
      prediction = metric_util.safe_to_scalar(prediction)
      weight = metric_util.safe_to_scalar(weight)
      sums.weight += weight
      sums.label += weight * label
      sums.label_squared += weight * label * label
      sums.squared_error += weight * (label - prediction)**2
    return sums

  def merge_accumulators(self, accumulators: Iterable[_Sums]) -> _Sums:
    merged = _Sums()
    for sums in accumulators:
      merged.weight += sums.weight
      merged.label += sums.label
      merged.label_squared += sums.label_squared
      merged.squared_error += sums.squared_error
    return merged

  def extract_output(self, sums: _Sums) -> metric_types.MetricsDict:
    if sums.weight <= 0:
      return {self._key: float('nan')}
    total = sums.label_squared - sums.label * sums.label / sums.weight
    if total <= 0:
      return {self._key: float('nan')}  # A constant label: R² is undefined.
    return {self._key: float(1.0 - sums.squared_error / total)}


metric_types.register_metric(CoefficientOfDetermination)
