"""Checks the CSV input and the output folder before the TFX pipeline is built.

CsvExampleGen reports bad input as a traceback from deep inside a Beam job,
long after the pipeline started. The CLI calls ``profile_csv_data_root`` and
``check_output_dir`` first, so every problem a user can fix is reported as one
``InputDataError`` / ``ConfigError`` paragraph naming the data root, span,
file, 1-based line, column and value, and saying what to do.

The checks read the files as leantfx's CSV ExampleGen does (the rules of
leantfx/csv_format.py and leantfx/spans.py), so that data passing them also
passes the component, and count the rows of every file, which the pipeline
compares with the rows it used:

* the latest span is found by TFX's driver by parsing the text after
  ``span-`` as an integer, so a ``span-old/`` folder holding files breaks it;
* a span's data files are its ``.csv`` files, any case (spans.csv_entries);
* the header is line 1, parsed as CSV (a UTF-8 byte-order mark is dropped);
* data records are CSV records (quoted fields may hold commas and line
  breaks), decoded as UTF-8; blank lines are skipped;
* a column's kind is int, float or text (csv_format.value_kind); the empty
  field is the only missing-value marker;
* labels are kept as written: ``+1`` and ``1`` are two classes, and labels
  that differ only by surrounding white space or case are refused (or, with
  ``normalize_labels``, stripped).

Files are read line by line, never loaded whole, so tens of MB are fine.
"""
import codecs
import csv
import dataclasses
import math
import os
import re
import tempfile
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from leantfx import column_roles
from leantfx import columns as columns_lib
from leantfx import csv_format
from leantfx import row_counts
from leantfx import spans
from leantfx.errors import ConfigError, InputDataError

_CSV_EXTENSION = spans.CSV_EXTENSION
# A column whose non-empty values are at least this share finite numbers but
# not all of them is taken for a numeric column with typos or 'NA'-style
# markers (which would silently turn it into a text column in TFX) rather than
# a categorical one.
_NUMERIC_SHARE_FOR_TYPO = 0.9
# Longest value or list quoted in a message, so one bad line cannot flood it.
_MAX_SHOWN_CHARS = 120
_MAX_SHOWN_NAMES = 20
# Rows named in a message about label values (the count covers the rest).
_MAX_NAMED_ROWS = 10


@dataclasses.dataclass(frozen=True)
class CsvProfile:
  """What the latest span of a CSV data root holds.

  Attributes:
    data_root: absolute path of the folder holding the span-<N>/ folders.
    span: the latest span number (the one CsvExampleGen ingests).
    span_dir: absolute path of that span's folder.
    files: sorted absolute paths of the CSV files in that span.
    columns: the header, in file order.
    numeric_columns: feature columns whose non-empty values are all finite
      numbers (label excluded), in file order.
    categorical_columns: the other feature columns (label excluded), in file
      order.
    label: the label column.
    label_values: distinct label values, sorted numerically when all are
      integers, else lexically.
    num_rows: number of data rows in all files of the span.
    missing_by_column: number of empty fields per column, every column listed.
    label_not_finite: (file, line, value) of the first rows whose label is a
      NaN or infinite number (a regression run refuses them, leantfx/task.py).
    label_not_finite_count: how many rows have such a label.
    rows_by_file: {span-N/file name: data rows} (leantfx/row_counts.py).
    feature_keys: {column as written: feature key} (leantfx/columns.py).
    roles: every feature column's role and its reason
      (leantfx/column_roles.py), header order.
  """
  data_root: str
  span: int
  span_dir: str
  files: Tuple[str, ...]
  columns: Tuple[str, ...]
  numeric_columns: Tuple[str, ...]
  categorical_columns: Tuple[str, ...]
  label: str
  label_values: Tuple[str, ...]
  num_rows: int
  # A dict is unhashable; leaving it out of the hash keeps the profile hashable.
  missing_by_column: Mapping[str, int] = dataclasses.field(hash=False)
  label_not_finite: Tuple[Tuple[str, int, str], ...] = ()
  label_not_finite_count: int = 0
  rows_by_file: Mapping[str, int] = dataclasses.field(
      default_factory=dict, hash=False)
  feature_keys: Mapping[str, str] = dataclasses.field(
      default_factory=dict, hash=False)
  # {label value: rows} (leantfx/split_feasibility.py).
  label_counts: Mapping[str, int] = dataclasses.field(
      default_factory=dict, hash=False)
  roles: Tuple[column_roles.ColumnRole, ...] = ()

  def columns_of(self, role: str) -> Tuple[str, ...]:
    """The feature columns of one role (column_roles.ROLES), header order."""
    return tuple(r.column for r in self.roles if r.role == role)

  @property
  def missing_markers(self) -> Tuple[str, ...]:
    """The missing-value markers found in numeric columns, sorted."""
    return tuple(sorted({m for r in self.roles for m, _ in r.markers}))

  @property
  def date_formats(self) -> Dict[str, str]:
    """{date column: its format}."""
    return {r.column: r.date_format for r in self.roles
            if r.role == column_roles.DATE}


