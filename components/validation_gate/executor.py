"""ValidationGate's executor: checks its inputs, then fails or passes the span.

It reads ExampleValidator's anomalies of every split, adds drift against the
previous validated span (when one exists) and empty splits, writes
report.txt / report.json into its output artifact and, when any anomaly is
not allowed, raises so that nothing downstream (Augment, Transform, Trainer,
Pusher) runs. A span that passes also keeps its statistics in the artifact:
the next span's run compares against them.

The previous spans' statistics come from the baseline folder
(``baseline_dir``), where a passing gate also keeps its span's statistics;
component.py says why it is a folder.
"""
import dataclasses
import json
import os

import uuid
from typing import Any, Dict, List, Optional, Tuple

from absl import logging
from tfx import types
from tfx.components.statistics_gen import stats_artifact_utils
from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.utils import io_utils

import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import anomalies_pb2

from leantfx import columns
from leantfx import row_counts
from leantfx import spans
from leantfx.components.validation_gate import checks
from leantfx.components.validation_gate import role_checks
from leantfx.components.validation_gate import spec as spec_lib
from leantfx.errors import InputDataError

_ANOMALIES_FILE = 'SchemaDiff.pb'  # ExampleValidator's file per split.


def parse_allowed(value: Any) -> List[str]:
  """The allow_anomalies execution property: a JSON list of kind names."""
  if not value:
    return []
  kinds = json.loads(value)
  if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
    raise ValueError(
        f'allow_anomalies must be a JSON list of anomaly kind names, got '
        f'{value!r}.')
  return kinds


def _load_anomalies(artifact: types.Artifact,
                    split: str) -> anomalies_pb2.Anomalies:
  path = os.path.join(
      artifact_utils.get_split_uri([artifact], split), _ANOMALIES_FILE)
  if not fileio.exists(path):
    raise ValueError(f'ExampleValidator wrote no {_ANOMALIES_FILE} for split '
                     f'{split!r} (looked for {path}).')
  return anomalies_pb2.Anomalies.FromString(io_utils.read_bytes_file(path))


def artifact_span(examples: types.Artifact) -> int:
  """The span ExampleGen recorded (a custom property in TFX 1.16)."""
  span = recorded_span(examples)
  return 0 if span is None else span


def recorded_span(examples: types.Artifact) -> Optional[int]:
  """The span ExampleGen recorded, or None when it recorded none.

  On Kubeflow the Examples artifact carries what ExampleGen's executor set
  (TFX's V2 entry point drops what its driver set): an ExampleGen that does
  not stamp the span leaves it unknown.
  """
  if examples.has_custom_property('span'):
    return int(examples.get_int_custom_property('span'))
  if 'span' in examples.mlmd_artifact.properties:
    return int(examples.span)
  return None


def failed_report_dir(report_uri: str) -> str:
  """<pipeline root>/<gate id>/failed_reports/<execution id> for a report URI."""
  component_dir = os.path.dirname(os.path.dirname(report_uri.rstrip('/')))
  return os.path.join(component_dir, spec_lib.FAILED_REPORTS_DIR,
                      os.path.basename(report_uri.rstrip('/')))


def baseline_candidates(baseline_dir: Optional[str]
                       ) -> List[Tuple[int, int, str]]:
  """(span, 0, statistics path) of every entry of the baseline folder."""
  if not baseline_dir or not fileio.isdir(baseline_dir):
    return []
  candidates = []
  for name in fileio.listdir(baseline_dir):
    span = spans.span_number(name.rstrip('/'))
    path = os.path.join(baseline_dir, name.rstrip('/'),
                        spec_lib.STATISTICS_FILE)
    if span is not None and fileio.exists(path):
      candidates.append((span, 0, path))
  return candidates


def keep_baseline(baseline_dir: str, span: int, statistics: bytes,
                  roles: Optional[str] = None) -> bool:
  """Adds span's statistics to the baseline folder unless it has them.

  ``roles``: the span's role profile (role_checks.py, JSON), kept beside
  them (written first: the statistics file marks a complete entry).

  The first run that passed a span stays its baseline (as the local
  resolver keeps a span's first report). Written under a temporary name,
  then renamed, so a reader never sees half a file.

  Returns:
    Whether an entry was written.
  """
  folder = os.path.join(baseline_dir, spans.span_dir_name(span))
  target = os.path.join(folder, spec_lib.STATISTICS_FILE)
  if fileio.exists(target):
    return False
  fileio.makedirs(folder)
  if roles is not None:
    roles_path = os.path.join(folder, role_checks.ROLES_FILE)
    temporary = f'{roles_path}.tmp-{uuid.uuid4().hex}'
    io_utils.write_string_file(temporary, roles)
    fileio.rename(temporary, roles_path, overwrite=True)
  temporary = f'{target}.tmp-{uuid.uuid4().hex}'
  io_utils.write_bytes_file(temporary, statistics)
  fileio.rename(temporary, target, overwrite=True)
  return True


