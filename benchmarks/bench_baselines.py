"""Figure: the gate that knows what good is, on every kind of span (issue 43).

Each span goes through the default ``leantfx run`` (the ModelOptimizer off:
nothing it does moves the gate), and the run record gives, side by side:
the pushed model's eval figure and family (network or trees), each
baseline the Baselines component fit on the same split (the majority class
or mean, a linear model, HistGradientBoosting or TF-IDF + logistic
regression), the gate's bound and whether the model was blessed, and the
time the baselines took against the whole run.

Spans, nothing downloaded:
- the bundled ``digits``, ``penguins`` and ``diabetes``;
- issue 42's generated spans: text (benchmarks/column_spans.py, 50,000
  rows) and tabular with an id and dates (benchmarks/tabular_spans.py,
  12,000 rows);
- a span whose best reachable accuracy is about 0.8
  (benchmarks/tree_data.py with 30% of labels redrawn: 1 - 0.3 x 2/3);
- with ``--sizes all``: benchmarks/scale_data.py's 1,000,000 rows, where the
  baselines may add at most 10% to the run.

  python -m benchmarks.bench_baselines [--sizes small|all] [--keep DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

from benchmarks import column_spans
from benchmarks import harness
from benchmarks import scale_data
from benchmarks import tabular_spans
from benchmarks import tree_data
from leantfx.components.relative_gate import rule

REACHABLE_FLIP = 0.3  # best reachable accuracy 1 - 0.3 * 2/3 = 0.8


def _spans(workdir: str, sizes: str) -> List[Dict[str, Any]]:
  """[{name, args}] of the spans, their data written into workdir."""
  spans = [{'name': name, 'args': ['--dataset', name]}
           for name in ('digits', 'penguins', 'diabetes')]

  def own(name, write, label):
    data = os.path.join(workdir, name, 'data')
    write(data)
    return {'name': name, 'args': ['--data-root', data, '--label', label,
                                   '--name', name]}

  spans.append(own('text50k', lambda d: column_spans.write_span(d, 50_000),
                   column_spans.LABEL))
  spans.append(own('tabular12k', lambda d: tabular_spans.write_span(d, 12_000),
                   tabular_spans.LABEL))
  spans.append(own('reachable08', lambda d: tree_data.write_span(
      d, 12_000, flip=REACHABLE_FLIP), tree_data.LABEL))
  if sizes == 'all':
    spans.append(own('scale1m', lambda d: scale_data.write_span(d, 1_000_000),
                     scale_data.LABEL))
  return spans


def _run(span: Dict[str, Any], workdir: str) -> Dict[str, Any]:
  output = os.path.join(workdir, span['name'], 'out')
  record_path = os.path.join(output, 'record.json')
  started = time.monotonic()
  done = subprocess.run(
      [sys.executable, '-m', 'leantfx.cli', 'run', *span['args'], '--output',
       output, '--no-optimize', '--run-record', record_path],
      capture_output=True, text=True, check=False)
  seconds = time.monotonic() - started
  if not os.path.isfile(record_path):
    raise SystemExit(f'{span["name"]}: no run record (exit '
                     f'{done.returncode}):\n{done.stdout[-3000:]}\n'
                     f'{done.stderr[-3000:]}')
  with open(record_path, encoding='utf-8') as f:
    return dict(json.load(f), seconds=seconds, exit=done.returncode)


def _figure(record: Dict[str, Any]) -> Optional[float]:
  gate = record.get('gate') or {}
  if gate.get('model') is not None:
    return gate['model']
  return record.get('accuracy')


def row(name: str, record: Dict[str, Any]) -> Dict[str, Any]:
  """One table row of a run record."""
  doc = record.get('baselines') or {}
  family = record.get('model_family') or {}
  out = {'span': name, 'metric': doc.get('metric'),
         'model': _figure(record), 'family': family.get('chosen')}
  for baseline, entry in (doc.get('baselines') or {}).items():
    out[baseline] = entry.get('value')
  gate = record.get('gate')
  # The record keeps the gate's bounds; the bound applied is derived.
  bound = rule.Gate.from_json(gate).combined if gate else None
  out.update(gate_bound=bound, blessed=record.get('blessed'),
             exit=record.get('exit'), run_s=round(record['seconds'], 1),
             baselines_s=doc.get('seconds'))
  if doc.get('seconds') is not None:
    out['baselines_share'] = round(doc['seconds'] / record['seconds'], 3)
  rows = doc.get('rows') or {}
  out['sampled'] = rows.get('sampled')
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--sizes', choices=('small', 'all'), default='all')
  parser.add_argument('--keep', help='keep the spans and runs in DIR')
  args = parser.parse_args(argv)
  workdir = args.keep or tempfile.mkdtemp(prefix='leantfx-bench-baselines-')
  rows = [row(span['name'], _run(span, workdir))
          for span in _spans(workdir, args.sizes)]
  harness.report(
      'baselines', 'The gate against the run\'s own baselines (issue 43)',
      rows, ['model and baselines: eval split (accuracy; RMSE for diabetes)',
             'baselines_share: the Baselines component\'s seconds / the run '
             '(target at 1M rows: <= 0.10)',
             f'reachable08: {REACHABLE_FLIP:.0%} of labels redrawn, best '
             'reachable accuracy about 0.8'])
  return 0


if __name__ == '__main__':
  sys.exit(main())
