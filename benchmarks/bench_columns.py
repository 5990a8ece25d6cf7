"""Figure: what a user's columns mean, against the obvious alternative (issue 42).

A real span and generated ones, nothing downloaded:

- debian: benchmarks/debian_text_span.py's checked snapshot of Debian 12
  bookworm's packages of the 8 most common sections (33,656 rows: a short
  ``description``, a ``priority``, an ``installed_size``; label
  ``section``), issue 42's real text-classification span;

- text: benchmarks/column_spans.py's ticket queue (a free-text
  ``description``, a ``priority``, a ``size``; 8 classes), 50,000 and
  500,000 rows;
- tabular: benchmarks/tabular_spans.py (8 nonlinear numeric features, a
  near-unique ``customer_id``, an ``order_date`` and a ``paid_at`` timestamp,
  NA-marked amounts; 3 classes), 12,000 and 500,000 rows.

Each span goes through the default ``leantfx run --data-root D --label L``
(roles inferred, the ModelOptimizer on), timed from the command to its exit.
On exactly the rows of ExampleGen's train and eval splits (read back from
the run's Examples), what a competent engineer fits in ten minutes:

- text: scikit-learn TfidfVectorizer (word 1-2-grams, sublinear tf) of the
  description plus the priority one-hot and the standardized size, and
  LogisticRegression (C=10, lbfgs);
- tabular: HistGradientBoostingClassifier (defaults, random_state 0) on the
  numeric features and the dates' calendar numbers (year, month, day of
  week, hour, days since 2022-01-01), the identifier left out.

Then every pushed folder (the Pusher's SavedModel, the ModelOptimizer's
TFLite, OpenVINO and ONNX picks) is loaded by ``leantfx serve``'s loader and
timed alike (benchmarks/raw_variants.time_offline: ``servable.run`` at batch
1, one thread, raw columns: the text and the date strings as written), and
scored on the same EVAL_ROWS raw eval rows.

Targets (issue 42): the Debian span's default run pushed, within 1 point
of TF-IDF + logistic regression; text within 1 point of TF-IDF + logistic regression;
tabular within 1 point of HistGradientBoosting; every runtime within 2
points of the SavedModel; the 500k-row text run at most 2x the 500k-row
tabular run's time.

  python -m benchmarks.bench_columns [--sizes small|all] [--kinds debian
      text tabular] [--keep DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from benchmarks import column_spans
from benchmarks import debian_text_span
from benchmarks import harness
from benchmarks import tabular_spans
from benchmarks import text_baseline

SIZES = {'small': {'debian': (debian_text_span.ROWS,), 'text': (50_000,),
                   'tabular': (12_000,)},
         'all': {'debian': (debian_text_span.ROWS,),
                 'text': (50_000, 500_000), 'tabular': (12_000, 500_000)}}
# The text columns of each text span: (text, categorical, numeric, label).
TEXT_COLUMNS = {
    'text': (column_spans.TEXT, column_spans.CATEGORICAL,
             column_spans.NUMERIC, column_spans.LABEL),
    'debian': (debian_text_span.TEXT, debian_text_span.CATEGORICAL,
               debian_text_span.NUMERIC, debian_text_span.LABEL)}
# Raw eval rows each pushed folder is scored and timed on.
EVAL_ROWS = 2_000
_EPOCH = np.datetime64('2022-01-01T00:00:00')


def _run(kind: str, rows: int, workdir: str) -> Dict[str, Any]:
  """Writes the span, runs the default `leantfx run`; returns its facts."""
  data = os.path.join(workdir, f'{kind}-{rows}', 'data')
  output = os.path.join(workdir, f'{kind}-{rows}', 'out')
  if kind == 'debian':
    debian_text_span.write_span(data)
    label = debian_text_span.LABEL
  elif kind == 'text':
    column_spans.write_span(data, rows)
    label = column_spans.LABEL
  else:
    tabular_spans.write_span(data, rows)
    label = tabular_spans.LABEL
  record_path = os.path.join(output, 'record.json')
  started = time.monotonic()
  done = subprocess.run(
      [sys.executable, '-m', 'leantfx.cli', 'run', '--data-root', data,
       '--label', label, '--output', output, '--name', f'{kind}{rows}',
       '--run-record', record_path], capture_output=True, text=True,
      check=False)
  seconds = time.monotonic() - started
  record = {}
  if os.path.isfile(record_path):
    with open(record_path, encoding='utf-8') as f:
      record = json.load(f)
  if done.returncode not in (0, 4):
    raise SystemExit(f'leantfx run on the {kind} span of {rows} rows failed '
                     f'(exit {done.returncode}):\n{done.stdout[-3000:]}\n'
                     f'{done.stderr[-3000:]}')
  return {'output': output, 'name': f'{kind}{rows}', 'seconds': seconds,
          'record': record, 'stdout': done.stdout, 'exit': done.returncode}


def split_rows(output: str, split: str,
               columns: List[str]) -> List[Dict[str, str]]:
  """The rows of ExampleGen's split as {column: value as written}."""
  values = text_baseline.read_split(output, split, columns)
  return [dict(zip(columns, row)) for row in zip(*values.values())]