def latest_span(data_root: str,
                span: Optional[int] = None) -> Tuple[int, str]:
  """Finds the span CsvExampleGen ingests: the span-<N>/ folder with highest N.

  Args:
    data_root: the folder holding span-<N>/ folders (N = 1, 2, ...).
    span: a pinned span number (``leantfx run --span N``) instead of the
      highest.

  Returns:
    (N, absolute path of the span-<N> folder).

  Raises:
    InputDataError: when data_root is missing, not a folder, unreadable or has
      no span-<N> folder; when a span-<text>/ folder holds files (TFX cannot
      parse its span number and fails); when two folders (span-1 and span-01)
      name the latest span.
  """
  if not data_root or not str(data_root).strip():
    raise InputDataError(
        'The data root is empty: pass the folder that holds your span-<N>/ '
        'folders with --data-root DIR (CSV files go into DIR/span-1/).')
  root = os.path.abspath(os.path.expanduser(data_root))
  if not os.path.exists(root):
    raise InputDataError(
        f'Data root {root!r} does not exist. Create it and put the CSV files '
        f'into {os.path.join(root, "span-1")}/ (a later delivery goes into '
        'span-2/, and so on), or pass the right folder with --data-root.')
  if not os.path.isdir(root):
    hint = ''
    if root.lower().endswith(_CSV_EXTENSION):
      parent = os.path.dirname(root)
      hint = (f' To use this file, move it into '
              f'{os.path.join(parent, "span-1")}/ and pass --data-root '
              f'{parent}.')
    raise InputDataError(
        f'Data root {root!r} is a file, not a folder: --data-root must name '
        f'the folder that holds span-<N>/ folders of CSV files.{hint}')
  names = sorted(_list_dir(root, f'data root {root!r}'))

  found = {}  # span number -> folder names
  not_spans = []  # span-* folders whose suffix is no positive integer
  unparsable_with_files = []  # span-* folders that make TFX's glob fail
  for name in names:
    path = os.path.join(root, name)
    if not name.startswith(spans.SPAN_PREFIX) or not os.path.isdir(path):
      continue
    number = spans.span_number(name)
    if number is not None and number >= spans.FIRST_SPAN:
      found.setdefault(number, []).append(name)
      continue
    not_spans.append(name)
    if number is None and _list_dir(path, f'folder {path!r}'):
      unparsable_with_files.append(name)

  if not found:
    msg = (f'Data root {root!r} has no span folder: CsvExampleGen reads '
           f'folders named span-<N> (N = 1, 2, ...), e.g. '
           f'{os.path.join(root, "span-1", "data.csv")}. It contains '
           f'{_describe_entries(root, names)}.')
    if not_spans:
      msg += (f' {_names(not_spans)} are not span folders: the text after '
              '"span-" must be a positive integer.')
    loose_csv = [n for n in names if n.lower().endswith(_CSV_EXTENSION)]
    if loose_csv:
      msg += (f' Move {_names(loose_csv)} into '
              f'{os.path.join(root, "span-1")}/.')
    else:
      msg += (' Put the CSV files into span-1/ (later deliveries into '
              'span-2/, ...).')
    raise InputDataError(msg)

  if unparsable_with_files:
    raise InputDataError(
        f'Data root {root!r} holds {_names(unparsable_with_files)} next to its '
        'span folders. CsvExampleGen looks for the latest span with the '
        f'pattern {spans.CSV_PATTERN} and fails on any folder whose text after '
        '"span-" is not a number, so move those folders out of the data root '
        '(or rename them span-<N> if they hold a span).')

  if span is not None and span not in found:
    raise InputDataError(
        f'Data root {root!r} has no folder for span {span} (--span): it has '
        f'spans {sorted(found)}. Pass one of those, or drop --span to use the '
        'newest.')
  span = max(found) if span is None else span
  if len(found[span]) > 1:
    raise InputDataError(
        f'Data root {root!r} has {len(found[span])} folders for span {span}: '
        f'{_names(found[span])}. CsvExampleGen would ingest only one of them; '
        'merge them into one folder.')
  return span, os.path.join(root, found[span][0])


