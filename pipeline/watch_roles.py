"""Column roles a local ``leantfx watch`` keeps the same from span to span.

Each span's ``leantfx run`` infers the roles of its columns from that
span's values (leantfx/column_roles.py). Once a model is pushed, its serving
signature is made of those roles: a later span whose short texts looked like
categories, or whose dates came in one format fewer, would otherwise give
the next version another signature, and its clients' requests would fail.
So the roles of the first pushed run (its run record's ``columns``) are
written beside the watcher's state, and every later run gets them as
``--column-role COLUMN=ROLE`` and ``--date-format COLUMN=FORMAT``: a span
whose values contradict a pinned role is then refused by that run's own
check (exit 2, "rejected"), never trained on another role.

Options the user gave win; with ``--schema`` the schema already holds the
roles (TFDV's natural_language_domain/time_domain), so nothing is pinned.
A Kubeflow watcher needs none of this: its compiled pipeline carries the
roles decided at compile time.
"""
import json
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence

from leantfx.errors import ConfigError

FILE_NAME = 'column_roles.json'


def path_beside(state_path: str) -> str:
  """The pinned roles' file, in the folder of the watcher's state file."""
  return os.path.join(os.path.dirname(os.path.abspath(state_path)),
                      FILE_NAME)


def read(path: str) -> Optional[List[Dict[str, Any]]]:
  """The pinned columns ([{column, role, date_format?}]), None if not pinned.

  Raises:
    ConfigError: the file exists but is not what pin() writes.
  """
  if not os.path.exists(path):
    return None
  try:
    with open(path, encoding='utf-8') as f:
      pinned = json.load(f)
    columns = pinned['columns']
    for entry in columns:
      if not isinstance(entry.get('column'), str) or not isinstance(
          entry.get('role'), str):
        raise ValueError(f'entry {entry!r}')
  except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
    raise ConfigError(
        f'{path} does not hold the column roles the watcher pinned ({e}). '
        'Delete it to pin the roles of the next pushed run again.') from e
  return columns


def pin(path: str, record: Mapping[str, Any], span: int) -> bool:
  """Writes the roles of a pushed run, once; True when this call wrote them.

  Args:
    path: path_beside(state_path).
    record: the run record of a finished ``leantfx run``.
    span: the span that run trained on (stated in the file).
  """
  columns = record.get('columns')
  if record.get('status') != 'pushed' or not columns or os.path.exists(path):
    return False
  kept = [{k: c[k] for k in ('column', 'role', 'date_format') if c.get(k)}
          for c in columns]
  tmp = f'{path}.tmp'
  with open(tmp, 'w', encoding='utf-8') as f:
    json.dump({'span': span, 'run_id': record.get('run_id'),
               'columns': kept}, f, indent=1)
  os.replace(tmp, path)
  return True


def run_args(pinned: Optional[Sequence[Mapping[str, Any]]],
             given_roles: Sequence[str],
             given_formats: Sequence[str]) -> List[str]:
  """``leantfx run`` arguments that give each pinned column its role.

  Args:
    pinned: read()'s columns, or None.
    given_roles: the user's --column-role values (those columns are left
      to them).
    given_formats: the user's --date-format values (a bare FORMAT, for
      every date column, leaves every format to the user).

  Returns:
    --column-role/--date-format arguments, empty when nothing is pinned.
  """
  if not pinned:
    return []
  user_roles = {v.rpartition('=')[0] for v in given_roles}
  user_formats = {v.rpartition('=')[0] for v in given_formats}
  argv = []
  for entry in pinned:
    column = entry['column']
    if column in user_roles:
      continue
    argv.append(f'--column-role={column}={entry["role"]}')
    fmt = entry.get('date_format')
    if fmt and column not in user_formats and '' not in user_formats:
      argv.append(f'--date-format={column}={fmt}')
  return argv
