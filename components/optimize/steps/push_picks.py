"""Push the picks: what each pushed version's manifest says, and where it goes.
"""
import os
from typing import Any, Dict, Mapping, Optional

from tfx.dsl.io import fileio

from leantfx import feature_names
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.evaluation import quality as quality_lib
from leantfx.components.optimize.evaluation import report
from leantfx.components.optimize.evaluation import selection
from leantfx.models import model_layout


def runtime_push_base(tflite_push_base: str, runtime: str) -> str:
  """A server runtime's push base: a sibling of the TFLite one.

  ``<output>/tflite`` (the run's TFLite push base) gives ``<output>/openvino``
  and ``<output>/onnx``, the layouts OpenVINO Model Server and Triton read.
  """
  parent = os.path.dirname(tflite_push_base.rstrip('/'))
  return os.path.join(parent, runtime)


def _manifest_metrics(decision: selection.GateDecision,
                      baseline: measure.VariantMetrics,
                      held_out: Mapping[str, selection.HeldOut],
                      quality: quality_lib.Quality) -> Dict[str, Any]:
  """The pushed variant's figures, named by the task's metric.

  A classifier's keys are accuracy, baseline_accuracy, accuracy_drop,
  selection_accuracy, ...; a regression's rmse, baseline_rmse,
  rmse_increase, selection_rmse, ... and mae, baseline_mae.
  """
  v = decision.variant
  report = held_out[v.name]
  baseline_report = held_out[baseline.name]
  figures = {}
  # Measured on the report split, which the selection never saw.
  for field in quality.fields:
    figures[field] = getattr(report, field)
    figures[f'baseline_{field}'] = getattr(baseline_report, field)
  figures[quality.drop_name] = getattr(report, quality.drop_name)
  figures['eval_examples'] = report.num_examples
  for field in quality.fields:
    figures[f'selection_{field}'] = getattr(v, field)
  figures[f'selection_{quality.drop_name}'] = decision.drop(quality)
  return {
      **figures,
      'selection_examples': v.num_examples,
      'size_bytes': v.size_bytes,
      'gzipped_bytes': v.gzipped_bytes,
      'latency_p50_ms': v.latency_p50_ms,
      'latency_p99_ms': v.latency_p99_ms,
      'latency_runs': v.latency_runs,
      # Every variant is timed on transformed features (measure.LabeledData
      # of the Transform's output): the figures leave preprocessing out.
      'latency_includes_preprocessing': False,
      'num_threads': v.num_threads,
      'params': v.params,
      'sparsity': v.sparsity,
      'gate_reasons': list(decision.reasons),
  }


def _feature_names_file(model_uri: str) -> Optional[str]:
  """The trained SavedModel's feature-names file, pushed with raw exports."""
  path = os.path.join(model_uri, model_layout.SERVING_MODEL_DIR,
                      feature_names.SAVED_MODEL_DIR, feature_names.FILE_NAME)
  return path if fileio.exists(path) else None