def _role_profile(examples: types.Artifact,
                  roles: Dict[str, Any]) -> Dict[str, Any]:
  """The drift split's role profile (role_checks.py) of this span."""
  import datetime  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  split_uri = artifact_utils.get_split_uri([examples], spec_lib.DRIFT_SPLIT)
  files = sorted(fileio.glob(os.path.join(split_uri, '*')))
  dataset = tf.data.TFRecordDataset(files, compression_type='GZIP')
  records = (r.numpy() for r in dataset)
  dates = roles.get('dates', {})
  text_values, date_values = role_checks.read_split_values(
      records, roles.get('text', []), sorted(dates))
  return role_checks.profile_values(
      text_values, date_values, dates,
      datetime.datetime.now(datetime.timezone.utc))


def _baseline_roles(baseline) -> Optional[Dict[str, Any]]:
  """The role profile kept beside the baseline's statistics, if any."""
  if baseline is None:
    return None
  path = os.path.join(os.path.dirname(baseline[2]), role_checks.ROLES_FILE)
  if not fileio.exists(path):
    return None
  return json.loads(io_utils.read_string_file(path))


def as_written(rows: List[checks.AnomalyRow],
               examples: types.Artifact) -> List[checks.AnomalyRow]:
  """Rows naming each renamed column as written, its feature key after it.

  The statistics and anomalies name features by their keys
  (leantfx/columns.py); ExampleGen records the keys it gave columns whose
  names it could not keep, so the report speaks the user's names.
  """
  names = columns.recorded_names(examples)
  if not names:
    return rows
  return [dataclasses.replace(
      row, feature=(f'{names[row.feature]} ({row.feature})'
                    if row.feature in names else row.feature))
          for row in rows]


def dropped_by_class(examples: types.Artifact) -> Dict[str, int]:
  """{class: rows} ExampleGen dropped for --min-rows-per-class ({}: none)."""
  if not examples.has_custom_property(row_counts.ROWS_DROPPED_PROPERTY):
    return {}
  return row_counts.decode(examples.get_string_custom_property(
      row_counts.ROWS_DROPPED_PROPERTY))


def check_rows(examples: types.Artifact, num_examples: Dict[str, int],
               exec_properties: Dict[str, Any]) -> int:
  """Stops the run unless every row read is in the splits; returns rows read.

  Raises:
    InputDataError: the rows ExampleGen read, the rows the pre-flight
      counted and the examples in the splits differ (no anomaly allowance
      lets a lost row through).
  """
  rows_by_file = {}
  if examples.has_custom_property(row_counts.ROWS_BY_FILE_PROPERTY):
    rows_by_file = row_counts.decode(examples.get_string_custom_property(
        row_counts.ROWS_BY_FILE_PROPERTY))
  expected = exec_properties.get(spec_lib.EXPECTED_ROWS_KEY)
  expected = None if not expected else row_counts.decode(expected)
  problem = row_counts.mismatch(rows_by_file, num_examples, expected,
                                dropped_by_class(examples))
  if problem:
    raise InputDataError(
        f'Rows were lost between the files and the splits: {problem} '
        'Nothing was trained. Check that every file of the span is a CSV '
        'file the checks accept, and report this if the files are ordinary.')
  if rows_by_file:
    return sum(rows_by_file.values())
  return sum((expected or num_examples).values())


