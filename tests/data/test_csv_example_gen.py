"""leantfx's CsvExampleGen executor, run for real on small spans (Beam Direct)."""
import gzip
import json
import os

import pytest
import tensorflow as tf
from tfx.proto import example_gen_pb2
from tfx.types import standard_artifacts
from tfx.utils import proto_utils

from leantfx import columns
from leantfx import csv_format
from leantfx import input_checks
from leantfx import row_counts
from leantfx.components.csv_example_gen import executor
from leantfx.components.csv_example_gen import options as options_lib
from leantfx.errors import InputDataError


def _write(path, text):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w', newline='') as f:
    f.write(text)


def _run(tmp_path, data_root, read_options, span=1):
  """Runs the executor on span ``span``; returns (artifact, examples)."""
  output = standard_artifacts.Examples()
  output.uri = str(tmp_path / 'out')
  properties = {
      'input_base': str(data_root),
      'input_config': proto_utils.proto_to_json(example_gen_pb2.Input(splits=[
          example_gen_pb2.Input.Split(name='single_split',
                                      pattern=f'span-{span}/*')])),
      'output_config': proto_utils.proto_to_json(example_gen_pb2.Output(
          split_config=example_gen_pb2.SplitConfig(splits=[
              example_gen_pb2.SplitConfig.Split(name='train', hash_buckets=4),
              example_gen_pb2.SplitConfig.Split(name='eval', hash_buckets=1),
          ]))),
      'output_data_format': example_gen_pb2.FORMAT_TF_EXAMPLE,
      'output_file_format': example_gen_pb2.FORMAT_TFRECORDS_GZIP,
      'custom_config': proto_utils.proto_to_json(
          options_lib.custom_config(read_options)),
      'span': span,
  }
  executor.Executor().Do({}, {'examples': [output]}, properties)
  examples = []
  for split in ('train', 'eval'):
    folder = os.path.join(output.uri, f'Split-{split}')
    for name in sorted(os.listdir(folder)):
      with gzip.open(os.path.join(folder, name), 'rb') as f:
        data = f.read()
      path = str(tmp_path / 'plain.tfrecord')
      with open(path, 'wb') as f:
        f.write(data)
      examples += [tf.train.Example.FromString(r.numpy())
                   for r in tf.data.TFRecordDataset(path)]
  return output, examples


def _values(example, key):
  feature = example.features.feature[key]
  kind = feature.WhichOneof('kind')
  return kind, list(getattr(feature, kind).value) if kind else []


_HEADER = 'label,alcohol (%),"a,b ""q""",colour,zip,target (y)\n'


@pytest.fixture
def span(tmp_path):
  root = tmp_path / 'data'
  _write(str(root / 'span-1' / 'a.csv'),
         _HEADER + '1,12.5,x,red,01,+1\n2,,"two\nlines",blue,02,-1\n')
  # A Windows export: the upper-case extension is data too.
  _write(str(root / 'span-1' / 'b.CSV'),
         _HEADER + '3,13,"c, d",,10,01\n4,14.25,e,red,03,+1\n\n')
  return root


@pytest.mark.unit
def test_every_row_of_every_csv_file_is_read_and_counted(tmp_path, span):
  options = options_lib.CsvReadOptions(label='target (y)',
                                       categorical_columns=('zip',))
  artifact, examples = _run(tmp_path, span, options)
  assert len(examples) == 4
  assert artifact.get_int_custom_property(row_counts.ROWS_READ_PROPERTY) == 4
  assert row_counts.decode(artifact.get_string_custom_property(
      row_counts.ROWS_BY_FILE_PROPERTY)) == {'span-1/a.csv': 2,
                                            'span-1/b.CSV': 2}
  assert artifact.get_int_custom_property('span') == 1
  renamed = json.loads(artifact.get_string_custom_property(
      columns.FEATURE_NAMES_PROPERTY))
  assert sorted(renamed.values()) == ['a,b "q"', 'alcohol (%)', 'label',
                                      'target (y)']
  # The pre-flight counts the same rows per file, by the same file rule.
  profile = input_checks.profile_csv_data_root(
      str(span), 'target (y)', categorical_columns=['zip'])
  assert profile.rows_by_file == row_counts.decode(
      artifact.get_string_custom_property(row_counts.ROWS_BY_FILE_PROPERTY))


