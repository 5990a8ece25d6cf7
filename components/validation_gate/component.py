"""ValidationGate: fails the run before Transform on lost rows, anomalies or drift.

It first checks that every row read is in the splits (rows in == rows used,
leantfx/row_counts.py): the rows ExampleGen read per file, the rows the
pre-flight counted per file when the command ran one, and the examples the
statistics count must agree, or the run stops naming the files.

TFX's ExampleValidator only records anomalies; this component turns them
into a stop. It also measures drift against the previous validated span with
the schema's comparators, writes a readable report (feature, anomaly kind,
short description, span) into its output artifact, and lets named kinds
through (``allow_anomalies``, recorded as an execution property in ML
Metadata).

The drift baseline is a folder, on every orchestrator: ``<pipeline root>/
<pipeline name>/ValidationGate/drift_baselines/span-<N>/statistics.pb``. A
passing gate adds its span's drift-split statistics there (the first run that
passed a span stays its baseline; written under a temporary name, then
renamed), and a gate compares with the highest span below its own, so a
re-run of span N uses N-1 and never N itself. The report artifact records
the baseline span (drift_baseline_span).

Why a folder and not a Resolver of earlier reports, as this gate had before:
the local pipeline and the Kubeflow one must be the same pipeline, and no
Resolver of these reports works on Kubeflow. TFX 1.16's V2 compiler rejects
custom resolver strategies; a LatestArtifactStrategy resolver compiles, but
its query for a custom artifact type is ``schema_title="tfx.Artifact"`` (not
this report's type), it resolves one artifact (a re-run of span N would get
span N's own report), and the open-source KFP v2 backend runs no resolver
task at all ("resolver executors not implemented"; only Vertex AI does). An
importer needs a fixed URI and would only point at the same folder.

What follows: the folder is fixed when the pipeline is built (compiled, on
Kubeflow) from its pipeline root; TFX's cache key does not include it, so a
cached gate keeps the verdict of its first run (the baseline of span N
changes only if a span below N passes later, i.e. a backfill). The span
validated is the Examples artifact's: on Kubeflow ExampleGen's executor must
stamp it (SpanWindowCsvExampleGen does; TFX's V2 entry point drops what its
driver stamps). Without a span, drift is not checked, the report says why,
and nothing is kept in the folder.
"""
import json
import posixpath
from typing import Mapping, Optional, Sequence

from tfx import types
from tfx.dsl.components.base import base_component
from tfx.dsl.components.base import executor_spec

from leantfx import row_counts
from leantfx.components.validation_gate import executor
from leantfx.components.validation_gate import spec as spec_lib

# <pipeline root>/<pipeline name>/<this>/drift_baselines.
BASELINE_COMPONENT_DIR = 'ValidationGate'


def baseline_dir(pipeline_root: str, pipeline_name: str) -> str:
  """The drift baseline folder of a pipeline."""
  return posixpath.join(pipeline_root.rstrip('/'), pipeline_name,
                        BASELINE_COMPONENT_DIR, spec_lib.BASELINES_DIR)


class ValidationGate(base_component.BaseComponent):
  """Stops the run on anomalies; publishes the report when the span passes.

  Outputs:
    report: DataValidationReport with report.txt, report.json and (when the
      span passed) the train split's statistics for the next span's drift
      check. Custom properties: span, passed, blocking_anomalies,
      allowed_anomalies, drift_baseline_span, rows_read, rows_used.
  """

  SPEC_CLASS = spec_lib.ValidationGateSpec
  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

  def __init__(self,
               examples: types.BaseChannel,
               statistics: types.BaseChannel,
               schema: types.BaseChannel,
               anomalies: types.BaseChannel,
               allow_anomalies: Sequence[str] = (),
               check_drift: bool = True,
               baseline_dir: Optional[str] = None,
               expected_rows: Optional[Mapping[str, int]] = None,
               text_features: Sequence[str] = (),
               date_formats: Optional[Mapping[str, str]] = None):
    """Builds the component.

    Args:
      examples: ExampleGen's Examples (only their span is read).
      statistics: StatisticsGen's ExampleStatistics of this span.
      schema: the (curated) Schema, with drift comparators.
      anomalies: ExampleValidator's ExampleAnomalies of this span.
      allow_anomalies: kinds reported without stopping the run.
      check_drift: compare with the previous validated span.
      baseline_dir: the drift baseline folder (``baseline_dir()``; see the
        module docstring); None with check_drift off.
      expected_rows: {span-N/file: rows} the pre-flight counted, or None
        when no pre-flight ran (a compiled pipeline).
      text_features: free-text features, checked as text (role_checks.py).
      date_formats: {date feature: its format}, checked as dates.
    """
    component_spec = spec_lib.ValidationGateSpec(
        examples=examples,
        statistics=statistics,
        schema=schema,
        anomalies=anomalies,
        allow_anomalies=json.dumps(sorted(allow_anomalies)),
        check_drift=int(check_drift),
        baseline_dir=baseline_dir,
        expected_rows=(None if expected_rows is None else
                       row_counts.encode(expected_rows)),
        column_roles=(json.dumps({'text': list(text_features),
                                  'dates': dict(date_formats or {})},
                                 sort_keys=True)
                      if text_features or date_formats else None),
        report=types.Channel(type=spec_lib.DataValidationReport))
    super().__init__(spec=component_spec)
