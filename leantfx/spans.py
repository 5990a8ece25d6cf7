"""The span layout of a data root: one folder per delivery of data.

A data root holds one folder per span, ``span-<N>`` with N = 1, 2, ... (the
text after ``span-`` is digits only; ``span-01`` is span 1 too, as TFX parses
it with ``int``). ExampleGen reads the newest span through a pattern with
TFX's ``{SPAN}`` placeholder, one per data format:

* csv: ``span-{SPAN}/*``, of which the data files are those whose name ends
  in ``.csv`` in any case (``b.CSV`` from a Windows export too), read by
  leantfx's CSV ExampleGen (components/csv_example_gen) after
  ``csv_files`` below, the same function the pre-flight checks use;
* tfrecord: ``span-{SPAN}/*``, every file a TFRecord of tf.Examples
  (ImportExampleGen);
* images: ``span-{SPAN}/*/*``, ``<class name>/`` folders of images
  (ImageExampleGen keeps the image extensions).

A writer that finished a span drops the completion marker ``_SUCCESS`` in it
(as Hadoop, Spark and Beam jobs do); it and hidden entries (names starting
with '.') are not data.

Everything that names, finds or lists span folders uses this module, so the
rules are written once.
"""
import os
import re
from typing import Callable, List, Optional, Tuple

from leantfx.errors import InputDataError

SPAN_PREFIX = 'span-'
# TFX's placeholder for the span number in an ExampleGen split pattern.
SPAN_TOKEN = '{SPAN}'
# A span folder's name, matched whole (re.fullmatch): span-<digits>.
SPAN_DIR_RE = re.compile(r'span-([0-9]+)')
# leantfx numbers spans from 1 (datasets.prepare and the input checks refuse
# span-0, although TFX would read it).
FIRST_SPAN = 1
# Hadoop/Spark/Beam jobs drop this marker next to their output; it is no data.
COMPLETE_MARKER = '_SUCCESS'

# Every entry of the span: which of them are CSV data is csv_files' rule,
# not a glob's (a case-sensitive '*.csv' skipped 'b.CSV' without a word).
CSV_PATTERN = f'{SPAN_PREFIX}{SPAN_TOKEN}/*'
CSV_EXTENSION = '.csv'
TFRECORD_PATTERN = f'{SPAN_PREFIX}{SPAN_TOKEN}/*'
# The newest span's class folders; ImageExampleGen keeps image extensions.
IMAGES_PATTERN = f'{SPAN_PREFIX}{SPAN_TOKEN}/*/*'
EXAMPLE_GEN_PATTERNS = {
    'csv': CSV_PATTERN,
    'tfrecord': TFRECORD_PATTERN,
    'images': IMAGES_PATTERN,
}


def span_dir_name(span: int) -> str:
  """The folder name of a span: ``span-<span>``."""
  return f'{SPAN_PREFIX}{span}'


def span_path(data_root: str, span: int) -> str:
  """The path of span ``span``'s folder in data_root (it may not exist)."""
  return os.path.join(data_root, span_dir_name(span))


def span_number(name: str) -> Optional[int]:
  """The span number a folder name stands for, or None if it is no span name.

  Args:
    name: a folder name (not a path), e.g. 'span-3'.

  Returns:
    The number after ``span-`` when the whole name is ``span-<digits>``
    (``span-01`` -> 1, ``span-0`` -> 0); None for ``span-1x``, ``span-``,
    ``xspan-1`` and the like.
  """
  match = SPAN_DIR_RE.fullmatch(name)
  return int(match.group(1)) if match else None


def is_data_entry(name: str) -> bool:
  """Whether an entry of a span folder is data: not hidden, not the marker."""
  return not name.startswith('.') and name != COMPLETE_MARKER


def is_csv_file_name(name: str) -> bool:
  """Whether a data entry's name marks a CSV file: it ends in .csv, any case."""
  return name.lower().endswith(CSV_EXTENSION)


def csv_entries(span_dir: str, listdir: Callable[[str], List[str]] = os.listdir,
                isdir: Callable[[str], bool] = os.path.isdir
               ) -> Tuple[List[str], List[str]]:
  """The CSV data files of a span folder, and its other data entries.

  The one definition of "a CSV data file of a span": a regular file, not
  hidden, not the completion marker, whose name ends in .csv in any case.
  The pre-flight checks refuse a span with other data entries, and the
  ExampleGen reads exactly the first list.

  Args:
    span_dir: the span folder.
    listdir: lists a folder (tfx.dsl.io.fileio.listdir for remote storage).
    isdir: tells a folder (fileio.isdir likewise).

  Returns:
    (sorted CSV file paths, sorted names of the other data entries, folders
    with a trailing '/').

  Raises:
    OSError: the folder cannot be listed.
  """
  files, others = [], []
  for name in sorted(n.rstrip('/') for n in listdir(span_dir)):
    if not is_data_entry(name):
      continue
    path = os.path.join(span_dir, name)
    if isdir(path):
      others.append(name + '/')
    elif is_csv_file_name(name):
      files.append(path)
    else:
      others.append(name)
  return files, others


def example_gen_pattern(data_format: str) -> str:
  """The ExampleGen split pattern of 'csv', 'tfrecord' or 'images' data.

  Raises:
    ValueError: for another format.
  """
  try:
    return EXAMPLE_GEN_PATTERNS[data_format]
  except KeyError:
    raise ValueError(
        f'Unknown data format {data_format!r}; use one of '
        f'{sorted(EXAMPLE_GEN_PATTERNS)}.') from None


def list_span_dirs(data_root: str) -> List[Tuple[int, str]]:
  """The span folders of a data root, sorted by span number, then name.

  Only folders count (a file named span-2 is not a span), and only numbers
  from FIRST_SPAN. Two folders may share a number (span-1 and span-01); both
  are listed, so that a caller can refuse the ambiguity.

  Args:
    data_root: the folder holding the span-<N>/ folders.

  Returns:
    (span number, os.path.join(data_root, folder name)) pairs; empty when
    data_root is missing, unreadable or holds no span folder.
  """
  try:
    names = os.listdir(data_root)
  except OSError:
    return []
  found = []
  for name in names:
    number = span_number(name)
    path = os.path.join(data_root, name)
    if number is not None and number >= FIRST_SPAN and os.path.isdir(path):
      found.append((number, name, path))
  return [(number, path) for number, _, path in sorted(found)]


def newest_span_dir(data_root: str) -> Optional[str]:
  """The span folder with the highest number, without any checks (or None).

  When two folders share the highest number, the last by name is returned;
  input_checks.latest_span refuses that case with a clear error.
  """
  found = list_span_dirs(data_root)
  return found[-1][1] if found else None


def span_csv_files(span_dir: str,
                   listdir: Callable[[str], List[str]] = os.listdir,
                   isdir: Callable[[str], bool] = os.path.isdir) -> List[str]:
  """A span's CSV files (csv_entries' rule); refuses anything else.

  What the CSV ExampleGen and ``leantfx score`` read.

  Raises:
    InputDataError: the folder does not exist, holds entries that are not
      CSV files, or none.
  """
  if not isdir(span_dir):
    raise InputDataError(f'Span folder {span_dir} does not exist.')
  files, others = csv_entries(span_dir, listdir, isdir)
  if others:
    raise InputDataError(
        f'Span folder {span_dir} holds entries that are not CSV files: '
        f'{", ".join(repr(o) for o in others[:10])}. Every data entry of a '
        'span must be a .csv file (any case); move the others out of the '
        'span folder.')
  if not files:
    raise InputDataError(f'Span folder {span_dir} holds no .csv file.')
  return files
