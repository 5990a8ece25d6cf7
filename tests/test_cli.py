"""The CLI's options, parsing and bad-input errors (no pipeline runs here).

Each bad input of the foundation issue gets a one-paragraph error, exit code 2
and no serving directory. They run the console script's main in-process (the
cli fixture, tests/helpers.run_main); --help runs the installed script.
"""
import os

import pytest

from leantfx import datasets
from leantfx import schemas
from tests.helpers import run_cli

pytestmark = pytest.mark.unit


def _write(path, text):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w', encoding='utf-8') as f:
    f.write(text)


def _assert_clean_failure(result, output, *fragments):
  """Exit 2, one error paragraph naming each fragment, nothing pushed."""
  assert result.returncode == 2, (result.returncode, result.stderr)
  assert 'Traceback' not in result.stderr
  assert 'Traceback' not in result.stdout
  for fragment in fragments:
    assert fragment in result.stderr, (fragment, result.stderr)
  assert not os.path.exists(os.path.join(output, 'serving'))


def test_help_on_every_subcommand():
  for args in (['--help'], ['run', '--help'], ['data', '--help'],
               ['data', 'prepare', '--help']):
    result = run_cli(args, timeout=60)
    assert result.returncode == 0, result.stderr
    assert 'usage: leantfx' in result.stdout


def test_missing_data_root(tmp_path, cli):
  out = str(tmp_path / 'out')
  result = cli(['run', '--data-root', str(tmp_path / 'nope'), '--label',
                'y', '--output', out])
  _assert_clean_failure(result, out, str(tmp_path / 'nope'))


def test_empty_data_root(tmp_path, cli):
  (tmp_path / 'data').mkdir()
  out = str(tmp_path / 'out')
  result = cli(['run', '--data-root', str(tmp_path / 'data'), '--label',
                'y', '--output', out])
  _assert_clean_failure(result, out, 'span-1')


def test_span_without_csv(tmp_path, cli):
  (tmp_path / 'data' / 'span-1').mkdir(parents=True)
  out = str(tmp_path / 'out')
  result = cli(['run', '--data-root', str(tmp_path / 'data'), '--label',
                'y', '--output', out])
  _assert_clean_failure(result, out, 'span-1')


def test_label_column_absent(tmp_path, cli):
  _write(str(tmp_path / 'data/span-1/a.csv'), 'x,z\n1,a\n2,b\n')
  out = str(tmp_path / 'out')
  result = cli(['run', '--data-root', str(tmp_path / 'data'), '--label',
                'species', '--output', out])
  _assert_clean_failure(result, out, "'species'", 'a.csv')


def test_label_absent_from_bundled_dataset_files(tmp_path, cli):
  _write(str(tmp_path / 'data/span-1/a.csv'), 'x,z\n1,a\n2,b\n')
  out = str(tmp_path / 'out')
  result = cli(['run', '--dataset', 'penguins', '--data-root',
                str(tmp_path / 'data'), '--output', out])
  _assert_clean_failure(result, out, "'species'")


def test_different_headers_in_one_span(tmp_path, cli):
  _write(str(tmp_path / 'data/span-1/a.csv'), 'x,y\n1,a\n2,b\n')
  _write(str(tmp_path / 'data/span-1/b.csv'), 'x,w,y\n1,5,a\n2,6,b\n')
  out = str(tmp_path / 'out')
  result = cli(['run', '--data-root', str(tmp_path / 'data'), '--label',
                'y', '--output', out])
  _assert_clean_failure(result, out, 'a.csv', 'b.csv', "'w'")


def test_non_numeric_string_in_numeric_column(tmp_path, cli):
  rows = ''.join(f'{i}.5,{"a" if i % 2 else "b"}\n' for i in range(30))
  _write(str(tmp_path / 'data/span-1/a.csv'),
         'x,y\n' + rows + 'oops,a\n')
  out = str(tmp_path / 'out')
  result = cli(['run', '--data-root', str(tmp_path / 'data'), '--label',
                'y', '--output', out])
  _assert_clean_failure(result, out, "'x'", "'oops'", 'a.csv', 'line 32')


def test_non_numeric_string_in_bundled_numeric_column(tmp_path, cli):
  data = str(tmp_path / 'data')
  path = datasets.prepare('penguins', data)
  with open(path, encoding='utf-8') as f:
    lines = f.read().splitlines()
  fields = lines[5].split(',')
  fields[2] = 'forty'  # bill_length_mm
  lines[5] = ','.join(fields)
  _write(path, '\n'.join(lines) + '\n')
  out = str(tmp_path / 'out')
  result = cli(['run', '--dataset', 'penguins', '--data-root', data,
                '--output', out])
  _assert_clean_failure(result, out, "'bill_length_mm'", "'forty'", 'line 6')


