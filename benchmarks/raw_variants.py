"""One trained model's raw-column exports, every runtime and mode, timed alike.

A benchmark that compares runtimes or modes must change one factor at a time.
The ModelOptimizer exports raw-column models (the Transform folded in) only
for its picks, each a different variant; this module exports the *Trainer's*
model of a finished ``leantfx run`` with raw-column inputs as TFLite,
OpenVINO and ONNX, each float32 and int8, through the optimizer's own export
functions (components/optimize/export/raw_features.export_raw_tflite,
raw_runtimes.export_raw), calibrated on the raw train rows the optimizer
calibrates on (its executor's reading of the run's ModelOptimizer inputs,
found in ML Metadata), and pushes each as the optimizer pushes its picks
(leantfx/runtimes/push.py: model file, the trained SavedModel's
feature_names.json, manifest.json with every file's sha256), so
``leantfx serve --model-base-path <base> --model-name <dataset>`` loads it.
The pushed SavedModel (the Pusher's) stands beside them as the reference.

``time_offline`` then times every folder the same way, in one fresh process
whose TensorFlow is limited to ``threads`` intra-op and inter-op threads
before it starts: each folder loaded by ``leantfx serve``'s own loader
(serving/loading.load_servable), ``servable.run('serving_default', row,
['probabilities'])`` at batch 1 on the same raw-column arrays (one real eval
row), in interleaved rounds (the variants' order rotated each round, so a
busy machine slows every variant alike); accuracy is the eval split sent
through the same call, row by row.

  nice -n 19 .venv/bin/python -m benchmarks.raw_variants --output OUTPUT

From another benchmark (ML Metadata and the raw rows read once)::

  found = raw_variants.run_inputs(output)
  bases = raw_variants.build(output, workdir, found=found)
  rows = raw_variants.time_offline(bases, raw_variants.eval_rows(found))

At ``threads`` 1 (the servables' default, and ``leantfx serve``'s) each
folder is loaded by load_servable itself; at another count, by the backend
load_servable picks, given that many threads (load_servable takes none).
"""
import argparse
import dataclasses
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from benchmarks import harness

RUNTIMES = ('tflite', 'openvino', 'onnx')
MODES = ('float32', 'int8')
SAVED_MODEL = 'savedmodel'
SIGNATURE = 'serving_default'
OUTPUT = 'probabilities'
# The per-variant timed calls: enough for a p99 of 20 calls, and 7 variants
# x 2,000 calls of at most ~1 ms stay within seconds.
RUNS = 2000
ROUNDS = 10
WARMUP_CALLS = 100
_WORKER_FLAG = '--time-worker'


@dataclasses.dataclass(frozen=True)
class RunInputs:
  """What the run's ModelOptimizer was given, read back from ML Metadata.

  Attributes:
    model_uri: the Trainer's Model artifact.
    raw: the optimizer's raw rows (train: its calibration rows; eval: the
      raw eval split it scores raw exports on) and the Transform.
    calibration_samples: raw rows int8 calibrates on (its config's).
  """
  model_uri: str
  raw: Any
  calibration_samples: int


def _open_store(metadata_path: str):
  """The run's ML Metadata store, read-only (the run is not ours)."""
  from ml_metadata import metadata_store  # pylint: disable=g-import-not-at-top
  from ml_metadata.proto import metadata_store_pb2  # pylint: disable=g-import-not-at-top
  if not os.path.isfile(metadata_path):
    raise SystemExit(f'{metadata_path} does not exist: pass the --output of '
                     'a finished `leantfx run`.')
  config = metadata_store_pb2.ConnectionConfig()
  config.sqlite.filename_uri = metadata_path
  config.sqlite.connection_mode = (
      metadata_store_pb2.SqliteMetadataSourceConfig.READONLY)
  return metadata_store.MetadataStore(config)


