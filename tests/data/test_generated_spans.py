"""Generated CSV spans with hostile but legal names, labels and values.

Property: for every span, either the pre-flight checks refuse it with an
InputDataError (what, where, what to do) before anything runs, or leantfx's
CsvExampleGen reads every row the checks counted, file by file, keeps every
label exactly as written and writes every column under its feature key, with
the kind the checks gave it. Hypothesis draws the spans (derandomized, so CI
sees the same ones every run; no shrinking, each example runs a Beam job).
"""
import csv
import io
import os
import shutil

import hypothesis
from hypothesis import strategies as st
import pytest

from leantfx import columns
from leantfx import input_checks
from leantfx import row_counts
from leantfx.components.csv_example_gen import options as options_lib
from leantfx.errors import InputDataError
from tests.data import test_csv_example_gen

# Names and labels people's exports hold, besides random text.
HOSTILE_NAMES = ['label', 'alcohol (%)', 'größe', 'a,b "q"', 'Age', 'age',
                 'x_xf', 'image', '1st', 'naïve value', 'km/h', ' padded ']
HOSTILE_LABELS = ['+1', '-1', '01', '1', '1.0', 'yes', 'Barolo', 'barolo',
                  'barolo ', 'ünï', 'a,b', 'say "hi"', 'two\nlines']
_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=('Cs', 'Cc')), min_size=1,
    max_size=10)
_VALUES = st.one_of(
    st.integers(-10**6, 10**6).map(str),
    st.floats(-1e6, 1e6, allow_nan=False).map(lambda f: f'{f:.6g}'),
    st.just(''), _TEXT, st.sampled_from(['NA', 'nan', '+3', '0x10', ' 7']))


@st.composite
def spans_(draw, rows_per_file=(1, 12)):
  """(files {name: csv text}, label column, rows in all)."""
  names = draw(st.lists(st.sampled_from(HOSTILE_NAMES), min_size=1,
                        max_size=4, unique=True))
  names = list(dict.fromkeys(names + [draw(_TEXT)]))
  label = draw(st.sampled_from(names))
  label_pool = draw(st.lists(st.sampled_from(HOSTILE_LABELS), min_size=1,
                             max_size=3, unique=True))
  label_pool = sorted(set(label_pool + [draw(_TEXT)]))
  numeric = {n: draw(st.booleans()) for n in names}
  files = {}
  total = 0
  for index in range(draw(st.integers(1, 2))):
    rows = []
    for _ in range(draw(st.integers(*rows_per_file))):
      row = []
      for name in names:
        if name == label:
          row.append(draw(st.sampled_from(label_pool)))
        elif numeric[name]:
          row.append(draw(st.one_of(
              st.integers(-1000, 1000).map(str),
              st.floats(-1e3, 1e3, allow_nan=False).map(lambda f: f'{f:.4g}'),
              st.just(''))))
        else:
          row.append(draw(_VALUES))
      rows.append(row)
    total += len(rows)
    buffer = io.StringIO(newline='')
    writer = csv.writer(buffer)
    writer.writerow(names)
    writer.writerows(rows)
    extension = draw(st.sampled_from(['.csv', '.CSV', '.Csv']))
    files[f'part{index}{extension}'] = buffer.getvalue()
  return files, label, total


def write_span(root, files):
  """Writes files into root/span-1/ (root emptied first)."""
  span = os.path.join(root, 'span-1')
  shutil.rmtree(root, ignore_errors=True)
  os.makedirs(span)
  for name, text in files.items():
    with open(os.path.join(span, name), 'w', encoding='utf-8',
              newline='') as f:
      f.write(text)


@pytest.mark.unit
@hypothesis.settings(
    max_examples=12, deadline=None, derandomize=True, database=None,
    phases=(hypothesis.Phase.explicit, hypothesis.Phase.generate),
    suppress_health_check=list(hypothesis.HealthCheck))
@hypothesis.given(span=spans_())
def test_the_checks_refuse_a_span_or_the_example_gen_uses_every_row(
    tmp_path_factory, span):
  files, label, total = span
  tmp = tmp_path_factory.mktemp('span')
  root = str(tmp / 'data')
  write_span(root, files)
  try:
    profile = input_checks.profile_csv_data_root(root, label)
  except InputDataError as e:
    # Refused before anything runs: the message says where.
    assert str(e) and ('span 1' in str(e) or root in str(e)), str(e)
    hypothesis.event('refused by the checks')
    return
  hypothesis.event('read by the ExampleGen')
  assert profile.num_rows == total
  options = options_lib.CsvReadOptions(
      label=label, categorical_columns=profile.categorical_columns)
  artifact, examples = test_csv_example_gen._run(tmp, root, options)
  # Rows in == rows used, per file.
  assert len(examples) == total
  assert row_counts.decode(artifact.get_string_custom_property(
      row_counts.ROWS_BY_FILE_PROPERTY)) == profile.rows_by_file
  keys = columns.feature_keys(list(profile.columns))
  assert keys == dict(profile.feature_keys)
  # Labels exactly as written.
  written = sorted(e.features.feature[keys[label]].bytes_list.value[0]
                   for e in examples)
  assert set(written) == {v.encode('utf-8') for v in profile.label_values}
  # Every column under its key, with the checks' kind.
  for example in examples:
    features = example.features.feature
    for name in profile.numeric_columns:
      kind = features[keys[name]].WhichOneof('kind')
      assert kind in (None, 'int64_list', 'float_list'), (name, kind)
    for name in profile.categorical_columns:
      kind = features[keys[name]].WhichOneof('kind')
      assert kind in (None, 'bytes_list'), (name, kind)
