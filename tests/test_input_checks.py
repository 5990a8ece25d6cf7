"""Unit tests for leantfx.input_checks: every rule fails with a clear message.

Each fixture is a few CSV lines written into pytest's tmp_path; line numbers
in the assertions count the lines of those fixtures, header = line 1.
"""
import dataclasses
import os

import pytest

from leantfx import input_checks
from leantfx.errors import ConfigError, InputDataError

_GOOD = 'x,colour,y\n1.5,red,a\n2,blue,b\n3,red,a\n'


def _write(root, relative, content):
  """Writes text (str) or bytes to root/relative and returns the path."""
  path = os.path.join(str(root), relative)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  mode = 'wb' if isinstance(content, bytes) else 'w'
  with open(path, mode) as f:
    f.write(content)
  return path


def _profile(root, label='y', **kwargs):
  return input_checks.profile_csv_data_root(str(root), label, **kwargs)


def _error(root, label='y', error=InputDataError, **kwargs):
  with pytest.raises(error) as info:
    _profile(root, label, **kwargs)
  return str(info.value)


# --- happy paths -----------------------------------------------------------


@pytest.mark.unit
def test_profile_describes_columns_rows_and_labels(tmp_path):
  path = _write(tmp_path, 'span-1/data.csv', _GOOD)
  profile = _profile(tmp_path)
  assert profile.data_root == str(tmp_path)
  assert profile.span == 1
  assert profile.span_dir == os.path.join(str(tmp_path), 'span-1')
  assert profile.files == (path,)
  assert profile.columns == ('x', 'colour', 'y')
  assert profile.numeric_columns == ('x',)
  assert profile.categorical_columns == ('colour',)
  assert profile.label == 'y'
  assert profile.label_values == ('a', 'b')
  assert profile.num_rows == 3  # the 3 lines below the header of _GOOD
  assert profile.missing_by_column == {'x': 0, 'colour': 0, 'y': 0}


@pytest.mark.unit
def test_profile_is_frozen_and_hashable(tmp_path):
  _write(tmp_path, 'span-1/data.csv', _GOOD)
  profile = _profile(tmp_path)
  with pytest.raises(dataclasses.FrozenInstanceError):
    profile.span = 2
  hash(profile)


@pytest.mark.unit
def test_integer_labels_sort_numerically(tmp_path):
  _write(tmp_path, 'span-1/data.csv', 'x,z,y\n1,1,10\n2,2,2\n3,3,1\n4,4,2\n')
  assert _profile(tmp_path).label_values == ('1', '2', '10')


@pytest.mark.unit
def test_text_labels_sort_lexically(tmp_path):
  _write(tmp_path, 'span-1/data.csv',
         'x,z,y\n1,1,Gentoo\n2,2,Adelie\n3,3,Chinstrap\n4,4,10\n')
  assert _profile(tmp_path).label_values == ('10', 'Adelie', 'Chinstrap',
                                             'Gentoo')


@pytest.mark.unit
def test_missing_fields_are_counted_per_column(tmp_path):
  _write(tmp_path, 'span-1/data.csv',
         'x,colour,y\n,red,a\n2,,b\n,blue,a\n4,red,b\n')
  profile = _profile(tmp_path)
  assert profile.missing_by_column == {'x': 2, 'colour': 1, 'y': 0}
  assert profile.numeric_columns == ('x',)


@pytest.mark.unit
def test_hidden_files_and_success_marker_are_ignored(tmp_path):
  path = _write(tmp_path, 'span-1/data.csv', _GOOD)
  _write(tmp_path, 'span-1/_SUCCESS', '')
  _write(tmp_path, 'span-1/.DS_Store', b'\x00\x01binary')
  _write(tmp_path, 'span-1/.data.csv.crc', 'crc')
  profile = _profile(tmp_path)
  assert profile.files == (path,)
  assert profile.num_rows == 3