def run_inputs(output: str, dataset: str = 'digits') -> RunInputs:
  """The ModelOptimizer's inputs in the run at ``output``, as it read them.

  The executor's own reading (components/optimize/executor.py) of the
  execution's input artifacts and properties: the same calibration rows
  (the raw train split it was given, sampled as it samples) and eval rows.

  Raises:
    SystemExit: no finished run of ``leantfx-<dataset>`` with a
      ModelOptimizer that took raw rows.
  """
  from ml_metadata.proto import metadata_store_pb2  # pylint: disable=g-import-not-at-top
  from tfx.types import artifact_utils  # pylint: disable=g-import-not-at-top
  from leantfx.components.optimize import config as config_lib  # pylint: disable=g-import-not-at-top
  from leantfx.components.optimize import executor  # pylint: disable=g-import-not-at-top
  from leantfx.components.optimize import spec  # pylint: disable=g-import-not-at-top
  from leantfx.pipeline import run_summary  # pylint: disable=g-import-not-at-top

  store = _open_store(os.path.join(output, 'metadata.sqlite'))
  pipeline = f'leantfx-{dataset}'
  node = run_summary.node_executions(store, pipeline).get('ModelOptimizer')
  if node is None or node.state not in ('complete', 'cached'):
    raise SystemExit(
        f'{output}/metadata.sqlite holds no finished ModelOptimizer of '
        f'{pipeline}; run `leantfx run --dataset {dataset} --output {output}` '
        'first.')
  execution = store.get_executions_by_id([node.execution_id])[0]
  properties = {k: v.string_value or v.int_value
                for k, v in execution.custom_properties.items()}
  events = [e for e in store.get_events_by_execution_ids([execution.id])
            if e.type == metadata_store_pb2.Event.INPUT]
  artifacts = {a.id: a for a in store.get_artifacts_by_id(
      [e.artifact_id for e in events])}
  types = {t.id: t for t in store.get_artifact_types_by_id(
      list({a.type_id for a in artifacts.values()}))}
  input_dict: Dict[str, list] = {}
  for event in events:
    artifact = artifacts[event.artifact_id]
    input_dict.setdefault(event.path.steps[0].key, []).append(
        artifact_utils.deserialize_artifact(types[artifact.type_id], artifact))
  config = config_lib.OptimizationConfig.from_json(
      properties[spec.OPTIMIZATION_CONFIG_KEY])
  transform_graph_uri = input_dict[spec.TRANSFORM_GRAPH_KEY][0].uri
  raw = executor._raw_inputs(  # pylint: disable=protected-access
      input_dict, properties, transform_graph_uri, config)
  if raw is None:
    raise SystemExit(f'The ModelOptimizer of {output} took no raw rows: its '
                     'picks take transformed features; nothing to fold.')
  return RunInputs(model_uri=input_dict[spec.MODEL_KEY][0].uri, raw=raw,
                   calibration_samples=config.calibration_samples)


def _export(runtime: str, mode: str, model, found: RunInputs,
            scratch: str) -> str:
  """The optimizer's raw-column export; the file (TFLite) or folder."""
  from leantfx.components.optimize.export import raw_features  # pylint: disable=g-import-not-at-top
  from leantfx.components.optimize.export import raw_runtimes  # pylint: disable=g-import-not-at-top
  raw = found.raw
  out = os.path.join(scratch, f'{runtime}_{mode}')
  if runtime == 'tflite':
    path = os.path.join(out, 'model.tflite')
    raw_features.export_raw_tflite(
        model, raw.tf_transform_output, raw.label, raw.classes, mode,
        raw.train.features, output_path=path,
        num_calibration_samples=found.calibration_samples)
    return path
  raw_runtimes.export_raw(
      runtime, model, raw.tf_transform_output, raw.label, raw.classes, mode,
      raw.train.features, output_dir=out,
      num_calibration_samples=found.calibration_samples)
  return out


