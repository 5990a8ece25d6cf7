"""What the model card says, read from the run's artifacts (ML Metadata).

Every reader takes TFX Artifacts (their custom properties are ML Metadata's
record of the run, their files TFX's outputs) and returns plain JSON values,
so the card is built from nothing else and a test can compare each figure
with what ML Metadata holds.
"""
import json
import os
from typing import Any, Dict, List, Optional

from tfx import types
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tensorflow_metadata.proto.v0 import statistics_pb2

from leantfx import compute_cost
from leantfx import evaluation_results
from leantfx.components.infra_validator import spec as infra_spec
from leantfx.components.optimize import spec as optimize_spec
from leantfx.components.optimize.evaluation import report as report_lib
from leantfx.components.relative_gate import spec as relative_gate_spec
from leantfx.components.validation_gate import spec as gate_spec
from leantfx.models.training import trainer_executor
from leantfx.runtimes import registry

# StatisticsGen's file in each Split-<name> folder (TFX 1.16's
# stats_artifact_utils.BINARY_PB_BASENAME).
STATISTICS_FILE = 'FeatureStats.pb'
# The Trainer's custom properties the card shows, by the card's name.
TRAINING_PROPERTIES = {
    'precision': trainer_executor.PRECISION_POLICY,
    'precision_reason': trainer_executor.PRECISION_REASON,
    'strategy': trainer_executor.STRATEGY,
    'replicas': trainer_executor.REPLICAS,
    'steps': trainer_executor.TRAIN_STEPS,
    'global_batch': trainer_executor.GLOBAL_BATCH,
    'train_examples': trainer_executor.TRAIN_EXAMPLES,
    'train_passes': trainer_executor.TRAIN_PASSES,
    'budget_rule': trainer_executor.TRAIN_BUDGET_RULE,
    'model_family': trainer_executor.MODEL_FAMILY,
    'model_family_reason': trainer_executor.MODEL_FAMILY_REASON,
}


def _property(artifact: types.Artifact, name: str) -> Any:
  """A custom property's value (int, float or str), or None."""
  if not artifact.has_custom_property(name):
    return None
  value = artifact.mlmd_artifact.custom_properties[name]
  kind = value.WhichOneof('value')
  if kind == 'int_value':
    return value.int_value
  if kind == 'double_value':
    return value.double_value
  if kind == 'string_value':
    return value.string_value
  return None


def _common_stats(feature: statistics_pb2.FeatureNameStatistics):
  kind = feature.WhichOneof('stats')
  if kind in ('num_stats', 'string_stats', 'bytes_stats'):
    return getattr(feature, kind).common_stats
  if kind == 'struct_stats':
    return feature.struct_stats.common_stats
  return None


def split_statistics(statistics: types.Artifact) -> Dict[str, Dict[str, Any]]:
  """Each split's rows and a summary of its features.

  Returns:
    split -> {'rows', 'features', 'numeric', 'categorical',
    'with_missing': {feature: rows without it}, 'with_empty_values':
    [features with no value in some rows]}.
  """
  summary = {}
  for split in artifact_utils.decode_split_names(statistics.split_names):
    path = os.path.join(artifact_utils.get_split_uri([statistics], split),
                        STATISTICS_FILE)
    with fileio.open(path, 'rb') as f:
      stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(f.read())
    if not stats.datasets:
      continue
    dataset = stats.datasets[0]
    missing, empty = {}, []
    numeric = categorical = 0
    for feature in dataset.features:
      name = '.'.join(feature.path.step) or feature.name
      if feature.HasField('num_stats'):
        numeric += 1
      else:
        categorical += 1
      common = _common_stats(feature)
      if common is None:
        continue
      if common.num_missing:
        missing[name] = int(common.num_missing)
      if common.num_non_missing and not common.min_num_values:
        # An empty CSV cell is an empty value list, not a missing feature.
        empty.append(name)
    summary[split] = {'rows': int(dataset.num_examples),
                      'features': len(dataset.features),
                      'numeric': numeric, 'categorical': categorical,
                      'with_missing': missing, 'with_empty_values': empty}
  return summary


def validation(report: Optional[types.Artifact]) -> Optional[Dict[str, Any]]:
  """The ValidationGate's verdict on the span (None: no gate ran)."""
  if report is None:
    return None
  facts = {
      'span': _property(report, gate_spec.SPAN_PROPERTY),
      'passed': bool(_property(report, gate_spec.PASSED_PROPERTY)),
      'blocking_anomalies': _property(report,
                                      gate_spec.BLOCKING_COUNT_PROPERTY),
      'allowed_anomalies': _property(report, gate_spec.ALLOWED_COUNT_PROPERTY),
      'drift_baseline_span': _property(report,
                                       gate_spec.BASELINE_SPAN_PROPERTY),
      'rows_read': _property(report, gate_spec.ROWS_READ_PROPERTY),
      'rows_used': _property(report, gate_spec.ROWS_USED_PROPERTY),
      'anomalies': [],
  }
  path = os.path.join(report.uri, gate_spec.REPORT_JSON_FILE)
  if fileio.exists(path):
    with fileio.open(path) as f:
      record = json.load(f)
    # checks.AnomalyRow's fields.
    facts['anomalies'] = [
        f"{a['split']} {a['feature']}: {a['kind']} "
        f"({'allowed' if a['allowed'] else 'stops the run'})"
        for a in record.get('anomalies', [])]
  return facts