@pytest.mark.unit
def test_labels_and_categories_as_written_under_feature_keys(tmp_path, span):
  options = options_lib.CsvReadOptions(label='target (y)',
                                       categorical_columns=('zip',))
  _, examples = _run(tmp_path, span, options)
  keys = columns.feature_keys(
      ['label', 'alcohol (%)', 'a,b "q"', 'colour', 'zip', 'target (y)'])
  by_id = {_values(e, keys['label'])[1][0]: e for e in examples}
  assert sorted(by_id) == [1, 2, 3, 4]
  assert {_values(e, keys['target (y)'])[1][0] for e in examples} == {
      b'+1', b'-1', b'01'}
  assert _values(by_id[1], keys['zip']) == ('bytes_list', [b'01'])
  assert _values(by_id[3], keys['zip']) == ('bytes_list', [b'10'])
  assert _values(by_id[2], keys['a,b "q"']) == ('bytes_list', [b'two\nlines'])
  assert _values(by_id[3], keys['a,b "q"']) == ('bytes_list', [b'c, d'])
  # A float column; a missing value is an empty list.
  assert _values(by_id[4], keys['alcohol (%)']) == ('float_list', [14.25])
  assert _values(by_id[2], keys['alcohol (%)'])[1] == []
  assert _values(by_id[3], keys['colour'])[1] == []
  for example in examples:
    assert set(example.features.feature) == set(keys.values())


@pytest.mark.unit
def test_normalize_labels_strips_them(tmp_path):
  root = tmp_path / 'data'
  _write(str(root / 'span-1' / 'a.csv'), 'x,y\n1, a \n2,b\n3,a\n')
  _, examples = _run(tmp_path, root, options_lib.CsvReadOptions(
      label='y', normalize_labels=True))
  assert sorted(_values(e, 'y')[1][0] for e in examples) == [b'a', b'a', b'b']


@pytest.mark.unit
def test_a_regression_label_is_a_number(tmp_path):
  root = tmp_path / 'data'
  _write(str(root / 'span-1' / 'a.csv'), 'x,y\n1,0.5\n2,1.5\n')
  _, examples = _run(tmp_path, root, options_lib.CsvReadOptions(
      label='y', label_as_text=False))
  assert sorted(_values(e, 'y')[1][0] for e in examples) == [0.5, 1.5]


@pytest.mark.unit
def test_refuses_a_span_with_other_entries(tmp_path):
  root = tmp_path / 'data'
  _write(str(root / 'span-1' / 'a.csv'), 'x,y\n1,a\n')
  _write(str(root / 'span-1' / 'notes.txt'), 'hello')
  with pytest.raises(InputDataError, match="'notes.txt'"):
    _run(tmp_path, root, options_lib.CsvReadOptions(label='y'))


@pytest.mark.unit
def test_refuses_files_with_different_headers(tmp_path):
  root = tmp_path / 'data'
  _write(str(root / 'span-1' / 'a.csv'), 'x,y\n1,a\n')
  _write(str(root / 'span-1' / 'b.csv'), 'x,z,y\n1,2,a\n')
  with pytest.raises(InputDataError, match='differs from that of'):
    _run(tmp_path, root, options_lib.CsvReadOptions(label='y'))


@pytest.mark.unit
def test_refuses_a_missing_class_label(tmp_path):
  root = tmp_path / 'data'
  _write(str(root / 'span-1' / 'a.csv'), 'x,y\n1,a\n2,\n')
  with pytest.raises(InputDataError, match='no value in the label column'):
    _run(tmp_path, root, options_lib.CsvReadOptions(label='y'))


@pytest.mark.unit
def test_options_round_trip_through_custom_config():
  options = options_lib.CsvReadOptions(label='a b', label_as_text=False,
                                       categorical_columns=('c', 'd'),
                                       normalize_labels=True)
  packed = proto_utils.proto_to_json(options_lib.custom_config(options))
  assert options_lib.from_exec_properties(
      {'custom_config': packed}) == options
  assert json.loads(packed)


@pytest.mark.unit
def test_a_header_that_is_not_utf8_is_a_clear_error(tmp_path):
  # On Kubeflow no pre-flight runs before the ExampleGen: it says what is
  # wrong itself, never with a bare UnicodeDecodeError.
  root = tmp_path / 'data'
  os.makedirs(root / 'span-1')
  (root / 'span-1' / 'a.csv').write_bytes(b'x,\xe9t\xe9\n1,a\n')
  with pytest.raises(InputDataError, match='not UTF-8 CSV'):
    _run(tmp_path, root, options_lib.CsvReadOptions(label='x'))


