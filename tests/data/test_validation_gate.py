"""ValidationGate: every bad data input becomes a named, blocking anomaly.

Statistics are real TFDV statistics of the bundled penguins rows (typed as
CsvExampleGen types them, tests/data/helpers.py), changed one way per test;
the anomalies come from tfdv.validate_statistics, as in ExampleValidator.
"""
import dataclasses
import json
import os

import pytest
import tensorflow_data_validation as tfdv
from tfx.types import artifact_utils
from tfx.types import standard_artifacts

from leantfx import columns
from leantfx import row_counts
from leantfx.components.validation_gate import checks
from leantfx.components.validation_gate import executor as executor_lib
from leantfx.components.validation_gate import spec as spec_lib
from leantfx.errors import InputDataError
from tests.data import helpers

pytestmark = pytest.mark.unit


@pytest.fixture(scope='module')
def penguins(tmp_path_factory):
  return helpers.bundled_rows('penguins', str(tmp_path_factory.mktemp('p')))


@pytest.fixture(scope='module')
def schema():
  return helpers.schema('penguins')


def _rows_for(rows, schema, span=2, previous=None, allowed=()):
  stats = helpers.statistics(rows, schema)
  anomalies = tfdv.validate_statistics(stats, schema)
  found = checks.anomaly_rows(anomalies, span, 'train', allowed)
  found += checks.missing_value_rows(stats, schema, span, 'train', allowed)
  if previous is not None:
    found += checks.drift_rows(stats, helpers.statistics(previous, schema),
                               schema, span, 'train', 1, allowed)
  return found


def _by_feature(rows):
  return {(r.feature, r.kind) for r in rows}


def test_bundled_penguins_pass_their_curated_schema(penguins, schema):
  # Also against itself as the previous span: drift 0.
  assert _rows_for(penguins, schema, previous=penguins) == []


def test_new_category_value_stops_the_run(penguins, schema):
  rows = [dict(r) for r in penguins]
  for r in rows[:20]:
    r['island'] = 'Atlantis'
  found = _rows_for(rows, schema)
  assert ('island', 'ENUM_TYPE_UNEXPECTED_STRING_VALUES') in _by_feature(found)
  assert checks.blocking(found)
  assert any('Atlantis' in r.description for r in found)


def test_dropped_column_stops_the_run(penguins, schema):
  rows = [{k: v for k, v in r.items() if k != 'bill_depth_mm'}
          for r in penguins]
  found = _rows_for(rows, schema)
  assert ('bill_depth_mm', 'SCHEMA_MISSING_COLUMN') in _by_feature(found)
  assert all(not r.allowed for r in found)


def test_number_column_turned_string_stops_the_run(penguins, schema):
  rows = [dict(r) for r in penguins]
  for r in rows[::3]:
    r['body_mass_g'] = 'heavy'
  found = _rows_for(rows, schema)
  kinds = {k for f, k in _by_feature(found) if f == 'body_mass_g'}
  assert kinds, found
  assert any('STRING' in k or 'TYPE' in k for k in kinds), kinds


def test_thirty_percent_missing_stops_the_run(penguins, schema):
  rows = [dict(r) for r in penguins]
  # 30% of 344 rows, rounded up: 104 (some were missing already).
  for r in rows[:104]:
    r['bill_length_mm'] = ''
  missing = sum(1 for r in rows if r['bill_length_mm'] == '')
  assert missing >= 104
  found = _rows_for(rows, schema)
  row = next(r for r in found if r.feature == 'bill_length_mm')
  assert row.kind == 'FEATURE_TYPE_LOW_FRACTION_PRESENT'
  # The schema tolerates 5% without a value (min_fraction 0.95).
  assert f'{missing} of 344' in row.description and '5.0%' in row.description


def test_few_missing_values_pass(penguins, schema):
  # The bundled data misses 2 measurements and 11 sex values: within bounds.
  found = _rows_for(penguins, schema)
  assert not [r for r in found if r.kind == checks.LOW_PRESENCE_KIND]


def test_value_outside_the_domain_stops_the_run(penguins, schema):
  rows = [dict(r) for r in penguins]
  rows[5]['flipper_length_mm'] = '999'  # Domain 150..260 mm.
  found = _rows_for(rows, schema)
  assert ('flipper_length_mm', 'INT_TYPE_BIG_INT') in _by_feature(found)


def test_label_drift_beyond_threshold_stops_the_run(penguins, schema):
  adelie = [r for r in penguins if r['species'] == 'Adelie']
  others = [r for r in penguins if r['species'] != 'Adelie']
  drifted = adelie + others[:40]  # 152 Adelie of 192: 79% instead of 44%.
  found = _rows_for(drifted, schema, previous=penguins)
  row = next(r for r in found if r.feature == 'species')
  assert row.kind == 'COMPARATOR_L_INFTY_HIGH'
  assert 'span 1' in row.description and 'threshold 0.250' in row.description


