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

``--time-rows N`` (no pipeline run) times the Baselines component alone at
N rows: benchmarks/scale_data.py's span through leantfx's CsvExampleGen
executor (the real 4:1 split), then the Baselines executor on its splits,
against the default 1M-row run's minutes in docs/figures.json
(``scale.minutes``): the share the baselines add where a whole run does not
fit the time at hand.

  python -m benchmarks.bench_baselines [--sizes small|all] [--keep DIR]
  python -m benchmarks.bench_baselines --time-rows 1000000
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


def _example_gen(data_root: str, out: str) -> str:
  """The scale span through the CsvExampleGen executor; its Examples uri."""
  # pylint: disable=g-import-not-at-top
  from tfx.proto import example_gen_pb2
  from tfx.types import standard_artifacts
  from tfx.utils import proto_utils
  from leantfx import splits
  from leantfx.components.csv_example_gen import executor
  from leantfx.components.csv_example_gen import options
  # pylint: enable=g-import-not-at-top
  examples = standard_artifacts.Examples()
  examples.uri = out
  read = options.CsvReadOptions(label=scale_data.LABEL,
                                categorical_columns=scale_data.CATEGORICAL)
  executor.Executor().Do({}, {'examples': [examples]}, {
      'input_base': data_root,
      'input_config': proto_utils.proto_to_json(example_gen_pb2.Input(
          splits=[example_gen_pb2.Input.Split(name='single_split',
                                              pattern='span-1/*')])),
      'output_config': proto_utils.proto_to_json(splits.output_config()),
      'output_data_format': example_gen_pb2.FORMAT_TF_EXAMPLE,
      'output_file_format': example_gen_pb2.FORMAT_TFRECORDS_GZIP,
      'custom_config': proto_utils.proto_to_json(
          options.custom_config(read)),
      'span': 1})
  return examples


def _schema_file(folder: str) -> str:
  """A schema.pbtxt of the scale span's features, as SchemaGen types them."""
  # pylint: disable=g-import-not-at-top
  from google.protobuf import text_format
  from tensorflow_metadata.proto.v0 import schema_pb2
  # pylint: enable=g-import-not-at-top
  schema = schema_pb2.Schema()
  for name in scale_data.NUMERIC:
    schema.feature.add(name=name, type=schema_pb2.FLOAT)
  for name in scale_data.CATEGORICAL + (scale_data.LABEL,):
    schema.feature.add(name=name, type=schema_pb2.BYTES)
  os.makedirs(folder, exist_ok=True)
  with open(os.path.join(folder, 'schema.pbtxt'), 'w', encoding='utf-8') as f:
    f.write(text_format.MessageToString(schema))
  return folder


def _run_minutes() -> float:
  """docs/figures.json's default 1M-row run (scale.minutes)."""
  path = os.path.join(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))), 'docs', 'figures.json')
  with open(path, encoding='utf-8') as f:
    figures = json.load(f)
  return next(f['value'] for f in figures['rows']
              if f['id'] == 'scale.minutes')


def time_component(rows: int, workdir: str,
                   max_rows: Optional[int] = None) -> Dict[str, Any]:
  """The Baselines executor's seconds on an ExampleGen split of rows rows
  (max_rows: the per-split sample; None: the component's default)."""
  # pylint: disable=g-import-not-at-top
  from tfx.dsl.components.base import base_executor
  from tfx.types import standard_artifacts
  from leantfx import config as config_lib
  from leantfx.components.baselines import component as baselines_component
  from leantfx.components.baselines import executor as baselines_executor
  from leantfx.components.baselines import spec as baselines_spec
  # pylint: enable=g-import-not-at-top
  data = os.path.join(workdir, 'data')
  started = time.monotonic()
  scale_data.write_span(data, rows)
  examples = _example_gen(data, os.path.join(workdir, 'examples'))
  ingest_seconds = time.monotonic() - started
  schema = standard_artifacts.Schema()
  schema.uri = _schema_file(os.path.join(workdir, 'schema'))
  output = baselines_spec.Baselines()
  output.uri = os.path.join(workdir, 'baselines')
  os.makedirs(output.uri)
  spec = config_lib.DatasetSpec(
      name='scale', label=scale_data.LABEL,
      classes=tuple(f'class_{c}' for c in range(scale_data.CLASSES)),
      numeric_features=scale_data.NUMERIC,
      categorical_features=scale_data.CATEGORICAL, model='mlp')
  started = time.monotonic()
  baselines_executor.Executor(base_executor.BaseExecutor.Context(
      tmp_dir=os.path.join(workdir, 'tmp'), unique_id='1')).Do(
          {baselines_spec.EXAMPLES_KEY: [examples],
           baselines_spec.SCHEMA_KEY: [schema]},
          {baselines_spec.BASELINES_KEY: [output]},
          {baselines_spec.DATASET_KEY: json.dumps(
              config_lib.to_json_dict(spec)),
           baselines_spec.MAX_ROWS_KEY: (
               max_rows or baselines_component.DEFAULT_MAX_ROWS)})
  seconds = time.monotonic() - started
  doc = json.loads(output.get_string_custom_property(
      baselines_spec.FIGURES_PROPERTY))
  run_seconds = 60 * _run_minutes()
  row_out = {'rows': rows, 'ingest_s': round(ingest_seconds, 1),
             'baselines_s': round(seconds, 1),
             'run_s (figures.json)': run_seconds,
             'baselines_share': round(seconds / run_seconds, 3),
             'sampled': doc['rows']['sampled'],
             'max_rows': doc['rows']['max_rows']}
  for name, entry in doc['baselines'].items():
    row_out[name] = entry.get('value')
    row_out[f'{name}_s'] = entry.get('fit_seconds')
  return row_out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--sizes', choices=('small', 'all'), default='all')
  parser.add_argument('--keep', help='keep the spans and runs in DIR')
  parser.add_argument('--time-rows', type=int, metavar='N',
                      help='time the Baselines component alone at N rows '
                      '(no pipeline run)')
  parser.add_argument('--max-rows', type=int, metavar='N',
                      help='with --time-rows: the per-split sample (default: '
                      'the component\'s)')
  args = parser.parse_args(argv)
  if args.time_rows:
    workdir = args.keep or tempfile.mkdtemp(prefix='leantfx-bench-baselines-')
    harness.report(
        'baselines_time', 'The Baselines component alone (issue 43)',
        [time_component(args.time_rows, workdir, args.max_rows)],
        ['baselines_s: the Baselines executor on the CsvExampleGen splits '
         '(an even sample of at most max_rows rows per split)',
         'baselines_share: baselines_s / the default 1M-row run of '
         'docs/figures.json (scale.minutes; target <= 0.10)'])
    return 0
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