@pytest.mark.unit
def test_latest_span_is_the_highest_number_not_the_last_name(tmp_path):
  for span in (1, 2, 10):
    _write(tmp_path, f'span-{span}/data.csv', _GOOD)
  span, span_dir = input_checks.latest_span(str(tmp_path))
  assert span == 10  # lexically span-2 would sort last
  assert span_dir == os.path.join(str(tmp_path), 'span-10')
  assert _profile(tmp_path).span == 10


@pytest.mark.unit
def test_several_files_are_sorted_and_their_rows_summed(tmp_path):
  second = _write(tmp_path, 'span-1/b.csv', 'x,colour,y\n7,green,c\n')
  first = _write(tmp_path, 'span-1/a.CSV', _GOOD)
  profile = _profile(tmp_path)
  assert profile.files == (first, second)
  assert profile.num_rows == 4  # 3 rows in a.CSV + 1 in b.csv
  assert profile.label_values == ('a', 'b', 'c')


@pytest.mark.unit
def test_quoted_multiline_field_and_blank_lines(tmp_path):
  _write(tmp_path, 'span-1/data.csv',
         'x,note,y\n1,"two\nlines, one field",a\n\n2,plain,b\r\n\n')
  profile = _profile(tmp_path)
  assert profile.num_rows == 2  # the blank lines are skipped, as TFX does
  assert profile.categorical_columns == ('note',)


@pytest.mark.unit
def test_categorical_columns_are_never_numeric(tmp_path):
  _write(tmp_path, 'span-1/data.csv', 'zip,x,y\n10115,1,a\n80331,2,b\n')
  profile = _profile(tmp_path, categorical_columns=['zip'])
  assert profile.numeric_columns == ('x',)
  assert profile.categorical_columns == ('zip',)


@pytest.mark.unit
def test_given_numeric_columns_are_used_as_given(tmp_path):
  _write(tmp_path, 'span-1/data.csv', 'a,b,c,y\n1,2,3,p\n4,,6,q\n')
  profile = _profile(tmp_path, numeric_columns=['c', 'a'],
                     required_columns=['b'])
  assert profile.numeric_columns == ('a', 'c')  # file order
  assert profile.categorical_columns == ('b',)


@pytest.mark.unit
def test_mostly_text_column_with_some_numbers_is_categorical(tmp_path):
  # 1 number among 4 values: 25% numeric, far below the 90% typo threshold.
  _write(tmp_path, 'span-1/data.csv',
         'size,x,y\nsmall,1,a\nlarge,2,b\n42,3,a\nmedium,4,b\n')
  profile = _profile(tmp_path)
  assert profile.categorical_columns == ('size',)
  assert profile.numeric_columns == ('x',)


# --- rule 1: data root and span folders --------------------------------------


@pytest.mark.unit
def test_missing_data_root(tmp_path):
  root = tmp_path / 'nowhere'
  with pytest.raises(InputDataError) as info:
    input_checks.latest_span(str(root))
  message = str(info.value)
  assert str(root) in message and 'does not exist' in message
  assert 'span-1' in message


@pytest.mark.unit
def test_data_root_is_a_file(tmp_path):
  path = _write(tmp_path, 'data.csv', _GOOD)
  message = _error(path)
  assert path in message and 'not a folder' in message
  assert os.path.join(str(tmp_path), 'span-1') in message


@pytest.mark.unit
def test_data_root_without_span_folder_lists_what_it_found(tmp_path):
  _write(tmp_path, 'data.csv', _GOOD)
  _write(tmp_path, 'span-abc/data.csv', _GOOD)
  _write(tmp_path, 'span-0/data.csv', _GOOD)
  message = _error(tmp_path)
  assert 'no span folder' in message
  assert "'data.csv'" in message
  assert "'span-0', 'span-abc' are not span folders" in message
  assert 'positive integer' in message
  assert f"Move 'data.csv' into {tmp_path}/span-1/" in message


@pytest.mark.unit
def test_empty_data_root(tmp_path):
  message = _error(tmp_path)
  assert 'no span folder' in message and 'empty' in message
  assert 'span-1/' in message