def profile_csv_data_root(data_root: str,
                          label: str,
                          *,
                          numeric_columns: Optional[Sequence[str]] = None,
                          categorical_columns: Sequence[str] = (),
                          required_columns: Sequence[str] = (),
                          span: Optional[int] = None,
                          normalize_labels: bool = False,
                          role_overrides: Mapping[str, str] = None,
                          date_formats: Mapping[Optional[str], str] = None,
                          schema_roles: Mapping[str, Tuple[str, Optional[str]]]
                          = None) -> CsvProfile:
  """Checks the latest span of a CSV data root and describes its columns.

  Args:
    data_root: the folder holding span-<N>/ folders of CSV files.
    label: the label column (a class or a number to predict).
    numeric_columns: the numeric feature columns when they are known (bundled
      datasets); every non-empty value in them must be a finite number. None
      infers them: a feature column is numeric when every non-empty value is a
      finite number.
    categorical_columns: feature columns that are categorical even when their
      values look numeric (the CLI's --categorical).
    required_columns: columns that must be in the header besides the label.
    span: profile this span instead of the latest (``--span``).
    normalize_labels: strip white space around labels instead of refusing
      labels that differ only by it (``--normalize-labels``).
    role_overrides: {column: role} of ``--column-role`` (with inferred
      columns only; ``categorical_columns`` are categorical overrides).
    date_formats: {column or None (every date column): strptime format} of
      ``--date-format``.
    schema_roles: {feature key: (role, date format)} a curated schema
      records (column_roles.schema_roles); the options above win.

  Returns:
    A CsvProfile of the latest span.

  Raises:
    ConfigError: when the arguments contradict each other (the label listed as
      a feature, a column both numeric and categorical).
    InputDataError: for any problem in the data, with file, line, column and
      value where they apply.
  """
  numeric_given = None if numeric_columns is None else tuple(numeric_columns)
  categorical_given = tuple(categorical_columns)
  _check_arguments(label, numeric_given, categorical_given)

  span, span_dir = latest_span(data_root, span)
  root = os.path.dirname(span_dir)
  files = _span_csv_files(span, span_dir)

  columns = _read_header(files[0], span)
  for path in files[1:]:
    _check_same_header(files[0], columns, path, _read_header(path, span), span)
  _check_columns_present(files[0], columns, span, label, required_columns,
                         numeric_given or (), categorical_given)
  try:
    keys = columns_lib.feature_keys(columns)
  except ValueError as e:
    raise InputDataError(f'{files[0]} (span {span}), line 1: {e}') from e

  label_index = columns.index(label)
  overrides = dict(role_overrides or {})
  overrides.update({c: column_roles.CATEGORICAL for c in categorical_given})
  column_roles.check_overrides(overrides, columns, label)
  sources = {c: '--column-role' for c in overrides}
  formats = dict(date_formats or {})
  for column in columns:
    role, fmt = (schema_roles or {}).get(keys[column], (None, None))
    if role is not None and column != label and column not in overrides:
      overrides[column], sources[column] = role, 'the schema'
      if fmt and column not in formats:
        formats[column] = fmt
  if numeric_given is None:
    numeric_candidates = [i for i in range(len(columns)) if i != label_index]
  else:
    numeric_candidates = [columns.index(c) for c in numeric_given]
  declared_numeric = numeric_given is not None
  unknown = [c for c in formats if c is not None and c not in columns]
  if unknown:
    raise ConfigError(
        f'--date-format names {_names(unknown)}, not in the header '
        f'{list(columns)}.')
  role_stats = {} if declared_numeric else {
      i: column_roles.ColumnStats(
          columns[i], formats.get(columns[i], formats.get(None)),
          forced=columns[i] in formats)
      for i in numeric_candidates}
  # Columns whose numbers are looked at one by one (an integer id is told by
  # them); every other column's numbers are counted, then added in bulk.
  id_named = {i for i, stats in role_stats.items()
              if stats.count_numbers_distinct}

  width = len(columns)
  missing = [0] * width
  finite = [0] * width
  text = [0] * width  # values CsvExampleGen would read as strings
  not_finite = [0] * width  # NaN / infinity
  first_bad = [None] * width  # (path, line, value, problem)
  label_counts: Dict[str, int] = {}
  rows_by_file: Dict[str, int] = {}
  label_not_finite = []
  label_not_finite_count = 0
  num_rows = 0
  files_without_rows = []

  for path in files:
    rows_in_file = 0
    for line, fields in _data_records(path, span):
      if len(fields) != width:
        raise InputDataError(
            f'{path} (span {span}), line {line}: the row has {len(fields)} '
            f'fields but the header (line 1) has {width} columns. Row: '
            f'{_shorten(",".join(fields))!r}. Quote values that contain a '
            'comma ("a, b"), and check for a missing or extra comma'
            + (', or a double quote opened here and never closed (the '
               'record runs on over the next lines)'
               if any('\n' in f for f in fields) else '') + '.')
      rows_in_file += 1
      label_value = fields[label_index]
      if normalize_labels:
        label_value = label_value.strip()
      if not label_value:
        raise InputDataError(
            f'{path} (span {span}), line {line}: the label column '
            f'{label!r} is empty. Every row needs a label: fill it in or '
            'delete the row.')
      label_counts[label_value] = label_counts.get(label_value, 0) + 1
      number = _as_float(label_value)
      if number is not None and not math.isfinite(number):
        if len(label_not_finite) < _MAX_NAMED_ROWS:
          label_not_finite.append((path, line, label_value))
        label_not_finite_count += 1
      for i, value in enumerate(fields):
        if not value:
          missing[i] += 1
      for i in numeric_candidates:
        value = fields[i]
        if not value:
          continue
        if not declared_numeric and value in column_roles.MISSING_MARKERS:
          role_stats[i].add_marker(value)
          continue
        problem, is_text = _numeric_problem(value)
        if problem is None:
          finite[i] += 1
          if i in id_named:
            role_stats[i].add_number(value, '.' not in value and
                                     'e' not in value.lower())
          continue
        if declared_numeric:
          raise InputDataError(
              f'{path} (span {span}), line {line}, column {columns[i]!r}: '
              f'{_shorten(value)!r} {problem}, but {columns[i]!r} is a '
              'numeric column of this dataset. Fix the value, or leave the '
              'field empty to mark it missing (an empty field is the only '
              'missing-value marker CsvExampleGen understands).')
        if is_text:
          text[i] += 1
          role_stats[i].add_text(value, path, line)
        else:
          not_finite[i] += 1
        if first_bad[i] is None:
          first_bad[i] = (path, line, value, problem)
    num_rows += rows_in_file
    rows_by_file[path] = rows_in_file
    if not rows_in_file:
      files_without_rows.append(path)

  if not num_rows:
    raise InputDataError(
        f'Span {span} of data root {root!r} has no data rows: '
        f'{_names(files)} hold a header line and nothing below it. Add rows, '
        'or remove the span folder so that an earlier span is the latest.')
  if files_without_rows:
    raise InputDataError(
        f'{_names(files_without_rows)} in span {span} of data root {root!r} '
        'have a header but no data rows. Add rows or move those files out of '
        f'{span_dir}/.')

  all_empty = [columns[i] for i in range(width) if missing[i] == num_rows]
  if all_empty:
    raise InputDataError(
        f'Column(s) {_names(all_empty)} are empty in all {num_rows} rows of '
        f'span {span} ({span_dir}), so CsvExampleGen cannot infer their type. '
        'Fill in values, or delete the column(s) from every file of the span.')

  if declared_numeric:
    roles = tuple(
        column_roles.ColumnRole(c, column_roles.NUMERIC
                                if c in numeric_given else
                                column_roles.CATEGORICAL, 'the dataset says so')
        for i, c in enumerate(columns) if i != label_index)
  else:
    _check_numeric_typos(columns, numeric_candidates, overrides, missing,
                         finite, text, not_finite, first_bad, num_rows, span)
    for i, stats in role_stats.items():
      if i not in id_named:
        stats.add_numbers(finite[i])
    roles = tuple(
        column_roles.decide(role_stats[i], span,
                            overrides.get(columns[i]),
                            sources.get(columns[i], '--column-role'))
        for i in numeric_candidates)
  by_role = _columns_by_role(roles)
  label_values = set(label_counts)
  _check_label_variants(label, label_counts, span, span_dir)
  if len(label_values) < 2:
    raise InputDataError(
        f'The label column {label!r} has a single value '
        f'({_shorten(next(iter(label_values)))!r}) in all {num_rows} rows of '
        f'span {span} ({span_dir}): a constant target teaches a model nothing '
        '(classification needs at least 2 classes, regression a target that '
        'varies). Check that --label names the right column, or add rows '
        'with other values.')

  return CsvProfile(
      data_root=root,
      span=span,
      span_dir=span_dir,
      files=tuple(files),
      columns=tuple(columns),
      numeric_columns=by_role[column_roles.NUMERIC],
      categorical_columns=(by_role[column_roles.CATEGORICAL] +
                           by_role[column_roles.BOOLEAN]),
      label=label,
      label_values=_sorted_labels(label_values),
      num_rows=num_rows,
      missing_by_column={c: missing[i] for i, c in enumerate(columns)},
      label_not_finite=tuple(label_not_finite),
      label_not_finite_count=label_not_finite_count,
      rows_by_file=row_counts.by_name(rows_by_file),
      feature_keys=keys,
      label_counts=dict(label_counts),
      roles=roles)


