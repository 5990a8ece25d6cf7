"""Column roles: what each column of a user's CSV means, decided in one place.

A careful engineer looks at every column before training on it; this module
is that look, made once per run by the pre-flight (leantfx/input_checks.py
feeds it every value of the newest span in its one pass) and carried in the
DatasetSpec to every component, runner and runtime:

  numeric      every present value is a finite number, or a missing-value
               marker (``NA``, ``n/a``, ``null``, ``-``, ...: ``MISSING_MARKERS``),
               which the ExampleGen then writes as missing;
  categorical  a small vocabulary of values (a vocabulary with an OOV bucket);
  boolean      two values of one yes/no pair (``true``/``false``, ``yes``/``no``,
               ``y``/``n``, ``t``/``f``): trained as a two-value category;
  date         every present value is a date or timestamp of one format of
               ``DATE_FORMATS`` (the format found is stated; ``--date-format``
               sets it): calendar features in the Transform;
  text         words: values of several words each, most of them distinct:
               tokens, n-grams and TF-IDF in the Transform;
  identifier   a near-unique value per row (an order or customer id): left
               out of the features (it would be memorised, not learned) and
               kept in ``leantfx score``'s output.

``--column-role COL=ROLE`` overrides any of them (an identifier forced to a
feature is allowed and warned about).

The decision reads counts that ``ColumnStats`` accumulates one value at a
time, so a million-row span costs one pass and bounded memory (distinct
values are counted up to ``DISTINCT_CAP``).
"""
import dataclasses
import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from leantfx.errors import ConfigError, InputDataError

NUMERIC, CATEGORICAL, BOOLEAN, DATE, TEXT, IDENTIFIER = (
    'numeric', 'categorical', 'boolean', 'date', 'text', 'identifier')
ROLES = (NUMERIC, CATEGORICAL, BOOLEAN, DATE, TEXT, IDENTIFIER)
# Spellings of "no value" seen in exported spreadsheets and databases. In a
# column of numbers they mean missing; in any other column they stay values
# as written (a category 'NA' may be meant).
MISSING_MARKERS = frozenset({
    'NA', 'N/A', 'n/a', 'na', 'N.A.', 'NaN', 'nan', 'NAN', 'null', 'NULL',
    'Null', 'None', 'none', 'NONE', '-', '--', '?', '#N/A', '#NA', 'missing'})
_BOOLEAN_PAIRS = (frozenset({'true', 'false'}), frozenset({'yes', 'no'}),
                  frozenset({'y', 'n'}), frozenset({'t', 'f'}))
# strptime patterns of the date formats recognised, each with the regular
# expression its values match. The Transform parses exactly these
# (models/date_features.py). %z: 'Z' or an offset (+05:30, +0530).
_TIME = r'[0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]{1,9})?)?'
DATE_FORMATS = {
    '%Y-%m-%d': r'[0-9]{4}-[0-9]{2}-[0-9]{2}',
    '%Y-%m-%dT%H:%M:%S%z': (r'[0-9]{4}-[0-9]{2}-[0-9]{2}T' + _TIME +
                            r'(Z|[+-][0-9]{2}:?[0-9]{2})'),
    '%Y-%m-%dT%H:%M:%S': r'[0-9]{4}-[0-9]{2}-[0-9]{2}T' + _TIME,
    '%Y-%m-%d %H:%M:%S': r'[0-9]{4}-[0-9]{2}-[0-9]{2} ' + _TIME,
    '%Y/%m/%d': r'[0-9]{4}/[0-9]{1,2}/[0-9]{1,2}',
    '%d/%m/%Y': r'[0-9]{1,2}/[0-9]{1,2}/[0-9]{4}',
    '%m/%d/%Y': r'[0-9]{1,2}/[0-9]{1,2}/[0-9]{4}',
    '%d.%m.%Y': r'[0-9]{1,2}\.[0-9]{1,2}\.[0-9]{4}',
}
_DATE_RES = {fmt: re.compile(pattern) for fmt, pattern in DATE_FORMATS.items()}
# Formats whose values look alike and are told apart by a field over 12.
_DAY_FIRST, _MONTH_FIRST = '%d/%m/%Y', '%m/%d/%Y'
# Values tried against every format before a column's candidates are fixed;
# later values are checked against the candidates only.
_DATE_SAMPLE = 200
# A sample this share of whose values are dates, of several formats, is a
# date column in mixed formats (refused), not text.
_MIXED_DATE_SHARE = 0.9
# Distinct values are counted up to this many per column (memory bound).
DISTINCT_CAP = 200_000
# A column is an identifier when at least this share of its present values
# are distinct (and there are more than _MIN_IDENTIFIER_VALUES of them).
IDENTIFIER_SHARE = 0.5
_MIN_IDENTIFIER_VALUES = 50
# Text: values of at least this many words on average, and at least this
# share of them distinct (a category like 'New York City' repeats).
TEXT_MEAN_WORDS = 2.5
TEXT_DISTINCT_SHARE = 0.2
# A column of at most this many distinct values is a vocabulary however
# many words each has ('New York City'): one token a value loses nothing.
TEXT_MIN_DISTINCT = 20
# An integer column is read as an identifier only when its name says so.
_ID_NAME_RE = re.compile(r'(^|[^a-z])(id|ids|uuid|guid|key)$|[a-z](Id|ID)$',
                         re.IGNORECASE)