@pytest.mark.unit
def test_non_numeric_span_folder_with_files_breaks_tfx_glob(tmp_path):
  _write(tmp_path, 'span-1/data.csv', _GOOD)
  _write(tmp_path, 'span-old/data.csv', _GOOD)
  message = _error(tmp_path)
  assert "'span-old'" in message and 'move those folders out' in message


@pytest.mark.unit
def test_two_folders_for_the_latest_span(tmp_path):
  _write(tmp_path, 'span-2/data.csv', _GOOD)
  _write(tmp_path, 'span-02/data.csv', _GOOD)
  message = _error(tmp_path)
  assert "'span-02', 'span-2'" in message and 'span 2' in message


# --- rule 2: no CSV file in the latest span ----------------------------------


@pytest.mark.unit
def test_empty_latest_span_folder(tmp_path):
  _write(tmp_path, 'span-1/data.csv', _GOOD)
  os.makedirs(tmp_path / 'span-2')
  message = _error(tmp_path)
  assert 'span-2' in message and 'has no CSV file' in message


@pytest.mark.unit
def test_span_with_only_hidden_files_and_success_marker(tmp_path):
  _write(tmp_path, 'span-1/_SUCCESS', '')
  _write(tmp_path, 'span-1/.hidden.csv', _GOOD)
  message = _error(tmp_path)
  assert 'has no CSV file' in message
  assert "'.hidden.csv', '_SUCCESS', which are not data" in message


# --- rule 3: files that are not (valid) CSV ----------------------------------


@pytest.mark.unit
def test_file_with_other_extension(tmp_path):
  _write(tmp_path, 'span-1/data.csv', _GOOD)
  _write(tmp_path, 'span-1/notes.txt', 'hello')
  message = _error(tmp_path)
  assert "'notes.txt'" in message and 'not CSV files' in message
  assert 'move the others out' in message and 'rename' in message


@pytest.mark.unit
def test_folder_inside_span(tmp_path):
  _write(tmp_path, 'span-1/data.csv', _GOOD)
  _write(tmp_path, 'span-1/old/data.csv', _GOOD)
  message = _error(tmp_path)
  assert "'old/'" in message and 'not CSV files' in message


@pytest.mark.unit
def test_binary_file_with_nul_bytes(tmp_path):
  path = _write(tmp_path, 'span-1/data.csv', b'x,y\n1,a\n\x00\x01\x02\n')
  message = _error(tmp_path)
  assert path in message and 'line 3' in message and 'NUL' in message
  assert 'not UTF-8' in message


@pytest.mark.unit
def test_utf16_file_is_not_utf8(tmp_path):
  path = _write(tmp_path, 'span-1/data.csv', _GOOD.encode('utf-16'))
  message = _error(tmp_path)
  assert path in message and 'line 1' in message and 'UTF-16' in message


@pytest.mark.unit
def test_latin1_file_is_not_utf8(tmp_path):
  path = _write(tmp_path, 'span-1/data.csv',
                'x,city,y\n1,Köln,a\n'.encode('latin-1'))
  message = _error(tmp_path)
  assert path in message and 'line 2' in message
  assert '0xf6' in message and 'UTF-8' in message  # latin-1 'ö' is 0xf6


@pytest.mark.unit
def test_byte_order_mark_is_dropped(tmp_path):
  # Excel's "CSV UTF-8" starts with a BOM; the ExampleGen's reader drops it.
  _write(tmp_path, 'span-1/data.csv', b'\xef\xbb\xbf' + _GOOD.encode())
  plain = tmp_path / 'plain'
  _write(plain, 'span-1/data.csv', _GOOD)
  assert _profile(tmp_path).columns == _profile(plain).columns


@pytest.mark.unit
def test_empty_file(tmp_path):
  path = _write(tmp_path, 'span-1/data.csv', '')
  message = _error(tmp_path)
  assert path in message and 'is empty' in message


