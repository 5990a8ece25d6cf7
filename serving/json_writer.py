"""JSON text exactly as TF Serving's REST API writes it.

TF Serving builds its REST responses with rapidjson's ``PrettyWriter`` (four
spaces of indent, ``kFormatSingleLineArray`` switched on and off around each
row) and formats floats with ``WriteDecimal`` in ``util/json_tensor.cc``: six
significant digits when they round-trip, else full precision, ``.0`` added to
whole numbers, ``NaN``/``Infinity``/``-Infinity`` as bare tokens. Clients that
compare response bytes, or parse them with a strict reader, see the same text
from leantfx as from ``tensorflow_model_server``.
"""
import math
import re
from typing import Any, List

import numpy as np

_ESCAPE_RE = re.compile(rb'[\x00-\x1f"\\]')
_SHORT_ESCAPES = {
    0x08: b'\\b', 0x09: b'\\t', 0x0a: b'\\n', 0x0c: b'\\f', 0x0d: b'\\r',
    0x22: b'\\"', 0x5c: b'\\\\',
}


def _escape_byte(match) -> bytes:
  byte = match.group(0)[0]
  short = _SHORT_ESCAPES.get(byte)
  if short is not None:
    return short
  return b'\\u00%02X' % byte


def quote(value) -> bytes:
  """Returns `value` (str or bytes) as a JSON string literal, rapidjson-style.

  Bytes are written as they are (rapidjson does not validate UTF-8 on output);
  only control characters, ``"`` and ``\\`` are escaped, with upper-case hex.
  """
  if isinstance(value, str):
    value = value.encode('utf-8', 'surrogatepass')
  return b'"' + _ESCAPE_RE.sub(_escape_byte, bytes(value)) + b'"'


def format_decimal(value: float, single_precision: bool) -> str:
  """Formats a float as ``WriteDecimal`` does.

  Args:
    value: the number.
    single_precision: True for DT_FLOAT (round-trip through float32), False
      for DT_DOUBLE.

  Returns:
    The JSON number token.
  """
  value = float(value)
  if math.isnan(value):
    return 'NaN'
  if math.isinf(value):
    return '-Infinity' if value < 0 else 'Infinity'
  text = '%.6g' % value
  if single_precision:
    if np.float32(float(text)) != np.float32(value):
      text = '%.9g' % value
  elif float(text) != value:
    text = '%.17g' % value
  if '.' not in text and 'e' not in text:
    text += '.0'
  return text


# Formats per value: six significant digits when they round-trip, else
# nine; '.0' after a whole number that %g writes without a point.
_FLOAT_FORMATS = ('%.9g', '%.9g.0', '%.6g', '%.6g.0')
# 10**k is exact in a double up to here, so m / 10**k rounds once.
_EXACT_POWER = 22
_FORMAT_PART = 4096


def _six_digits_round_trip(flat: np.ndarray):
  """Whether each float32 value's six-digit text reads back to it.

  Returns:
    (round_trips, unsure): boolean arrays. The six-digit rounding is done
    in double precision as printf does it in decimal: exact but for a
    product within 1e-6 of a rounding tie, or a power of ten a double does
    not hold (values below ~1e-17 or above ~1e27), which are ``unsure``.
  """
  with np.errstate(invalid='ignore'):
    magnitude = np.abs(flat.astype(np.float64))
  finite = np.isfinite(magnitude) & (magnitude > 0)
  with np.errstate(divide='ignore', invalid='ignore', over='ignore'):
    exponent = np.floor(np.log10(np.where(finite, magnitude, 1.0)))
    k = (5 - exponent).astype(np.int64)
    unsure = ~finite | (np.abs(k) > _EXACT_POWER - 1)
    k = np.where(unsure, 0, k)
    # log10 may be off by one next to a power of ten: mend it.
    for _ in range(2):
      scaled = magnitude * np.power(10.0, k)
      k = k - (scaled >= 999999.5) + (scaled < 99999.5)
    scaled = magnitude * np.power(10.0, k)
    unsure |= np.abs(scaled - np.floor(scaled) - 0.5) < 1e-6
    digits = np.rint(scaled)
    back = np.where(k >= 0, digits / np.power(10.0, np.maximum(k, 0)),
                    digits * np.power(10.0, np.maximum(-k, 0)))
  round_trips = back.astype(np.float32) == np.abs(flat.astype(np.float32))
  return round_trips, unsure


def format_decimals(values: np.ndarray, single_precision: bool) -> List[str]:
  """format_decimal of each value of a float array, in bulk.

  The same tokens as format_decimal value by value. For float32 the
  six-digit round trip is decided on the array (_six_digits_round_trip),
  and the values are formatted by one printf-style call per part of
  _FORMAT_PART values (a part holds the interpreter a few milliseconds, so
  the event loop answers between parts); doubles, and the few float32
  values that check cannot decide, go value by value.

  Args:
    values: a float array (any shape; read flat).
    single_precision: True for DT_FLOAT, False for DT_DOUBLE.

  Returns:
    The tokens, in the array's (C) order.
  """
  flat = np.ascontiguousarray(values).reshape(-1)
  if not single_precision:
    return [format_decimal(v, False) for v in flat.tolist()]
  texts: List[str] = []
  for start in range(0, flat.size, _FORMAT_PART):
    texts += _format_float32s(flat[start:start + _FORMAT_PART])
  return texts


