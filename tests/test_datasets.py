"""Bundled datasets: written as span CSVs, idempotent, matching their specs."""
import csv
import os

import pytest

from leantfx import datasets
from leantfx.errors import ConfigError
from leantfx import input_checks

pytestmark = pytest.mark.unit


@pytest.mark.parametrize('name,rows,counts', [
    # palmerpenguins ships 344 penguins: 152 Adelie, 68 Chinstrap, 124 Gentoo.
    ('penguins', 344, {'Adelie': 152, 'Chinstrap': 68, 'Gentoo': 124}),
    # scikit-learn's load_digits has 1797 images, 174 to 183 per digit.
    ('digits', 1797, None),
])
def test_prepare_writes_a_span_the_checks_accept(tmp_path, name, rows, counts):
  path = datasets.prepare(name, str(tmp_path))
  assert path == os.path.join(str(tmp_path), 'span-1', f'{name}.csv')
  spec = datasets.BUNDLED[name]
  profile = input_checks.profile_csv_data_root(
      str(tmp_path), spec.label,
      numeric_columns=spec.numeric_features + spec.image_features,
      categorical_columns=spec.categorical_features,
      required_columns=spec.feature_columns)
  assert profile.num_rows == rows
  assert set(profile.label_values) == set(spec.classes)
  if counts:
    with open(path, encoding='utf-8') as f:
      labels = [r[spec.label] for r in csv.DictReader(f)]
    assert {c: labels.count(c) for c in counts} == counts


def test_prepare_is_idempotent_and_keeps_mtime(tmp_path):
  path = datasets.prepare('penguins', str(tmp_path))
  os.utime(path, (1_000_000, 1_000_000))
  datasets.prepare('penguins', str(tmp_path))
  assert os.stat(path).st_mtime == 1_000_000


def test_penguins_missing_values_are_empty_fields(tmp_path):
  path = datasets.prepare('penguins', str(tmp_path))
  with open(path, encoding='utf-8') as f:
    text = f.read()
  assert 'NA' not in text.split(',')
  assert ',,' in text  # the measured-nothing rows keep empty fields


def test_prepare_rejects_unknown_dataset_and_span(tmp_path):
  with pytest.raises(ConfigError, match='Unknown dataset'):
    datasets.prepare('mnist', str(tmp_path))
  with pytest.raises(ConfigError, match='Span numbers start at 1'):
    datasets.prepare('digits', str(tmp_path), span=0)