def test_drift_thresholds_hold_between_samples_of_the_same_data(penguins,
                                                                 schema):
  """The schema's thresholds sit above natural sampling variation.

  Disjoint random halves of the bundled data (172 rows each, seeds 0-4) must
  not trip any comparator; the schema comment quotes the largest values
  measured on 100-row samples.
  """
  import random  # pylint: disable=g-import-not-at-top
  for seed in range(5):
    rows = list(penguins)
    random.Random(seed).shuffle(rows)
    half = len(rows) // 2
    found = checks.drift_rows(
        helpers.statistics(rows[half:], schema),
        helpers.statistics(rows[:half], schema), schema, 2, 'train', 1, ())
    assert found == [], (seed, found)


def test_empty_split_is_an_anomaly():
  rows = checks.empty_split_rows({'train': 0, 'eval': 3}, 4, ())
  assert [(r.split, r.kind) for r in rows] == [('train', 'EMPTY_SPLIT')]


def test_allowed_kinds_are_reported_but_do_not_stop(penguins, schema):
  rows = [dict(r) for r in penguins]
  for r in rows[:20]:
    r['island'] = 'Atlantis'
  found = _rows_for(rows, schema,
                    allowed=('ENUM_TYPE_UNEXPECTED_STRING_VALUES',))
  assert found and not checks.blocking(found)
  text = checks.format_report(found, 2, None,
                              ['ENUM_TYPE_UNEXPECTED_STRING_VALUES'], True)
  assert 'PASSED' in text and 'allowed' in text and 'island' in text


def test_failure_message_is_one_line_naming_features_and_report(penguins,
                                                                schema):
  rows = [dict(r) for r in penguins]
  for r in rows[:20]:
    r['island'] = 'Atlantis'
  found = _rows_for(rows, schema)
  message = checks.failure_message(found, 2, '/out/report.txt')
  assert '\n' not in message
  assert "'island'" in message and '/out/report.txt' in message
  assert 'span 2' in message and '--allow-anomalies' in message


def test_baseline_is_the_newest_report_of_the_highest_earlier_span():
  candidates = [(1, 10, 'a'), (3, 11, 'b'), (3, 15, 'c'), (4, 20, 'd')]
  assert checks.choose_baseline(candidates, 4) == (3, 15, 'c')
  assert checks.choose_baseline(candidates, 1) is None


def _artifact(cls, uri, splits=None, span=None):
  artifact = cls()
  artifact.uri = uri
  if splits:
    artifact.split_names = artifact_utils.encode_split_names(splits)
  if span is not None:
    artifact.set_int_custom_property('span', span)
  os.makedirs(uri, exist_ok=True)
  return artifact


def _gate_inputs(tmp_path, rows, schema, span):
  stats_dir = tmp_path / f'stats{span}'
  anomalies_dir = tmp_path / f'anomalies{span}'
  for split in ('train', 'eval'):
    stats = helpers.statistics(rows, schema)
    os.makedirs(stats_dir / f'Split-{split}', exist_ok=True)
    (stats_dir / f'Split-{split}' / 'FeatureStats.pb').write_bytes(
        stats.SerializeToString())
    os.makedirs(anomalies_dir / f'Split-{split}', exist_ok=True)
    (anomalies_dir / f'Split-{split}' / 'SchemaDiff.pb').write_bytes(
        tfdv.validate_statistics(stats, schema).SerializeToString())
  schema_dir = tmp_path / 'schema'
  os.makedirs(schema_dir, exist_ok=True)
  tfdv.write_schema_text(schema, str(schema_dir / 'schema.pbtxt'))
  inputs = {
      spec_lib.EXAMPLES_KEY: [_artifact(standard_artifacts.Examples,
                                        str(tmp_path / f'ex{span}'),
                                        span=span)],
      spec_lib.STATISTICS_KEY: [_artifact(standard_artifacts.ExampleStatistics,
                                          str(stats_dir), ['train', 'eval'])],
      spec_lib.ANOMALIES_KEY: [_artifact(standard_artifacts.ExampleAnomalies,
                                         str(anomalies_dir),
                                         ['train', 'eval'])],
      spec_lib.SCHEMA_KEY: [_artifact(standard_artifacts.Schema,
                                      str(schema_dir))],
  }
  report = _artifact(spec_lib.DataValidationReport,
                     str(tmp_path / 'gate' / 'report' / str(span)))
  return inputs, {spec_lib.REPORT_KEY: [report]}, report