# Rows named in a message.
_MAX_NAMED = 5


@dataclasses.dataclass(frozen=True)
class ColumnRole:
  """One column's role and why.

  Attributes:
    column: the column as written in the header.
    role: one of ROLES.
    reason: the evidence, in words, for the plan and the run record.
    date_format: the strptime format of a date column, else None.
    markers: missing-value markers found in a numeric column, with counts.
  """
  column: str
  role: str
  reason: str
  date_format: Optional[str] = None
  markers: Tuple[Tuple[str, int], ...] = ()

  @property
  def is_feature(self) -> bool:
    return self.role != IDENTIFIER


class ColumnStats:
  """Counts of one column's present values, fed one value at a time."""

  __slots__ = ('name', 'present', 'numbers', 'integers', 'markers', 'texts',
               'distinct', 'overflow', 'length_sum', 'word_sum',
               'date_candidates', 'date_sample', 'date_misses', 'day_over_12',
               'month_over_12', 'count_numbers_distinct', 'sample_formats',
               'sample_dates', 'sample_size', 'date_format', 'forced')

  def __init__(self, name: str, date_format: Optional[str] = None,
               forced: bool = False):
    """Args: name: the column; date_format: a --date-format for it;
    forced: the format was given for this column (else for every date
    column, so it applies only when the sample is mostly dates)."""
    self.name = name
    self.date_format = date_format
    self.forced = forced
    self.present = 0
    self.numbers = 0  # finite numbers
    self.integers = 0
    self.markers: Dict[str, int] = {}
    self.texts = 0  # neither a number nor a marker
    self.distinct = set()
    self.overflow = False
    self.length_sum = 0
    self.word_sum = 0
    self.date_candidates: Optional[set] = None
    self.date_sample: List[Tuple[str, int, str]] = []
    # {format: [(file, line, value), ...]} of values a candidate refused.
    self.date_misses: Dict[str, List[Tuple[str, int, str]]] = {}
    self.day_over_12 = None  # (file, line, value) of a first field > 12
    self.month_over_12 = None  # of a second field > 12
    self.count_numbers_distinct = bool(_ID_NAME_RE.search(name))
    # Of the sampled values: a first example of each format matched, and
    # how many matched some format.
    self.sample_formats: Dict[str, Tuple[str, int, str]] = {}
    self.sample_dates = 0
    self.sample_size = 0

  def _remember(self, value: str) -> None:
    if self.overflow:
      return
    self.distinct.add(value)
    if len(self.distinct) > DISTINCT_CAP:
      self.overflow = True
      self.distinct = set()

  def add_number(self, value: str, is_integer: bool) -> None:
    """A present value that is a finite number, of a column named like an id.

    Only such a column's numbers are looked at one by one (an integer id is
    told by them); any other column's are counted with add_numbers.
    """
    self.present += 1
    self.numbers += 1
    self.integers += is_integer
    self._remember(value)

  def add_numbers(self, count: int) -> None:
    """``count`` finite numbers of a column not named like an id."""
    self.present += count
    self.numbers += count

  def add_marker(self, value: str) -> None:
    """A present value that is one of MISSING_MARKERS."""
    self.present += 1
    self.markers[value] = self.markers.get(value, 0) + 1

  def add_text(self, value: str, path: str, line: int) -> None:
    """A present value that is neither a number nor a marker."""
    self.present += 1
    self.texts += 1
    self._remember(value)
    self.length_sum += len(value)
    self.word_sum += len(value.split())
    if self.date_candidates is None:
      self.date_sample.append((path, line, value))
      if len(self.date_sample) >= _DATE_SAMPLE:
        self._fix_date_candidates()
      return
    if self.date_candidates:
      self._check_date(path, line, value)

  def _fix_date_candidates(self) -> None:
    """Keeps the formats every sampled value matches, then checks them."""
    sample, self.date_sample = self.date_sample, []
    self.sample_formats = {}
    for path, line, value in sample:
      for fmt, pattern in _DATE_RES.items():
        if pattern.fullmatch(value):
          self.sample_formats.setdefault(fmt, (path, line, value))
          break
    self.sample_dates = sum(
        any(p.fullmatch(v) for p in _DATE_RES.values()) for _, _, v in sample)
    self.sample_size = len(sample)
    self.date_candidates = {
        fmt for fmt, pattern in _DATE_RES.items()
        if all(pattern.fullmatch(v) for _, _, v in sample)}
    if self.date_format and (self.forced or self.date_is_likely):
      self.date_candidates.add(self.date_format)
    if self.date_candidates:
      for path, line, value in sample:
        self._check_date(path, line, value)

  def _check_date(self, path: str, line: int, value: str) -> None:
    for fmt in self.date_candidates:
      if not _DATE_RES[fmt].fullmatch(value):
        misses = self.date_misses.setdefault(fmt, [])
        if len(misses) < _MAX_NAMED:
          misses.append((path, line, value))
    if (_DAY_FIRST in self.date_candidates and
        _DATE_RES[_DAY_FIRST].fullmatch(value)):
      first, second = value.split('/')[:2]
      if int(first) > 12 and self.day_over_12 is None:
        self.day_over_12 = (path, line, value)
      if int(second) > 12 and self.month_over_12 is None:
        self.month_over_12 = (path, line, value)

  def finish(self) -> None:
    """Settles the date candidates of a column with fewer sampled values."""
    if self.date_candidates is None:
      self._fix_date_candidates()

  @property
  def date_is_likely(self) -> bool:
    """Whether most sampled values are dates of some format."""
    return bool(self.sample_size) and (
        self.sample_dates >= _MIXED_DATE_SHARE * self.sample_size)

  @property
  def distinct_count(self) -> Optional[int]:
    """Distinct values seen (None: more than DISTINCT_CAP)."""
    return None if self.overflow else len(self.distinct)

  def distinct_share(self, of: int) -> float:
    if self.overflow:
      return 1.0
    return len(self.distinct) / of if of else 0.0

  def matching_formats(self) -> List[str]:
    """The date formats every text value matched."""
    if not self.date_candidates:
      return []
    return [fmt for fmt in DATE_FORMATS if fmt in self.date_candidates and
            fmt not in self.date_misses]


