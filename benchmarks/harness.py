"""Shared pieces of the benchmarks: a results table printed and saved as JSON.

Every benchmark module is ``benchmarks/bench_<name>.py`` with a ``main()`` that
measures its figures in one process, side by side, then calls ``report`` with
rows of plain values. ``make bench`` runs them all.
"""
import datetime
import json
import os
import platform
from typing import Any, Dict, List, Sequence

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           'results')


def newest_version(base: str) -> str:
  """The newest ``<base>/<version>`` folder (what ``leantfx serve`` loads)."""
  versions = [d for d in os.listdir(base) if d.isdigit()]
  if not versions:
    raise SystemExit(f'{base} holds no version folder.')
  return os.path.join(base, max(versions, key=int))


def format_table(rows: Sequence[Dict[str, Any]]) -> str:
  """Returns rows as a fixed-width text table (columns in first-seen order)."""
  columns: List[str] = []
  for row in rows:
    for key in row:
      if key not in columns:
        columns.append(key)

  def cell(value):
    if isinstance(value, float):
      return f'{value:.4g}'
    return str(value)

  cells = [[cell(row.get(c, '')) for c in columns] for row in rows]
  widths = [max([len(c)] + [len(r[i]) for r in cells])
            for i, c in enumerate(columns)]
  lines = ['  '.join(c.ljust(w) for c, w in zip(columns, widths)),
           '  '.join('-' * w for w in widths)]
  lines += ['  '.join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
  return '\n'.join(lines)


def report(name: str, title: str, rows: Sequence[Dict[str, Any]],
           notes: Sequence[str] = ()) -> str:
  """Prints a benchmark's table and writes results/<name>.json.

  Args:
    name: file stem of the JSON result.
    title: one line printed above the table.
    rows: the measured rows.
    notes: lines printed below the table (method, anchors, caveats).

  Returns:
    The path of the JSON file.
  """
  print(f'\n== {title}')
  print(format_table(rows))
  for note in notes:
    print(f'   {note}')
  os.makedirs(RESULTS_DIR, exist_ok=True)
  path = os.path.join(RESULTS_DIR, f'{name}.json')
  with open(path, 'w', encoding='utf-8') as f:
    json.dump({
        'benchmark': name,
        'title': title,
        'measured_at': datetime.datetime.now(
            datetime.timezone.utc).isoformat(timespec='seconds'),
        'machine': {'cpus': os.cpu_count(), 'platform': platform.platform(),
                    'python': platform.python_version()},
        'rows': list(rows),
        'notes': list(notes),
    }, f, indent=2)
  print(f'   results: {path}')
  return path
