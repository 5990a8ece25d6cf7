"""Scoring a run's span with the served model, after the push (--bulk-score).

TFX's BulkInferrer scores examples with the blessed model inside the
pipeline. leantfx's pipeline does the same after its Pusher, on every
entry point, by running ``leantfx score`` (serving/bulk_score.py: any
runtime's push, loaded as ``leantfx serve`` loads it, rows in == rows out
checked) on the span the run ingested, with the newest version in the
Pusher's base path, which is the model serving traffic after this run:

- ``leantfx run`` / ``watch`` (local): after the run's summary, into
  ``<output>/bulk_scores/span-<N>/version-<V>/``;
- Kubeflow: the compiled ``BulkScore`` task after the Pusher
  (kubeflow/bulk_score_task.py), into
  ``<pipeline root>/bulk_scores/span-<N>/version-<V>/``.

A span already scored with that version is not scored again (the folder
appears only once complete); with no version pushed yet, nothing is scored,
and the result says so.
"""
import json
import os
import subprocess
import sys
from typing import Any, Dict, List, Optional

from leantfx import versioned_push
from leantfx.errors import LeantfxError

# The folder of a run's scores, below the output or the pipeline root.
SCORES_DIR = 'bulk_scores'
# `leantfx score`'s summary file (serving/bulk_score.SUMMARY_FILE).
SUMMARY_FILE = 'summary.json'
# How much of a failed scoring's output an error quotes.
_TAIL_LINES = 15


class BulkScoreError(LeantfxError):
  """``leantfx score`` failed on the run's span, after the push (exit 3)."""

  exit_code = 3


def scored_dir(root: str, span: int, version: int) -> str:
  """Where a span's scores with a version go, below ``root``."""
  return os.path.join(root, SCORES_DIR, f'span-{span}', f'version-{version}')


def score_argv(model_base_path: str, version: int, data_root: str, span: int,
               out: str, label: Optional[str],
               normalize_labels: bool = False) -> List[str]:
  """The ``leantfx score`` command line, run with this interpreter."""
  argv = [sys.executable, '-m', 'leantfx.cli', 'score',
          '--model-base-path', model_base_path, '--version', str(version),
          '--data-root', data_root, '--span', str(span), '--out', out]
  if label:
    argv += ['--label', label]
  if normalize_labels:
    argv.append('--normalize-labels')
  return argv


def score_span(model_base_path: str, data_root: str, span: int,
               out_root: str, label: Optional[str],
               normalize_labels: bool = False) -> Dict[str, Any]:
  """Scores ``span`` with the newest version under ``model_base_path``.

  Args:
    model_base_path: the Pusher's base path (its versions' folder).
    data_root: the folder of span-<N>/ folders.
    span: the span the run ingested.
    out_root: the output folder or pipeline root (scores go below it).
    label: the label column (accuracy or RMSE in the summary), or None.
    normalize_labels: the run compared labels without surrounding spaces.

  Returns:
    ``{'scored': False, 'reason': ...}`` when no version was pushed yet;
    otherwise ``leantfx score``'s summary with ``scored`` (True),
    ``version``, ``out`` and ``again`` (False when it scored now, True when
    that span and version had been scored already).

  Raises:
    BulkScoreError: ``leantfx score`` failed (its last output lines quoted).
  """
  versions = versioned_push.list_versions(model_base_path)
  if not versions:
    return {'scored': False,
            'reason': f'no model version in {model_base_path} yet'}
  version = versions[-1]
  out = scored_dir(out_root, span, version)
  again = os.path.isfile(os.path.join(out, SUMMARY_FILE))
  if not again:
    os.makedirs(os.path.dirname(out), exist_ok=True)
    result = subprocess.run(
        score_argv(model_base_path, version, data_root, span, out, label,
                   normalize_labels),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        check=False)
    if result.returncode != 0:
      tail = '\n'.join(result.stdout.strip().splitlines()[-_TAIL_LINES:])
      raise BulkScoreError(
          f'Scoring span {span} of {data_root} with version {version} of '
          f'{model_base_path} failed (leantfx score exit code '
          f'{result.returncode}); nothing was written to {out}. Its output '
          f'ended:\n{tail}')
  with open(os.path.join(out, SUMMARY_FILE), encoding='utf-8') as f:
    summary = json.load(f)
  summary.update(scored=True, version=version, out=out, again=again)
  return summary


def describe(result: Dict[str, Any]) -> str:
  """One line for a run's summary."""
  if not result['scored']:
    return f'bulk score: nothing scored ({result["reason"]})'
  line = (f'bulk score: {result["rows_scored"]:,} of {result["rows_read"]:,} '
          f'rows of the span scored with version {result["version"]}')
  if 'accuracy' in result:
    line += f', accuracy {result["accuracy"]:.4f}'
  elif 'rmse' in result:
    line += f', RMSE {result["rmse"]:.6g}'
  if result['again']:
    line += ' (already scored)'
  return f'{line}: {result["out"]}'
