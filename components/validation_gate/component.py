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

# The previous span is among the newest spans that passed.
_MAX_PREVIOUS_SPANS = 20


class PassedReportsStrategy(tfx.dsl.experimental.ResolverStrategy):
  """Resolves, per span, the first report that passed validation.

  Failed gates publish nothing, so every resolved report passed. The gate's
  executor picks the highest span below the one it validates. One report per
  span (the oldest: a span's statistics do not change between runs) keeps
  the resolved inputs stable, so a re-run of the same span is a cache hit.
  Unlike LatestArtifactStrategy it resolves to an empty list (not to
  nothing) on the first run, so the gate still runs.
  """

  def __init__(self, max_spans: int = _MAX_PREVIOUS_SPANS):
    self._max_spans = max_spans

  def resolve_artifacts(
      self, store, input_dict: Dict[str, List[types.Artifact]]
  ) -> Optional[Dict[str, List[types.Artifact]]]:
    del store  # Unused: the channel's artifacts are all it needs.
    result = {}
    for key, artifacts in input_dict.items():
      first_per_span = {}
      for artifact in sorted(artifacts, key=lambda a: a.id):
        span = (artifact.get_int_custom_property(spec_lib.SPAN_PROPERTY)
                if artifact.has_custom_property(spec_lib.SPAN_PROPERTY) else
                -1)
        first_per_span.setdefault(span, artifact)
      newest_spans = sorted(first_per_span)[-self._max_spans:]
      result[key] = [first_per_span[s] for s in newest_spans]
    return result


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