def _columns_by_role(roles: Sequence[column_roles.ColumnRole]
                    ) -> Dict[str, Tuple[str, ...]]:
  """{role: its columns in header order}, every role listed."""
  return {role: tuple(r.column for r in roles if r.role == role)
          for role in column_roles.ROLES}


def _check_numeric_typos(columns, candidates, overrides, missing, finite,
                         text, not_finite, first_bad, num_rows, span) -> None:
  """Refuses a column of numbers with a few typos or infinities in it.

  Mostly numbers with a few other values is a numeric column with typos
  (the markers of column_roles.MISSING_MARKERS were taken out already),
  which would silently become a category column; NaN-free numbers with an
  infinity cannot be scaled. A column the user gave a role is left to it.
  """
  for i in candidates:
    if columns[i] in overrides or text[i] + not_finite[i] == 0:
      continue
    non_empty = num_rows - missing[i]
    if text[i] and finite[i] < _NUMERIC_SHARE_FOR_TYPO * non_empty:
      continue  # a text column that has some numeric-looking values
    path, line, value, problem = first_bad[i]
    bad = text[i] + not_finite[i]
    raise InputDataError(
        f'{path} (span {span}), line {line}, column {columns[i]!r}: '
        f'{_shorten(value)!r} {problem}, yet {finite[i]} of the '
        f'{non_empty} non-empty values of {columns[i]!r} are numbers '
        f'({bad} in total are not; this is the first). Fix the value, '
        'leave the field empty to mark it missing (an empty field and the '
        f'markers {", ".join(sorted(column_roles.MISSING_MARKERS))} are '
        'missing values; infinity is not), '
        f'or pass --column-role {columns[i]}=categorical if the column '
        'really is categorical.')


