"""ModelOptimizer's executor: validate every input, then run the pure steps.

``Executor.Do`` only resolves artifacts and properties, checks them (the model
is a loadable Keras SavedModel, the 'train' and 'eval' splits hold files, the
transform graph knows the label and every model input) and then calls
``optimize``, which builds the variants, measures, gates, selects, pushes and
reports. Every step below is a module-level function so it can be tested on
its own.

Artifact URIs and the push base may be on an object store (gs://, s3://: the
pipeline root on Kubeflow). The checks read through tfx.dsl.io.fileio, the
examples and transform graph are read by TensorFlow (which reads those
stores), the Keras model is copied to a local scratch folder to be loaded and
measured, and the report is written there and copied to its artifact.
"""
import concurrent.futures
import dataclasses
import json
import multiprocessing
import os
import tempfile
import time
import traceback
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import tensorflow as tf
import tensorflow_transform as tft
import tf_keras
from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.utils import io_utils

from leantfx import feature_names
from leantfx.components.optimize import config as config_lib
from leantfx.components.optimize.evaluation import measure
from leantfx.runtimes import push
from leantfx.components.optimize.export import raw_features
from leantfx.components.optimize.export import raw_runtimes
from leantfx.components.optimize.evaluation import quality as quality_lib
from leantfx.components.optimize.evaluation import report
from leantfx.components.optimize.export import runtime_variants
from leantfx.runtimes import registry as runtimes_lib
from leantfx.components.optimize.evaluation import selection
from leantfx.components.optimize import spec
from leantfx.components.optimize.export import tflite as tflite_export
from leantfx.errors import ConfigError
from leantfx.errors import InputDataError
from leantfx.models import features
from leantfx.models import model_layout
from leantfx.models.training import budget as budget_lib
from leantfx.models.model_layout import KERAS_MODEL_DIR

VARIANTS_DIR = 'variants'
BLESSED_FILE = 'BLESSED'
NOT_BLESSED_FILE = 'NOT_BLESSED'
_SHUFFLE_SEED = 0
# Train examples the techniques measure on (low-rank's rank search, their
# before/after figures): a fixed sample, so that no decision a technique
# makes is scored on the selection split the gate then judges it on.
TECHNIQUE_EXAMPLES = 1024
# Memory that does not grow with rows. A split of at most CACHE_MAX_RECORDS
# records is cached in memory as serialized records (tens of MB for a
# tabular split of that size; digits' ~2,900 augmented train rows are far
# below); a larger one is streamed from its files every pass, shuffled in a
# SHUFFLE_BUFFER-record buffer.
CACHE_MAX_RECORDS = 50_000
SHUFFLE_BUFFER = 10_000
# The variants are scored (gate, report, raw-feature parity) on at most this
# many eval rows, the first of the split (the Transform writes the rows in
# the order it read them, so the raw and the transformed samples are the
# same rows on the DirectRunner); a larger eval split is sampled, and the
# report says so. The raw train rows int8 calibration draws from are read up
# to the same bound.
SCORING_MAX_EXAMPLES = 20_000


@dataclasses.dataclass
class Outcome:
  """What one optimizer run produced.

  Attributes:
    baseline: metrics of the trained model served by TensorFlow.
    decisions: one gate decision per variant.
    selected: the chosen decision, or None ("no variant blessed").
    pushed: where the selected variant was pushed (None if nothing was).
    report_paths: the files report.write_report wrote.
    failures: the candidates (or modes) that raised and were skipped.
    runtime_picks: server runtime -> its chosen decision (None: nothing
      blessed in it), for each server runtime built.
    runtime_pushes: server runtime -> where its pick was pushed.
    held_out: variant name -> its quality (accuracy, or RMSE and MAE) on
      the report split (the baseline included), which gate and policy never
      saw.
    fastest: the blessed variant with the lowest p50 over every runtime,
      with its speed-ups (None when nothing was blessed).
    serving_inputs: what the pushed .tflite takes ({'inputs': 'raw', ...}
      with its scores, or {'inputs': 'transformed'}); None: nothing pushed.
    runtime_serving_inputs: the same for each server runtime's push.
    budgets: the Trainer's steps the techniques were tied to, the samples
      scored and calibrated on, and each candidate's time and steps.
  """
  baseline: measure.VariantMetrics
  decisions: List[selection.GateDecision]
  selected: Optional[selection.GateDecision]
  pushed: Optional[push.PushResult]
  report_paths: Dict[str, Any]
  failures: List[Dict[str, str]] = dataclasses.field(default_factory=list)
  runtime_picks: Dict[str, Optional[selection.GateDecision]] = (
      dataclasses.field(default_factory=dict))
  runtime_pushes: Dict[str, push.PushResult] = dataclasses.field(
      default_factory=dict)
  held_out: Dict[str, selection.HeldOut] = dataclasses.field(
      default_factory=dict)
  serving_inputs: Optional[Dict[str, Any]] = None
  runtime_serving_inputs: Dict[str, Dict[str, Any]] = dataclasses.field(
      default_factory=dict)
  fastest: Optional[selection.Fastest] = None
  budgets: Dict[str, Any] = dataclasses.field(default_factory=dict)


# JSON list of {'candidate', 'stage', 'error'} on the optimized model.
SKIPPED_CANDIDATES_PROPERTY = 'skipped_candidates'
# JSON {candidate: {'techniques_s', 'tflite_s', 'train_steps'}} on the
# optimized model (the run summary's line).
CANDIDATE_TIMES_PROPERTY = 'candidate_times'
# JSON of selection.Fastest on the optimized model (the run summary's line).
FASTEST_PROPERTY = 'fastest_variant'


class NoVariantBuilt(RuntimeError):
  """Every candidate raised: nothing could be built, let alone gated."""


# ---------------------------------------------------------------- checks ---


def keras_model_dir(model_uri: str) -> str:
  """The Format-Keras SavedModel directory of a Model artifact, checked.

  Raises:
    InputDataError: the directory is missing or holds no SavedModel.
  """
  path = os.path.join(model_uri, KERAS_MODEL_DIR)
  if not fileio.isdir(path):
    raise InputDataError(
        f'The model artifact at {model_uri} has no {KERAS_MODEL_DIR}/ '
        'directory; ModelOptimizer needs the bare tf_keras model that '
        "leantfx's run_fn saves there (see models/model_layout.py). Point it "
        "at the Trainer's model output.")
  if not tf.saved_model.contains_saved_model(path):
    raise InputDataError(
        f'{path} is not a SavedModel (no saved_model.pb); found '
        f'{sorted(fileio.listdir(path))[:10]}. The Trainer must save the Keras '
        "model there with model.save(path, save_format='tf').")
  return path


