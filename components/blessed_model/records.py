"""The blessed-model records the Pusher keeps under the pipeline root.

The same design as the ValidationGate's drift baselines: a folder fixed when
the pipeline is built, ``<pipeline root>/<pipeline name>/Pusher/
blessed_models/``, in which the Pusher writes one small JSON record per model
it pushed (only blessed models are pushed): the Model artifact's URI (the
Trainer's output folder, with ``Format-Serving`` and ``Format-Keras``), the
serving version and when. The newest record is the last blessed model: the
Evaluator's baseline and the warm start's base model, where no ML Metadata
resolver runs (the open-source KFP backend runs none).

Record names sort by time (``record-<nanoseconds since the epoch>.json``), so
the newest is the greatest name. A record is written under a temporary name,
then renamed, so a reader never parses half a record.
"""
import json
import posixpath
import re
import time
from typing import Any, Dict, Optional

from tfx.dsl.io import fileio

# <pipeline root>/<pipeline name>/<this>/<RECORDS_DIR>.
RECORDS_COMPONENT_DIR = 'Pusher'
RECORDS_DIR = 'blessed_models'
_RECORD_RE = re.compile(r'^record-([0-9]{20})\.json$')
# Keys of a record.
MODEL_URI = 'model_uri'
PUSHED_VERSION = 'pushed_version'
RECORDED_AT_NS = 'recorded_at_ns'


def records_dir(pipeline_root: str, pipeline_name: str) -> str:
  """The blessed-model record folder of a pipeline."""
  return posixpath.join(pipeline_root.rstrip('/'), pipeline_name,
                        RECORDS_COMPONENT_DIR, RECORDS_DIR)


def write_record(directory: str, model_uri: str, pushed_version: str,
                 now_ns: Optional[int] = None) -> str:
  """Records a pushed (hence blessed) model as the newest one.

  Args:
    directory: the record folder (``records_dir()``).
    model_uri: the Model artifact's URI.
    pushed_version: the serving version it was pushed as.
    now_ns: the record's time in nanoseconds (tests pass it; default now).

  Returns:
    The record's path.

  Raises:
    ValueError: for an empty directory or model URI.
  """
  if not directory or not model_uri:
    raise ValueError(
        f'A blessed-model record needs a folder and a model URI; got folder '
        f'{directory!r} and model {model_uri!r}.')
  now_ns = time.time_ns() if now_ns is None else now_ns
  name = f'record-{now_ns:020d}.json'
  record = {MODEL_URI: model_uri, PUSHED_VERSION: str(pushed_version),
            RECORDED_AT_NS: now_ns}
  fileio.makedirs(directory)
  target = posixpath.join(directory, name)
  temporary = posixpath.join(directory, f'.{name}.tmp')
  with fileio.open(temporary, 'w') as f:
    f.write(json.dumps(record, sort_keys=True))
  fileio.rename(temporary, target, overwrite=True)
  return target


def latest_record(directory: Optional[str]) -> Optional[Dict[str, Any]]:
  """The newest record whose model still exists, or None.

  Args:
    directory: the record folder; None or a missing folder means no record.

  Returns:
    The record dict (MODEL_URI, PUSHED_VERSION, RECORDED_AT_NS), or None when
    no model has been blessed yet.
  """
  if not directory or not fileio.isdir(directory):
    return None
  names = sorted((n.rstrip('/') for n in fileio.listdir(directory)
                  if _RECORD_RE.match(n.rstrip('/'))), reverse=True)
  for name in names:
    with fileio.open(posixpath.join(directory, name), 'r') as f:
      record = json.loads(f.read())
    # A model folder deleted by a retention policy is skipped: the next
    # older record is then the baseline.
    if fileio.isdir(record.get(MODEL_URI, '')):
      return record
  return None
