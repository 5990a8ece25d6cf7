"""Whether a span can be split into train and eval sensibly, before a run is spent.

The ExampleGen puts 4 of every 5 rows in train and 1 in eval (leantfx/
splits.py). A class needs at least MIN_ROWS_PER_CLASS rows for that 4:1
split to be able to hold it in both splits (4 train rows and 1 eval row);
a span needs at least MIN_ROWS rows for its eval split to hold about 2 rows,
the fewest a figure can be measured on. Either shortfall is refused with the
classes and their counts, and what to do, before any component runs.

``--min-rows-per-class N`` drops the rows of the classes under N rows
instead (the CSV ExampleGen leaves them out as it reads the span, and the
row count counts them as dropped, leantfx/row_counts.py); the classes left
must then pass the same checks.
"""
import dataclasses
from typing import Mapping, Optional, Sequence, Tuple

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


@dataclasses.dataclass(frozen=True)
class ClassDrop:
  """The classes ``--min-rows-per-class`` drops, as the pre-flight counted.

  Attributes:
    min_rows: the option's N.
    classes: (class, rows) of the classes under N rows, rarest first.
  """
  min_rows: int
  classes: Tuple[Tuple[str, int], ...]

  @property
  def rows(self) -> int:
    """The rows of the dropped classes."""
    return sum(n for _, n in self.classes)

  def line(self) -> str:
    """The plan's line: which classes, how many rows."""
    if not self.classes:
      return (f'  --min-rows-per-class {self.min_rows}: every class has at '
              'least that many rows; no row dropped')
    return (f'  --min-rows-per-class {self.min_rows}: {len(self.classes)} '
            f'class(es) under {self.min_rows} rows dropped, {self.rows:,} '
            f'row(s): {named_classes(self.classes)}')


def drop_rare(label_counts: Mapping[str, int], label: str, where: str,
              min_rows: int) -> Tuple[ClassDrop, Mapping[str, int]]:
  """The classes under min_rows dropped, and the counts of those left.

  Raises:
    ConfigError: fewer than 2 classes would be left.
  """
  dropped = ClassDrop(min_rows, rare_classes(label_counts, min_rows))
  names = {c for c, _ in dropped.classes}
  kept = {c: n for c, n in label_counts.items() if c not in names}
  if len(kept) < 2:
    raise ConfigError(
        f'{where}: --min-rows-per-class {min_rows} would drop '
        f'{len(dropped.classes)} of the {len(label_counts)} classes of '
        f'{label!r} ({named_classes(dropped.classes)}), leaving '
        f'{len(kept)}; a classification needs at least 2. Nothing was run. Pass a smaller '
        'N, or add rows of those classes.')
  return dropped, kept


def named_classes(classes: Sequence[Tuple[str, int]]) -> str:
  """"'a': 3, 'b': 4 and 10 more" of (class, rows), in their order."""
  text = ', '.join(f'{c!r}: {n}' for c, n in classes[:_MAX_NAMED])
  more = len(classes) - _MAX_NAMED
  return text + (f' and {more} more' if more > 0 else '')


def check(num_rows: int, label_counts: Mapping[str, int], label: str,
          where: str, regression: bool,
          min_rows_per_class: Optional[int] = None) -> Optional[ClassDrop]:
  """Refuses a span the 4:1 split cannot serve.

  Args:
    num_rows: the span's rows.
    label_counts: {class: rows} (empty for a regression, or when the
      profile did not count them).
    label: the label column, as written.
    where: the span, for the message ('span 1 of /data').
    regression: the label is a number (no classes to check).
    min_rows_per_class: --min-rows-per-class (None: off): the classes under
      it are dropped first, and the rest checked.

  Returns:
    The classes dropped (None without min_rows_per_class).

  Raises:
    ConfigError: too few rows, or classes too rare for both splits (the
      CLI exits 2); min_rows_per_class on a regression, or on a profile
      that counted no classes.
  """
  dropped = None
  if min_rows_per_class is not None:
    if regression or not label_counts:
      raise ConfigError(
          f'--min-rows-per-class drops the rows of rare classes, and '
          f'{label!r} in {where} is ' + (
              'a regression target with no classes' if regression else
              'a label whose classes were not counted') + '. Drop the option.')
    dropped, label_counts = drop_rare(label_counts, label, where,
                                      min_rows_per_class)
    num_rows -= dropped.rows
  if num_rows < MIN_ROWS:
    after = (f' after --min-rows-per-class dropped {dropped.rows}'
             if dropped and dropped.rows else '')
    raise ConfigError(
        f'{where} holds {num_rows} row(s){after}; the '
        f'{_TRAIN_PARTS}:{_EVAL_PARTS} train/eval split needs at least {MIN_ROWS} for its eval split to '
        'hold the 2 rows a figure can be measured on. Nothing was run. Add '
        'rows to the span.')
  if regression or not label_counts:
    return dropped
  rare = rare_classes(label_counts)
  if not rare:
    return dropped
  raise ConfigError(
      f'{where}: {len(rare)} of the {len(label_counts)} classes of {label!r} '
      f'have fewer than {MIN_ROWS_PER_CLASS} rows, the fewest a '
      f'{_TRAIN_PARTS}:{_EVAL_PARTS} train/eval split can hold in both '
      f'splits ({_TRAIN_PARTS} to train on, {_EVAL_PARTS} to evaluate): '
      f'{named_classes(rare)}. Nothing was run. Add rows of those classes, '
      'merge each into a related larger class, drop their rows from the span, or '
      f'pass --min-rows-per-class {MIN_ROWS_PER_CLASS} to have the run drop '
      'the rows of every class under that many (counted and named in its '
      'summary).')


def check_profile(profile, spec,
                  min_rows_per_class: Optional[int] = None
                 ) -> Optional[ClassDrop]:
  """check() on what the pre-flight saw of the span (a CSV, TFRecord or
  image profile; a profile that did not count classes is checked for its
  rows only).

  Returns:
    The classes --min-rows-per-class drops (None without it).

  Raises:
    ConfigError: see check().
  """
  return check(profile.num_rows,
               getattr(profile, 'label_counts', None) or {},
               spec.original_name(spec.label),
               f'Span {profile.span} ({profile.span_dir})',
               spec.is_regression, min_rows_per_class)
