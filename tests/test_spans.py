"""leantfx.spans: span folder names, the marker, ExampleGen patterns, listing."""
import os

import pytest

from leantfx import spans

pytestmark = pytest.mark.unit


@pytest.mark.parametrize('name,number', [
    ('span-1', 1),
    ('span-12', 12),
    # TFX parses the span with int(), so leading zeros name the same span.
    ('span-01', 1),
    ('span-0', 0),
    ('span-1x', None),
    ('span-x1', None),
    ('span-', None),
    ('span--1', None),
    ('span-1.csv', None),
    ('xspan-1', None),
    ('Span-1', None),
    ('span-1 ', None),
])
def test_span_number_matches_the_whole_name(name, number):
  assert spans.span_number(name) == number


def test_span_dir_name_and_path_round_trip(tmp_path):
  assert spans.span_dir_name(7) == 'span-7'
  assert spans.span_path(str(tmp_path), 7) == str(tmp_path / 'span-7')
  assert spans.span_number(spans.span_dir_name(7)) == 7


@pytest.mark.parametrize('name,is_data', [
    ('data.csv', True),
    ('part-0.tfrecord.gz', True),
    ('3', True),  # A class folder of the images layout.
    ('_SUCCESS', False),
    ('.hidden.csv', False),
    ('.DS_Store', False),
    ('_SUCCESS.csv', True),  # Only the exact marker name is no data.
])
def test_is_data_entry(name, is_data):
  assert spans.is_data_entry(name) is is_data


def test_example_gen_patterns_have_one_span_token():
  # Every entry: csv_entries, not a glob, says which are CSV data.
  assert spans.example_gen_pattern('csv') == 'span-{SPAN}/*'
  assert spans.example_gen_pattern('tfrecord') == 'span-{SPAN}/*'
  assert spans.example_gen_pattern('images') == 'span-{SPAN}/*/*'
  for pattern in spans.EXAMPLE_GEN_PATTERNS.values():
    assert pattern.count(spans.SPAN_TOKEN) == 1
  with pytest.raises(ValueError, match="'parquet'"):
    spans.example_gen_pattern('parquet')


def _make(root, *names):
  for name in names:
    os.makedirs(os.path.join(root, name))


def test_list_span_dirs_sorts_by_number_not_by_name(tmp_path):
  root = str(tmp_path)
  _make(root, 'span-10', 'span-9', 'span-2')
  assert spans.list_span_dirs(root) == [
      (2, os.path.join(root, 'span-2')),
      (9, os.path.join(root, 'span-9')),
      (10, os.path.join(root, 'span-10')),
  ]
  assert spans.newest_span_dir(root) == os.path.join(root, 'span-10')


def test_list_span_dirs_skips_what_is_no_span_folder(tmp_path):
  root = str(tmp_path)
  _make(root, 'span-1', 'span-1x', 'span-old', 'span-0', 'data')
  # A file named like a span is no span folder.
  (tmp_path / 'span-2').write_text('not a folder')
  (tmp_path / spans.COMPLETE_MARKER).write_text('')
  assert spans.list_span_dirs(root) == [(1, os.path.join(root, 'span-1'))]
  assert spans.newest_span_dir(root) == os.path.join(root, 'span-1')


def test_list_span_dirs_keeps_both_folders_of_one_span(tmp_path):
  root = str(tmp_path)
  _make(root, 'span-1', 'span-01')
  # Both listed (input_checks.latest_span refuses the pair); by name within
  # the number, so the choice of newest_span_dir does not depend on listdir.
  assert spans.list_span_dirs(root) == [
      (1, os.path.join(root, 'span-01')),
      (1, os.path.join(root, 'span-1')),
  ]
  assert spans.newest_span_dir(root) == os.path.join(root, 'span-1')


def test_empty_or_missing_root_has_no_span(tmp_path):
  assert spans.list_span_dirs(str(tmp_path)) == []
  assert spans.newest_span_dir(str(tmp_path)) is None
  missing = str(tmp_path / 'missing')
  assert spans.list_span_dirs(missing) == []
  assert spans.newest_span_dir(missing) is None
