"""Push the picks: each runtime's pick as a new version, with its manifest.

The TFLite pick is the component's blessing: it is pushed under the TFLite
push base and copied into the optimized model's Format-TFLite folder. Each
server runtime's pick goes under a sibling push base (runtime_push_base).
A pick whose raw-column export succeeded is pushed as that export, with the
trained SavedModel's feature-names file; otherwise as its transformed-input
model. The manifest holds the pick's figures (manifest_metrics) and what serving
it in ``leantfx serve`` before the push found (steps/serve_check.py,
``infra_validation``); a pick that failed there is not pushed.
"""
import dataclasses
import os
from typing import Any, Dict, Mapping, Optional, Tuple

from absl import logging
from tfx.dsl.io import fileio

from leantfx import feature_names
from leantfx.components.optimize import config as config_lib
from leantfx.components.optimize import spec
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.evaluation import quality as quality_lib
from leantfx.components.optimize.evaluation import report
from leantfx.components.optimize.evaluation import selection
from leantfx.models import model_layout
from leantfx.runtimes import push
from leantfx.runtimes import registry as runtimes_lib

# runtime -> (the raw-column export's file or folder, or None; its facts):
# raw_fold.fold_raw_columns's answer.
Exports = Mapping[str, Tuple[Optional[str], Dict[str, Any]]]