def text_reference(train, evaluation, columns: Tuple[str, str, str, str] = (
    TEXT_COLUMNS['text'])) -> Tuple[float, float]:
  """(accuracy, seconds) of TF-IDF (1-2-grams) + logistic regression.

  Args:
    train: the train rows, {column: value as written}.
    evaluation: the rows scored.
    columns: (text, categorical, numeric, label) column names.
  """
  from sklearn.compose import ColumnTransformer  # pylint: disable=g-import-not-at-top
  from sklearn.feature_extraction.text import TfidfVectorizer  # pylint: disable=g-import-not-at-top
  from sklearn.linear_model import LogisticRegression  # pylint: disable=g-import-not-at-top
  from sklearn.pipeline import make_pipeline  # pylint: disable=g-import-not-at-top
  from sklearn.preprocessing import OneHotEncoder, StandardScaler  # pylint: disable=g-import-not-at-top
  import pandas as pd  # pylint: disable=g-import-not-at-top
  text, categorical, numeric, label = columns
  frame = lambda rows: pd.DataFrame(
      {c: [r.get(c, '') for r in rows] for c in columns[:3]}).assign(
          **{numeric: lambda d: pd.to_numeric(
              d[numeric], errors='coerce').fillna(0.0)})
  model = make_pipeline(
      ColumnTransformer([
          ('text', TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True,
                                   min_df=2), text),
          ('priority', OneHotEncoder(handle_unknown='ignore'), [categorical]),
          ('size', StandardScaler(), [numeric])]),
      LogisticRegression(C=10.0, max_iter=1000))
  started = time.monotonic()
  model.fit(frame(train), [r[label] for r in train])
  seconds = time.monotonic() - started
  return float(model.score(frame(evaluation),
                           [r[label] for r in evaluation])), seconds


def _calendar(values: List[str]) -> np.ndarray:
  """[n, 5] year, month, weekday, hour, days since 2022 (NaN: missing)."""
  import pandas as pd  # pylint: disable=g-import-not-at-top
  # An empty value coerces to NaT. pandas 1.5 (the pinned one) infers the
  # column's one ISO format; it has no format='ISO8601' (read as a literal
  # pattern, every value NaT).
  when = pd.to_datetime(pd.Series(values), utc=True, errors='coerce')
  return np.stack([when.dt.year, when.dt.month, when.dt.weekday, when.dt.hour,
                   (when.dt.tz_localize(None) - pd.Timestamp(_EPOCH))
                   .dt.total_seconds() / 86400.0], axis=1).astype(float)


def _tabular_matrix(rows) -> np.ndarray:
  numeric = np.array([[float(r[k]) if r.get(k) else np.nan
                       for k in tabular_spans.NUMERIC] for r in rows])
  dates = [_calendar([r.get(c, '') for r in rows])
           for c in (tabular_spans.DATE, tabular_spans.TIMESTAMP)]
  return np.concatenate([numeric] + dates, axis=1)


def tabular_reference(train, evaluation) -> Tuple[float, float]:
  """(accuracy, seconds) of HistGradientBoosting, the identifier left out."""
  from sklearn.ensemble import HistGradientBoostingClassifier  # pylint: disable=g-import-not-at-top
  import threadpoolctl  # pylint: disable=g-import-not-at-top
  model = HistGradientBoostingClassifier(random_state=0)
  started = time.monotonic()
  # One OpenMP thread, as the Baselines component fits it (its fits.py
  # says why: two threads were slower on this machine).
  with threadpoolctl.threadpool_limits(1, user_api='openmp'):
    model.fit(_tabular_matrix(train),
              [r[tabular_spans.LABEL] for r in train])
  seconds = time.monotonic() - started
  return float(model.score(_tabular_matrix(evaluation),
                           [r[tabular_spans.LABEL] for r in evaluation])), (
                               seconds)