def parse_role_overrides(values: Sequence[str]) -> Dict[str, str]:
  """--column-role COL=ROLE values (repeatable) as {column: role}.

  Raises:
    ConfigError: a value without '=', or an unknown role.
  """
  roles: Dict[str, str] = {}
  for value in values:
    column, sep, role = value.rpartition('=')
    role = role.strip().lower()
    if not sep or not column:
      raise ConfigError(
          f'--column-role {value!r} is not COLUMN=ROLE; for example '
          f'--column-role customer_id=identifier. Roles: {", ".join(ROLES)}.')
    if role not in ROLES:
      raise ConfigError(
          f'--column-role {value!r}: unknown role {role!r}; use one of '
          f'{", ".join(ROLES)}.')
    roles[column] = role
  return roles


def parse_date_formats(values: Sequence[str]) -> Dict[Optional[str], str]:
  """--date-format [COL=]FORMAT values as {column or None (all): format}.

  Raises:
    ConfigError: a format leantfx does not parse.
  """
  formats: Dict[Optional[str], str] = {}
  for value in values:
    column, sep, fmt = value.rpartition('=')
    if not sep:
      column, fmt = None, value
    if fmt not in DATE_FORMATS:
      raise ConfigError(
          f'--date-format {value!r}: leantfx parses the formats '
          f'{", ".join(DATE_FORMATS)} (strptime patterns; %z is Z or an '
          'offset such as +05:30). Pass one of them, or COLUMN=FORMAT for '
          'one column.')
    formats[column] = fmt
  return formats