@pytest.mark.unit
def test_header_with_a_single_column(tmp_path):
  path = _write(tmp_path, 'span-1/data.csv', 'x;colour;y\n1;red;a\n')
  message = _error(tmp_path)
  assert path in message and 'line 1' in message
  assert "'x;colour;y'" in message and 'single column' in message
  assert 'comma-separated' in message


@pytest.mark.unit
def test_header_with_duplicate_column_names(tmp_path):
  path = _write(tmp_path, 'span-1/data.csv', 'x,x,y\n1,2,a\n')
  message = _error(tmp_path)
  assert path in message and "'x'" in message and 'more than once' in message


@pytest.mark.unit
def test_header_with_empty_column_name(tmp_path):
  path = _write(tmp_path, 'span-1/data.csv', 'x,,y,\n1,2,a,\n')
  message = _error(tmp_path)
  assert path in message and 'number 2, 4' in message
  assert 'trailing comma' in message


@pytest.mark.unit
def test_quoted_header_names_may_hold_commas_and_quotes(tmp_path):
  _write(tmp_path, 'span-1/data.csv',
         '"x","colour, ""hue""",y\n1,red,a\n2,blue,b\n')
  profile = _profile(tmp_path)
  assert profile.columns == ('x', 'colour, "hue"', 'y')
  assert profile.feature_keys['colour, "hue"'] != 'colour, "hue"'


@pytest.mark.unit
def test_header_with_unbalanced_quote(tmp_path):
  path = _write(tmp_path, 'span-1/data.csv', '"x,colour,y\n1,red,a\n')
  message = _error(tmp_path)
  assert path in message and 'line 1' in message and 'quote' in message


@pytest.mark.unit
def test_row_with_wrong_number_of_fields_names_file_and_line(tmp_path):
  # Line 3 is blank (skipped), line 4 has an unquoted comma in the colour.
  path = _write(tmp_path, 'span-1/data.csv',
                'x,colour,y\n1,red,a\n\n2,dark, blue,b\n')
  message = _error(tmp_path)
  assert f'{path} (span 1), line 4' in message
  assert 'has 4 fields but the header (line 1) has 3' in message
  assert "'2,dark, blue,b'" in message


@pytest.mark.unit
def test_line_numbers_count_lines_of_multiline_records(tmp_path):
  # The record on lines 2-3 has a quoted line break; line 4 is short.
  path = _write(tmp_path, 'span-1/data.csv',
                'x,note,y\n1,"a\nb",a\n2,b\n')
  message = _error(tmp_path)
  assert f'{path} (span 1), line 4' in message


@pytest.mark.unit
def test_quote_inside_an_unquoted_field_is_literal(tmp_path):
  # As the ExampleGen's CSV reader (pyarrow) reads it.
  _write(tmp_path, 'span-1/data.csv',
         'x,height,y\n1,5 ft 10",a\n2,6 ft,b\n')
  profile = _profile(tmp_path)
  assert profile.num_rows == 2 and profile.categorical_columns == ('height',)


@pytest.mark.unit
def test_unbalanced_quote(tmp_path):
  path = _write(tmp_path, 'span-1/data.csv',
                'x,height,y\n1,"5 ft 10,a\n2,6 ft,b\n')
  message = _error(tmp_path)
  assert f'{path} (span 1), line 2' in message and 'never closed' in message


@pytest.mark.unit
def test_unreadable_file_becomes_input_data_error(tmp_path):
  os.makedirs(tmp_path / 'span-1')
  path = os.path.join(str(tmp_path), 'span-1', 'data.csv')
  os.symlink(os.path.join(str(tmp_path), 'gone.csv'), path)  # dangling
  message = _error(tmp_path)
  assert f'Cannot read {path}' in message
  assert 'No such file or directory' in message


# --- rule 4: no data rows ----------------------------------------------------


@pytest.mark.unit
def test_span_without_data_rows(tmp_path):
  path = _write(tmp_path, 'span-3/data.csv', 'x,colour,y\n\n')
  message = _error(tmp_path)
  assert 'Span 3' in message and 'has no data rows' in message
  assert path in message