@pytest.mark.unit
def test_one_file_in_many_blocks_gives_the_rows_of_one_block(tmp_path,
                                                            monkeypatch):
  # Blocks of ~100 bytes cut one 400-row file (quoted line breaks in it)
  # into many units of work; the examples are the same bytes, as many, as
  # the whole file read in one go (csv_format.encode_files).
  root = tmp_path / 'data'
  lines = ['id,note,x,label']
  for i in range(400):
    note = f'"line\n{i} ""q""",' if i % 7 == 0 else f'n{i},'
    lines.append(f'{i},{note}{i * 0.5 if i % 5 else ""},c{i % 3}')
  _write(str(root / 'span-1' / 'only.csv'), '\n'.join(lines) + '\n')
  path = str(root / 'span-1' / 'only.csv')
  options = options_lib.CsvReadOptions(label='label')
  monkeypatch.setattr(executor, 'BLOCK_BYTES', 100)
  plan = executor.scan_files([path], options)
  assert len(plan['blocks'][path]) > 50
  artifact, examples = _run(tmp_path, root, options)
  expected = sorted(csv_format.encode_files([path], options.text_columns))
  assert len(expected) == 400
  assert sorted(e.SerializeToString(deterministic=True)
                for e in examples) == expected
  assert row_counts.decode(artifact.get_string_custom_property(
      row_counts.ROWS_BY_FILE_PROPERTY)) == {'span-1/only.csv': 400}


@pytest.mark.unit
def test_min_rows_per_class_drops_the_rare_classes_rows_and_counts_them(
    tmp_path):
  # 'a' 6 rows, 'b' 5, ' c ' and 'c' 2 with --normalize-labels (one class),
  # 'd' 1: with min_rows_per_class 5, 'c' and 'd' go, 11 rows stay.
  root = tmp_path / 'data'
  rows = [(i, 'a') for i in range(6)] + [(10 + i, 'b') for i in range(5)] + [
      (20, ' c '), (21, 'c'), (30, 'd')]
  _write(str(root / 'span-1' / 'a.csv'),
         'x,y\n' + ''.join(f'{i},{y}\n' for i, y in rows[:7]))
  _write(str(root / 'span-1' / 'b.csv'),
         'x,y\n' + ''.join(f'{i},{y}\n' for i, y in rows[7:]))
  artifact, examples = _run(tmp_path, root, options_lib.CsvReadOptions(
      label='y', normalize_labels=True, min_rows_per_class=5))
  assert sorted(_values(e, 'y')[1][0] for e in examples) == (
      [b'a'] * 6 + [b'b'] * 5)
  # Every row read is counted, and the dropped ones by class.
  assert artifact.get_int_custom_property(row_counts.ROWS_READ_PROPERTY) == 14
  assert row_counts.decode(artifact.get_string_custom_property(
      row_counts.ROWS_DROPPED_PROPERTY)) == {'c': 2, 'd': 1}
  # Without the option nothing is dropped and no property is written.
  artifact, examples = _run(tmp_path / 'all', root, options_lib.CsvReadOptions(
      label='y', normalize_labels=True))
  assert len(examples) == 14
  assert not artifact.has_custom_property(row_counts.ROWS_DROPPED_PROPERTY)


@pytest.mark.unit
def test_min_rows_per_class_leaving_one_class_is_refused(tmp_path):
  root = tmp_path / 'data'
  _write(str(root / 'span-1' / 'a.csv'), 'x,y\n' + ''.join(
      f'{i},a\n' for i in range(6)) + '7,b\n')
  with pytest.raises(InputDataError, match='leaving fewer than 2'):
    _run(tmp_path, root, options_lib.CsvReadOptions(
        label='y', min_rows_per_class=5))


@pytest.mark.unit
def test_min_rows_per_class_round_trips_as_an_int():
  options = options_lib.CsvReadOptions(label='y', min_rows_per_class=5)
  packed = proto_utils.proto_to_json(options_lib.custom_config(options))
  back = options_lib.from_exec_properties({'custom_config': packed})
  assert back == options and isinstance(back.min_rows_per_class, int)
