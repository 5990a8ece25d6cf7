"""Feature keys of column names as written (leantfx/columns.py)."""
import pytest

from leantfx import columns


@pytest.mark.unit
@pytest.mark.parametrize('name', ['sepal_length', 'x', 'Culmen1', 'a_b_c'])
def test_plain_names_are_their_own_keys(name):
  assert columns.feature_keys([name, 'other'])[name] == name


@pytest.mark.unit
@pytest.mark.parametrize('name', [
    'alcohol (%)',    # scikit-learn's own style
    'größe',          # non-ASCII letters
    'a,b "q"',        # a quoted CSV name
    'label',          # the pipeline's own label key, once transformed
    'image',
    'pixel_xf',       # ends like a transformed feature
    '1st',            # starts with a digit
    ' padded ',
    'x' * 60,         # longer than a key may be
])
def test_other_names_get_a_derived_plain_key(name):
  key = columns.feature_keys([name, 'other'])[name]
  assert key != name
  assert columns.is_plain(key)


@pytest.mark.unit
def test_names_equal_but_for_case_both_get_derived_keys():
  # On a case-insensitive file system their vocabulary files would clash.
  keys = columns.feature_keys(['Age', 'age', 'AGE'])
  assert len({k.lower() for k in keys.values()}) == 3
  assert all(k != n for n, k in keys.items())


@pytest.mark.unit
def test_keys_depend_on_the_name_only():
  # The same column gets the same key in every span and header order.
  a = columns.feature_keys(['alcohol (%)', 'x', 'y'])
  b = columns.feature_keys(['y', 'alcohol (%)', 'z', 'x'])
  assert a['alcohol (%)'] == b['alcohol (%)']


@pytest.mark.unit
def test_renamed_lists_only_the_renamed_columns():
  renamed = columns.renamed(['ok', 'not ok'])
  assert list(renamed.values()) == ['not ok']


@pytest.mark.unit
def test_a_plain_name_equal_to_a_derived_key_is_refused():
  derived = columns.derived_key('a b')
  with pytest.raises(ValueError, match='same feature key'):
    columns.feature_keys(['a b', derived])