def _check_label_variants(label: str, counts: Mapping[str, int], span: int,
                          span_dir: str) -> None:
  """Refuses labels that differ only by surrounding white space or case.

  ``barolo `` beside ``barolo`` would train as two classes, and the model
  would split one class's rows between them. Labels are kept as written
  otherwise, so the user says which spelling is meant.
  """
  groups: Dict[str, List[str]] = {}
  for value in counts:
    groups.setdefault(value.strip().casefold(), []).append(value)
  variants = [sorted(g) for g in groups.values() if len(g) > 1]
  if not variants:
    return
  shown = '; '.join(
      ', '.join(f'{v!r} ({counts[v]} rows)' for v in group)
      for group in variants[:_MAX_NAMED_ROWS])
  spaces = any(v != v.strip() for group in variants for v in group)
  cases = any(len({v.strip() for v in group}) > 1 for group in variants)
  todo = []
  if spaces:
    todo.append('pass --normalize-labels to strip the white space around '
                'labels')
  if cases:
    todo.append('write each class in one case (labels are kept as written, '
                'so the case is not guessed)')
  raise InputDataError(
      f'The label column {label!r} of span {span} ({span_dir}) spells '
      f'{len(variants)} class(es) in more than one way: {shown}. They would '
      'train as different classes. Fix the file, or ' + ' and '.join(todo) +
      '.')