def load_keras_model(path: str) -> tf_keras.Model:
  """Loads the Format-Keras model, turning load failures into a clear error.

  Raises:
    InputDataError: the SavedModel is corrupt or not a tf_keras model.
  """
  try:
    model = tf_keras.models.load_model(path, compile=False)
  except Exception as e:  # pylint: disable=broad-except
    # load_model raises many types (DecodeError, OSError, ValueError,
    # KeyError...) for a damaged directory; each means the same to the user.
    raise InputDataError(
        f'Cannot load the tf_keras model in {path}: {type(e).__name__}: {e}. '
        'The directory is damaged or was not written by tf_keras '
        "model.save(..., save_format='tf'); re-run the Trainer.") from e
  if not isinstance(model, tf_keras.Model) or not model.inputs:
    raise InputDataError(
        f'{path} holds a SavedModel but not a functional tf_keras model '
        f'(loaded a {type(model).__name__}); the optimizer needs the Keras '
        'model with named inputs.')
  return model


def split_files(examples: types.Artifact, split: str,
                what: str = 'transformed examples') -> List[str]:
  """The files of one split of an Examples artifact, checked.

  Raises:
    InputDataError: the split is not listed or its directory has no files.
  """
  names = json.loads(examples.split_names) if examples.split_names else None
  if names is not None and split not in names:
    raise InputDataError(
        f'The {what} at {examples.uri} have splits {names} but '
        f'no {split!r} split; ModelOptimizer trains on "train" and measures '
        'on "eval". Configure ExampleGen to output both.')
  directory = os.path.join(examples.uri, f'Split-{split}')
  files = sorted(f for f in fileio.glob(os.path.join(directory, '*'))
                 if not fileio.isdir(f))
  if not files:
    raise InputDataError(
        f'The {split!r} split of the {what} has no files in '
        f'{directory}; expected gzipped TFRecords of tf.Example.')
  return files


def transformed_feature_spec(transform_graph_uri: str,
                             model_inputs: Sequence[str],
                             label_key: str = features.LABEL_KEY
                            ) -> Dict[str, Any]:
  """The parsing spec of the label and the model's inputs, checked.

  Raises:
    InputDataError: the transform graph is unreadable, or lacks the label or
      a model input.
  """
  try:
    full_spec = tft.TFTransformOutput(
        transform_graph_uri).transformed_feature_spec()
  except Exception as e:  # pylint: disable=broad-except
    raise InputDataError(
        f'Cannot read the transform graph at {transform_graph_uri}: '
        f'{type(e).__name__}: {e}. Point transform_graph at the Transform '
        "component's transform_graph output.") from e
  wanted = [label_key] + list(model_inputs)
  missing = [name for name in wanted if name not in full_spec]
  if missing:
    raise InputDataError(
        f'The transformed features at {transform_graph_uri} lack {missing} '
        f'(they have {sorted(full_spec)}); the model needs its inputs and '
        f'the label {label_key!r}. Train and transform with the same '
        'preprocessing_fn.')
  return {name: full_spec[name] for name in wanted}


def model_input_names(model: tf_keras.Model) -> List[str]:
  return list(tflite_export.serving_input_specs(model))


