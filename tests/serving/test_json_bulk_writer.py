"""The bulk number writer writes the bytes the value-by-value writer does.

format_decimals and PrettyWriter.numbers replaced a format_decimal and a
raw_number call per value (a 100,000-row answer took ~10 s in them); these
tests hold the two to the same bytes, value by value and document by
document, on the values where the six-or-nine-digit choice is delicate.
"""
import numpy as np
import pytest

from leantfx.serving import dtypes
from leantfx.serving import json_tensor
from leantfx.serving import json_writer

pytestmark = pytest.mark.unit


def _delicate_float32s():
  rng = np.random.default_rng(0)
  # Every bit pattern is a float32 (NaN, infinities, subnormals included).
  bits = rng.integers(0, 2**32, size=50_000, dtype=np.uint64)
  random_bits = bits.astype(np.uint32).view(np.float32)
  # Softmax-like outputs: many tiny probabilities.
  probabilities = rng.random(50_000).astype(np.float32) ** 8
  whole = rng.integers(-2**25, 2**25, size=20_000).astype(np.float32)
  edges = np.array([
      0.0, -0.0, 1.0, 0.5, 0.1, 1e-5, 1e-4, 1e-17, 1e-45, 3.4e38,
      99999.5, 100000.0, 123456.5, 999999.0, 999999.5, 1e6, 1234565.0,
      999999936.0, 1e9, np.nan, np.inf, -np.inf], np.float32)
  return np.concatenate([random_bits, probabilities, whole, edges])


def test_float32_tokens_are_format_decimal_s():
  values = _delicate_float32s()
  with np.errstate(invalid='ignore'):
    expected = [json_writer.format_decimal(v, True) for v in values.tolist()]
  assert json_writer.format_decimals(values, True) == expected


def test_double_tokens_are_format_decimal_s():
  values = np.array([0.1, 1.0, 1e300, -2.5e-310, np.nan, 1 / 3], np.float64)
  assert json_writer.format_decimals(values, False) == [
      json_writer.format_decimal(v, False) for v in values.tolist()]


def _value_by_value(outputs, request_format):
  """predict_outputs_to_json with the bulk paths switched off."""
  original = json_tensor._number_tokens
  json_tensor._number_tokens = lambda array, dtype: None
  try:
    return json_tensor.predict_outputs_to_json(outputs, request_format)
  finally:
    json_tensor._number_tokens = original


@pytest.mark.parametrize('request_format', list(json_tensor.RequestFormat))
@pytest.mark.parametrize('outputs', [
    {'probabilities': np.random.default_rng(1).random((7, 10), np.float32)},
    {'p': np.random.default_rng(2).random((3, 2, 4)).astype(np.float32),
     'ids': np.arange(3, dtype=np.int64),
     'flags': np.array([True, False, True]),
     'score': np.array([0.25, 1e-7, 3.0], np.float64)},
    {'one': np.array([1.5], np.float32)},
    {'empty_rows': np.zeros((2, 0), np.float32)},
], ids=['probabilities', 'mixed', 'one', 'empty_rows'])
def test_documents_match_byte_for_byte(outputs, request_format):
  assert (json_tensor.predict_outputs_to_json(outputs, request_format) ==
          _value_by_value(outputs, request_format))


def test_numeric_tokens_cover_every_numeric_dtype():
  for dtype in (dtypes.DT_FLOAT, dtypes.DT_DOUBLE, dtypes.DT_INT32,
                dtypes.DT_INT64, dtypes.DT_UINT8, dtypes.DT_BOOL):
    array = np.ones((2,), dtype.numpy)
    assert json_tensor._number_tokens(array, dtype) is not None, dtype
  assert json_tensor._number_tokens(np.array([b'a'], object),
                                    dtypes.DT_STRING) is None