@pytest.mark.unit
def test_one_file_without_data_rows(tmp_path):
  _write(tmp_path, 'span-1/a.csv', _GOOD)
  empty = _write(tmp_path, 'span-1/b.csv', 'x,colour,y\n')
  message = _error(tmp_path)
  assert empty in message and 'header but no data rows' in message


# --- rule 5: different headers in one span -----------------------------------


@pytest.mark.unit
def test_files_with_different_columns(tmp_path):
  first = _write(tmp_path, 'span-1/a.csv', _GOOD)
  second = _write(tmp_path, 'span-1/b.csv', 'x,color,y\n1,red,a\n')
  message = _error(tmp_path)
  assert first in message and second in message
  assert "only in a.csv: 'colour'; only in b.csv: 'color'" in message


@pytest.mark.unit
def test_files_with_columns_in_a_different_order(tmp_path):
  first = _write(tmp_path, 'span-1/a.csv', _GOOD)
  second = _write(tmp_path, 'span-1/b.csv', 'colour,x,y\nred,1,a\n')
  message = _error(tmp_path)
  assert first in message and second in message
  assert 'different order' in message
  assert "'x', 'colour', 'y' versus 'colour', 'x', 'y'" in message


# --- rule 6: label ----------------------------------------------------------


@pytest.mark.unit
def test_label_not_in_header_lists_columns(tmp_path):
  _write(tmp_path, 'span-1/data.csv', _GOOD)
  message = _error(tmp_path, label='species')
  assert "'species' is not in the header" in message
  assert "'x', 'colour', 'y'" in message and '--label' in message


@pytest.mark.unit
def test_label_not_in_header_suggests_near_miss(tmp_path):
  _write(tmp_path, 'span-1/data.csv', 'x, Species\n1,a\n2,b\n')
  message = _error(tmp_path, label='species')
  assert "Did you mean ' Species'" in message


@pytest.mark.unit
def test_header_that_looks_like_data(tmp_path):
  _write(tmp_path, 'span-1/data.csv', '5.1,3.5,setosa\n4.9,3.0,setosa\n')
  message = _error(tmp_path, label='species')
  assert 'looks like data' in message


@pytest.mark.unit
def test_row_with_empty_label(tmp_path):
  path = _write(tmp_path, 'span-1/data.csv', 'x,colour,y\n1,red,a\n2,blue,\n')
  message = _error(tmp_path)
  assert f'{path} (span 1), line 3' in message
  assert "label column 'y' is empty" in message


@pytest.mark.unit
def test_label_listed_as_feature_is_a_config_error(tmp_path):
  _write(tmp_path, 'span-1/data.csv', _GOOD)
  message = _error(tmp_path, error=ConfigError, categorical_columns=['y'])
  assert "'y'" in message and '--categorical' in message


# --- rule 7: required and named columns --------------------------------------


@pytest.mark.unit
def test_required_column_missing(tmp_path):
  _write(tmp_path, 'span-1/data.csv', _GOOD)
  message = _error(tmp_path, required_columns=['x', 'body_mass_g'])
  assert "'body_mass_g', required by the dataset" in message
  assert "'x', 'colour', 'y'" in message


@pytest.mark.unit
def test_categorical_option_naming_unknown_column(tmp_path):
  _write(tmp_path, 'span-1/data.csv', _GOOD)
  message = _error(tmp_path, categorical_columns=['color'])
  assert "'color', passed with --categorical" in message


# --- rule 8: numeric columns -------------------------------------------------


@pytest.mark.unit
def test_given_numeric_column_with_na_token(tmp_path):
  path = _write(tmp_path, 'span-1/data.csv', 'x,colour,y\n1,red,a\nNA,blue,b\n')
  message = _error(tmp_path, numeric_columns=['x'])
  assert f"{path} (span 1), line 3, column 'x'" in message
  assert "'NA' is not a number" in message
  assert 'leave the field empty' in message