def _pushed_bases(output: str, name: str) -> Dict[str, Dict[str, str]]:
  bases = {'savedmodel': {'pushed': os.path.join(output, 'serving', name)}}
  for runtime in ('tflite', 'openvino', 'onnx'):
    base = os.path.join(output, runtime, name)
    if os.path.isdir(base):
      bases[runtime] = {'pick': base}
  return bases


def served(output: str, name: str) -> List[Dict[str, Any]]:
  """Every pushed folder timed and scored alike on EVAL_ROWS raw eval rows."""
  from benchmarks import raw_variants  # pylint: disable=g-import-not-at-top
  found = raw_variants.run_inputs(output, name)
  rows = raw_variants.eval_rows(found)

  class Rows:
    features = {k: np.asarray(v)[:EVAL_ROWS] for k, v in rows.features.items()}
    labels = np.asarray(rows.labels)[:EVAL_ROWS]

  return raw_variants.time_offline(_pushed_bases(output, name), Rows,
                                   runs=500, rounds=5, warmup=50)


def case(kind: str, rows: int, workdir: str) -> List[Dict[str, Any]]:
  """The rows of one span: leantfx, the reference, each runtime."""
  run = _run(kind, rows, workdir)
  record = run['record']
  # Every column name of both generators is its own feature key.
  columns = (list(TEXT_COLUMNS[kind]) if kind in TEXT_COLUMNS else
             [*tabular_spans.NUMERIC, tabular_spans.DATE,
              tabular_spans.TIMESTAMP, tabular_spans.LABEL])
  train = split_rows(run['output'], 'train', columns)
  evaluation = split_rows(run['output'], 'eval', columns)
  if kind in TEXT_COLUMNS:
    reference, fit_s = text_reference(train, evaluation, TEXT_COLUMNS[kind])
    name = 'TF-IDF 1-2-grams + logistic regression'
  else:
    reference, fit_s = tabular_reference(train, evaluation)
    name = 'HistGradientBoosting (id left out, calendar numbers)'
  accuracy = record.get('accuracy')
  out = [{
      'span': f'{kind} {rows:,}', 'what': 'leantfx run (default)',
      'eval_accuracy': accuracy, 'seconds': round(run['seconds'], 1),
      'blessed': record.get('blessed'), 'exit': run['exit'],
      'vs_reference_points': (None if accuracy is None else
                              round(100 * (accuracy - reference), 2)),
      'train_rows': len(train), 'eval_rows': len(evaluation)}, {
      'span': f'{kind} {rows:,}', 'what': name,
      'eval_accuracy': round(reference, 4), 'seconds': round(fit_s, 1)}]
  if record.get('pushed_path'):
    try:
      timed = served(run['output'], run['name'])
    except RuntimeError as error:
      # A pushed folder that cannot take the raw columns is a finding of
      # the figure, not the end of the other spans' rows.
      timed = [{'variant': 'FAILED: ' + str(error).strip().splitlines()[-1]}]
    for row in timed:
      out.append({'span': f'{kind} {rows:,}',
                  'what': f'served: {row["variant"]}',
                  'eval_accuracy': row.get('accuracy'),
                  'p50_ms': row.get('p50_ms'), 'p99_ms': row.get('p99_ms'),
                  'scored_rows': row.get('eval_rows')})
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--sizes', choices=sorted(SIZES), default='all')
  parser.add_argument('--kinds', nargs='+', choices=sorted(TEXT_COLUMNS) + [
      'tabular'], help='only these spans (default: every one of --sizes)')
  parser.add_argument('--keep', help='keep the spans and runs in DIR')
  args = parser.parse_args(argv)
  workdir = args.keep or tempfile.mkdtemp(prefix='leantfx-bench-columns-')
  rows: List[Dict[str, Any]] = []
  for kind, sizes in SIZES[args.sizes].items():
    if args.kinds and kind not in args.kinds:
      continue
    for size in sizes:
      rows.extend(case(kind, size, workdir))
  times = {r['span']: r['seconds'] for r in rows
           if r['what'] == 'leantfx run (default)'}
  notes = ['every figure on the rows of ExampleGen\'s own train/eval split',
           f'served rows: benchmarks/raw_variants.time_offline, batch 1, one '
           f'thread, raw columns, {EVAL_ROWS} eval rows']
  if 'text 500,000' in times and 'tabular 500,000' in times:
    notes.append(f'500k text run / 500k tabular run: '
                 f'{times["text 500,000"] / times["tabular 500,000"]:.2f}x '
                 '(target <= 2x)')
  harness.report('columns', 'What a user\'s columns mean (issue 42)', rows,
                 notes)
  return 0


if __name__ == '__main__':
  sys.exit(main())