def check_output_dir(path: str) -> str:
  """Makes sure the output folder exists and is writable.

  Creates the folder (and its parents) when missing, then creates and deletes
  a temporary file in it, because only writing proves it is writable (root
  ignores permission bits; a read-only filesystem does not).

  Args:
    path: the output folder (the CLI's --output).

  Returns:
    The folder's absolute path.

  Raises:
    ConfigError: when the folder cannot be created or written, naming the path
      and the operating system's reason.
  """
  if not path or not str(path).strip():
    raise ConfigError(
        'The output folder is empty: pass a writable folder with --output '
        'DIR.')
  absolute = os.path.abspath(os.path.expanduser(path))
  if os.path.exists(absolute) and not os.path.isdir(absolute):
    raise ConfigError(
        f'Output path {absolute!r} is a file, not a folder. Pass a writable '
        'folder with --output DIR (it is created if missing).')
  try:
    os.makedirs(absolute, exist_ok=True)
    fd, probe = tempfile.mkstemp(dir=absolute, prefix='.leantfx-write-check-')
    try:
      os.close(fd)
    finally:
      os.unlink(probe)
  except OSError as e:
    reason = e.strerror or str(e)
    if e.filename and os.path.abspath(e.filename) != absolute:
      reason += f' ({e.filename})'
    raise ConfigError(
        f'Output folder {absolute!r} cannot be created or written: {reason}. '
        'Pass a writable folder with --output DIR (it is created if '
        'missing).') from e
  return absolute


def _check_arguments(label: str, numeric: Optional[Tuple[str, ...]],
                     categorical: Tuple[str, ...]) -> None:
  """Rejects arguments that contradict each other, before reading any data."""
  if not label or not str(label).strip():
    raise ConfigError(
        'The label column name is empty: pass the column to predict with '
        '--label COLUMN.')
  if label in categorical:
    raise ConfigError(
        f'The label {label!r} is also passed with --categorical; drop it '
        'from --categorical (the label is never a feature).')
  if label in (numeric or ()):
    raise ConfigError(
        f'The label {label!r} is also listed as a numeric feature column; '
        'remove it from the numeric columns (the label is never a feature).')
  both = [c for c in categorical if c in (numeric or ())]
  if both:
    raise ConfigError(
        f'Column(s) {_names(both)} are listed as both numeric and '
        'categorical; list each column in one group only.')


def _list_dir(path: str, what: str) -> List[str]:
  try:
    return os.listdir(path)
  except OSError as e:
    raise InputDataError(
        f'Cannot list {what}: {e.strerror or e}. Check that it exists and is '
        'readable by this user.') from e


def _describe_entries(root: str, names: Sequence[str]) -> str:
  if not names:
    return 'nothing (it is empty)'
  shown = [n + ('/' if os.path.isdir(os.path.join(root, n)) else '')
           for n in names]
  return _names(shown)


def _span_csv_files(span: int, span_dir: str) -> List[str]:
  """The CSV files of a span folder (spans.csv_entries), refusing the rest."""
  try:
    files, others = spans.csv_entries(span_dir)
  except OSError as e:
    raise InputDataError(
        f'Cannot list span {span} folder {span_dir!r}: {e.strerror or e}. '
        'Check that it exists and is readable by this user.') from e
  if others:
    raise InputDataError(
        f'Span {span} folder {span_dir!r} holds entries that are not CSV '
        f'files: {_names(others)}. Every data entry of a span must be a '
        'file ending in .csv (any case); move the others out of the span '
        'folder, or rename a file to .csv if it is CSV.')
  if not files:
    ignored = sorted(_list_dir(span_dir, f'span {span} folder {span_dir!r}'))
    found = (f'only {_names(ignored)}, which are not data'
             if ignored else 'nothing')
    raise InputDataError(
        f'Span {span} folder {span_dir!r} has no CSV file (it holds '
        f'{found}); span {span} is the latest span, the one the pipeline '
        'ingests. Put the .csv files of this span into it, or remove the '
        'folder so that an earlier span is the latest.')
  return files