@dataclasses.dataclass(frozen=True)
class Push:
  """Where the picks go and what every manifest shares.

  Attributes:
    push_base: the TFLite push base; the server runtimes' are its siblings.
    model_name: the model's directory under each push base.
    source_model_uri: the Model artifact's uri (recorded in the manifest).
    baseline: the baseline's metrics.
    held_out: variant name -> its quality on the report split.
    quality: the task's quality.
  """
  push_base: str
  model_name: str
  source_model_uri: str
  baseline: measure.VariantMetrics
  held_out: Mapping[str, selection.HeldOut]
  quality: quality_lib.Quality

  def manifest(self, decision: selection.GateDecision,
               serving_inputs: Dict[str, Any],
               served: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    metrics = manifest_metrics(decision, self.baseline, self.held_out,
                               self.quality)
    metrics['serving_inputs'] = serving_inputs
    if served is not None:
      metrics['infra_validation'] = dict(served)
    return metrics


def _refused(runtime: str, served: Optional[Mapping[str, Mapping[str, Any]]]
            ) -> bool:
  """Whether serving the pick before its push failed (it is not pushed)."""
  return bool(served) and runtime in served and not served[runtime]['passed']


def technique_chain(variant: measure.VariantMetrics) -> list:
  """The techniques a variant's manifest lists ([] for the baseline)."""
  if variant.technique == config_lib.BASELINE:
    return []
  return variant.technique.split('+')


def push_tflite_pick(selected: Optional[selection.GateDecision],
                     exports: Exports, target: Push,
                     optimized_model_dir: Optional[str],
                     served: Optional[Mapping[str, Mapping[str, Any]]] = None
                    ) -> Tuple[Optional[push.PushResult],
                               Optional[Dict[str, Any]]]:
  """Pushes the TFLite pick; (where it went, the inputs it takes).

  (None, None) when nothing was blessed or the pick failed in ``leantfx
  serve`` (``served``: steps/serve_check.py). With ``optimized_model_dir``,
  the pushed model.tflite and its manifest are copied into
  <dir>/Format-TFLite/.
  """
  if selected is None:
    logging.warning('ModelOptimizer: %s; nothing pushed.',
                    report.NO_VARIANT_BLESSED)
    return None, None
  if _refused(runtimes_lib.TFLITE, served):
    return None, None
  v = selected.variant
  path, serving_inputs = exports[runtimes_lib.TFLITE]
  pushed = push.push_tflite(
      path or v.path, target.push_base, target.model_name,
      source_model_uri=target.source_model_uri,
      technique_chain=technique_chain(v), tflite_mode=v.tflite_mode,
      metrics=target.manifest(selected, serving_inputs,
                              (served or {}).get(runtimes_lib.TFLITE)),
      feature_names_file=(feature_names_file(target.source_model_uri)
                          if path else None))
  logging.info('ModelOptimizer: pushed %s as version %d to %s', v.name,
               pushed.version, pushed.directory)
  if optimized_model_dir:
    out = os.path.join(optimized_model_dir, spec.TFLITE_MODEL_DIR)
    fileio.makedirs(out)
    fileio.copy(pushed.model_path, os.path.join(out, push.MODEL_FILE),
                overwrite=True)
    fileio.copy(os.path.join(pushed.directory, push.MANIFEST_FILE),
                os.path.join(out, push.MANIFEST_FILE), overwrite=True)
  return pushed, serving_inputs


def push_runtime_picks(picks: Mapping[str, Optional[selection.GateDecision]],
                       exports: Exports, target: Push,
                       served: Optional[Mapping[str, Mapping[str, Any]]] = None
                      ) -> Tuple[Dict[str, push.PushResult],
                                 Dict[str, Dict[str, Any]]]:
  """Pushes each server runtime's pick; (runtime -> where, runtime -> inputs).

  A runtime with nothing blessed is logged and left out of both; so is a
  pick that failed in ``leantfx serve`` (``served``).
  """
  runtime_pushes = {}
  runtime_inputs = {}
  for runtime, pick in picks.items():
    if pick is None:
      logging.warning('ModelOptimizer: %s: %s; nothing pushed.', runtime,
                      report.NO_VARIANT_BLESSED)
      continue
    if _refused(runtime, served):
      continue
    v = pick.variant
    source_dir = (v.path if os.path.isdir(v.path) else
                  os.path.dirname(v.path))
    raw_dir, inputs = exports[runtime]
    runtime_inputs[runtime] = inputs
    runtime_pushes[runtime] = push.push_runtime_model(
        runtime, raw_dir or source_dir,
        runtime_push_base(target.push_base, runtime), target.model_name,
        source_model_uri=target.source_model_uri,
        technique_chain=technique_chain(v), mode=v.tflite_mode,
        metrics=target.manifest(pick, inputs, (served or {}).get(runtime)),
        feature_names_file=(feature_names_file(target.source_model_uri)
                            if raw_dir else None))
    logging.info('ModelOptimizer: pushed %s as version %d to %s', v.name,
                 runtime_pushes[runtime].version,
                 runtime_pushes[runtime].directory)
  return runtime_pushes, runtime_inputs


def runtime_push_base(tflite_push_base: str, runtime: str) -> str:
  """A server runtime's push base: a sibling of the TFLite one.

  ``<output>/tflite`` (the run's TFLite push base) gives ``<output>/openvino``
  and ``<output>/onnx``, the layouts OpenVINO Model Server and Triton read.
  """
  parent = os.path.dirname(tflite_push_base.rstrip('/'))
  return os.path.join(parent, runtime)


def manifest_metrics(decision: selection.GateDecision,
                     baseline: measure.VariantMetrics,
                     held_out: Mapping[str, selection.HeldOut],
                     quality: quality_lib.Quality) -> Dict[str, Any]:
  """The pushed variant's figures, named by the task's metric.

  A classifier's keys are accuracy, baseline_accuracy, accuracy_drop,
  selection_accuracy, ...; a regression's rmse, baseline_rmse,
  rmse_increase, selection_rmse, ... and mae, baseline_mae.
  """
  v = decision.variant
  on_report = held_out[v.name]
  baseline_report = held_out[baseline.name]
  figures = {}
  # Measured on the report split, which the selection never saw.
  for field in quality.fields:
    figures[field] = getattr(on_report, field)
    figures[f'baseline_{field}'] = getattr(baseline_report, field)
  figures[quality.drop_name] = getattr(on_report, quality.drop_name)
  figures['eval_examples'] = on_report.num_examples
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


def feature_names_file(model_uri: str) -> Optional[str]:
  """The trained SavedModel's feature-names file, pushed with raw exports."""
  path = os.path.join(model_uri, model_layout.SERVING_MODEL_DIR,
                      feature_names.SAVED_MODEL_DIR, feature_names.FILE_NAME)
  return path if fileio.exists(path) else None