class Executor(base_executor.BaseExecutor):
  """Fails the run on anomalies; publishes the report when the span passes."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    allowed = parse_allowed(exec_properties.get(spec_lib.ALLOW_ANOMALIES_KEY))
    check_drift = bool(exec_properties.get(spec_lib.CHECK_DRIFT_KEY, 1))
    statistics = artifact_utils.get_single_instance(
        input_dict[spec_lib.STATISTICS_KEY])
    anomalies = artifact_utils.get_single_instance(
        input_dict[spec_lib.ANOMALIES_KEY])
    schema = io_utils.SchemaReader().read(
        io_utils.get_only_uri_in_dir(
            artifact_utils.get_single_uri(input_dict[spec_lib.SCHEMA_KEY])))
    report = artifact_utils.get_single_instance(
        output_dict[spec_lib.REPORT_KEY])
    stats_splits = artifact_utils.decode_split_names(statistics.split_names)
    anomaly_splits = artifact_utils.decode_split_names(anomalies.split_names)
    if spec_lib.DRIFT_SPLIT not in stats_splits:
      raise ValueError(
          f'The statistics have splits {stats_splits}; the gate needs a '
          f'{spec_lib.DRIFT_SPLIT!r} split.')
    missing = [s for s in anomaly_splits if s not in stats_splits]
    if missing:
      raise ValueError(f'ExampleValidator validated splits {missing} that the '
                       f'statistics ({stats_splits}) do not have.')
    examples = artifact_utils.get_single_instance(
        input_dict[spec_lib.EXAMPLES_KEY])
    known_span = recorded_span(examples)
    span = 0 if known_span is None else known_span

    rows: List[checks.AnomalyRow] = []
    num_examples = {}
    stats_by_split = {}
    for split in stats_splits:
      stats_by_split[split] = stats_artifact_utils.load_statistics(
          statistics, split).proto()
      datasets = stats_by_split[split].datasets
      num_examples[split] = int(datasets[0].num_examples) if datasets else 0
    rows_read = check_rows(examples, num_examples, exec_properties)
    report.set_int_custom_property(spec_lib.ROWS_READ_PROPERTY, rows_read)
    report.set_int_custom_property(spec_lib.ROWS_USED_PROPERTY,
                                   sum(num_examples.values()))
    if examples.has_custom_property(row_counts.ROWS_DROPPED_PROPERTY):
      report.set_string_custom_property(
          row_counts.ROWS_DROPPED_PROPERTY,
          row_counts.encode(dropped_by_class(examples)))
    rows += checks.empty_split_rows(num_examples, span, allowed)
    for split in anomaly_splits:
      rows += checks.anomaly_rows(
          _load_anomalies(anomalies, split), span, split, allowed)
      rows += checks.missing_value_rows(stats_by_split[split], schema, span,
                                        split, allowed)

    baseline_dir = exec_properties.get(spec_lib.BASELINE_DIR_KEY) or None
    baseline = None
    drift_skipped = None
    if check_drift and known_span is None:
      # Without this span's number, "the previous span" means nothing.
      drift_skipped = 'ExampleGen recorded no span on its Examples artifact'
      logging.warning('Drift not checked: %s.', drift_skipped)
    elif check_drift:
      baseline = checks.choose_baseline(baseline_candidates(baseline_dir),
                                        span)
    baseline_span = None
    if baseline is not None:
      baseline_span = baseline[0]
      previous = tfdv.load_stats_binary(baseline[2])
      rows += checks.drift_rows(stats_by_split[spec_lib.DRIFT_SPLIT],
                                previous, schema, span, spec_lib.DRIFT_SPLIT,
                                baseline_span, allowed)

    roles = json.loads(exec_properties.get(spec_lib.ROLES_KEY) or '{}')
    role_profile = None
    if roles:
      role_profile = _role_profile(examples, roles)
      rows += role_checks.role_rows(
          role_profile, _baseline_roles(baseline), span,
          spec_lib.DRIFT_SPLIT, baseline_span, allowed)

    rows = as_written(rows, examples)
    stopping = checks.blocking(rows)
    # TFX deletes a failed execution's outputs: a failing report goes where
    # it stays.
    report_dir = failed_report_dir(report.uri) if stopping else report.uri
    text_path = os.path.join(report_dir, spec_lib.REPORT_TEXT_FILE)
    fileio.makedirs(report_dir)
    io_utils.write_string_file(
        text_path,
        checks.format_report(rows, span, baseline_span, allowed, check_drift,
                             drift_skipped))
    io_utils.write_string_file(
        os.path.join(report_dir, spec_lib.REPORT_JSON_FILE),
        checks.report_json(rows, span, baseline_span, allowed))
    report.set_int_custom_property(spec_lib.SPAN_PROPERTY, span)
    report.set_int_custom_property(spec_lib.PASSED_PROPERTY, int(not stopping))
    report.set_int_custom_property(spec_lib.BLOCKING_COUNT_PROPERTY,
                                   len(stopping))
    report.set_int_custom_property(spec_lib.ALLOWED_COUNT_PROPERTY,
                                   len(rows) - len(stopping))
    report.set_int_custom_property(
        spec_lib.BASELINE_SPAN_PROPERTY,
        -1 if baseline_span is None else baseline_span)
    logging.info('Validation report of span %d written to %s', span, text_path)
    if stopping:
      raise InputDataError(checks.failure_message(rows, span, text_path))
    # Kept for the next span's drift check (only passing spans publish this).
    passed_statistics = stats_by_split[spec_lib.DRIFT_SPLIT].SerializeToString()
    io_utils.write_bytes_file(
        os.path.join(report.uri, spec_lib.STATISTICS_FILE), passed_statistics)
    roles_text = (None if role_profile is None else
                  json.dumps(role_profile, sort_keys=True))
    if roles_text is not None:
      io_utils.write_string_file(
          os.path.join(report.uri, role_checks.ROLES_FILE), roles_text)
    if (baseline_dir and known_span is not None and
        keep_baseline(baseline_dir, span, passed_statistics, roles_text)):
      logging.info('Statistics of span %d kept as a drift baseline in %s',
                   span, baseline_dir)
