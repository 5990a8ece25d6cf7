"""A real text-classification span: Debian packages by section (issue 42).

The rows are the binary packages of Debian 12 "bookworm" (amd64, main; the
point release 12.15 with bookworm-updates and bookworm-security, as
``apt-cache dumpavail`` lists them from /var/lib/apt/lists, Release files
dated 2026-12-06), one row a package, of the 8 most common ``Section:``
values. The columns, as a user would export them:

  description     the first line of ``Description:`` (mean 47 characters;
                  commas, quotes, parentheses and non-ASCII inside)
  priority        ``Priority:`` (optional, extra, important, ...)
  installed_size  ``Installed-Size:`` in kB
  section         the label, 8 classes (CLASS_COUNTS)

The package name is left out: it is an identifier, and its prefix
('libghc-', 'python3-', 'lib...-dev') nearly names the section.

Rows are sorted by package name, so the same lists give the same bytes.
apt lists differ between machines and days and nothing may download at run
time, so the rows measured are a snapshot, SNAPSHOT (gzip CSV, ~0.6 MB),
rebuilt with ``--rebuild`` from this machine's lists; ``write_span`` copies
the snapshot and ``check_snapshot`` holds it to the counts stated here.

  python -m benchmarks.debian_text_span --out DIR     # DIR/span-1/data.csv
  python -m benchmarks.debian_text_span --rebuild     # the snapshot, anew
"""
import argparse
import collections
import csv
import gzip
import io
import os
import subprocess
from typing import Dict, Iterator, List

LABEL = 'section'
TEXT = 'description'
CATEGORICAL = 'priority'
NUMERIC = 'installed_size'
COLUMNS = (TEXT, CATEGORICAL, NUMERIC, LABEL)
SNAPSHOT = os.path.join(os.path.dirname(__file__), 'data',
                        'debian_bookworm_sections.csv.gz')
# The 8 most common sections of the bookworm lists above (apt-cache
# dumpavail | grep '^Section:' | sort | uniq -c), 33,656 packages.
CLASS_COUNTS = {'libs': 6711, 'libdevel': 5581, 'python': 4546, 'doc': 4475,
                'perl': 4223, 'devel': 3570, 'utils': 2345, 'haskell': 2205}
ROWS = sum(CLASS_COUNTS.values())


def _stanzas(text: str) -> Iterator[Dict[str, str]]:
  """Each package's fields (a continuation line is dropped: only the
  first line of a field is kept)."""
  fields: Dict[str, str] = {}
  for line in text.splitlines():
    if not line.strip():
      if fields:
        yield fields
      fields = {}
    elif not line[0].isspace() and ':' in line:
      key, value = line.split(':', 1)
      fields[key] = value.strip()
  if fields:
    yield fields


def packages_rows(dumpavail: str, classes: int = len(CLASS_COUNTS)
                 ) -> List[Dict[str, str]]:
  """The rows of the ``classes`` most common sections, sorted by package.

  Args:
    dumpavail: the text of ``apt-cache dumpavail``.
    classes: how many sections to keep, the most common.

  Returns:
    [{column: value}] in package-name order.
  """
  stanzas = [s for s in _stanzas(dumpavail) if s.get('Section')]
  counts = collections.Counter(s['Section'] for s in stanzas)
  kept = {section for section, _ in counts.most_common(classes)}
  rows = [(s['Package'], {TEXT: s.get('Description', ''),
                          CATEGORICAL: s.get('Priority', ''),
                          NUMERIC: s.get('Installed-Size', ''),
                          LABEL: s['Section']})
          for s in stanzas if s['Section'] in kept]
  return [row for _, row in sorted(rows, key=lambda r: r[0])]


def _csv_bytes(rows: List[Dict[str, str]]) -> bytes:
  buffer = io.StringIO()
  writer = csv.DictWriter(buffer, fieldnames=list(COLUMNS),
                          lineterminator='\n')
  writer.writeheader()
  writer.writerows(rows)
  return buffer.getvalue().encode('utf-8')


def rebuild_snapshot(path: str = SNAPSHOT) -> str:
  """Writes SNAPSHOT from this machine's apt lists; returns its path.

  Raises:
    RuntimeError: apt-cache is missing or failed.
  """
  try:
    dumped = subprocess.run(['apt-cache', 'dumpavail'], capture_output=True,
                            text=True, check=True).stdout
  except (OSError, subprocess.CalledProcessError) as error:
    raise RuntimeError(f'apt-cache dumpavail failed ({error}); the snapshot '
                       f'{path} is built on a Debian machine with updated '
                       'apt lists (apt-get update).') from error
  os.makedirs(os.path.dirname(path), exist_ok=True)
  # mtime=0: the same rows give the same gzip bytes.
  with open(path, 'wb') as raw, gzip.GzipFile(
      fileobj=raw, mode='wb', mtime=0, compresslevel=9) as f:
    f.write(_csv_bytes(packages_rows(dumped)))
  return path


def read_snapshot(path: str = SNAPSHOT) -> List[Dict[str, str]]:
  """The snapshot's rows as {column: value as written}."""
  with gzip.open(path, 'rt', encoding='utf-8', newline='') as f:
    return list(csv.DictReader(f))


def check_snapshot(path: str = SNAPSHOT) -> List[Dict[str, str]]:
  """The snapshot's rows, held to ROWS and CLASS_COUNTS.

  Raises:
    ValueError: the snapshot's columns, row count or class counts are not
      the ones stated.
  """
  rows = read_snapshot(path)
  if rows and tuple(rows[0]) != COLUMNS:
    raise ValueError(f'{path}: columns {tuple(rows[0])}, expected {COLUMNS}.')
  counts = dict(collections.Counter(r[LABEL] for r in rows))
  if len(rows) != ROWS or counts != CLASS_COUNTS:
    raise ValueError(f'{path}: {len(rows)} rows with classes {counts}; '
                     f'expected {ROWS} with {CLASS_COUNTS}. Rebuilt from '
                     'other apt lists? Restore it from git.')
  return rows


def write_span(directory: str) -> str:
  """Writes the checked snapshot to directory/span-1/data.csv; its path."""
  rows = check_snapshot()
  span = os.path.join(directory, 'span-1')
  os.makedirs(span, exist_ok=True)
  path = os.path.join(span, 'data.csv')
  with open(path, 'wb') as f:
    f.write(_csv_bytes(rows))
  return path


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--out', help='the data root to write the span to')
  parser.add_argument('--rebuild', action='store_true',
                      help='rebuild the snapshot from apt-cache dumpavail')
  args = parser.parse_args(argv)
  if args.rebuild:
    print(rebuild_snapshot())
  if args.out:
    print(write_span(args.out))


if __name__ == '__main__':
  main()