def training(model: types.Artifact) -> Dict[str, Any]:
  """The Trainer's choices and what it cost (its Model's custom properties)."""
  facts = {name: _property(model, key)
           for name, key in TRAINING_PROPERTIES.items()}
  facts['seconds'] = _property(model, compute_cost.COMPUTE_SECONDS_PROPERTY)
  facts['cores'] = _property(model, compute_cost.COMPUTE_CORES_PROPERTY)
  return facts


def compute(artifact: Optional[types.Artifact]) -> Optional[Dict[str, Any]]:
  """{'seconds', 'cores'} a component recorded on its output, or None."""
  if artifact is None:
    return None
  seconds = _property(artifact, compute_cost.COMPUTE_SECONDS_PROPERTY)
  cores = _property(artifact, compute_cost.COMPUTE_CORES_PROPERTY)
  if seconds is None or cores is None:
    return None
  return {'seconds': seconds, 'cores': cores}


def evaluation(evaluation_artifact: types.Artifact,
               blessing: types.Artifact) -> Dict[str, Any]:
  """The Evaluator's verdict, every slice's metrics (TFMA's output), and
  the relative gate it blessed by with the baselines' figures (None: the
  blessing records none)."""
  recorded = _property(blessing, relative_gate_spec.GATE_PROPERTY)
  return {
      'blessed': bool(_property(blessing, 'blessed')),
      'slices': evaluation_results.metrics_by_slice(evaluation_artifact.uri),
      'relative_gate': json.loads(recorded) if recorded else None,
  }


def infra(blessing: types.Artifact) -> Dict[str, Any]:
  """The InfraValidator's verdict, reason and figures."""
  return {
      'blessed': bool(_property(blessing, infra_spec.BLESSED_PROPERTY)),
      'reason': _property(blessing, infra_spec.REASON_PROPERTY),
      'figures': infra_spec.recorded_figures(blessing.mlmd_artifact),
  }


def push(pushed_model: types.Artifact) -> Dict[str, Any]:
  """Whether the Pusher pushed, which version and where."""
  return {
      'pushed': bool(_property(pushed_model, 'pushed')),
      'version': _property(pushed_model, 'pushed_version'),
      'destination': _property(pushed_model, 'pushed_destination'),
      'reused_version': bool(_property(pushed_model,
                                       'reused_existing_version')),
  }


def runtime_picks(report: Optional[types.Artifact]) -> Optional[
    List[Dict[str, Any]]]:
  """Each runtime's pushed pick with its figures, from the optimizer's report.

  Returns:
    None when the ModelOptimizer did not run; else one entry per runtime
    with a pick: {'runtime', 'variant', 'pushed_to', 'size_bytes',
    'gzipped_bytes', 'latency_p50_ms', 'latency_p99_ms', 'num_threads',
    the quality on the report split ('accuracy' or 'rmse'...), 'served':
    {'passed', 'reason', 'figures'} or None}.
  """
  if report is None:
    return None
  path = os.path.join(report.uri, report_lib.VARIANTS_FILE)
  with fileio.open(path) as f:
    record = json.load(f)
  # The report keeps TFLite's pick (the one every run builds) on its own.
  picks = {registry.TFLITE: {'selected': record.get('selected'),
                             'pushed_to': record.get('pushed_to')}}
  picks.update(record.get('runtime_picks') or {})
  variants = {d['variant']['name']: d['variant']
              for d in record.get('decisions', [])}
  held_out = record.get('held_out') or {}
  served = record.get('infra_validation') or {}
  found = []
  for runtime, pick in picks.items():
    name = pick.get('selected')
    if not name or name not in variants:
      continue
    variant = variants[name]
    entry = {'runtime': runtime, 'variant': name,
             'pushed_to': pick.get('pushed_to')}
    for key in ('size_bytes', 'gzipped_bytes', 'latency_p50_ms',
                'latency_p99_ms', 'num_threads'):
      entry[key] = variant.get(key)
    on_report = held_out.get(name) or {}
    entry['report_examples'] = on_report.get('num_examples')
    for key in ('accuracy', 'rmse', 'mae'):
      if on_report.get(key) is not None:
        entry[key] = on_report[key]
    entry['served'] = served.get(runtime)
    found.append(entry)
  return found


def optimizer_pick(optimized_model: Optional[types.Artifact]) -> Optional[str]:
  """The TFLite variant the ModelOptimizer recorded as its blessing."""
  if optimized_model is None:
    return None
  return _property(optimized_model, optimize_spec.SELECTED_VARIANT_PROPERTY)
