"""Tests for leantfx/column_roles.py through the pre-flight's one pass.

Each span is written to a temporary folder and profiled as `leantfx run`
profiles it (input_checks.profile_csv_data_root), so the roles asserted are
those the pipeline is built for.
"""
import csv
import random

import pyarrow as pa
import pytest

from leantfx import column_roles
from leantfx import csv_format
from leantfx import input_checks
from leantfx.errors import ConfigError, InputDataError

_WORDS = ('refund payment login crash slow page button invoice delivery late '
          'broken screen password reset account order missing item').split()


def _span(root, header, rows):
  (root / 'span-1').mkdir(parents=True, exist_ok=True)
  path = root / 'span-1' / 'data.csv'
  with open(path, 'w', newline='', encoding='utf-8') as f:
    writer = csv.writer(f)
    writer.writerow(header)
    writer.writerows(rows)
  return str(path)


def _roles(root, **kwargs):
  profile = input_checks.profile_csv_data_root(str(root), 'label', **kwargs)
  return {r.column: r for r in profile.roles}, profile


def _rows(n, make, seed=0):
  rng = random.Random(seed)
  return [make(i, rng) + [rng.choice('abc')] for i in range(n)]


@pytest.mark.unit
def test_each_role_is_inferred_with_its_reason(tmp_path):
  _span(tmp_path, ['customer_id', 'order_date', 'seen_at', 'amount', 'vip',
                   'note', 'size', 'label'],
        _rows(300, lambda i, r: [
            f'C{i:05d}', f'2024-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}',
            f'2024-03-01T12:{r.randint(0, 59):02d}:56Z',
            'NA' if i % 7 == 0 else f'{r.random() * 100:.2f}',
            r.choice(['Yes', 'No']),
            ' '.join(r.choice(_WORDS) for _ in range(r.randint(3, 9))),
            r.choice('SML')]))
  roles, profile = _roles(tmp_path)
  assert {c: r.role for c, r in roles.items()} == {
      'customer_id': 'identifier', 'order_date': 'date', 'seen_at': 'date',
      'amount': 'numeric', 'vip': 'boolean', 'note': 'text',
      'size': 'categorical'}
  assert roles['order_date'].date_format == '%Y-%m-%d'
  assert roles['seen_at'].date_format == '%Y-%m-%dT%H:%M:%S%z'
  assert '300 distinct values in 300 rows' in roles['customer_id'].reason
  assert "'NA' (43 rows) read as missing" in roles['amount'].reason  # 0..294 step 7
  assert profile.missing_markers == ('NA',)
  assert profile.numeric_columns == ('amount',)
  assert profile.categorical_columns == ('size', 'vip')
  assert 'words' in roles['note'].reason


@pytest.mark.unit
def test_integer_ids_need_an_id_name(tmp_path):
  _span(tmp_path, ['order_id', 'income', 'label'],
        _rows(200, lambda i, r: [str(1000 + i), str(r.randint(0, 10**6))]))
  roles, _ = _roles(tmp_path)
  assert roles['order_id'].role == 'identifier'
  assert roles['income'].role == 'numeric'  # distinct too, but a quantity


@pytest.mark.unit
def test_a_small_vocabulary_of_phrases_is_categorical(tmp_path):
  _span(tmp_path, ['city', 'label'],
        _rows(300, lambda i, r: [r.choice(['New York City', 'Los Angeles Area',
                                           'San Francisco Bay'])]))
  roles, _ = _roles(tmp_path)
  assert roles['city'].role == 'categorical'


@pytest.mark.unit
@pytest.mark.parametrize('dates, expected', [
    (['13/01/2024', '02/03/2024'], '%d/%m/%Y'),  # a day over 12 first
    (['01/13/2024', '02/03/2024'], '%m/%d/%Y'),  # a day over 12 second
    (['01.02.2024', '28.12.2023'], '%d.%m.%Y'),
    (['2024/1/5', '2023/12/31'], '%Y/%m/%d'),
    (['2024-01-05 10:00:00', '2023-12-31 23:59:59'], '%Y-%m-%d %H:%M:%S'),
    (['2024-01-05T10:00:00.123', '2023-12-31T23:59:59'], '%Y-%m-%dT%H:%M:%S'),
    (['2024-01-05T10:00:00+05:30', '2023-12-31T23:59:59-0800'],
     '%Y-%m-%dT%H:%M:%S%z'),
])
def test_date_formats(tmp_path, dates, expected):
  _span(tmp_path, ['when', 'label'],
        _rows(60, lambda i, r: [dates[i % len(dates)]]))
  roles, _ = _roles(tmp_path)
  assert (roles['when'].role, roles['when'].date_format) == ('date', expected)


@pytest.mark.unit
def test_day_and_month_that_cannot_be_told_apart_are_stated(tmp_path):
  _span(tmp_path, ['when', 'label'],
        _rows(40, lambda i, r: [f'{r.randint(1, 12):02d}/'
                                f'{r.randint(1, 12):02d}/2024']))
  roles, _ = _roles(tmp_path)
  assert roles['when'].date_format == '%d/%m/%Y'
  assert 'cannot be told apart' in roles['when'].reason
  assert '--date-format when=%m/%d/%Y' in roles['when'].reason
  roles, _ = _roles(tmp_path, date_formats={'when': '%m/%d/%Y'})
  assert roles['when'].date_format == '%m/%d/%Y'
  assert 'as given' in roles['when'].reason


@pytest.mark.unit
def test_mixed_date_formats_are_refused_naming_rows(tmp_path):
  path = _span(tmp_path, ['when', 'label'],
               _rows(40, lambda i, r: ['2024-01-05' if i % 2 else
                                       '05/01/2024']))
  with pytest.raises(InputDataError) as info:
    _roles(tmp_path)
  message = str(info.value)
  assert "'when'" in message and 'more than one format' in message
  assert f'%Y-%m-%d at {path}, line 3' in message
  assert f'%d/%m/%Y at {path}, line 2' in message
  assert '--date-format when=FORMAT' in message


