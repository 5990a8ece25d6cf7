"""ValidationGate: fails the run before Transform on anomalies or drift.

TFX's ExampleValidator only records anomalies; this component turns them
into a stop. It also measures drift against the previous validated span with
the schema's comparators, writes a readable report (feature, anomaly kind,
short description, span) into its output artifact, and lets named kinds
through (``allow_anomalies``, recorded as an execution property in ML
Metadata).
"""
import json
from typing import Dict, List, Optional, Sequence

from tfx import types
from tfx import v1 as tfx
from tfx.dsl.components.base import base_component
from tfx.dsl.components.base import executor_spec

from leantfx.components.validation_gate import executor
from leantfx.components.validation_gate import spec as spec_lib

# Enough earlier reports to find the previous span after many re-runs.
_MAX_PREVIOUS_REPORTS = 50


class PassedReportsStrategy(tfx.dsl.experimental.ResolverStrategy):
  """Resolves the newest reports of spans that passed validation.

  Failed gates publish nothing, so every resolved report passed. The gate's
  executor picks the highest span below the one it validates. Unlike
  LatestArtifactStrategy it resolves to an empty list (not to nothing) on the
  first run, so the gate still runs.
  """

  def __init__(self, max_reports: int = _MAX_PREVIOUS_REPORTS):
    self._max_reports = max_reports

  def resolve_artifacts(
      self, store, input_dict: Dict[str, List[types.Artifact]]
  ) -> Optional[Dict[str, List[types.Artifact]]]:
    del store  # Unused: the channel's artifacts are all it needs.
    return {
        key: sorted(artifacts, key=lambda a: a.id,
                    reverse=True)[:self._max_reports]
        for key, artifacts in input_dict.items()
    }


def previous_reports_resolver() -> tfx.dsl.Resolver:
  """A Resolver of the reports that earlier runs' gates published."""
  return tfx.dsl.Resolver(
      strategy_class=PassedReportsStrategy,
      reports=tfx.dsl.Channel(type=spec_lib.DataValidationReport))


class ValidationGate(base_component.BaseComponent):
  """Stops the run on anomalies; publishes the report when the span passes.

  Outputs:
    report: DataValidationReport with report.txt, report.json and (when the
      span passed) the train split's statistics for the next span's drift
      check. Custom properties: span, passed, blocking_anomalies,
      allowed_anomalies, drift_baseline_span.
  """

  SPEC_CLASS = spec_lib.ValidationGateSpec
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

  def __init__(self,
               examples: types.BaseChannel,
               statistics: types.BaseChannel,
               schema: types.BaseChannel,
               anomalies: types.BaseChannel,
               previous_reports: Optional[types.BaseChannel] = None,
               allow_anomalies: Sequence[str] = (),
               check_drift: bool = True):
    """Builds the component.

    Args:
      examples: ExampleGen's Examples (only their span is read).
      statistics: StatisticsGen's ExampleStatistics of this span.
      schema: the (curated) Schema, with drift comparators.
      anomalies: ExampleValidator's ExampleAnomalies of this span.
      previous_reports: earlier passed reports (previous_reports_resolver);
        None skips the drift check.
      allow_anomalies: kinds reported without stopping the run.
      check_drift: compare with the previous validated span.
    """
    component_spec = spec_lib.ValidationGateSpec(
        examples=examples,
        statistics=statistics,
        schema=schema,
        anomalies=anomalies,
        previous_reports=previous_reports,
        allow_anomalies=json.dumps(sorted(allow_anomalies)),
        check_drift=int(check_drift),
        report=types.Channel(type=spec_lib.DataValidationReport))
    super().__init__(spec=component_spec)