def _where(found: Tuple[str, int, str]) -> str:
  path, line, value = found
  return f'{path}, line {line}: {value[:60]!r}'


def _date_role(stats: ColumnStats, forced: Optional[str],
               span: int) -> Optional[ColumnRole]:
  """The date role of a text column, None if it holds no dates.

  Raises:
    InputDataError: a column of dates in more than one format, or dates
      beside values of no format, naming rows and formats.
  """
  formats = stats.matching_formats()
  if forced is not None:
    if forced in formats:
      return ColumnRole(stats.name, DATE, f'dates in {forced}, as given',
                        forced)
    misses = stats.date_misses.get(forced) or stats.date_sample[:_MAX_NAMED]
    shown = '; '.join(_where(m) for m in misses[:_MAX_NAMED])
    raise InputDataError(
        f'Column {stats.name!r} (span {span}) was given --date-format '
        f'{forced}, but not every value follows it: {shown}. Fix those '
        'values, leave them empty (missing), or pass the format the column '
        'is written in.')
  if not stats.date_candidates:
    if len(stats.sample_formats) > 1 and stats.date_is_likely:
      shown = '; '.join(f'{fmt} at {_where(found)}'
                        for fmt, found in stats.sample_formats.items())
      raise InputDataError(
          f'Column {stats.name!r} (span {span}) holds dates in more than one '
          f'format: {shown}. Write every date of the column in one format '
          f'(or leave a field empty for missing), pass --date-format '
          f'{stats.name}=FORMAT to read it as one format (rows that do not '
          'follow it are then refused by name), or --column-role '
          f'{stats.name}=categorical to keep the values as categories.')
    return None
  if not formats:
    # The first values were dates, later ones break every candidate.
    shown = '; '.join(
        f'not {fmt}: ' + _where(stats.date_misses[fmt][0])
        for fmt in sorted(stats.date_candidates) if stats.date_misses.get(fmt))
    raise InputDataError(
        f'Column {stats.name!r} (span {span}) holds dates, but not in one '
        f'format: the first {_DATE_SAMPLE} values follow '
        f'{" or ".join(sorted(stats.date_candidates))}, and later rows do '
        f'not ({shown}). Write every date of the column in one format (or '
        'leave a field empty for missing), pass --date-format '
        f'{stats.name}=FORMAT to read it as one format (rows that do not '
        'follow it are then refused by name), or --column-role '
        f'{stats.name}=categorical to keep the values as categories.')
  if _DAY_FIRST in formats:
    if stats.day_over_12 and stats.month_over_12:
      raise InputDataError(
          f'Column {stats.name!r} (span {span}) mixes day-first and '
          f'month-first dates: {_where(stats.day_over_12)} has a day first, '
          f'{_where(stats.month_over_12)} a month first. Write the column in '
          'one order.')
    if stats.month_over_12:
      return ColumnRole(stats.name, DATE,
                        f'dates in {_MONTH_FIRST} (a second field over 12 at '
                        f'{_where(stats.month_over_12)})', _MONTH_FIRST)
    if stats.day_over_12:
      return ColumnRole(stats.name, DATE,
                        f'dates in {_DAY_FIRST} (a first field over 12 at '
                        f'{_where(stats.day_over_12)})', _DAY_FIRST)
    return ColumnRole(
        stats.name, DATE,
        f'dates in {_DAY_FIRST}: no field is over 12, so day and month '
        f'cannot be told apart; read day first. Pass --date-format '
        f'{stats.name}={_MONTH_FIRST} if the month comes first', _DAY_FIRST)
  fmt = formats[0]
  return ColumnRole(stats.name, DATE, f'dates in {fmt}', fmt)