def _read_header(path: str, span: int) -> List[str]:
  """Reads and checks line 1 of a CSV file (csv_format.read_header's rules)."""
  try:
    with open(path, 'rb') as f:
      raw = f.readline()
  except OSError as e:
    raise _os_error(path, span, e) from e
  if not raw:
    raise InputDataError(
        f'{path} (span {span}) is empty. A CSV file needs a header line '
        'naming the columns, then one row per example; delete the file or '
        'fill it.')
  if raw.startswith(codecs.BOM_UTF8):
    raw = raw[len(codecs.BOM_UTF8):]  # Excel's "CSV UTF-8" starts so.
  line = _decode(raw, path, span, 1)
  if not line.strip():
    raise InputDataError(
        f'{path} (span {span}), line 1 is blank. The first line is the '
        'header: put the comma-separated column names on it.')
  if line.count('"') % 2:
    raise InputDataError(
        f'{path} (span {span}), line 1: the header has an unbalanced double '
        f'quote ({_shorten(line.strip())!r}). Quote a column name whole '
        '("alcohol, %"), double a quote inside it, and keep the header on '
        'one line.')
  try:
    columns = csv_format.read_header(path)
  except (csv.Error, UnicodeDecodeError, OSError) as e:
    raise InputDataError(
        f'{path} (span {span}), line 1: the header is not valid CSV ({e}). '
        'Quote column names whole and double quotes inside them.') from e
  if len(columns) < 2:
    separator = ''
    if ';' in line or '\t' in line:
      separator = (' It looks separated by ";" or tabs: leantfx reads '
                   'comma-separated files, so convert the file.')
    raise InputDataError(
        f'{path} (span {span}), line 1: the header has a single column '
        f'({_shorten(line.strip())!r}); a CSV file needs at least one feature '
        'column and the label column, separated by commas.'
        f'{separator}')
  empty = [str(i + 1) for i, c in enumerate(columns) if not c.strip()]
  if empty:
    raise InputDataError(
        f'{path} (span {span}), line 1: column(s) number {", ".join(empty)} '
        f'of the header have no name (header: {_shorten(line.strip())!r}). '
        'Name every column, and remove a trailing comma if there is one.')
  seen, duplicates = set(), []
  for c in columns:
    if c in seen and c not in duplicates:
      duplicates.append(c)
    seen.add(c)
  if duplicates:
    raise InputDataError(
        f'{path} (span {span}), line 1: column name(s) {_names(duplicates)} '
        'appear more than once in the header. Give every column a distinct '
        'name.')
  return columns


def _check_same_header(first_path: str, first: Sequence[str], path: str,
                       columns: Sequence[str], span: int) -> None:
  if list(columns) == list(first):
    return
  only_first = [c for c in first if c not in columns]
  only_this = [c for c in columns if c not in first]
  if only_first or only_this:
    difference = (f'only in {os.path.basename(first_path)}: '
                  f'{_names(only_first) if only_first else "none"}; only in '
                  f'{os.path.basename(path)}: '
                  f'{_names(only_this) if only_this else "none"}')
  else:
    difference = (f'same columns in a different order: {_names(first)} '
                  f'versus {_names(columns)}')
  raise InputDataError(
      f'{first_path} and {path} in span {span} have different headers '
      f'({difference}). every file of a span needs the '
      'same header line; make them identical, or move the odd file to '
      'another span.')


def _check_columns_present(path: str, columns: Sequence[str], span: int,
                           label: str, required: Sequence[str],
                           numeric: Sequence[str],
                           categorical: Sequence[str]) -> None:
  """Checks that the label and every named column are in the header."""
  existing = f'The columns of {path} (span {span}) are {_names(columns)}.'
  if label not in columns:
    hints = []
    near = [c for c in columns if c.strip().lower() == label.strip().lower()]
    if near:
      hints.append(f' Did you mean {_names(near)} (spelling, case and '
                   'spaces must match exactly)?')
    if sum(_is_number(c) for c in columns) * 2 > len(columns):
      hints.append(' Line 1 looks like data, not a header: a CSV file must '
                   'start with a line naming the columns.')
    raise InputDataError(
        f'The label column {label!r} is not in the header. {existing}'
        f'{"".join(hints)} Pass the column to predict with --label COLUMN.')
  for names, what, todo in (
      (required, 'required by the dataset',
       'Add them to every file of the span.'),
      (numeric, 'listed as numeric', 'Add them, or fix the column list.'),
      (categorical, 'passed with --categorical',
       'Fix the --categorical names.')):
    absent = [c for c in names if c not in columns]
    if absent:
      raise InputDataError(
          f'Column(s) {_names(absent)}, {what}, are not in the header. '
          f'{existing} {todo}')