@pytest.mark.unit
def test_dates_broken_after_the_sample_are_refused_naming_the_row(tmp_path):
  rows = _rows(300, lambda i, r: ['2024-01-05'])
  rows[250][0] = '5 Jan 2024'
  path = _span(tmp_path, ['when', 'label'], rows)
  with pytest.raises(InputDataError) as info:
    _roles(tmp_path)
  assert f"{path}, line 252: '5 Jan 2024'" in str(info.value)


@pytest.mark.unit
def test_a_date_format_the_values_do_not_follow_is_refused(tmp_path):
  path = _span(tmp_path, ['when', 'label'],
               _rows(30, lambda i, r: ['2024-01-05']))
  with pytest.raises(InputDataError) as info:
    _roles(tmp_path, date_formats={None: '%d/%m/%Y'})
  assert f"{path}, line 2: '2024-01-05'" in str(info.value)


@pytest.mark.unit
def test_an_identifier_forced_to_a_feature_is_warned_about(tmp_path):
  _span(tmp_path, ['customer_id', 'x', 'label'],
        _rows(100, lambda i, r: [f'C{i}', str(r.random())]))
  roles, _ = _roles(tmp_path, role_overrides={'customer_id': 'categorical'})
  assert roles['customer_id'].role == 'categorical'
  assert 'warning' in roles['customer_id'].reason
  assert 'look like an identifier' in roles['customer_id'].reason


@pytest.mark.unit
def test_overrides_are_checked(tmp_path):
  _span(tmp_path, ['note', 'label'],
        _rows(30, lambda i, r: [f'some words here {i}']))
  with pytest.raises(ConfigError, match="'nope'"):
    _roles(tmp_path, role_overrides={'nope': 'text'})
  with pytest.raises(ConfigError, match='label'):
    _roles(tmp_path, role_overrides={'label': 'text'})
  with pytest.raises(InputDataError, match='are not numbers'):
    _roles(tmp_path, role_overrides={'note': 'numeric'})
  with pytest.raises(ConfigError, match='unknown role'):
    column_roles.parse_role_overrides(['note=words'])
  with pytest.raises(ConfigError, match='COLUMN=ROLE'):
    column_roles.parse_role_overrides(['note'])
  with pytest.raises(ConfigError, match='%Y-%m-%d'):
    column_roles.parse_date_formats(['%Y%m%d'])
  assert column_roles.parse_date_formats(['a=%d.%m.%Y', '%Y-%m-%d']) == {
      'a': '%d.%m.%Y', None: '%Y-%m-%d'}


@pytest.mark.unit
def test_empty_long_and_non_ascii_texts(tmp_path):
  def make(i, r):
    if i % 10 == 0:
      return ['']
    if i % 10 == 1:
      return [' '.join(r.choice(_WORDS) for _ in range(1500))]  # ~10 kB
    return [' '.join(r.choice(_WORDS + ['größe', 'টাকা', '退款'])
                     for _ in range(r.randint(3, 8)))]
  _span(tmp_path, ['note', 'label'], _rows(200, make))
  roles, profile = _roles(tmp_path)
  assert roles['note'].role == 'text'
  assert profile.missing_by_column['note'] == 20


@pytest.mark.unit
def test_null_markers_makes_markers_missing_in_the_given_columns():
  batch = pa.RecordBatch.from_arrays(
      [pa.array(['1.5', 'NA', None, 'n/a']), pa.array(['NA', 'x', 'y', 'z'])],
      names=['x', 'c'])
  out = csv_format.null_markers(batch, ['x'], ['NA', 'n/a'])
  assert out.column(0).to_pylist() == ['1.5', None, None, None]
  assert out.column(1).to_pylist() == ['NA', 'x', 'y', 'z']  # not numeric
  assert csv_format.array_kind(out.column(0)) == csv_format.FLOAT


@pytest.mark.unit
def test_roles_round_trip_through_the_schema(tmp_path):
  from tensorflow_metadata.proto.v0 import schema_pb2  # pylint: disable=g-import-not-at-top
  _span(tmp_path, ['order_id', 'when', 'note', 'label'],
        _rows(120, lambda i, r: [f'O{i}', '01/02/2024',
                                 ' '.join(r.choice(_WORDS) for _ in range(5))]))
  roles, profile = _roles(tmp_path, date_formats={'when': '%m/%d/%Y'})
  schema = schema_pb2.Schema()
  for column in ('order_id', 'when', 'note'):
    schema.feature.add(name=column, type=schema_pb2.BYTES)
    schema.feature[-1].drift_comparator.infinity_norm.threshold = 0.25
  column_roles.annotate_schema(
      schema, {r.column: (r.role, r.date_format) for r in profile.roles})
  recorded = column_roles.schema_roles(schema)
  assert recorded == {'order_id': ('identifier', None),
                      'when': ('date', '%m/%d/%Y'), 'note': ('text', None)}
  assert all(not f.HasField('drift_comparator') for f in schema.feature)
  assert schema.feature[2].HasField('natural_language_domain')
  # A run with that schema reads the same roles, the schema named as source.
  again, _ = _roles(tmp_path, schema_roles=recorded)
  assert {c: (r.role, r.date_format) for c, r in again.items()} == recorded
  assert 'the schema' in again['order_id'].reason
  # The options still win over the schema.
  forced, _ = _roles(tmp_path, schema_roles=recorded,
                     role_overrides={'note': 'categorical'})
  assert forced['note'].role == 'categorical'