def _push(runtime: str, mode: str, exported: str, base_parent: str,
          model_name: str, found: RunInputs) -> str:
  """Pushes an export as the optimizer pushes a raw pick; its model base."""
  from leantfx.components.optimize.export import raw_runtimes  # pylint: disable=g-import-not-at-top
  from leantfx.components.optimize.steps import push_picks  # pylint: disable=g-import-not-at-top
  from leantfx.runtimes import push  # pylint: disable=g-import-not-at-top
  metrics: Dict[str, Any] = {'serving_inputs': {'inputs': 'raw'}}
  common = dict(source_model_uri=found.model_uri, technique_chain=[],
                metrics=metrics,
                feature_names_file=push_picks.feature_names_file(
                    found.model_uri))
  if runtime == 'tflite':
    push.push_tflite(exported, base_parent, model_name, tflite_mode=mode,
                     **common)
  else:
    # The runtime's own manifest facts, as the optimizer records them
    # (OpenVINO: what a server compiling the IR as pushed answers at
    # batch 1), on the same eval rows.
    from leantfx.runtimes import registry  # pylint: disable=g-import-not-at-top
    model_file = registry.get(runtime).model_path(exported)
    rows = found.raw.eval
    metrics['serving_inputs'].update(
        raw_runtimes.raw_predictor(runtime, model_file).push_facts(
            [rows.example(i) for i in range(
                min(raw_runtimes.PUSH_FACT_ROWS, len(rows)))]))
    push.push_runtime_model(runtime, exported, base_parent, model_name,
                            mode=mode, **common)
  return os.path.join(base_parent, model_name)


def export_and_push(model, found: RunInputs, workdir: str, model_name: str,
                    runtimes=RUNTIMES, modes=MODES
                   ) -> Dict[str, Dict[str, str]]:
  """Each runtime's and mode's raw-column export of ``model``, pushed.

  Args:
    model: the trained tf_keras model (transformed-feature inputs).
    found: the run's inputs (run_inputs): the Transform, the calibration
      rows, and the trained model's uri, whose feature-names file is pushed
      beside each export.
    workdir: where the model bases go (``<workdir>/<runtime>-<mode>/``,
      replaced if present).
    model_name: the model's folder under each base's parent.
    runtimes: a subset of RUNTIMES.
    modes: a subset of MODES.

  Returns:
    {runtime: {mode: model base}}.
  """
  bases: Dict[str, Dict[str, str]] = {}
  with tempfile.TemporaryDirectory(prefix='leantfx-raw-variants-') as scratch:
    for runtime in runtimes:
      for mode in modes:
        parent = os.path.join(workdir, f'{runtime}-{mode}')
        shutil.rmtree(parent, ignore_errors=True)
        exported = _export(runtime, mode, model, found, scratch)
        bases.setdefault(runtime, {})[mode] = _push(
            runtime, mode, exported, parent, model_name, found)
  return bases


def build(output: str, workdir: str, dataset: str = 'digits',
          found: Optional[RunInputs] = None) -> Dict[str, Dict[str, str]]:
  """Exports the run's trained model with raw columns, every runtime and mode.

  Args:
    output: a finished ``leantfx run --output OUTPUT``.
    workdir: where the model bases go (``<workdir>/<runtime>-<mode>/``,
      replaced if present).
    dataset: the run's dataset (its pipeline ``leantfx-<dataset>`` and model
      name).
    found: run_inputs(output, dataset), if already read.

  Returns:
    {runtime: {mode: model base}}: 'tflite', 'openvino', 'onnx' with
    'float32' and 'int8', and 'savedmodel' {'float32': the Pusher's base}.
    Each base holds one ``<version>/`` folder that ``leantfx serve
    --model-base-path BASE --model-name DATASET`` loads.
  """
  from leantfx.components.optimize import inputs  # pylint: disable=g-import-not-at-top
  saved = os.path.join(output, 'serving', dataset)
  if not os.path.isdir(saved):
    raise SystemExit(f'{saved} does not exist: the run pushed no SavedModel.')
  found = found or run_inputs(output, dataset)
  model = inputs.load_keras_model(inputs.keras_model_dir(found.model_uri))
  bases = export_and_push(model, found, workdir, dataset)
  bases[SAVED_MODEL] = {'float32': saved}
  return bases


def eval_rows(found: RunInputs):
  """The raw eval split the optimizer scores raw exports on (LabeledData)."""
  return found.raw.eval


def call_name(threads: int) -> str:
  """How every variant is called, for the rows."""
  return (f'servable.run, batch 1, {threads} thread'
          f'{"s" * (threads != 1)}, raw columns')


