"""ValidationGate's ComponentSpec: artifact keys, parameters and the report type."""
from tfx import types
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter
from tfx.types.component_spec import ExecutionParameter

# Inputs.
EXAMPLES_KEY = 'examples'
STATISTICS_KEY = 'statistics'
SCHEMA_KEY = 'schema'
ANOMALIES_KEY = 'anomalies'
# Outputs.
REPORT_KEY = 'report'
# Execution properties (they land in ML Metadata with the execution).
ALLOW_ANOMALIES_KEY = 'allow_anomalies'
CHECK_DRIFT_KEY = 'check_drift'
# The folder of the drift baselines (see component.py).
BASELINE_DIR_KEY = 'baseline_dir'
# {span-N/file: rows} the pre-flight counted (leantfx/row_counts.py), JSON.
EXPECTED_ROWS_KEY = 'expected_rows'
# {"text": [feature, ...], "dates": {feature: format}}: the features checked
# by their role (role_checks.py), JSON.
ROLES_KEY = 'column_roles'

# Drift is measured on this split of the current and of the previous span.
DRIFT_SPLIT = 'train'
# Files inside the report artifact.
REPORT_TEXT_FILE = 'report.txt'
REPORT_JSON_FILE = 'report.json'
# A failed execution's output artifact is deleted by TFX, so a failing report
# is also written to <pipeline root>/<gate id>/failed_reports/<execution>/.
FAILED_REPORTS_DIR = 'failed_reports'
# The drift split's statistics of a span that passed, kept for the next span.
STATISTICS_FILE = 'statistics.pb'
# In the baseline folder, span <N>'s entry is span-<N>/statistics.pb (named as
# the data's span folders, leantfx/spans.py): the drift split's statistics of
# the first run that passed span N.
BASELINES_DIR = 'drift_baselines'
# Custom properties of the report artifact.
SPAN_PROPERTY = 'span'
PASSED_PROPERTY = 'passed'
BLOCKING_COUNT_PROPERTY = 'blocking_anomalies'
ALLOWED_COUNT_PROPERTY = 'allowed_anomalies'
BASELINE_SPAN_PROPERTY = 'drift_baseline_span'
ROWS_READ_PROPERTY = 'rows_read'
ROWS_USED_PROPERTY = 'rows_used'


class DataValidationReport(types.Artifact):
  """report.txt / report.json of one validation, and the statistics it passed.

  Only a span that passed is published. Its statistics are also kept in the
  gate's baseline folder, where the next span's drift check finds them (see
  component.py).
  """
  TYPE_NAME = 'leantfx.DataValidationReport'


class ValidationGateSpec(types.ComponentSpec):
  """ValidationGate: anomalies + statistics (+ the baseline folder) -> pass or stop."""

  PARAMETERS = {
      ALLOW_ANOMALIES_KEY: ExecutionParameter(type=str),
      CHECK_DRIFT_KEY: ExecutionParameter(type=int),
      BASELINE_DIR_KEY: ExecutionParameter(type=str, optional=True),
      EXPECTED_ROWS_KEY: ExecutionParameter(type=str, optional=True),
      ROLES_KEY: ExecutionParameter(type=str, optional=True),
  }
  INPUTS = {
      # Read for its span only (ExampleGen records it as a custom property).
      EXAMPLES_KEY:
          ChannelParameter(type=standard_artifacts.Examples),
      STATISTICS_KEY:
          ChannelParameter(type=standard_artifacts.ExampleStatistics),
      SCHEMA_KEY:
          ChannelParameter(type=standard_artifacts.Schema),
      ANOMALIES_KEY:
          ChannelParameter(type=standard_artifacts.ExampleAnomalies),
  }
  OUTPUTS = {
      REPORT_KEY: ChannelParameter(type=DataValidationReport),
  }
