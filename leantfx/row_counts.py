"""Rows in == rows used: what ExampleGen read, what the splits hold, and the check.

ExampleGen records on its Examples artifact how many rows it read from each
file of the span (``rows_by_file``, JSON) and their sum (``rows_read``).
The ValidationGate, which runs before Augment and Transform, compares them
with the examples StatisticsGen counted in the splits and, when the command
checked the files first (``leantfx run`` / ``watch``), with the rows the
pre-flight counted per file. Any difference stops the run, naming the files
and the counts; no anomaly allowance lets it through. The one difference
allowed is said, not silent: the rows of the classes ``--min-rows-per-class``
dropped, which ExampleGen records by class (``rows_dropped_by_class``); the
splits must then hold exactly the rows read less those.
"""
import json
import os
from typing import Dict, Mapping, Optional

ROWS_READ_PROPERTY = 'rows_read'
ROWS_BY_FILE_PROPERTY = 'rows_by_file'
# {class: rows} of the classes --min-rows-per-class dropped (JSON), on the
# Examples artifact; the splits hold the rows read less these.
ROWS_DROPPED_PROPERTY = 'rows_dropped_by_class'
_MAX_NAMED_FILES = 10


def encode(rows_by_file: Mapping[str, int]) -> str:
  """The rows_by_file property's text: {file name: rows}, sorted."""
  return json.dumps(dict(rows_by_file), sort_keys=True)


def decode(text: Optional[str]) -> Dict[str, int]:
  """Reads ``encode``'s text; {} for none."""
  if not text:
    return {}
  value = json.loads(text)
  if not isinstance(value, dict) or not all(
      isinstance(k, str) and isinstance(v, int) for k, v in value.items()):
    raise ValueError(f'rows_by_file must map file names to row counts, got '
                     f'{text[:200]!r}.')
  return value


def by_name(rows_by_path: Mapping[str, int]) -> Dict[str, int]:
  """{span-N/file name: rows} of {path: rows}: comparable across machines."""
  return {os.path.join(os.path.basename(os.path.dirname(p)),
                       os.path.basename(p)): n
          for p, n in rows_by_path.items()}


def _differences(a: Mapping[str, int], b: Mapping[str, int]) -> str:
  lines = []
  for name in sorted(set(a) | set(b)):
    if a.get(name) != b.get(name):
      lines.append(f'{name}: {a.get(name, "not read")} vs '
                   f'{b.get(name, "not read")}')
  shown = '; '.join(lines[:_MAX_NAMED_FILES])
  if len(lines) > _MAX_NAMED_FILES:
    shown += f'; and {len(lines) - _MAX_NAMED_FILES} more'
  return shown


def mismatch(rows_by_file: Mapping[str, int], rows_used: Mapping[str, int],
             expected_by_file: Optional[Mapping[str, int]] = None,
             dropped_by_class: Optional[Mapping[str, int]] = None
            ) -> Optional[str]:
  """Why the rows used differ from the rows in the files, or None.

  Args:
    rows_by_file: what ExampleGen read, {span-N/file: rows}; empty when the
      ExampleGen counts nothing (TFRecord and image data).
    rows_used: examples per split as StatisticsGen counted them.
    expected_by_file: what the pre-flight counted, {span-N/file: rows}, or
      None when no pre-flight ran (a compiled Kubeflow run).
    dropped_by_class: {class: rows} ExampleGen dropped for
      --min-rows-per-class (None or {}: none).

  Returns:
    A sentence naming the files and counts, or None when they agree.
  """
  used = sum(rows_used.values())
  splits = ', '.join(f'{s} {n:,}' for s, n in sorted(rows_used.items()))
  if rows_by_file and expected_by_file is not None and dict(
      expected_by_file) != dict(rows_by_file):
    return (f'ExampleGen read {sum(rows_by_file.values()):,} rows from '
            f'{len(rows_by_file)} file(s) where the pre-flight check counted '
            f'{sum(expected_by_file.values()):,} in {len(expected_by_file)} '
            f'(per file, ExampleGen vs check: '
            f'{_differences(rows_by_file, expected_by_file)}).')
  source = rows_by_file or expected_by_file
  if source is None:
    return None
  read = sum(source.values())
  dropped = sum((dropped_by_class or {}).values())
  if read != used + dropped:
    who = 'ExampleGen read' if rows_by_file else 'The pre-flight check counted'
    files = ', '.join(f'{k} {v:,}' for k, v in
                      sorted(source.items())[:_MAX_NAMED_FILES])
    less = (f' less the {dropped:,} of the classes --min-rows-per-class '
            f'dropped ({read - dropped:,})' if dropped else '')
    return (f'{who} {read:,} rows ({files}){less} but the splits hold '
            f'{used:,} ({splits}).')
  return None
