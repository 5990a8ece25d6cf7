"""baselines.json: what was fit, on how many rows, and each eval-split figure.

The one document the Baselines artifact carries (as a file and as its
``figures`` custom property) and the relative gate, the run summary, the
run record and the model card read.
"""
import dataclasses
import json
from typing import Any, Dict, Optional, Sequence

from leantfx.components.baselines import fits

ACCURACY = 'accuracy'
RMSE = 'rmse'


def metric_of(task: str) -> str:
  """The figure the baselines are measured by: accuracy, or RMSE."""
  return RMSE if task == 'regression' else ACCURACY


def document(task: str, baselines: Sequence[fits.Baseline],
             train_rows: int, train_total: int, eval_rows: int,
             eval_total: int, max_rows: int, seconds: float) -> Dict[str, Any]:
  """The baselines document.

  Args:
    task: 'classification' or 'regression'.
    baselines: fits.fit_all's results.
    train_rows: the train rows fit on; train_total: the rows of the split.
    eval_rows: the eval rows measured on; eval_total: the rows of the split.
    max_rows: the per-split row cap.
    seconds: the component's wall time (reading included).

  Returns:
    {'task', 'metric', 'rows': {...}, 'baselines': {name: {...}},
    'seconds'}.
  """
  sampled = train_rows < train_total or eval_rows < eval_total
  return {
      'task': task,
      'metric': metric_of(task),
      'rows': {'train': train_rows, 'train_total': train_total,
               'eval': eval_rows, 'eval_total': eval_total,
               'max_rows': max_rows, 'sampled': sampled},
      'baselines': {b.name: dataclasses.asdict(b) for b in baselines},
      'seconds': round(seconds, 3),
  }


def loads(text: Optional[str]) -> Optional[Dict[str, Any]]:
  """A document from its JSON, or None for no text."""
  return json.loads(text) if text else None


def figure(doc: Dict[str, Any], name: str) -> Optional[float]:
  """One baseline's eval figure (None: not fit, or not in the document)."""
  entry = doc.get('baselines', {}).get(name)
  return None if entry is None else entry.get('value')


def trivial_name(doc: Dict[str, Any]) -> str:
  """'mean' for a regression, 'majority' for a classifier."""
  return fits.MEAN if doc.get('task') == 'regression' else fits.MAJORITY


def rows_text(doc: Dict[str, Any]) -> str:
  """'1,437 train / 360 eval rows' (with the sample said when there is one)."""
  rows = doc['rows']
  text = f'{rows["train"]:,} train / {rows["eval"]:,} eval rows'
  if rows['sampled']:
    text += (f' (an even sample of at most {rows["max_rows"]:,} rows per '
             f'split, of {rows["train_total"]:,} / {rows["eval_total"]:,})')
  return text


def lines(doc: Dict[str, Any]) -> Sequence[str]:
  """One line per baseline: name, figure, fit time, model and note."""
  metric = doc['metric']
  found = []
  order = (trivial_name(doc), fits.LINEAR, fits.STRONG)
  for name in sorted(doc['baselines'], key=lambda n: (
      order.index(n) if n in order else len(order), n)):
    entry = doc['baselines'][name]
    value = entry['value']
    figure_text = ('not fit' if value is None else f'{metric} {value:.4f}')
    note = f' ({entry["note"]})' if entry.get('note') else ''
    found.append(f'{name}: {figure_text} in {entry["fit_seconds"]:.1f} s, '
                 f'{entry["model"]}{note}')
  return found
