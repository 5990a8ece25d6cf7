"""benchmarks/debian_text_span.py: the snapshot holds the rows it states,
and the parser reads apt's stanzas as the snapshot was built from them."""
import gzip

import pytest

from benchmarks import debian_text_span

pytestmark = pytest.mark.unit

# Two stanzas as apt-cache dumpavail prints them (fields trimmed), and one
# without a section.
_DUMP = """Package: zlib1g-dev
Installed-Size: 600
Description: compression library - development
Section: libdevel
Priority: optional

Package: 2to3
Installed-Size: 31
Description: 2to3 binary using python3
 a continuation line, not kept
Section: python
Priority: optional

Package: no-section
Description: dropped
"""


def test_snapshot_rows_and_classes_are_as_stated():
  rows = debian_text_span.check_snapshot()
  # The span: 33,656 rows, mean description 47 characters.
  assert len(rows) == debian_text_span.ROWS == 33_656
  mean = sum(len(r[debian_text_span.TEXT]) for r in rows) / len(rows)
  assert 46.5 < mean < 48.5
  assert all(r[debian_text_span.LABEL] for r in rows)


def test_stanzas_become_rows_sorted_by_package():
  rows = debian_text_span.packages_rows(_DUMP, classes=2)
  assert rows == [
      {'description': '2to3 binary using python3', 'priority': 'optional',
       'installed_size': '31', 'section': 'python'},
      {'description': 'compression library - development',
       'priority': 'optional', 'installed_size': '600',
       'section': 'libdevel'}]


def test_a_changed_snapshot_is_refused(tmp_path):
  path = tmp_path / 'short.csv.gz'
  rows = debian_text_span.read_snapshot()[:-1]
  with gzip.open(path, 'wb') as f:
    f.write(debian_text_span._csv_bytes(rows))  # pylint: disable=protected-access
  with pytest.raises(ValueError, match='33655 rows'):
    debian_text_span.check_snapshot(str(path))