def decide(stats: ColumnStats, span: int,
           override: Optional[str] = None,
           source: str = '--column-role') -> ColumnRole:
  """A feature column's role from its counts (or the user's override).

  Args:
    stats: the column's counts over the span (finished).
    span: the span number, for messages.
    override: the role --column-role (or the schema) gave, or None.
    source: who gave it, for the reason.

  Returns:
    The ColumnRole.

  Raises:
    InputDataError: dates in mixed formats or orders; an override the
      values contradict (numeric over words, date over non-dates).
  """
  stats.finish()
  date_format = stats.date_format if (
      stats.forced or stats.date_format in (stats.date_candidates or ())
  ) else None
  present = stats.present
  mean_words = stats.word_sum / stats.texts if stats.texts else 0.0
  share = stats.distinct_share(present)
  if override is not None:
    return _overridden(stats, override, date_format, span, present, share,
                       source)
  if not stats.texts and stats.numbers:
    if (stats.count_numbers_distinct and stats.integers == stats.numbers and
        share >= IDENTIFIER_SHARE and present > _MIN_IDENTIFIER_VALUES):
      return ColumnRole(
          stats.name, IDENTIFIER,
          f'integers named like an id, {_distinct(stats)} distinct in '
          f'{present} rows: left out of the features (pass --column-role '
          f'{stats.name}=numeric to train on it)')
    markers = tuple(sorted(stats.markers.items(), key=lambda kv: -kv[1]))
    if markers:
      shown = ', '.join(f'{m!r} ({n} rows)' for m, n in markers)
      return ColumnRole(stats.name, NUMERIC,
                        f'numbers; {shown} read as missing', markers=markers)
    return ColumnRole(stats.name, NUMERIC, 'every value is a number')
  role = _date_role(stats, date_format, span)
  if role is not None:
    return role
  lowered = {v.lower() for v in stats.distinct}
  if not stats.overflow and len(lowered) == 2 and lowered in _BOOLEAN_PAIRS:
    return ColumnRole(stats.name, BOOLEAN,
                      f'two values {sorted(stats.distinct)}')
  if (mean_words >= TEXT_MEAN_WORDS and share >= TEXT_DISTINCT_SHARE and
      (stats.overflow or len(stats.distinct) > TEXT_MIN_DISTINCT)):
    return ColumnRole(
        stats.name, TEXT,
        f'words: {mean_words:.1f} a value on average, {share:.0%} of values '
        'distinct')
  if share >= IDENTIFIER_SHARE and present > _MIN_IDENTIFIER_VALUES:
    return ColumnRole(
        stats.name, IDENTIFIER,
        f'{_distinct(stats)} distinct values in {present} rows (near-unique '
        'per row): left out of the features (pass --column-role '
        f'{stats.name}=categorical to train on it)')
  return ColumnRole(stats.name, CATEGORICAL,
                    f'{_distinct(stats)} distinct values')


def _distinct(stats: ColumnStats) -> str:
  count = stats.distinct_count
  return f'over {DISTINCT_CAP:,}' if count is None else f'{count:,}'


def _overridden(stats: ColumnStats, role: str, date_format: Optional[str],
                span: int, present: int, share: float,
                said: str) -> ColumnRole:
  """The role --column-role or the schema gave, checked against the values."""
  if role == NUMERIC:
    if stats.texts:
      raise InputDataError(
          f'--column-role {stats.name}=numeric, but {stats.texts} values of '
          f'{stats.name!r} (span {span}) are not numbers. Fix them, or give '
          'the column another role.')
    markers = tuple(sorted(stats.markers.items(), key=lambda kv: -kv[1]))
    return ColumnRole(stats.name, NUMERIC, said, markers=markers)
  if role == DATE:
    forced = date_format
    if forced is None:
      formats = stats.matching_formats()
      if not formats:
        raise InputDataError(
            f'--column-role {stats.name}=date, but the values of '
            f'{stats.name!r} (span {span}) follow none of the formats '
            f'{", ".join(DATE_FORMATS)} throughout. Pass --date-format '
            f'{stats.name}=FORMAT, or fix the values.')
    found = _date_role(stats, forced, span)
    if found is None:
      raise InputDataError(
          f'--column-role {stats.name}=date, but {stats.name!r} (span '
          f'{span}) holds numbers, not dates written as text.')
    return dataclasses.replace(found, reason=f'{found.reason} ({said})')
  if role in (CATEGORICAL, NUMERIC, BOOLEAN) and share >= IDENTIFIER_SHARE and (
      present > _MIN_IDENTIFIER_VALUES):
    return ColumnRole(
        stats.name, role,
        f'{said}; warning: {_distinct(stats)} distinct values in {present} '
        'rows look like an identifier, which a model memorises rather than '
        'learns from')
  return ColumnRole(stats.name, role, said)


