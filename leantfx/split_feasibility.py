"""Whether a span can be split into train and eval sensibly, before a run is spent.

The ExampleGen puts 4 of every 5 rows in train and 1 in eval (leantfx/
splits.py). A class needs at least MIN_ROWS_PER_CLASS rows for that 4:1
split to be able to hold it in both splits (4 train rows and 1 eval row);
a span needs at least MIN_ROWS rows for its eval split to hold about 2 rows,
the fewest a figure can be measured on. Either shortfall is refused with the
classes and their counts, and what to do, before any component runs.
"""
from typing import Mapping, Sequence, Tuple

from leantfx import splits
from leantfx.errors import ConfigError

_TRAIN_PARTS = dict(splits.SPLITS)['train']
_EVAL_PARTS = dict(splits.SPLITS)['eval']
# 4 + 1: one eval row beside four train rows.
MIN_ROWS_PER_CLASS = _TRAIN_PARTS + _EVAL_PARTS
# 10 rows: an eval split of about 2 rows.
MIN_ROWS = 2 * (_TRAIN_PARTS + _EVAL_PARTS)
# At most this many classes are named in the message.
_MAX_NAMED = 12


def rare_classes(label_counts: Mapping[str, int],
                 min_rows: int = MIN_ROWS_PER_CLASS
                ) -> Tuple[Tuple[str, int], ...]:
  """(class, rows) of the classes under min_rows, rarest first."""
  return tuple(sorted(((c, n) for c, n in label_counts.items()
                       if n < min_rows), key=lambda item: (item[1], item[0])))


def _named(classes: Sequence[Tuple[str, int]]) -> str:
  text = ', '.join(f'{c!r}: {n}' for c, n in classes[:_MAX_NAMED])
  more = len(classes) - _MAX_NAMED
  return text + (f' and {more} more' if more > 0 else '')


def check(num_rows: int, label_counts: Mapping[str, int], label: str,
          where: str, regression: bool) -> None:
  """Refuses a span the 4:1 split cannot serve.

  Args:
    num_rows: the span's rows.
    label_counts: {class: rows} (empty for a regression, or when the
      profile did not count them).
    label: the label column, as written.
    where: the span, for the message ('span 1 of /data').
    regression: the label is a number (no classes to check).

  Raises:
    ConfigError: too few rows, or classes too rare for both splits (the
      CLI exits 2).
  """
  if num_rows < MIN_ROWS:
    raise ConfigError(
        f'{where} holds {num_rows} row(s); the {_TRAIN_PARTS}:{_EVAL_PARTS} '
        f'train/eval split needs at least {MIN_ROWS} for its eval split to '
        'hold the 2 rows a figure can be measured on. Nothing was run. Add '
        'rows to the span.')
  if regression or not label_counts:
    return
  rare = rare_classes(label_counts)
  if not rare:
    return
  raise ConfigError(
      f'{where}: {len(rare)} of the {len(label_counts)} classes of {label!r} '
      f'have fewer than {MIN_ROWS_PER_CLASS} rows, the fewest a '
      f'{_TRAIN_PARTS}:{_EVAL_PARTS} train/eval split can hold in both '
      f'splits ({_TRAIN_PARTS} to train on, {_EVAL_PARTS} to evaluate): '
      f'{_named(rare)}. Nothing was run. Add rows of those classes, merge '
      'each into a related larger class, or drop their rows from the span.')


def check_profile(profile, spec) -> None:
  """check() on what the pre-flight saw of the span (a CSV, TFRecord or
  image profile; a profile that did not count classes is checked for its
  rows only).

  Raises:
    ConfigError: see check().
  """
  check(profile.num_rows, getattr(profile, 'label_counts', None) or {},
        spec.original_name(spec.label),
        f'Span {profile.span} ({profile.span_dir})', spec.is_regression)