@pytest.mark.unit
def test_mostly_numeric_column_with_a_typo(tmp_path):
  # 10 non-empty values, 9 numeric: exactly the 90% threshold.
  rows = [f'{i},{"a" if i % 2 else "b"}' for i in range(9)]
  rows.insert(5, '3.l4,a')  # line 7: header + 5 rows before it
  path = _write(tmp_path, 'span-1/data.csv', 'x,y\n' + '\n'.join(rows) + '\n')
  message = _error(tmp_path)
  assert f"{path} (span 1), line 7, column 'x'" in message
  assert "'3.l4' is not a number" in message
  assert '9 of the 10 non-empty values' in message
  assert 'leave the field empty' in message
  assert '--column-role x=categorical' in message


@pytest.mark.unit
@pytest.mark.parametrize('token', ['inf', '-inf', 'Infinity'])
def test_non_finite_numbers_in_numeric_column(tmp_path, token):
  path = _write(tmp_path, 'span-1/data.csv',
                f'x,y\n1,a\n2,b\n{token},a\n')
  message = _error(tmp_path)
  assert f"{path} (span 1), line 4, column 'x'" in message
  assert f"'{token}' is not a finite number" in message


@pytest.mark.unit
@pytest.mark.parametrize('token', ['NA', 'null', 'N/A', '?', 'NaN', 'nan'])
def test_missing_value_markers_in_numeric_column(tmp_path, token):
  # Issue 42: a marker in a column of numbers is a missing value, stated.
  rows = ''.join(f'{i},{"ab"[i % 2]}\n' for i in range(9))
  _write(tmp_path, 'span-1/data.csv', f'x,y\n{rows}{token},a\n')
  profile = _profile(tmp_path)
  assert profile.numeric_columns == ('x',)
  assert profile.missing_markers == (token,)
  (role,) = profile.roles
  assert role.role == 'numeric'
  assert f"{token!r} (1 rows) read as missing" in role.reason


@pytest.mark.unit
def test_integer_beyond_int64_is_a_float(tmp_path):
  big = str(2**63)  # one above int64 max: read as a float (csv_format)
  rows = ''.join(f'{i},{"ab"[i % 2]}\n' for i in range(9))
  _write(tmp_path, 'span-1/data.csv', f'x,y\n{rows}{big},a\n')
  assert _profile(tmp_path).numeric_columns == ('x',)


@pytest.mark.unit
def test_declared_categorical_column_skips_numeric_check(tmp_path):
  rows = ''.join(f'{i},{"ab"[i % 2]}\n' for i in range(9))
  _write(tmp_path, 'span-1/data.csv', f'x,y\n{rows}NA,a\n')
  profile = _profile(tmp_path, categorical_columns=['x'])
  assert profile.categorical_columns == ('x',)


# --- rule 9: label classes ---------------------------------------------------


@pytest.mark.unit
def test_single_label_value(tmp_path):
  _write(tmp_path, 'span-1/data.csv', 'x,colour,y\n1,red,a\n2,blue,a\n')
  message = _error(tmp_path)
  assert "label column 'y' has a single value ('a')" in message
  assert 'at least 2 classes' in message and 'span 1' in message


# --- rule 10: entirely empty column ------------------------------------------


@pytest.mark.unit
def test_entirely_empty_column(tmp_path):
  _write(tmp_path, 'span-1/a.csv', 'x,notes,y\n1,,a\n')
  _write(tmp_path, 'span-1/b.csv', 'x,notes,y\n2,,b\n')
  message = _error(tmp_path)
  assert "'notes' are empty in all 2 rows of span 1" in message
  assert 'cannot infer' in message


# --- check_output_dir --------------------------------------------------------


@pytest.mark.unit
def test_output_dir_is_created_with_parents(tmp_path):
  target = tmp_path / 'a' / 'b' / 'out'
  assert input_checks.check_output_dir(str(target)) == str(target)
  assert target.is_dir()
  assert not os.listdir(target)  # the write probe is deleted