def check_overrides(overrides: Mapping[str, str], columns: Sequence[str],
                    label: str) -> None:
  """Refuses an override of a column that is not there, or of the label."""
  unknown = [c for c in overrides if c not in columns]
  if unknown:
    raise ConfigError(
        f'--column-role names {", ".join(repr(c) for c in unknown)}, not in '
        f'the header {list(columns)}.')
  if label in overrides:
    raise ConfigError(
        f'--column-role gives the label {label!r} a role; the label is '
        'never a feature (--task says how it is predicted).')


def describe(roles: Sequence[ColumnRole]) -> List[str]:
  """One line per column for the plan: 'column: role (reason)'."""
  return [f'{r.column}: {r.role} ({r.reason})' for r in roles]


# The schema records each column's role: TFDV's own semantic domains where
# one exists (natural_language_domain for text, time_domain.string_format for
# dates, bool_domain), and this annotation tag on every feature.
ROLE_TAG_PREFIX = 'leantfx-role:'


def annotate_schema(schema, roles: Mapping[str, Tuple[str, Optional[str]]]):
  """Writes roles into a tensorflow_metadata Schema, in place.

  Args:
    schema: the Schema (features named by their keys).
    roles: {feature key: (role, date format or None)}.
  """
  for feature in schema.feature:
    if feature.name not in roles:
      continue
    role, date_format = roles[feature.name]
    del feature.annotation.tag[:]
    feature.annotation.tag.append(ROLE_TAG_PREFIX + role)
    if role in (TEXT, DATE, IDENTIFIER):
      # A vocabulary of whole strings means nothing for these roles.
      feature.ClearField('domain')
      feature.ClearField('string_domain')
      feature.ClearField('drift_comparator')
    if role == TEXT:
      feature.natural_language_domain.SetInParent()
    elif role == DATE:
      feature.time_domain.string_format = date_format


def schema_roles(schema) -> Dict[str, Tuple[str, Optional[str]]]:
  """{feature key: (role, date format)} a schema records (annotate_schema).

  Raises:
    ConfigError: a role tag naming no role.
  """
  found = {}
  for feature in schema.feature:
    tags = [t[len(ROLE_TAG_PREFIX):] for t in feature.annotation.tag
            if t.startswith(ROLE_TAG_PREFIX)]
    role = tags[0] if tags else None
    if role is None and feature.HasField('natural_language_domain'):
      role = TEXT
    if role is None and feature.HasField('time_domain'):
      role = DATE
    if role is None:
      continue
    if role not in ROLES:
      raise ConfigError(
          f'The schema gives feature {feature.name!r} the role {role!r} '
          f'({ROLE_TAG_PREFIX}{role}); roles are {", ".join(ROLES)}.')
    date_format = (feature.time_domain.string_format
                   if feature.HasField('time_domain') else None)
    found[feature.name] = (role, date_format or None)
  return found


_FRACTION_RE = re.compile(r'(:[0-9]{2})\.[0-9]{1,9}')
_NO_SECONDS_RE = re.compile(r'(T| )([0-9]{2}:[0-9]{2})(?=$|Z|[+-])')


def parse_date(value: str, date_format: str):
  """A value of a date column as a datetime (None: it does not follow the format).

  Parses what DATE_FORMATS' patterns accept: fractional seconds are
  dropped, missing seconds are 0, %z takes 'Z' or an offset. A value with
  no offset is read as UTC.
  """
  import datetime  # pylint: disable=g-import-not-at-top
  if not _DATE_RES[date_format].fullmatch(value):
    return None
  text = _FRACTION_RE.sub(r'\1', value)
  if 'H' in date_format:
    text = _NO_SECONDS_RE.sub(r'\1\2:00', text)
  try:
    parsed = datetime.datetime.strptime(text, date_format)
  except ValueError:
    return None  # e.g. month 13, 30 February
  if parsed.tzinfo is None:
    parsed = parsed.replace(tzinfo=datetime.timezone.utc)
  return parsed