def test_executor_passes_then_catches_drift_against_the_passed_span(
    tmp_path, penguins, schema):
  baselines = str(tmp_path / 'drift_baselines')
  properties = {spec_lib.ALLOW_ANOMALIES_KEY: '[]',
                spec_lib.CHECK_DRIFT_KEY: 1,
                spec_lib.BASELINE_DIR_KEY: baselines}
  inputs, outputs, first = _gate_inputs(tmp_path, penguins, schema, 1)
  executor_lib.Executor().Do(inputs, outputs, properties)
  assert first.get_int_custom_property(spec_lib.PASSED_PROPERTY) == 1
  assert os.path.isfile(os.path.join(first.uri, spec_lib.STATISTICS_FILE))
  assert 'PASSED' in open(os.path.join(first.uri, 'report.txt')).read()
  # The passed span's statistics are the next span's drift baseline.
  assert os.listdir(baselines) == ['span-1']

  adelie = [r for r in penguins if r['species'] == 'Adelie']
  drifted = adelie + [r for r in penguins if r['species'] != 'Adelie'][:40]
  inputs, outputs, second = _gate_inputs(tmp_path, drifted, schema, 2)
  with pytest.raises(InputDataError) as raised:
    executor_lib.Executor().Do(inputs, outputs, properties)
  message = str(raised.value)
  assert "'species' COMPARATOR_L_INFTY_HIGH" in message
  # TFX deletes a failed execution's outputs: the report is kept beside them.
  path = os.path.join(str(tmp_path), 'gate', 'failed_reports', '2',
                      'report.txt')
  assert path in message and os.path.isfile(path)
  report = json.loads(open(path.replace('.txt', '.json')).read())
  assert report['drift_baseline_span'] == 1 and not report['passed']
  assert not os.path.exists(os.path.join(second.uri, spec_lib.STATISTICS_FILE))
  assert os.listdir(baselines) == ['span-1']  # A failed span is no baseline.




def _with_rows(inputs, rows_by_file):
  examples = inputs[spec_lib.EXAMPLES_KEY][0]
  examples.set_string_custom_property(row_counts.ROWS_BY_FILE_PROPERTY,
                                      row_counts.encode(rows_by_file))
  return inputs


_NO_DRIFT = {spec_lib.ALLOW_ANOMALIES_KEY: '[]', spec_lib.CHECK_DRIFT_KEY: 0}


def test_the_gate_passes_when_every_row_read_is_in_the_splits(
    tmp_path, penguins, schema):
  # _gate_inputs puts the rows in both splits: twice the rows are used.
  inputs, outputs, report = _gate_inputs(tmp_path, penguins, schema, 1)
  half = len(penguins)
  _with_rows(inputs, {'span-1/a.csv': half, 'span-1/b.CSV': half})
  properties = dict(_NO_DRIFT, **{spec_lib.EXPECTED_ROWS_KEY: row_counts.encode(
      {'span-1/a.csv': half, 'span-1/b.CSV': half})})
  executor_lib.Executor().Do(inputs, outputs, properties)
  assert report.get_int_custom_property(spec_lib.ROWS_READ_PROPERTY) == 2 * half
  assert report.get_int_custom_property(spec_lib.ROWS_USED_PROPERTY) == 2 * half


def test_rows_read_but_not_in_the_splits_stop_the_run(tmp_path, penguins,
                                                      schema):
  inputs, outputs, _ = _gate_inputs(tmp_path, penguins, schema, 1)
  _with_rows(inputs, {'span-1/a.csv': 2 * len(penguins) + 3})
  with pytest.raises(InputDataError, match='Rows were lost') as raised:
    executor_lib.Executor().Do(inputs, outputs, dict(_NO_DRIFT))
  assert 'span-1/a.csv' in str(raised.value)


def test_a_file_the_check_counted_but_exampleGen_skipped_stops_the_run(
    tmp_path, penguins, schema):
  # TFX's CsvExampleGen globbed '*.csv' and skipped 'b.CSV' without a word.
  inputs, outputs, _ = _gate_inputs(tmp_path, penguins, schema, 1)
  read = {'span-1/a.csv': 2 * len(penguins)}
  _with_rows(inputs, read)
  expected = dict(read, **{'span-1/b.CSV': 89})
  properties = dict(_NO_DRIFT, **{
      spec_lib.EXPECTED_ROWS_KEY: row_counts.encode(expected)})
  with pytest.raises(InputDataError) as raised:
    executor_lib.Executor().Do(inputs, outputs, properties)
  assert 'span-1/b.CSV: not read vs 89' in str(raised.value)


def test_allowing_anomalies_never_lets_lost_rows_through(tmp_path, penguins,
                                                         schema):
  inputs, outputs, _ = _gate_inputs(tmp_path, penguins, schema, 1)
  properties = {spec_lib.ALLOW_ANOMALIES_KEY: json.dumps(['EMPTY_SPLIT']),
                spec_lib.CHECK_DRIFT_KEY: 0,
                spec_lib.EXPECTED_ROWS_KEY: row_counts.encode({'span-1': 1})}
  with pytest.raises(InputDataError, match='Rows were lost'):
    executor_lib.Executor().Do(inputs, outputs, properties)