@pytest.mark.unit
def test_output_dir_relative_path_becomes_absolute(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert input_checks.check_output_dir('out') == str(tmp_path / 'out')


@pytest.mark.unit
def test_output_dir_below_a_regular_file(tmp_path):
  blocker = _write(tmp_path, 'file', 'not a folder')
  target = os.path.join(blocker, 'out')
  with pytest.raises(ConfigError) as info:
    input_checks.check_output_dir(target)
  message = str(info.value)
  assert target in message and 'Not a directory' in message
  assert '--output' in message


@pytest.mark.unit
def test_output_dir_is_a_file(tmp_path):
  path = _write(tmp_path, 'file', 'not a folder')
  with pytest.raises(ConfigError) as info:
    input_checks.check_output_dir(path)
  assert path in str(info.value) and 'is a file' in str(info.value)


@pytest.mark.unit
@pytest.mark.parametrize('target', ['/proc/leantfx-output/run', '/proc/self'])
def test_output_dir_on_read_only_filesystem(target):
  # Tests run as root, which ignores permission bits; /proc refuses writes.
  with pytest.raises(ConfigError) as info:
    input_checks.check_output_dir(target)
  message = str(info.value)
  assert target in message and '--output' in message


# --- every row and every label as written ----------------------------------


@pytest.mark.unit
def test_upper_case_extension_is_a_data_file_and_counted(tmp_path):
  # A Windows/Excel export names its file b.CSV: it is read and counted.
  _write(tmp_path, 'span-1/a.csv', 'x,y\n1,a\n2,b\n')
  _write(tmp_path, 'span-1/b.CSV', 'x,y\n3,a\n4,b\n5,a\n')
  profile = _profile(tmp_path)
  assert profile.num_rows == 5
  assert profile.rows_by_file == {'span-1/a.csv': 2, 'span-1/b.CSV': 3}


@pytest.mark.unit
def test_labels_are_kept_as_written(tmp_path):
  # '+1' and '1' are two spellings a user chose; they are not parsed.
  _write(tmp_path, 'span-1/data.csv', 'x,y\n1,+1\n2,-1\n3,01\n4,1.0\n')
  assert _profile(tmp_path).label_values == ('+1', '-1', '01', '1.0')


@pytest.mark.unit
def test_labels_differing_by_white_space_are_refused_with_counts(tmp_path):
  _write(tmp_path, 'span-1/data.csv',
         'x,y\n1,barolo\n2,barolo \n3,grignolino\n4,barolo\n')
  message = _error(tmp_path)
  assert "'barolo' (2 rows)" in message and "'barolo ' (1 rows)" in message
  assert '--normalize-labels' in message


@pytest.mark.unit
def test_normalize_labels_strips_white_space(tmp_path):
  _write(tmp_path, 'span-1/data.csv',
         'x,y\n1,barolo\n2, barolo \n3,grignolino\n')
  profile = _profile(tmp_path, normalize_labels=True)
  assert profile.label_values == ('barolo', 'grignolino')


@pytest.mark.unit
def test_labels_differing_by_case_are_refused_even_when_normalizing(tmp_path):
  _write(tmp_path, 'span-1/data.csv', 'x,y\n1,Barolo\n2,barolo\n3,other\n')
  message = _error(tmp_path, normalize_labels=True)
  assert "'Barolo' (1 rows), 'barolo' (1 rows)" in message
  assert 'one case' in message


@pytest.mark.unit
def test_any_column_name_gets_a_feature_key(tmp_path):
  _write(tmp_path, 'span-1/data.csv',
         'label,alcohol (%),größe,Age,age,plain,y\n1,2,3,4,5,6,a\n2,3,4,5,6,7,b\n')
  keys = _profile(tmp_path).feature_keys
  assert keys['plain'] == 'plain'
  renamed = [c for c in keys if c != 'plain' and c != 'y']
  assert all(keys[c] != c for c in renamed)
  assert len(set(keys.values())) == len(keys)
