"""The argument types of every ``leantfx`` command, one rule each.

argparse calls these on the option's text; an ``ArgumentTypeError`` becomes
``leantfx COMMAND: error: argument --X: <message>`` and exit 2, the same
message whichever command (run, compile, watch, ...) has the option.
"""
import argparse
import re
from typing import Optional

from leantfx.runtimes import registry as runtimes
from leantfx.errors import ConfigError
from leantfx.pipeline import beam_presets

_SIZE_RE = re.compile(r'^\s*(\d+)\s*(|b|k|kb|kib|m|mb|mib|g|gb|gib)\s*$',
                      re.IGNORECASE)
_SIZE_UNITS = {'': 1, 'b': 1, 'k': 1024, 'kb': 1000, 'kib': 1024,
               'm': 1024**2, 'mb': 1000**2, 'mib': 1024**2, 'g': 1024**3,
               'gb': 1000**3, 'gib': 1024**3}


def _number(text: str, kind=float):
  try:
    return kind(text)
  except ValueError:
    what = 'a whole number' if kind is int else 'a number'
    raise argparse.ArgumentTypeError(f'{text!r} is not {what}') from None


def whole_number(text: str) -> int:
  """Any integer (the config objects check the range)."""
  return _number(text, int)


def positive_int(text: str) -> int:
  """A whole number >= 1."""
  value = _number(text, int)
  if value < 1:
    raise argparse.ArgumentTypeError(f'must be >= 1, got {value}')
  return value


def non_negative_int(text: str) -> int:
  """A whole number >= 0."""
  value = _number(text, int)
  if value < 0:
    raise argparse.ArgumentTypeError(f'must be >= 0, got {value}')
  return value


def positive_float(text: str) -> float:
  """A number > 0."""
  value = _number(text)
  if not value > 0:
    raise argparse.ArgumentTypeError(f'must be > 0, got {value}')
  return value


def non_negative_float(text: str) -> float:
  """A number >= 0."""
  value = _number(text)
  if not value >= 0:
    raise argparse.ArgumentTypeError(f'must be >= 0, got {value}')
  return value


def fraction(text: str) -> float:
  """A share from 0 to 1, both included (accuracies, accuracy drops)."""
  value = _number(text)
  if not 0.0 <= value <= 1.0:
    raise argparse.ArgumentTypeError(f'must be in [0, 1], got {value}')
  return value


def fraction_or_off(text: str) -> Optional[float]:
  """A share from 0 to 1, or 'off' (None): --baseline-margin."""
  if text.strip().lower() == 'off':
    return None
  return fraction(text)


def trials_or_auto(text: str):
  """A trial budget (any integer; the config checks the range), or 'auto'
  (--tune auto: tune only when the network trails the strong baseline)."""
  if text.strip().lower() == 'auto':
    return 'auto'
  return whole_number(text)


def fraction_below_one(text: str) -> float:
  """A share in [0, 1): augmentation ranges, where 1 would erase the image."""
  value = _number(text)
  if not 0.0 <= value < 1.0:
    raise argparse.ArgumentTypeError(f'must be in [0, 1), got {value}')
  return value


def port(text: str) -> int:
  """A TCP port, 0 meaning any free one."""
  value = _number(text, int)
  if not 0 <= value <= 65535:
    raise argparse.ArgumentTypeError(f'port {value} is not in 0..65535')
  return value


def size_bytes(text: str) -> int:
  """``16MiB``, ``10MB``, ``1048576`` ... in bytes."""
  match = _SIZE_RE.match(text)
  if not match:
    raise argparse.ArgumentTypeError(
        f'{text!r} is not a size; use e.g. 16MiB, 500KB or 1048576.')
  return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]


def beam_environment(text: str) -> beam_presets.Environment:
  """--environment: loopback, external:HOST:PORT, process[:CMD], docker:IMAGE."""
  try:
    return beam_presets.parse_environment(text)
  except ConfigError as e:
    raise argparse.ArgumentTypeError(str(e)) from None


def job_endpoint(text: str) -> str:
  """--job-endpoint: embed or HOST:PORT."""
  try:
    return beam_presets.parse_job_endpoint(text)
  except ConfigError as e:
    raise argparse.ArgumentTypeError(str(e)) from None


def runtime_list(text: str) -> str:
  """A comma-separated list of optimizer runtimes, e.g. 'tflite,openvino'.

  'all' stands for every runtime installed where the optimizer runs. Kept as
  the normalized text (so ``leantfx watch`` passes it on as given);
  ``build.optimization_config`` splits it.
  """
  if text.strip() == runtimes.ALL:
    return runtimes.ALL
  names = [n.strip() for n in text.split(',') if n.strip()]
  try:
    runtimes.check_names(names)
  except ConfigError as e:
    raise argparse.ArgumentTypeError(str(e)) from None
  return ','.join(names)


ALL_TECHNIQUES = 'all'
NO_TECHNIQUES = 'none'


def technique_list(text: str) -> str:
  """--techniques: all, none, or a comma-separated list of candidate names.

  The names are checked against the model's task when the optimizer's
  config is built (``build.optimization_config``: a regression model has no
  technique candidates); here only the form: no empty or repeated name, and
  'all' / 'none' alone. Kept as the normalized text, as ``runtime_list``.
  """
  names = [n.strip() for n in text.split(',')]
  if not all(names):
    raise argparse.ArgumentTypeError(
        f'{text!r} has an empty name; give comma-separated candidate names, '
        f'{ALL_TECHNIQUES} or {NO_TECHNIQUES}')
  repeated = sorted({n for n in names if names.count(n) > 1})
  if repeated:
    raise argparse.ArgumentTypeError(f'{text!r} names {repeated} twice')
  alone = [n for n in names if n in (ALL_TECHNIQUES, NO_TECHNIQUES)]
  if alone and len(names) > 1:
    raise argparse.ArgumentTypeError(
        f'{alone[0]!r} stands alone; got {text!r}')
  return ','.join(names)