def make_dataset(files: Sequence[str],
                 feature_spec: Mapping[str, Any],
                 label_key: str,
                 batch_size: int,
                 shuffle: bool = False,
                 cache_max_records: int = CACHE_MAX_RECORDS
                ) -> tf.data.Dataset:
  """A finite dataset of (features dict, label) batches from gzipped TFRecords.

  Its records are counted once (so its cardinality is known: the
  techniques' epochs need no counting pass). At most ``cache_max_records``
  records are cached in memory (the techniques pass over the data several
  times); a larger split is streamed from its files on every pass, the
  files in a new order each pass and the records through a SHUFFLE_BUFFER
  buffer when ``shuffle``. Shuffling after the cache gives every epoch a new
  order.

  Raises:
    InputDataError: the files cannot be read or parsed (checked on the first
      batch).
  """
  files = list(files)
  try:
    records = budget_lib.count_records(files)
  except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
    raise InputDataError(
        f'Cannot read transformed examples from {files[:3]}: '
        f'{e.message.splitlines()[0]}. They must be gzipped TFRecords of '
        'tf.Example matching the transform graph.') from e
  if records > cache_max_records:
    names = tf.data.Dataset.from_tensor_slices(files)
    if shuffle:
      names = names.shuffle(len(files), seed=_SHUFFLE_SEED)
    dataset = names.interleave(
        lambda name: tf.data.TFRecordDataset(name, compression_type='GZIP'),
        cycle_length=min(4, len(files)))
  else:
    dataset = tf.data.TFRecordDataset(files, compression_type='GZIP').cache()
  if shuffle:
    dataset = dataset.shuffle(SHUFFLE_BUFFER, seed=_SHUFFLE_SEED)

  def parse(serialized):
    parsed = tf.io.parse_example(serialized, feature_spec)
    label = parsed.pop(label_key)
    return parsed, tf.reshape(label, [-1])

  dataset = dataset.batch(batch_size).map(parse).apply(
      tf.data.experimental.assert_cardinality(-(-records // batch_size)))
  try:
    next(iter(dataset))
  except StopIteration as e:
    raise InputDataError(f'{files[0]} (and siblings) hold no examples.') from e
  except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
    raise InputDataError(
        f'Cannot read transformed examples from {list(files)[:3]}: '
        f'{e.message.splitlines()[0]}. They must be gzipped TFRecords of '
        'tf.Example matching the transform graph.') from e
  return dataset


# ----------------------------------------------------------- pure steps ---


def _chain_details(results) -> Dict[str, Any]:
  history = {}
  for result in results:
    for key, values in (result.details.get('history') or {}).items():
      history[f'{result.technique}/{key}'] = values
  return {
      'technique_chain': [r.technique for r in results],
      'steps': [{'technique': r.technique, 'details': r.details}
                for r in results],
      'history': history,
  }


def _technique_steps(details: Mapping[str, Any]) -> int:
  """The optimizer steps a technique trained for (0: none recorded)."""
  return int(details.get('training_steps') or
             details.get('optimizer_steps') or 0)


def build_variants(model: tf_keras.Model,
                   train_ds: tf.data.Dataset,
                   eval_ds: tf.data.Dataset,
                   eval_data: measure.LabeledData,
                   config: config_lib.OptimizationConfig,
                   variants_dir: str,
                   failures: Optional[List[Dict[str, str]]] = None,
                   *,
                   server_runtimes: Sequence[str] = (),
                   baseline: Optional[measure.VariantMetrics] = None,
                   models: Optional[Dict[str, Any]] = None,
                   pool: Optional[concurrent.futures.Executor] = None,
                   timings: Optional[Dict[str, Dict[str, Any]]] = None
                  ) -> List[measure.VariantMetrics]:
  """Runs every candidate chain, exports each mode and measures it.

  A candidate whose technique raises (e.g. a layer tfmot cannot wrap, in a
  user's architecture) is skipped, and so is a mode whose conversion or
  measurement raises: the other variants are still built, and the failure
  is logged and recorded in ``failures`` for the report. The float model has
  already been pushed by then; one technique must not fail the run.

  Args:
    model: the trained Keras model (never modified).
    train_ds: train batches for fine-tuning and calibration.
    eval_ds: batches the techniques search and report accuracy on
      (optimize passes technique_sample's train rows, never the gate's).
    eval_data: the selection split in memory, which every variant is
      measured on (and gated on, by the caller).
    config: candidates and measurement settings.
    variants_dir: where <candidate>/<mode>.tflite files go.
    failures: a list the skipped candidates and modes are appended to, as
      {'candidate', 'stage', 'error'}.
    server_runtimes: runtimes beside TFLite (openvino, onnx) to build
      float32 and int8 variants in, for the candidates that can still win:
      those with a TFLite variant inside the quality budget (the other
      runtimes cost conversion time). Their exports run
      in a worker process beside the next candidate; then every variant,
      TFLite's too, is timed in one interleaved run (``_time_together``).
    baseline: the baseline's metrics, for that budget check.
    models: if given, candidate name -> its Keras model (after its chain)
      is put in it, for the raw-feature export of the pick.
    pool: the worker process for the server-runtime exports (the caller's,
      which it shuts down); None: one is started here when server_runtimes
      is not empty, and shut down on return.
    timings: if given, candidate name -> {'techniques_s': its chain's
      training, 'tflite_s': its TFLite exports and measurements,
      'train_steps': the steps its techniques trained} is put in it (the
      server runtimes' exports overlap the next candidate, untimed).

  Returns:
    One VariantMetrics per (candidate, mode) or (candidate, runtime, mode)
    that was built, in config order.
  """
  failures = [] if failures is None else failures

  def record(candidate_name, stage, error):
    logging.exception('Candidate %s failed at %s; skipped.', candidate_name,
                      stage)
    failures.append({'candidate': candidate_name, 'stage': stage,
                     'error': f'{type(error).__name__}: {error}'})

  by_candidate: Dict[str, List[measure.VariantMetrics]] = {}
  background: List[Tuple[str, Any]] = []
  # The server-runtime exports of one candidate (conversion, calibration,
  # accuracy; no timing) run in a worker process while the next candidate
  # trains: the training step and tf2onnx/NNCF are both bound to one core
  # (Python), so a thread would wait for the GIL; a process uses the other
  # core (measured: the optimizer took as long with the other runtimes as
  # without them, docs/measurements.md "Foundation"). The process starts
  # with the first candidate and imports the runtimes while the baseline's
  # TFLite modes convert.
  own_pool = pool is None and bool(server_runtimes)
  if own_pool:
    pool = _runtime_pool()
  elif not server_runtimes:
    pool = None
  scratch = tempfile.TemporaryDirectory(prefix='leantfx-variants-')
  try:
    for candidate in config.candidates:
      current, results, stage = model, [], None
      started = time.perf_counter()
      try:
        for step in candidate.steps:
          stage = step.technique
          logging.info('Candidate %s: running %s', candidate.name,
                       step.technique)
          result = config_lib.technique_function(step.technique)(
              current, train_ds, step.config, eval_ds)
          results.append(result)
          current = result.model
      except Exception as e:  # pylint: disable=broad-except
        record(candidate.name, stage, e)
        continue
      chain = '+'.join(r.technique for r in results) or config_lib.BASELINE
      details = _chain_details(results)
      trained = time.perf_counter()
      if models is not None:
        models[candidate.name] = current
      out_dir = os.path.join(variants_dir, candidate.name)
      os.makedirs(out_dir, exist_ok=True)
      tflite_variants = by_candidate.setdefault(candidate.name, [])
      # One serving SavedModel per candidate: every TFLite mode and the
      # worker's OpenVINO/ONNX exports convert it (a save is 0.5-0.7 s on
      # digits after the first).
      saved_model = os.path.join(scratch.name, candidate.name, 'saved_model')
      try:
        tflite_export.save_serving_model(current, saved_model)
      except Exception as e:  # pylint: disable=broad-except
        record(candidate.name, 'serving SavedModel', e)
        continue
      quantization_aware = tflite_export.is_quantization_aware(current)
      for mode in candidate.tflite_modes:
        path = os.path.join(out_dir, f'{mode}.tflite')
        try:
          tflite_export.export_saved_model_tflite(
              saved_model, mode, train_ds,
              quantization_aware=quantization_aware, output_path=path,
              num_calibration_samples=config.calibration_samples)
          metrics = measure.measure_tflite(
              path, eval_data, name=f'{candidate.name}/{mode}',
              technique=chain, tflite_mode=mode,
              num_threads=config.num_threads,
              latency_runs=config.latency_runs,
              warmup_runs=config.warmup_runs, keras_model=current,
              details=details, quality=config.quality)
        except Exception as e:  # pylint: disable=broad-except
          record(candidate.name, f'tflite {mode}', e)
          continue
        if pool is None:
          _log_variant(metrics, config.quality)
        tflite_variants.append(metrics)
      if timings is not None:
        timings[candidate.name] = {
            'techniques_s': round(trained - started, 2),
            'tflite_s': round(time.perf_counter() - trained, 2),
            'train_steps': sum(_technique_steps(r.details) for r in results)}
      if pool is not None and _can_still_win(
          current, candidate.name, tflite_variants, eval_data, config,
          server_runtimes, baseline):
        try:
          background.append((candidate.name, pool.submit(
              runtime_variants.export_in_worker, _worker_job(
                  current, candidate.name, chain, details, train_ds,
                  eval_data, config, out_dir, server_runtimes,
                  saved_model))))
        except Exception as e:  # pylint: disable=broad-except
          record(candidate.name, ', '.join(server_runtimes), e)
    built = {}
    for name, future in background:
      try:
        built[name], worker_failures = future.result()
      except Exception as e:  # pylint: disable=broad-except
        # Raised outside a (runtime, mode) pair, or the worker died.
        record(name, ', '.join(server_runtimes), e)
        continue
      for stage, error, trace in worker_failures:
        logging.warning('Candidate %s failed at %s; skipped.\n%s', name,
                        stage, trace)
        failures.append({'candidate': name, 'stage': stage, 'error': error})
  finally:
    if own_pool:
      _shut_down(pool)
    scratch.cleanup()
  if pool is None:
    return [v for found in by_candidate.values() for v in found]
  return _time_together(by_candidate, built, eval_data, config, record)


def _runtime_pool() -> concurrent.futures.ProcessPoolExecutor:
  """One worker process for the server-runtime exports, started now.

  Spawned, not forked: a fork of a process running TensorFlow's threads
  can deadlock. It inherits the environment (TF_USE_LEGACY_KERAS), and dies
  with this process (runtime_variants.worker_init). The worker is started by
  the submit below, in the calling thread, which uses the pool and shuts it
  down: the kernel's parent-death signal follows that thread.
  """
  pool = concurrent.futures.ProcessPoolExecutor(
      max_workers=1, mp_context=multiprocessing.get_context('spawn'),
      initializer=runtime_variants.worker_init, initargs=(os.getpid(),))
  pool.submit(runtime_variants.warm_up)
  return pool


def _shut_down(pool: Optional[concurrent.futures.Executor]) -> None:
  """Every job is done (or the caller raised): the worker's own exit
  (TensorFlow's finalization takes seconds) is not waited for."""
  if pool is not None:
    pool.shutdown(wait=False, cancel_futures=True)


def _worker_job(model, candidate_name, chain, details, train_ds, eval_data,
                config, out_dir, server_runtimes, saved_model_dir
               ) -> Dict[str, Any]:
  """What the worker needs: the serving SavedModel (saved_model_dir, already
  saved) and data in memory."""
  return runtime_variants.saved_model_job(
      model, saved_model_dir, candidate_name=candidate_name, technique=chain,
      runtimes=list(server_runtimes), representative_data=train_ds,
      eval_data=eval_data, out_dir=out_dir, num_threads=config.num_threads,
      num_calibration_samples=config.calibration_samples, details=details,
      quality=config.quality)


def _log_variant(metrics: measure.VariantMetrics,
                 quality: quality_lib.Quality) -> None:
  logging.info('Variant %s: %s %.4f, %d bytes, p99 %.3f ms', metrics.name,
               quality.name, quality.value(metrics), metrics.size_bytes,
               metrics.latency_p99_ms)


def _can_still_win(model, candidate_name, tflite_variants, eval_data, config,
                   server_runtimes, baseline) -> bool:
  """Whether a candidate's OpenVINO/ONNX variants are worth building."""
  quality = config.quality
  # The gate's quality terms (the drop, and a classifier's lost examples),
  # not size or latency: another runtime's file and speed differ from
  # TFLite's.
  quality_only = dataclasses.replace(config.budget, max_size_bytes=None,
                                     max_p99_ms=None)
  if baseline is not None and not any(
      d.blessed for d in selection.gate(baseline, tflite_variants,
                                        quality_only, quality,
                                        labels=eval_data.labels)):
    logging.info('Candidate %s: no TFLite variant within the %s budget; not '
                 'built in %s.', candidate_name, quality.label,
                 ', '.join(server_runtimes))
    return False
  if tflite_export.is_quantization_aware(model):
    # A QAT model's fake-quant ranges are TFLite's; the server runtimes
    # quantize the float candidates with their own calibration instead.
    logging.info('Candidate %s is quantization-aware; built for TFLite only.',
                 candidate_name)
    return False
  return True


def _time_together(by_candidate: Mapping[str, List[measure.VariantMetrics]],
                   built: Mapping[str, Sequence[runtime_variants.Built]],
                   eval_data: measure.LabeledData,
                   config: config_lib.OptimizationConfig,
                   record) -> List[measure.VariantMetrics]:
  """Every variant timed in one interleaved run, once nothing else runs.

  The TFLite variants were timed as they were built, beside the background
  exports; their figures are replaced by this run's, which also times the
  server-runtime variants, so every runtime's figures come from the same
  rounds on a quiet process. Returns the variants in config order, each
  candidate's TFLite variants then its server-runtime ones.
  """
  example = eval_data.example(0)
  tflite = [v for found in by_candidate.values() for v in found]
  timers = [measure.LatencyVariant(v.name, v.path, config.num_threads,
                                   example) for v in tflite]
  server_timers, timed = [], {}
  for name, entries in built.items():
    found_timers, timed[name] = runtime_variants.timers_for(
        entries, config.num_threads, example,
        lambda stage, e, name=name: record(name, stage, e))
    server_timers.extend(found_timers)
  if not timers and not server_timers:
    return []
  latency = measure.measure_latency_interleaved(
      timers + server_timers, runs=config.latency_runs,
      warmup_runs=config.warmup_runs)
  del timers, server_timers
  retimed = {}
  for v in tflite:
    stats = latency.variants[v.name]
    facts = dict(v.details)
    facts['latency'] = dict(
        facts.get('latency', {}), rounds=latency.rounds,
        attempts=latency.attempts, stable=latency.stable,
        max_round_spread=latency.max_round_spread, round_spread=stats.spread,
        interleaved_with=sorted(latency.variants))
    retimed[v.name] = dataclasses.replace(
        v, latency_p50_ms=stats.p50_ms, latency_p99_ms=stats.p99_ms,
        latency_runs=stats.runs, call_overhead_ms=stats.call_overhead_ms,
        latency_round_p50_ms=list(stats.round_p50_ms), details=facts)
  variants = []
  for name, found in by_candidate.items():
    variants.extend(retimed[v.name] for v in found)
    variants.extend(
        runtime_variants.variant_metrics(entry, latency, len(eval_data),
                                         config.num_threads)
        for entry in timed.get(name, ()))
  for metrics in variants:
    _log_variant(metrics, config.quality)
  return variants


def _raw_export(variant: measure.VariantMetrics, models: Mapping[str, Any],
                raw: Optional[raw_features.RawInputs],
                all_eval: measure.LabeledData,
                config: config_lib.OptimizationConfig,
                failures: List[Dict[str, str]]
               ) -> Tuple[Optional[str], Dict[str, Any]]:
  """The raw-feature export of one pick, in this process (_raw_exports)."""
  return _raw_exports({variant.runtime: variant}, models, raw, all_eval,
                      config, failures)[variant.runtime]


def _raw_exports(picks: Mapping[str, measure.VariantMetrics],
                 models: Mapping[str, Any],
                 raw: Optional[raw_features.RawInputs],
                 all_eval: measure.LabeledData,
                 config: config_lib.OptimizationConfig,
                 failures: List[Dict[str, str]],
                 pool: Optional[concurrent.futures.Executor] = None
                ) -> Dict[str, Tuple[Optional[str], Dict[str, Any]]]:
  """The raw-feature export of each runtime's pick, and what its push takes.

  The exports are independent: with a worker ``pool``, the server runtimes'
  conversions and measurements (raw_runtimes.convert_and_measure; their
  wrapper SavedModels are saved here first) run in the worker while this
  process exports the TFLite pick, so they overlap instead of running one
  after the other. Each export is scored on the whole raw eval split and
  checked against its transformed-input variant on the same rows.

  Args:
    picks: runtime -> its pick (the gated transformed-input variant).
    models: candidate name -> its Keras model.
    raw: the raw rows and the Transform; None: nothing is exported.
    all_eval: the transformed eval split (all of it).
    config: the optimization config.
    failures: a failed export is appended here; its pick is then pushed
      with transformed-feature inputs.
    pool: the worker process, or None to run everything here.

  Returns:
    runtime -> (the export's file (TFLite) or folder (OpenVINO, ONNX), its
    facts), or (None, {'inputs': 'transformed'}) when raw is None or the
    export failed: the caller pushes the transformed-input variant.
  """
  transformed = {'inputs': 'transformed'}
  if raw is None:
    return {runtime: (None, transformed) for runtime in picks}
  quality = config.quality
  tolerance = getattr(config.budget, quality.budget_field)
  settings = dict(num_threads=config.num_threads,
                  latency_runs=config.latency_runs,
                  warmup_runs=config.warmup_runs,
                  calibration_samples=config.calibration_samples)
  results: Dict[str, Tuple[Optional[str], Dict[str, Any]]] = {}

  def failed(variant, error):
    logging.error('ModelOptimizer: the raw-feature export of %s failed; '
                  'pushing its transformed-input model.\n%s', variant.name,
                  ''.join(traceback.format_exception(
                      type(error), error, error.__traceback__)))
    failures.append({
        'candidate': variant.name, 'stage': 'raw-feature export',
        'error': (f'{type(error).__name__}: {error}; the pushed model takes '
                  'the transformed features instead'),
        # The pick was still pushed (the summary says so, not "skipped").
        'pushed_inputs': 'transformed'})
    results[variant.runtime] = (None, transformed)

  with tempfile.TemporaryDirectory(prefix='leantfx-raw-exports-') as scratch:
    jobs = []
    for runtime, variant in picks.items():
      if runtime not in runtime_variants.SERVER_RUNTIMES:
        continue
      try:
        reference = _scores_on(variant, all_eval, config)[quality.name]
        variant_dir = (variant.path if os.path.isdir(variant.path) else
                       os.path.dirname(variant.path))
        job = raw_runtimes.checked_job(
            runtime, models[variant.name.split('/')[0]], variant_dir,
            variant.tflite_mode, raw, quality, scratch=scratch, **settings)
      except Exception as e:  # pylint: disable=broad-except
        failed(variant, e)
        continue
      future = None
      if pool is not None:
        try:
          future = pool.submit(raw_runtimes.convert_and_measure, **job)
        except Exception:  # pylint: disable=broad-except
          # A worker that died earlier: the export runs here.
          logging.warning('ModelOptimizer: the worker process is gone; the '
                          'raw-feature export of %s runs here.', variant.name)
      jobs.append((variant, reference, job, future))
    for runtime, variant in picks.items():
      if runtime in runtime_variants.SERVER_RUNTIMES:
        continue
      try:
        results[runtime] = raw_features.export_checked(
            models[variant.name.split('/')[0]], variant, raw, all_eval,
            quality, tolerance, **settings)
      except Exception as e:  # pylint: disable=broad-except
        failed(variant, e)
    for variant, reference, job, future in jobs:
      try:
        measured = (future.result() if future is not None else
                    raw_runtimes.convert_and_measure(**job))
        results[variant.runtime] = raw_runtimes.checked_facts(
            variant.runtime, job['output_dir'], measured, variant.name,
            len(raw.eval), reference, quality, tolerance)
      except Exception as e:  # pylint: disable=broad-except
        failed(variant, e)
  for runtime, variant in picks.items():
    path, facts = results[runtime]
    if path is not None:
      logging.info('ModelOptimizer: %s takes raw features: %s %.4f on %d raw '
                   'eval rows, p50 %.3f ms with the Transform', variant.name,
                   quality.name, facts[quality.name], facts['eval_examples'],
                   facts['latency_p50_ms'])
  return results


def runtime_push_base(tflite_push_base: str, runtime: str) -> str:
  """A server runtime's push base: a sibling of the TFLite one.

  ``<output>/tflite`` (the run's TFLite push base) gives ``<output>/openvino``
  and ``<output>/onnx``, the layouts OpenVINO Model Server and Triton read.
  """
  parent = os.path.dirname(tflite_push_base.rstrip('/'))
  return os.path.join(parent, runtime)


def technique_sample(train_ds: tf.data.Dataset,
                     batch_size: int) -> measure.LabeledData:
  """A fixed sample of TECHNIQUE_EXAMPLES train rows (all, when fewer).

  Taken once from the shuffled train batches, so every trial of a search
  is scored on the same rows.
  """
  batches = -(-TECHNIQUE_EXAMPLES // batch_size)
  data = measure.LabeledData.from_dataset(train_ds.take(batches))
  return raw_features.sample_rows(data, TECHNIQUE_EXAMPLES)


def first_rows(data: measure.LabeledData,
               count: int) -> measure.LabeledData:
  """The first ``count`` rows of ``data`` (all, when fewer)."""
  if count >= len(data):
    return data
  return measure.LabeledData({c: v[:count] for c, v in data.features.items()},
                             data.labels[:count])


def _batched(data: measure.LabeledData,
             batch_size: int) -> tf.data.Dataset:
  return tf.data.Dataset.from_tensor_slices(
      (dict(data.features), data.labels)).batch(batch_size)


def _scores_on(variant: measure.VariantMetrics, data: measure.LabeledData,
               config: config_lib.OptimizationConfig) -> Dict[str, float]:
  """A variant's quality on ``data`` through the runtime it was built for."""
  if variant.runtime in runtime_variants.SERVER_RUNTIMES:
    return runtime_variants.scores_on(variant.runtime, variant.path, data,
                                      config.quality, config.num_threads)
  return measure.scores_on(variant.path, data, config.quality,
                           config.num_threads)


def _manifest_metrics(decision: selection.GateDecision,
                      baseline: measure.VariantMetrics,
                      held_out: Mapping[str, selection.HeldOut],
                      quality: quality_lib.Quality) -> Dict[str, Any]:
  """The pushed variant's figures, named by the task's metric.

  A classifier's keys are accuracy, baseline_accuracy, accuracy_drop,
  selection_accuracy, ...; a regression's rmse, baseline_rmse,
  rmse_increase, selection_rmse, ... and mae, baseline_mae.
  """
  v = decision.variant
  report = held_out[v.name]
  baseline_report = held_out[baseline.name]
  figures = {}
  # Measured on the report split, which the selection never saw.
  for field in quality.fields:
    figures[field] = getattr(report, field)
    figures[f'baseline_{field}'] = getattr(baseline_report, field)
  figures[quality.drop_name] = getattr(report, quality.drop_name)
  figures['eval_examples'] = report.num_examples
  for field in quality.fields:
    figures[f'selection_{field}'] = getattr(v, field)
  figures[f'selection_{quality.drop_name}'] = decision.drop(quality)
  return {
      **figures,
      'selection_examples': v.num_examples,
      'size_bytes': v.size_bytes,
      'gzipped_bytes': v.gzipped_bytes,
      'latency_p50_ms': v.latency_p50_ms,
      'latency_p99_ms': v.latency_p99_ms,
      'latency_runs': v.latency_runs,
      # Every variant is timed on transformed features (measure.LabeledData
      # of the Transform's output): the figures leave preprocessing out.
      'latency_includes_preprocessing': False,
      'num_threads': v.num_threads,
      'params': v.params,
      'sparsity': v.sparsity,
      'gate_reasons': list(decision.reasons),
  }


def _feature_names_file(model_uri: str) -> Optional[str]:
  """The trained SavedModel's feature-names file, pushed with raw exports."""
  path = os.path.join(model_uri, model_layout.SERVING_MODEL_DIR,
                      feature_names.SAVED_MODEL_DIR, feature_names.FILE_NAME)
  return path if fileio.exists(path) else None


def optimize(model: tf_keras.Model,
             model_dir: str,
             source_model_uri: str,
             train_ds: tf.data.Dataset,
             eval_ds: tf.data.Dataset,
             config: config_lib.OptimizationConfig,
             report_dir: str,
             push_base: str,
             model_name: str,
             optimized_model_dir: Optional[str] = None,
             raw: Optional[raw_features.RawInputs] = None,
             budgets: Optional[Dict[str, Any]] = None) -> Outcome:
  """Builds, measures, gates and selects variants; pushes and reports.

  Args:
    model: the trained Keras model.
    model_dir: its SavedModel directory (the baseline, measured in TF).
    source_model_uri: the Model artifact's uri (recorded in the manifest).
    train_ds: train batches.
    eval_ds: eval batches; split by selection.split_eval into the selection
      split (gate, policy) and the report split. The techniques (their
      eval_ds: low-rank's rank search) get technique_sample's train rows.
    config: the optimization config.
    report_dir: where the report, variants.json and variant files go.
    push_base: push base directory.
    model_name: the model's directory name under push_base.
    optimized_model_dir: if given, the selected model.tflite and its
      manifest are copied into <dir>/Format-TFLite/.
    raw: if given, each runtime's pick is pushed as its raw-feature export
      (_raw_exports: the Transform folded in, measured on the raw eval
      split; the OpenVINO and ONNX ones in the worker, beside the TFLite
      one); if an export fails, that pick's transformed-input model is
      pushed and the failure is listed. None: the transformed-input models
      (each manifest says which inputs it takes).
    budgets: what the techniques trained for and the samples used
      (Executor.Do: the Trainer's steps, the train split's caching); the
      eval sample, the calibration and technique samples and each
      candidate's time and steps are added, and the report shows it.

  Returns:
    The Outcome; nothing is pushed when no variant is blessed.
  """
  # The gate and the policy see the selection split only; every variant is
  # re-measured on the report split for the report.
  eval_batches = -(-SCORING_MAX_EXAMPLES // config.batch_size)
  collected = measure.LabeledData.from_dataset(eval_ds.take(eval_batches))
  all_eval = first_rows(collected, SCORING_MAX_EXAMPLES)
  budgets = dict(budgets or {})
  budgets['samples'] = {
      'eval_rows_scored': len(all_eval),
      'eval_sampled': (len(collected) > len(all_eval) or
                       int(eval_ds.cardinality()) > eval_batches),
      'scoring_max_examples': SCORING_MAX_EXAMPLES,
      'calibration_samples': config.calibration_samples,
      'technique_examples': TECHNIQUE_EXAMPLES,
      'raw_eval_rows': len(raw.eval) if raw is not None else None,
  }
  timings: Dict[str, Dict[str, Any]] = {}
  budgets['candidates'] = timings
  selection_data, report_data = selection.split_eval(
      all_eval, config.selection_fraction)
  # A search scored on the selection split keeps what happens to pass on
  # those examples, and the gate would then certify it on the same ones: a
  # low-rank search with a 0.005 budget on 174 examples keeps the lowest
  # ranks that lose no example there. The techniques see train rows.
  technique_ds = _batched(technique_sample(train_ds, config.batch_size),
                          config.batch_size)
  quality = config.quality
  baseline = measure.measure_saved_model(
      model_dir, selection_data, name=f'{config_lib.BASELINE}/savedmodel',
      latency_runs=config.latency_runs, warmup_runs=config.warmup_runs,
      keras_model=model, quality=quality)
  failures: List[Dict[str, str]] = []
  built_runtimes, missing = runtimes_lib.resolve(config.runtimes)
  for message in missing:
    logging.warning('ModelOptimizer: %s', message)
    failures.append({'candidate': '(all)', 'stage': 'runtime',
                     'error': message})
  server_runtimes = [r for r in built_runtimes
                     if r in runtime_variants.SERVER_RUNTIMES]
  # One worker process for the server runtimes' exports, for as long as
  # there are any: the candidates' (build_variants) and the picks' raw-feature
  # ones (_raw_exports).
  pool = _runtime_pool() if server_runtimes else None
  try:
    models: Dict[str, Any] = {}
    variants = build_variants(model, train_ds, technique_ds, selection_data,
                              config,
                              os.path.join(report_dir, VARIANTS_DIR), failures,
                              server_runtimes=server_runtimes,
                              baseline=baseline, models=models, pool=pool,
                              timings=timings)
    if not variants and failures:
      raise NoVariantBuilt(
          'ModelOptimizer: every candidate failed, nothing to gate or push '
          '(the SavedModel push is not affected): ' + '; '.join(
              f"{f['candidate']} at {f['stage']}: {f['error']}"
              for f in failures) +
          '. Fix or remove these candidates, or run with --no-optimize.')
    decisions = selection.gate(baseline, variants, config.budget, quality,
                               labels=selection_data.labels)
    # Per runtime, the policy's pick among that runtime's blessed variants;
    # the TFLite pick is the component's blessing and its Format-TFLite
    # output.
    picks = {runtime: selection.select(
        [d for d in decisions if d.variant.runtime == runtime], config.policy,
        quality)
             for runtime in [runtimes_lib.TFLITE] + server_runtimes}
    selected = picks.pop(runtimes_lib.TFLITE)
    held_out = selection.held_out(
        baseline, decisions, report_data,
        lambda v, data: _scores_on(v, data, config), quality)
    pushed = None
    serving_inputs = None
    names_file = _feature_names_file(source_model_uri)
    exports = _raw_exports(
        {runtime: pick.variant for runtime, pick in
         [(runtimes_lib.TFLITE, selected)] + list(picks.items())
         if pick is not None},
        models, raw, all_eval, config, failures, pool)
    if selected is None:
      logging.warning('ModelOptimizer: %s; nothing pushed.',
                      report.NO_VARIANT_BLESSED)
    else:
      v = selected.variant
      chain = [] if v.technique == config_lib.BASELINE else v.technique.split(
          '+')
      metrics = _manifest_metrics(selected, baseline, held_out, quality)
      path, serving_inputs = exports[runtimes_lib.TFLITE]
      metrics['serving_inputs'] = serving_inputs
      pushed = push.push_tflite(
          path or v.path, push_base, model_name,
          source_model_uri=source_model_uri, technique_chain=chain,
          tflite_mode=v.tflite_mode, metrics=metrics,
          feature_names_file=names_file if path else None)
      logging.info('ModelOptimizer: pushed %s as version %d to %s', v.name,
                   pushed.version, pushed.directory)
      if optimized_model_dir:
        out = os.path.join(optimized_model_dir, spec.TFLITE_MODEL_DIR)
        fileio.makedirs(out)
        fileio.copy(pushed.model_path, os.path.join(out, push.MODEL_FILE),
                    overwrite=True)
        fileio.copy(os.path.join(pushed.directory, push.MANIFEST_FILE),
                    os.path.join(out, push.MANIFEST_FILE), overwrite=True)
    runtime_pushes = {}
    runtime_inputs = {}
    for runtime, pick in picks.items():
      if pick is None:
        logging.warning('ModelOptimizer: %s: %s; nothing pushed.', runtime,
                        report.NO_VARIANT_BLESSED)
        continue
      v = pick.variant
      source_dir = (v.path if os.path.isdir(v.path) else
                    os.path.dirname(v.path))
      raw_dir, inputs = exports[runtime]
      metrics = _manifest_metrics(pick, baseline, held_out, quality)
      metrics['serving_inputs'] = runtime_inputs[runtime] = inputs
      runtime_pushes[runtime] = push.push_runtime_model(
          runtime, raw_dir or source_dir,
          runtime_push_base(push_base, runtime), model_name,
          source_model_uri=source_model_uri,
          technique_chain=([] if v.technique == config_lib.BASELINE else
                           v.technique.split('+')),
          mode=v.tflite_mode, metrics=metrics,
          feature_names_file=names_file if raw_dir else None)
      logging.info('ModelOptimizer: pushed %s as version %d to %s', v.name,
                   runtime_pushes[runtime].version,
                   runtime_pushes[runtime].directory)
    report_paths = report.write_report(
        report_dir, baseline, decisions, selected, budget=config.budget,
        policy=config.policy, source_model_uri=source_model_uri,
        pushed_to=pushed.directory if pushed else None, failures=failures,
        runtime_picks={
            runtime: {'selected': pick.variant.name if pick else None,
                      'pushed_to': (runtime_pushes[runtime].directory
                                    if runtime in runtime_pushes else None)}
            for runtime, pick in picks.items()},
        held_out=held_out, quality=quality,
        left_out=(config_lib.REGRESSION_LEFT_OUT
                  if quality.task == quality_lib.REGRESSION else None),
        budgets=budgets)
    return Outcome(baseline=baseline, decisions=decisions, selected=selected,
                   pushed=pushed, report_paths=report_paths, failures=failures,
                   runtime_picks=picks, runtime_pushes=runtime_pushes,
                   held_out=held_out,
                   fastest=selection.fastest(baseline, decisions),
                   budgets=budgets,
                   serving_inputs=serving_inputs,
                   runtime_serving_inputs=runtime_inputs)
  finally:
    _shut_down(pool)


# -------------------------------------------------------------- executor ---


def _parse_properties(exec_properties: Mapping[str, Any]
                     ) -> Tuple[config_lib.OptimizationConfig, str, str]:
  text = exec_properties.get(spec.OPTIMIZATION_CONFIG_KEY)
  if not text:
    raise ConfigError(f'ModelOptimizer needs the {spec.OPTIMIZATION_CONFIG_KEY!r}'
                      ' execution property (OptimizationConfig JSON).')
  config = config_lib.OptimizationConfig.from_json(text)
  push_base = exec_properties.get(spec.TFLITE_PUSH_BASE_KEY) or ''
  if not push_base:
    raise ConfigError(f'ModelOptimizer needs {spec.TFLITE_PUSH_BASE_KEY!r}: the '
                      'directory TFLite versions are pushed under.')
  model_name = exec_properties.get(spec.MODEL_NAME_KEY) or ''
  if not push._NAME_RE.match(model_name):  # pylint: disable=protected-access
    raise ConfigError(
        f'{spec.MODEL_NAME_KEY} {model_name!r} is not usable as a directory '
        'name: use letters, digits, "_" or "-", starting with a letter.')
  return config, push_base, model_name


def _write_blessing(blessing: types.Artifact,
                    selected: Optional[selection.GateDecision]) -> None:
  fileio.makedirs(blessing.uri)
  marker = BLESSED_FILE if selected else NOT_BLESSED_FILE
  # As TFX's Evaluator writes its BLESSED file (gfile creates nothing for a
  # file opened and closed without a write).
  io_utils.write_string_file(os.path.join(blessing.uri, marker), '')
  blessing.set_int_custom_property(spec.BLESSED_PROPERTY, int(bool(selected)))
  if selected:
    blessing.set_string_custom_property(spec.SELECTED_VARIANT_PROPERTY,
                                        selected.variant.name)
  else:
    blessing.set_string_custom_property('reason', report.NO_VARIANT_BLESSED)


def _raw_inputs(input_dict: Mapping[str, List[types.Artifact]],
                exec_properties: Mapping[str, Any], transform_graph_uri: str,
                config: config_lib.OptimizationConfig
               ) -> Optional[raw_features.RawInputs]:
  """The raw rows and Transform for a raw-feature push (None: not asked).

  Raises:
    ConfigError: a malformed raw_serving property, or examples without it.
    InputDataError: the raw examples cannot be read.
  """
  text = exec_properties.get(spec.RAW_SERVING_KEY)
  examples = input_dict.get(spec.EXAMPLES_KEY) or []
  if not text and not examples:
    return None
  try:
    raw_serving = json.loads(text or 'null')
    label, classes = raw_serving['label'], tuple(raw_serving['classes'])
  except (TypeError, KeyError, ValueError) as e:
    raise ConfigError(
        f'ModelOptimizer\'s {spec.RAW_SERVING_KEY!r} must be JSON '
        '{"label": <raw label column>, "classes": [<class names>]} beside '
        f'the {spec.EXAMPLES_KEY!r} input; got {text!r}.') from e
  if not examples:
    raise ConfigError(
        f'ModelOptimizer has {spec.RAW_SERVING_KEY!r} but no '
        f'{spec.EXAMPLES_KEY!r} input: pass the raw Examples the Transform '
        'read.')
  tf_transform_output = tft.TFTransformOutput(transform_graph_uri)
  if label not in tf_transform_output.raw_feature_spec():
    raise ConfigError(
        f'The raw label {label!r} is not a column of the Transform\'s raw '
        f'schema ({sorted(tf_transform_output.raw_feature_spec())}).')

  def files(split, artifacts=examples):
    # Every Examples artifact the Transform read (a window of spans is
    # several).
    return [f for artifact in artifacts
            for f in split_files(artifact, split, 'raw examples')]

  # Calibration rows as they arrived (spec.CALIBRATION_EXAMPLES_KEY), when
  # the pipeline passes them: Augment's copies are not what is served.
  calibration = input_dict.get(spec.CALIBRATION_EXAMPLES_KEY) or examples
  return raw_features.RawInputs(
      tf_transform_output=tf_transform_output, label=label, classes=classes,
      train=raw_features.sample_rows(
          raw_features.read_raw_split(files(spec.TRAIN_SPLIT, calibration),
                                      tf_transform_output, label,
                                      limit=SCORING_MAX_EXAMPLES),
          config.calibration_samples),
      eval=raw_features.read_raw_split(
          files(spec.EVAL_SPLIT), tf_transform_output, label,
          limit=SCORING_MAX_EXAMPLES))


def _tie_to_trainer(config: config_lib.OptimizationConfig,
                    model_artifact: types.Artifact
                   ) -> Tuple[config_lib.OptimizationConfig, Dict[str, Any]]:
  """The config with every technique's steps within the Trainer's.

  The Trainer records the steps it trained on its Model artifact
  (model_layout.TRAIN_STEPS_PROPERTY); a model without them (trained
  elsewhere) keeps the techniques' own epochs, and the report says so.
  """
  steps = None
  if model_artifact.has_custom_property(model_layout.TRAIN_STEPS_PROPERTY):
    steps = model_artifact.get_int_custom_property(
        model_layout.TRAIN_STEPS_PROPERTY)
  if not steps:
    logging.warning('ModelOptimizer: the model records no Trainer steps; '
                    "the techniques train for their own epochs.")
    return config, {'trainer_steps': None}
  tied = dataclasses.replace(
      config, candidates=config_lib.tie_to_trainer(config.candidates, steps))
  unit = config_lib.technique_step_unit(config.candidates, steps)
  caps = {technique: config_lib.trainer_step_cap(technique, unit)
          for technique in config_lib.TECHNIQUES}
  logging.info('ModelOptimizer: technique steps capped by the Trainer\'s %d '
               '(%dx in all, at least %d each): %s', steps,
               config_lib.OPTIMIZER_STEP_BUDGET,
               config_lib.MIN_TECHNIQUE_STEPS, caps)
  return tied, {'trainer_steps': steps, 'technique_step_caps': caps,
                'step_budget': config_lib.OPTIMIZER_STEP_BUDGET,
                'min_technique_steps': config_lib.MIN_TECHNIQUE_STEPS}


class Executor(base_executor.BaseExecutor):
  """Validates the inputs, then runs ``optimize``."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    """Optimizes the model; see ModelOptimizer for inputs and outputs.

    Raises:
      ConfigError: invalid execution properties.
      InputDataError: the model, examples or transform graph are unusable.
    """
    self._log_startup(input_dict, output_dict, exec_properties)
    config, push_base, model_name = _parse_properties(exec_properties)
    model_artifact = artifact_utils.get_single_instance(
        input_dict[spec.MODEL_KEY])
    examples = artifact_utils.get_single_instance(
        input_dict[spec.TRANSFORMED_EXAMPLES_KEY])
    transform_graph = artifact_utils.get_single_instance(
        input_dict[spec.TRANSFORM_GRAPH_KEY])
    optimized_model = artifact_utils.get_single_instance(
        output_dict[spec.OPTIMIZED_MODEL_KEY])
    blessing = artifact_utils.get_single_instance(
        output_dict[spec.BLESSING_KEY])
    report_artifact = artifact_utils.get_single_instance(
        output_dict[spec.REPORT_KEY])

    # Every check that needs no TensorFlow work first, then the model.
    model_dir = keras_model_dir(model_artifact.uri)
    train_files = split_files(examples, spec.TRAIN_SPLIT)
    eval_files = split_files(examples, spec.EVAL_SPLIT)
    with tempfile.TemporaryDirectory(prefix='leantfx-optimizer-') as scratch:
      if not push.is_local(model_dir):
        local_model = os.path.join(scratch, KERAS_MODEL_DIR)
        io_utils.copy_dir(model_dir, local_model)
        model_dir = local_model
      model = load_keras_model(model_dir)
      feature_spec = transformed_feature_spec(transform_graph.uri,
                                              model_input_names(model))
      train_ds = make_dataset(train_files, feature_spec, features.LABEL_KEY,
                              config.batch_size, shuffle=True)
      eval_ds = make_dataset(eval_files, feature_spec, features.LABEL_KEY,
                             config.batch_size)
      config, budgets = _tie_to_trainer(config, model_artifact)
      train_batches = int(train_ds.cardinality())
      budgets['train_split'] = {
          'batches': train_batches,
          'cached': train_batches * config.batch_size <= CACHE_MAX_RECORDS,
          'cache_max_records': CACHE_MAX_RECORDS,
          'shuffle_buffer': SHUFFLE_BUFFER}

      report_dir = report_artifact.uri
      if not push.is_local(report_dir):
        report_dir = os.path.join(scratch, 'report')
      fileio.makedirs(optimized_model.uri)
      raw = _raw_inputs(input_dict, exec_properties, transform_graph.uri,
                        config)
      outcome = optimize(model, model_dir, model_artifact.uri, train_ds,
                         eval_ds, config, report_dir, push_base, model_name,
                         optimized_model_dir=optimized_model.uri, raw=raw,
                         budgets=budgets)
      if report_dir != report_artifact.uri:
        io_utils.copy_dir(report_dir, report_artifact.uri)

    _write_blessing(blessing, outcome.selected)
    optimized_model.set_int_custom_property(spec.BLESSED_PROPERTY,
                                            int(bool(outcome.selected)))
    if outcome.failures:
      optimized_model.set_string_custom_property(
          SKIPPED_CANDIDATES_PROPERTY, json.dumps(outcome.failures))
    if outcome.selected:
      optimized_model.set_string_custom_property(
          spec.SELECTED_VARIANT_PROPERTY, outcome.selected.variant.name)
      optimized_model.set_int_custom_property(spec.PUSHED_VERSION_PROPERTY,
                                              outcome.pushed.version)
      optimized_model.set_string_custom_property(
          spec.PUSHED_DESTINATION_PROPERTY, outcome.pushed.directory)
      optimized_model.set_string_custom_property(
          spec.SERVING_INPUTS_PROPERTY, json.dumps(outcome.serving_inputs))
    optimized_model.set_string_custom_property(
        CANDIDATE_TIMES_PROPERTY,
        json.dumps(outcome.budgets.get('candidates') or {}))
    if outcome.fastest is not None:
      optimized_model.set_string_custom_property(
          FASTEST_PROPERTY, json.dumps(outcome.fastest.to_dict()))
    # Each server runtime's pick: '<runtime>_selected_variant' and
    # '<runtime>_pushed_destination' (the run summary prints them).
    for runtime, pushed in outcome.runtime_pushes.items():
      optimized_model.set_string_custom_property(
          f'{runtime}_{spec.SELECTED_VARIANT_PROPERTY}',
          outcome.runtime_picks[runtime].variant.name)
      optimized_model.set_string_custom_property(
          f'{runtime}_{spec.PUSHED_DESTINATION_PROPERTY}', pushed.directory)
      optimized_model.set_string_custom_property(
          f'{runtime}_{spec.SERVING_INPUTS_PROPERTY}',
          json.dumps(outcome.runtime_serving_inputs.get(runtime)))