def time_offline(bases: Mapping[str, Mapping[str, str]], rows,
                 runs: int = RUNS, threads: int = 1, rounds: int = ROUNDS,
                 warmup: int = WARMUP_CALLS) -> List[Dict[str, Any]]:
  """Times every model base the same way, in one fresh process.

  Args:
    bases: build()'s answer (or any {runtime: {mode: model base}}).
    rows: the raw eval rows (a LabeledData: {column: [n]}, labels [n]);
      row 0 is the timed request, all of them score accuracy.
    runs: timed batch-1 calls per variant (split over ``rounds``).
    threads: TensorFlow's intra-op and inter-op threads, and each runtime's
      threads.
    rounds: interleaved rounds.
    warmup: untimed calls per variant first.

  Returns:
    One row per variant: variant, call, p50_ms, p99_ms, size_bytes,
    accuracy, eval_rows, calls.

  Raises:
    RuntimeError: the timing process failed (its stderr's end is quoted).
  """
  job = {'bases': {r: dict(m) for r, m in bases.items()},
         'features': {k: np.asarray(v) for k, v in rows.features.items()},
         'labels': np.asarray(rows.labels), 'runs': int(runs),
         'threads': int(threads), 'rounds': max(1, int(rounds)),
         'warmup': int(warmup)}
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  with tempfile.TemporaryDirectory(prefix='leantfx-raw-timing-') as tmp:
    job_path = os.path.join(tmp, 'job.pickle')
    with open(job_path, 'wb') as f:
      pickle.dump(job, f)
    done = subprocess.run(
        [sys.executable, '-m', 'benchmarks.raw_variants', _WORKER_FLAG,
         job_path], cwd=root, capture_output=True, text=True, check=False)
    result = job_path + '.json'
    if done.returncode or not os.path.isfile(result):
      raise RuntimeError(
          f'The timing process failed (exit {done.returncode}):\n'
          + '\n'.join(done.stderr.splitlines()[-20:]))
    with open(result, encoding='utf-8') as f:
      return json.load(f)


def _load(version_dir: str, model_name: str, threads: int):
  """The servable ``leantfx serve`` would load for a version folder.

  At the servables' default thread count (1) this is load_servable itself;
  at another, the same backend it picks, given that many threads.
  """
  from leantfx.runtimes import timing  # pylint: disable=g-import-not-at-top
  from leantfx.serving import loading  # pylint: disable=g-import-not-at-top
  from leantfx.serving import runtime_servable  # pylint: disable=g-import-not-at-top
  from leantfx.serving import saved_model_servable  # pylint: disable=g-import-not-at-top
  from leantfx.serving import tflite_servable  # pylint: disable=g-import-not-at-top
  version = int(os.path.basename(version_dir))
  if threads == timing.DEFAULT_NUM_THREADS == (
      tflite_servable.DEFAULT_NUM_THREADS):
    return loading.load_servable(model_name, version, version_dir)
  runtime = loading.runtime_of(version_dir)
  if runtime is None:
    return saved_model_servable.SavedModelServable(model_name, version,
                                                   version_dir)
  if runtime in loading.SERVABLES:
    return tflite_servable.TfLiteServable(model_name, version, version_dir,
                                          num_threads=threads)
  return runtime_servable.RuntimeServable(runtime, model_name, version,
                                          version_dir, num_threads=threads)


def _folder_bytes(folder: str) -> int:
  return sum(os.path.getsize(os.path.join(d, f))
             for d, _, files in os.walk(folder) for f in files)