def _data_records(path: str, span: int) -> Iterator[Tuple[int, List[str]]]:
  """Yields (first line number, fields) for each non-blank data record.

  Records are read with Python's csv module, which reads them as the
  ExampleGen's pyarrow reader does: quoted fields may hold commas and line
  breaks, a quote inside an unquoted field is literal, a blank line is no
  record.
  """
  reader = csv.reader(_lines_after_header(path, span))
  while True:
    start = reader.line_num + 2  # line_num counts the lines after the header.
    try:
      fields = next(reader)
    except StopIteration:
      return
    except csv.Error as e:
      raise InputDataError(
          f'{path} (span {span}), line {start}: not valid CSV ({e}). Fix '
          'the quoting of this record: quote whole fields and double quotes '
          'inside them.') from e
    if fields:
      yield start, fields


def _lines_after_header(path: str, span: int) -> Iterator[str]:
  """The decoded lines of a file after its header."""
  try:
    with open(path, 'rb') as f:
      f.readline()  # The header, checked by _read_header.
      line_number = 1
      for raw in f:
        line_number += 1
        yield _decode(raw, path, span, line_number)
  except OSError as e:
    raise _os_error(path, span, e) from e


def _decode(raw: bytes, path: str, span: int, line: int) -> str:
  """Decodes one line as UTF-8, rejecting binary content."""
  if b'\x00' in raw:
    raise InputDataError(
        f'{path} (span {span}), line {line}: the file contains NUL bytes, so '
        'it is not UTF-8 text (a binary file, or text saved as UTF-16 / '
        '"Unicode"). Move it out of the span folder, or re-save it as UTF-8 '
        'CSV.')
  try:
    return raw.decode('utf-8')
  except UnicodeDecodeError as e:
    raise InputDataError(
        f'{path} (span {span}), line {line}: byte {e.start + 1} of the line '
        f'(0x{raw[e.start]:02x}) is not valid UTF-8; leantfx reads '
        'UTF-8 only. Re-save the file as UTF-8 (e.g. from Latin-1 or '
        'Windows-1252), or move it out if it is not a CSV file.') from e


def _os_error(path: str, span: int, e: OSError) -> InputDataError:
  return InputDataError(
      f'Cannot read {path} (span {span}): {e.strerror or e}. Check that the '
      'file exists and is readable by this user, or move it out of the span '
      'folder.')


def _numeric_problem(value: str) -> Tuple[Optional[str], bool]:
  """Says why a non-empty value is no finite number (csv_format's kinds).

  Returns:
    (None, False) for a finite number; else (what is wrong, True when the
    ExampleGen would read the value as text rather than as a number).
  """
  if csv_format.value_kind(value) == csv_format.BYTES:
    return 'is not a number', True
  if not csv_format.is_finite_number(value):
    return ('is not a finite number (NaN or infinity are not allowed in a '
            'numeric column)'), False
  return None, False


def _as_float(text: str) -> Optional[float]:
  """The number a field holds (NaN and infinity included), else None."""
  try:
    return float(text)
  except ValueError:
    return None


def _is_number(text: str) -> bool:
  try:
    float(text)
  except ValueError:
    return False
  return True


def _sorted_labels(values) -> Tuple[str, ...]:
  if all(re.fullmatch(r'[+-]?[0-9]+', v) for v in values):
    return tuple(sorted(values, key=lambda v: (int(v), v)))
  return tuple(sorted(values))


def _shorten(text: str) -> str:
  if len(text) <= _MAX_SHOWN_CHARS:
    return text
  return text[:_MAX_SHOWN_CHARS] + '...'


def _names(names: Sequence[str]) -> str:
  """Quotes names for a message, at most _MAX_SHOWN_NAMES of them."""
  shown = ', '.join(repr(n) for n in names[:_MAX_SHOWN_NAMES])
  if len(names) > _MAX_SHOWN_NAMES:
    shown += f' and {len(names) - _MAX_SHOWN_NAMES} more'
  return shown