def test_the_report_names_renamed_columns_as_written():
  examples = standard_artifacts.Examples()
  examples.set_string_custom_property(
      columns.FEATURE_NAMES_PROPERTY, json.dumps({'alcohol_1a2b3c': 'alcohol (%)'}))
  row = checks.AnomalyRow(span=1, split='train', feature='alcohol_1a2b3c',
                          kind='X', short_description='s', description='d',
                          allowed=False)
  other = dataclasses.replace(row, feature='plain')
  named = executor_lib.as_written([row, other], examples)
  assert [r.feature for r in named] == ['alcohol (%) (alcohol_1a2b3c)',
                                        'plain']


def _write_examples(examples, dates):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  examples.split_names = artifact_utils.encode_split_names(['train'])
  split = os.path.join(examples.uri, 'Split-train')
  os.makedirs(split, exist_ok=True)
  options = tf.io.TFRecordOptions(compression_type='GZIP')
  with tf.io.TFRecordWriter(os.path.join(split, 'data.gz'), options) as w:
    for date in dates:
      example = tf.train.Example()
      example.features.feature['when'].bytes_list.value.append(date.encode())
      w.write(example.SerializeToString())


def test_executor_checks_dates_by_their_role_against_the_passed_span(
    tmp_path, penguins, schema):
  baselines = str(tmp_path / 'drift_baselines')
  properties = {spec_lib.ALLOW_ANOMALIES_KEY: '[]',
                spec_lib.CHECK_DRIFT_KEY: 1,
                spec_lib.BASELINE_DIR_KEY: baselines,
                spec_lib.ROLES_KEY: json.dumps(
                    {'text': [], 'dates': {'when': '%Y-%m-%d'}})}
  inputs, outputs, first = _gate_inputs(tmp_path, penguins, schema, 1)
  _write_examples(inputs[spec_lib.EXAMPLES_KEY][0],
                  ['2025-01-01', '2025-02-01'])
  executor_lib.Executor().Do(inputs, outputs, properties)
  assert os.path.isfile(os.path.join(baselines, 'span-1', 'roles.json'))
  assert os.path.isfile(os.path.join(first.uri, 'roles.json'))

  inputs, outputs, _ = _gate_inputs(tmp_path, penguins, schema, 2)
  _write_examples(inputs[spec_lib.EXAMPLES_KEY][0],
                  ['2023-01-01', '2023-02-01'])
  with pytest.raises(InputDataError) as raised:
    executor_lib.Executor().Do(inputs, outputs, properties)
  assert "'when' DATE_RANGE_BEFORE_BASELINE" in str(raised.value)


def test_rows_dropped_by_min_rows_per_class_are_counted_not_lost(
    tmp_path, penguins, schema):
  # _gate_inputs puts the rows in both splits: 2 x len(penguins) are used.
  inputs, outputs, report = _gate_inputs(tmp_path, penguins, schema, 1)
  used = 2 * len(penguins)
  read = {'span-1/a.csv': used + 7}
  _with_rows(inputs, read)
  examples = inputs[spec_lib.EXAMPLES_KEY][0]
  examples.set_string_custom_property(row_counts.ROWS_DROPPED_PROPERTY,
                                      row_counts.encode({'rare': 4, 'odd': 3}))
  properties = dict(_NO_DRIFT, **{
      spec_lib.EXPECTED_ROWS_KEY: row_counts.encode(read)})
  executor_lib.Executor().Do(inputs, outputs, properties)
  assert report.get_int_custom_property(spec_lib.ROWS_READ_PROPERTY) == used + 7
  assert report.get_int_custom_property(spec_lib.ROWS_USED_PROPERTY) == used
  assert row_counts.decode(report.get_string_custom_property(
      row_counts.ROWS_DROPPED_PROPERTY)) == {'odd': 3, 'rare': 4}


def test_rows_lost_beside_the_dropped_ones_still_stop_the_run(
    tmp_path, penguins, schema):
  inputs, outputs, _ = _gate_inputs(tmp_path, penguins, schema, 1)
  _with_rows(inputs, {'span-1/a.csv': 2 * len(penguins) + 8})
  inputs[spec_lib.EXAMPLES_KEY][0].set_string_custom_property(
      row_counts.ROWS_DROPPED_PROPERTY, row_counts.encode({'rare': 7}))
  with pytest.raises(InputDataError, match='less the 7 of the classes'):
    executor_lib.Executor().Do(inputs, outputs, dict(_NO_DRIFT))