def _format_float32s(flat: np.ndarray) -> List[str]:
  with np.errstate(invalid='ignore', over='ignore'):
    numbers = flat.astype(np.float64).tolist()
    round_trips, unsure = _six_digits_round_trip(flat)
    narrow = flat.astype(np.float32)
    whole = (narrow == np.rint(narrow)) & (
        np.abs(narrow) < np.where(round_trips, 999999.5, 1e9))
  choice = (round_trips.astype(np.int64) * 2 + whole).tolist()
  pattern = '\n'.join([_FLOAT_FORMATS[c] for c in choice])
  texts = (pattern % tuple(numbers)).split('\n')
  for index in np.flatnonzero(unsure).tolist():
    texts[index] = format_decimal(numbers[index], True)
  return texts


class PrettyWriter:
  """A byte-for-byte model of rapidjson's ``PrettyWriter`` (indent 4).

  Call the start/end/value methods in document order, then :meth:`getvalue`.
  ``single_line_array`` mirrors ``SetFormatOptions(kFormatSingleLineArray)``:
  it is read when each value is written and when an array ends, exactly as in
  rapidjson, which is what gives TF Serving's responses their shape.
  """

  def __init__(self):
    self._parts: List[bytes] = []
    # Each level: [is_array, value_count].
    self._stack: List[List[Any]] = []
    self.single_line_array = False

  def _indent(self):
    self._parts.append(b' ' * (4 * len(self._stack)))

  def _prefix(self):
    if not self._stack:
      return
    level = self._stack[-1]
    if level[0]:
      if level[1] > 0:
        self._parts.append(b', ' if self.single_line_array else b',')
      if not self.single_line_array:
        self._parts.append(b'\n')
        self._indent()
    else:
      if level[1] > 0:
        self._parts.append(b',\n' if level[1] % 2 == 0 else b': ')
      else:
        self._parts.append(b'\n')
      if level[1] % 2 == 0:
        self._indent()
    level[1] += 1

  def start_object(self):
    self._prefix()
    self._stack.append([False, 0])
    self._parts.append(b'{')

  def end_object(self):
    level = self._stack.pop()
    if level[1]:
      self._parts.append(b'\n')
      self._indent()
    self._parts.append(b'}')

  def start_array(self):
    self._prefix()
    self._stack.append([True, 0])
    self._parts.append(b'[')

  def end_array(self):
    level = self._stack.pop()
    if level[1] and not self.single_line_array:
      self._parts.append(b'\n')
      self._indent()
    self._parts.append(b']')

  def key(self, name):
    self.string(name)

  def string(self, value):
    self._prefix()
    self._parts.append(quote(value))

  def raw_number(self, token: str):
    self._prefix()
    self._parts.append(token.encode('ascii'))

  def int(self, value):
    self.raw_number(str(int(value)))

  def numbers(self, tokens: List[str]):
    """An array of number tokens: start_array, raw_number each, end_array.

    The same bytes as those calls, joined at once (the separators depend
    only on the depth and single_line_array, which no token changes).
    """
    self._prefix()
    if not tokens:
      self._parts.append(b'[]')
      return
    if self.single_line_array:
      self._parts.append(b'[' + ', '.join(tokens).encode('ascii') + b']')
      return
    inner = '\n' + ' ' * (4 * (len(self._stack) + 1))
    outer = ('\n' + ' ' * (4 * len(self._stack))).encode('ascii')
    self._parts.append(b'[' + inner.encode('ascii') +
                       (',' + inner).join(tokens).encode('ascii') + outer +
                       b']')

  def bool(self, value):
    self.raw_number('true' if value else 'false')

  def null(self):
    self.raw_number('null')

  def getvalue(self) -> bytes:
    return b''.join(self._parts)


# TF Serving leaves large values whole (a TODO in json_tensor.cc); leantfx
# truncates them so a 16 MiB request cannot come back as a 16 MiB error.
_MAX_VALUE_CHARS = 1000
_FLOAT_MAX = float(np.finfo(np.float32).max)


def _write_value(writer: PrettyWriter, value: Any):
  if isinstance(value, dict):
    writer.start_object()
    for key, item in value.items():
      writer.key(key)
      _write_value(writer, item)
    writer.end_object()
  elif isinstance(value, list):
    writer.start_array()
    for item in value:
      _write_value(writer, item)
    writer.end_array()
  elif isinstance(value, bool):
    writer.bool(value)
  elif isinstance(value, int):
    writer.int(value)
  elif isinstance(value, float):
    writer.raw_number(format_decimal(value, single_precision=False)
                      if not math.isfinite(value) else repr(value))
  elif isinstance(value, str):
    writer.string(value)
  elif value is None:
    writer.null()
  else:
    writer.string(str(value))


def value_to_string(value: Any) -> str:
  """Returns a parsed JSON value as text for an error message.

  Mirrors ``JsonValueToString`` (pretty-printed, floats at top level through
  ``WriteDecimal``), cut to 1000 characters.
  """
  if isinstance(value, float):
    # JsonValueToString writes a float through WriteDecimal<float> when the
    # double converts to float exactly (rapidjson's IsFloat()).
    single = (not math.isfinite(value) or
              (abs(value) <= _FLOAT_MAX and float(np.float32(value)) == value))
    text = format_decimal(value, single_precision=single)
  else:
    writer = PrettyWriter()
    _write_value(writer, value)
    text = writer.getvalue().decode('utf-8', 'replace')
  if len(text) > _MAX_VALUE_CHARS:
    text = text[:_MAX_VALUE_CHARS] + '...'
  return text


def error_body(message: str) -> bytes:
  """Returns ``{"error": message}`` as ``MakeJsonFromStatus`` writes it."""
  writer = PrettyWriter()
  writer.start_object()
  writer.key('error')
  writer.string(message)
  writer.end_object()
  return writer.getvalue()