def _time_worker(job_path: str) -> None:
  """The timing process: TF's threads first, then load, time, score."""
  with open(job_path, 'rb') as f:
    job = pickle.load(f)
  threads = job['threads']
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  # Before any op runs: fixed once TensorFlow's runtime starts.
  tf.config.threading.set_intra_op_parallelism_threads(threads)
  tf.config.threading.set_inter_op_parallelism_threads(threads)
  features, labels = job['features'], job['labels']
  loaded = {}
  for runtime, modes in job['bases'].items():
    for mode, base in modes.items():
      version_dir = harness.newest_version(base)
      servable = _load(version_dir, os.path.basename(base.rstrip('/')),
                       threads)
      inputs = servable.signatures[SIGNATURE].inputs
      if set(inputs) != set(features):
        raise SystemExit(
            f'{version_dir} takes {sorted(inputs)[:5]}... ({len(inputs)} '
            f'inputs), not the {len(features)} raw columns '
            f'{sorted(features)[:5]}...: not a raw-column model.')
      loaded[f'{runtime} {mode}'] = (servable, version_dir)
  request = {k: np.asarray(v[0:1]) for k, v in features.items()}
  outputs = [OUTPUT]
  for servable, _ in loaded.values():
    for _ in range(job['warmup']):
      servable.run(SIGNATURE, request, outputs)
  names = list(loaded)
  per_round = max(1, job['runs'] // job['rounds'])
  durations: Dict[str, List[int]] = {n: [] for n in names}
  clock = time.perf_counter_ns
  for round_index in range(job['rounds']):
    shift = round_index % len(names)
    for name in names[shift:] + names[:shift]:
      run = loaded[name][0].run
      timed = durations[name]
      for _ in range(per_round):
        start = clock()
        run(SIGNATURE, request, outputs)
        timed.append(clock() - start)
  result = []
  for name in names:
    servable, version_dir = loaded[name]
    right = 0
    for i in range(len(labels)):
      answer = servable.run(
          SIGNATURE, {k: np.asarray(v[i:i + 1]) for k, v in features.items()},
          outputs)[OUTPUT]
      right += int(np.argmax(np.asarray(answer).reshape(-1)) == labels[i])
    ms = np.asarray(durations[name]) / 1e6
    result.append({
        'variant': name, 'servable': type(servable).__name__,
        'call': call_name(threads),
        'p50_ms': float(np.percentile(ms, 50)),
        'p99_ms': float(np.percentile(ms, 99)),
        'size_bytes': _folder_bytes(version_dir),
        'accuracy': right / len(labels), 'eval_rows': int(len(labels)),
        'calls': int(len(ms))})
    servable.close()
  with open(job_path + '.json', 'w', encoding='utf-8') as f:
    json.dump(result, f, indent=1)


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else list(argv)
  if argv[:1] == [_WORKER_FLAG]:
    _time_worker(argv[1])
    return 0
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--output', required=True,
                      help='a finished `leantfx run --output` folder')
  parser.add_argument('--dataset', default='digits')
  parser.add_argument('--workdir', default=None,
                      help='where the model bases go (default: a temporary '
                      'folder, removed at the end)')
  parser.add_argument('--runs', type=int, default=RUNS)
  parser.add_argument('--rounds', type=int, default=ROUNDS)
  parser.add_argument('--threads', type=int, default=1)
  args = parser.parse_args(argv)
  with tempfile.TemporaryDirectory(prefix='leantfx-raw-variants-') as tmp:
    workdir = args.workdir or tmp
    began = time.perf_counter()
    found = run_inputs(args.output, args.dataset)
    bases = build(args.output, workdir, args.dataset, found)
    built = time.perf_counter() - began
    began = time.perf_counter()
    rows = time_offline(bases, eval_rows(found), runs=args.runs,
                        threads=args.threads, rounds=args.rounds)
    timed = time.perf_counter() - began
  harness.report(
      'raw_variants',
      f'{args.dataset}: the Trainer\'s model with raw columns, every runtime '
      f'and mode, {call_name(args.threads)}', rows, notes=[
          f'{args.rounds} interleaved rounds of {args.runs // args.rounds} '
          f'calls per variant after {WARMUP_CALLS} warm-up calls, one '
          'process; request: eval row 0; accuracy: every raw eval row '
          'through the same call.',
          'size_bytes: the whole version folder (manifest and feature '
          'names included).',
          f'build() {built:.0f} s (ML Metadata, raw rows, 6 exports and '
          f'pushes), time_offline() {timed:.0f} s.'])
  return 0


if __name__ == '__main__':
  raise SystemExit(main())