def test_file_that_is_not_csv(tmp_path, cli):
  _write(str(tmp_path / 'data/span-1/a.csv'), 'x,y\n1,a\n2,b\n')
  with open(tmp_path / 'data/span-1/b.csv', 'wb') as f:
    f.write(b'\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00')
  out = str(tmp_path / 'out')
  result = cli(['run', '--data-root', str(tmp_path / 'data'), '--label',
                'y', '--output', out])
  _assert_clean_failure(result, out, 'b.csv')


def test_file_with_another_extension(tmp_path, cli):
  _write(str(tmp_path / 'data/span-1/a.csv'), 'x,y\n1,a\n2,b\n')
  _write(str(tmp_path / 'data/span-1/notes.txt'), 'hello\n')
  out = str(tmp_path / 'out')
  # Mixed files: the format cannot be inferred, and the error says how to
  # name it; named as CSV, the stray file itself is reported.
  result = cli(['run', '--data-root', str(tmp_path / 'data'), '--label',
                'y', '--output', out])
  _assert_clean_failure(result, out, 'Cannot tell the data format',
                        '--format csv')
  result = cli(['run', '--data-root', str(tmp_path / 'data'), '--label',
                'y', '--output', out, '--format', 'csv'])
  _assert_clean_failure(result, out, 'notes.txt')


def test_unknown_dataset(tmp_path, cli):
  result = cli(['run', '--dataset', 'mnist', '--output',
                str(tmp_path / 'out')])
  assert result.returncode == 2
  assert "invalid choice: 'mnist'" in result.stderr
  assert 'Traceback' not in result.stderr


def test_output_dir_not_writable(tmp_path, cli):
  blocker = tmp_path / 'file'
  blocker.write_text('not a folder')
  out = str(blocker / 'out')
  result = cli(['run', '--dataset', 'penguins', '--output', out])
  _assert_clean_failure(result, out, str(blocker), '--output')


def test_output_dir_on_read_only_filesystem(cli):
  result = cli(['run', '--dataset', 'penguins', '--output',
                '/proc/leantfx-out'])
  assert result.returncode == 2
  assert '/proc/leantfx-out' in result.stderr
  assert 'Traceback' not in result.stderr


def test_label_values_unknown_to_bundled_model(tmp_path, cli):
  data = str(tmp_path / 'data')
  path = datasets.prepare('penguins', data)
  with open(path, encoding='utf-8') as f:
    text = f.read().replace('\nGentoo,', '\nEmperor,', 1)
  _write(path, text)
  out = str(tmp_path / 'out')
  result = cli(['run', '--dataset', 'penguins', '--data-root', data,
                '--output', out])
  _assert_clean_failure(result, out, "'Emperor'")


def test_label_mismatch_with_bundled_dataset(tmp_path, cli):
  out = str(tmp_path / 'out')
  result = cli(['run', '--dataset', 'digits', '--label', 'species',
                '--output', out])
  _assert_clean_failure(result, out, "'digit'")


@pytest.mark.parametrize('flag,value', [('--train-steps', '0'),
                                        ('--min-accuracy', '1.5'),
                                        ('--beam-workers', '0')])
def test_bad_numeric_options(tmp_path, flag, value, cli):
  result = cli(['run', flag, value, '--output', str(tmp_path / 'out')])
  assert result.returncode == 2
  assert flag in result.stderr
  assert 'Traceback' not in result.stderr


@pytest.mark.parametrize('args,fragments', [
    (['--target-qps', '-5'], ['--target-qps', 'must be > 0']),
    (['--core-hour-price', '0.05'], ['--core-hour-price', 'pass --target-qps']),
])
def test_bad_model_card_options(tmp_path, args, fragments, cli):
  out = str(tmp_path / 'out')
  result = cli(['run', '--dataset', 'penguins', '--output', out] + args)
  _assert_clean_failure(result, out, *fragments)


def test_bundled_schemas_exist_and_parse():
  from google.protobuf import text_format  # pylint: disable=g-import-not-at-top
  from tensorflow_metadata.proto.v0 import schema_pb2  # pylint: disable=g-import-not-at-top
  for name, spec in datasets.BUNDLED.items():
    path = schemas.bundled_schema(name)
    assert path, name
    with open(path, encoding='utf-8') as f:
      schema = text_format.Parse(f.read(), schema_pb2.Schema())
    names = {feature.name for feature in schema.feature}
    assert names == set(spec.feature_columns) | {spec.label}, name
