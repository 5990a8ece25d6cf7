"""A candidate's variants in the server runtimes: OpenVINO and ONNX Runtime.

For one optimized tf_keras model, ``export_and_score`` exports each
(runtime, mode) pair through the runtime's Exporter (its
``Runtime.exporter``: leantfx/runtimes/openvino.py, onnx.py) and measures its
accuracy on the eval set through its own runtime at batch 1; ``time_built``
times pairs in the same interleaved rounds (measure.measure_latency_interleaved,
the runtime's own call on inputs bound once; the one-line Python call path
for the per-call overhead). ``build_runtime_variants`` does both for one
model. A pair whose export or measurement raises is reported through
``on_failure`` and skipped; the others go on.
"""
import importlib
import os
import tempfile
import traceback
from typing import (Any, Callable, Dict, List, Mapping, NamedTuple,
                    Optional, Sequence, Tuple)

import numpy as np
import tensorflow as tf

from leantfx import stopping
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.evaluation import quality as quality_lib
from leantfx.runtimes import exporter as exporter_lib
from leantfx.runtimes import serving_export
from leantfx.runtimes import registry as runtimes_lib

FLOAT32 = exporter_lib.FLOAT32
INT8 = exporter_lib.INT8
MODES = exporter_lib.MODES
SERVER_RUNTIMES = runtimes_lib.SERVER_RUNTIMES


def variant_dir_name(runtime: str, mode: str) -> str:
  return f'{runtime}_{mode}'


def export(runtime: str, model, mode: str, representative_data, out_dir: str,
           num_calibration_samples: int, cache: Dict[str, Any]) -> str:
  """Exports one (runtime, mode) pair of a tf_keras model; the file's path.

  `cache` keeps what the pairs of one model share (its serving SavedModel,
  its calibration samples, the float ONNX file) so each is made once;
  cache['scratch'] is a folder for them that the caller removes.
  """
  if 'saved_model' not in cache:
    cache['saved_model'] = serving_export.save_serving_model(
        model, os.path.join(cache['scratch'], 'saved_model'))
  if mode == INT8 and 'samples' not in cache:
    cache['samples'] = serving_export.int8_calibration_samples(
        model, representative_data, num_calibration_samples,
        runtimes_lib.LABELS.get(runtime, runtime))
  return export_saved_model(runtime, cache['saved_model'], mode,
                            cache.get('samples'), out_dir, cache)


def export_saved_model(runtime: str, saved_model_dir: str, mode: str,
                       samples: Optional[List[Dict[str, np.ndarray]]],
                       out_dir: str, cache: Dict[str, Any]) -> str:
  """Exports one (runtime, mode) pair of a serving SavedModel through the
  runtime's Exporter.

  Raises:
    ConfigError: ``runtime`` is not a server runtime.
  """
  return runtimes_lib.exporter(runtime).export_saved_model(
      saved_model_dir, mode, samples, out_dir, cache)


def predictor(runtime: str, path: str, num_threads: int):
  return runtimes_lib.get(runtime).predictor(path, num_threads)


def timer(runtime: str, label: str, path: str, num_threads: int,
          features: Mapping[str, np.ndarray]) -> measure.RuntimeTimer:
  return runtimes_lib.get(runtime).timer(label, path, num_threads, features)


def scores(run, data: measure.LabeledData,
           quality: quality_lib.Quality = quality_lib.ACCURACY
          ) -> Dict[str, Optional[float]]:
  """The VariantMetrics quality fields of a runtime predictor on ``data``.

  Predicts at batch 1; ``quality`` scores the outputs (accuracy of class
  scores; RMSE and MAE of a regression's predictions in target units).
  """
  predictions = np.concatenate([run.predict(data.example(i))
                                for i in range(len(data))])
  return measure.score_fields(quality, predictions, data.labels)


def scores_on(runtime: str, artifact: str, data: measure.LabeledData,
              quality: quality_lib.Quality = quality_lib.ACCURACY,
              num_threads: int = measure.DEFAULT_NUM_THREADS
             ) -> Dict[str, float]:
  """The quality of a pushed-form variant (its ``artifact_path``) on ``data``.

  Used to re-measure variants on the report split; the keys are
  ``quality.fields``.
  """
  path = runtimes_lib.get(runtime).model_in_artifact(artifact)
  found = scores(predictor(runtime, path, num_threads), data, quality)
  return {k: found[k] for k in quality.fields}


def artifact_path(runtime: str, model_path: str) -> str:
  """What is sized and pushed: the IR directory, or the .onnx file."""
  return runtimes_lib.get(runtime).artifact_path(model_path)




class Built(NamedTuple):
  """A (runtime, mode) pair exported and scored, not yet timed.

  Attributes:
    runtime: 'openvino' or 'onnx'.
    mode: 'float32' or 'int8'.
    label: the variant's name, '<candidate>/<runtime>_<mode>'.
    path: the model file the runtime loads (model.xml, model.onnx).
    quality_fields: the VariantMetrics quality fields (accuracy, ...).
    technique: the technique chain that produced the model.
    params: the Keras model's parameter count, when known.
    sparsity: its fraction of zero kernel weights, when known.
    facts: the technique's details and per-layer facts.
  """
  runtime: str
  mode: str
  label: str
  path: str
  quality_fields: Dict[str, Any]
  technique: str
  params: Optional[int]
  sparsity: Optional[float]
  facts: Dict[str, Any]


def build_runtime_variants(
    model,
    *,
    latency_runs: int = measure.DEFAULT_LATENCY_RUNS,
    warmup_runs: int = measure.DEFAULT_WARMUP_RUNS,
    **export_args) -> List[measure.VariantMetrics]:
  """Exports and measures one model in each server runtime and mode.

  ``export_and_score`` then ``time_built`` (the ModelOptimizer calls them
  apart: exports in a worker process, every variant timed together at the
  end).

  Args:
    model: the optimized tf_keras model.
    latency_runs: timed runs per variant.
    warmup_runs: untimed runs first.
    **export_args: export_and_score's keyword arguments (candidate_name,
      technique, runtimes, representative_data, eval_data, out_dir, ...).

  Returns:
    One VariantMetrics per pair built and measured.
  """
  built = export_and_score(model, **export_args)
  return time_built(
      built, export_args['eval_data'],
      export_args.get('num_threads', measure.DEFAULT_NUM_THREADS),
      latency_runs, warmup_runs, export_args.get('on_failure'))


def export_and_score(
    model,
    *,
    candidate_name: str,
    technique: str,
    runtimes: Sequence[str],
    representative_data,
    eval_data: measure.LabeledData,
    out_dir: str,
    num_threads: int = measure.DEFAULT_NUM_THREADS,
    num_calibration_samples: int = serving_export.DEFAULT_CALIBRATION_SAMPLES,
    modes: Sequence[str] = MODES,
    details: Optional[Mapping[str, Any]] = None,
    on_failure: Optional[Callable[[str, Exception], None]] = None,
    quality: quality_lib.Quality = quality_lib.ACCURACY) -> List[Built]:
  """Exports each (runtime, mode) pair of a tf_keras model and scores it.

  Nothing is timed here (``time_built`` does). The model is saved once as
  its serving SavedModel and ``export_and_score_saved_model`` does the rest,
  as the ModelOptimizer's background process does.

  Args:
    model: the optimized tf_keras model.
    candidate_name: the candidate's name (variant names are
      '<candidate>/<runtime>_<mode>').
    technique: the technique chain that produced the model.
    runtimes: server runtimes to build (of SERVER_RUNTIMES; 'tflite' is
      ignored, the caller builds it).
    representative_data: train-split features/dataset for int8 calibration.
    eval_data: the eval set.
    out_dir: the candidate's folder; each variant goes in
      <out_dir>/<runtime>_<mode>/.
    num_threads: runtime threads for accuracy (and, later, latency).
    num_calibration_samples: int8 calibration examples.
    modes: the modes to build.
    details: facts to keep with each variant (the technique's details).
    on_failure: called with (stage, error) for a pair that raised.
    quality: what the variants are scored by (accuracy; RMSE and MAE).

  Returns:
    One Built per pair exported and scored.
  """
  with tempfile.TemporaryDirectory(prefix='leantfx-runtimes-') as scratch:
    saved_model = serving_export.save_serving_model(
        model, os.path.join(scratch, 'saved_model'))
    job = saved_model_job(
        model, saved_model,
        candidate_name=candidate_name, technique=technique, runtimes=runtimes,
        representative_data=representative_data, eval_data=eval_data,
        out_dir=out_dir, num_threads=num_threads,
        num_calibration_samples=num_calibration_samples, modes=modes,
        details=details, quality=quality)
    return export_and_score_saved_model(on_failure=on_failure, **job)


def saved_model_job(model, saved_model_dir: str, *, representative_data,
                    num_calibration_samples: int,
                    details: Optional[Mapping[str, Any]] = None,
                    **arguments) -> Dict[str, Any]:
  """``export_and_score_saved_model``'s arguments for a tf_keras model.

  Draws the model's int8 calibration samples (None without representative
  data: the int8 pairs then fail with the empty-calibration message) and
  its facts (parameters, sparsity, the technique's details); ``arguments``
  (candidate_name, technique, runtimes, eval_data, out_dir, num_threads,
  modes, quality) pass through. ``saved_model_dir`` holds the model's
  serving SavedModel already (serving_export.save_serving_model; the
  ModelOptimizer's TFLite modes convert the same one). Everything in it
  pickles: the ModelOptimizer sends it to its worker process.
  """
  samples = None
  if (INT8 in arguments.get('modes', MODES) and
      representative_data is not None):
    samples = serving_export.calibration_samples(
        representative_data, serving_export.serving_input_specs(model),
        num_calibration_samples)
  params, sparsity, facts = measure._model_facts(model, details)  # pylint: disable=protected-access
  return dict(arguments, saved_model_dir=saved_model_dir, samples=samples,
              params=params, sparsity=sparsity, facts=facts)


def export_and_score_saved_model(
    saved_model_dir: str,
    *,
    candidate_name: str,
    technique: str,
    runtimes: Sequence[str],
    samples: Optional[List[Dict[str, np.ndarray]]],
    eval_data: measure.LabeledData,
    out_dir: str,
    num_threads: int,
    modes: Sequence[str] = MODES,
    on_failure: Optional[Callable[[str, Exception], None]] = None,
    quality: quality_lib.Quality = quality_lib.ACCURACY,
    params: Optional[int] = None,
    sparsity: Optional[float] = None,
    facts: Optional[Mapping[str, Any]] = None) -> List[Built]:
  """Exports and scores each pair of a serving SavedModel.

  Needs no Keras model, so it runs in another process
  (``export_in_worker``). ``samples``: batch-1 calibration feature dicts
  for int8 (None or empty: each int8 pair fails with the empty-calibration
  error, through on_failure). ``params``, ``sparsity``, ``facts``: the Keras
  model's, kept with each variant.
  """
  built = []
  cache: Dict[str, Any] = {}
  for runtime in runtimes:
    if runtime not in SERVER_RUNTIMES:
      continue
    for mode in modes:
      stage = f'{runtime} {mode}'
      label = f'{candidate_name}/{variant_dir_name(runtime, mode)}'
      try:
        path = export_saved_model(
            runtime, saved_model_dir, mode, samples,
            os.path.join(out_dir, variant_dir_name(runtime, mode)), cache)
        score = scores(predictor(runtime, path, num_threads), eval_data,
                       quality)
      except Exception as e:  # pylint: disable=broad-except
        if on_failure is None:
          raise
        on_failure(stage, e)
        continue
      built.append(Built(runtime, mode, label, path, score, technique,
                         params, sparsity, dict(facts or {})))
  return built


WORKER_NICENESS = 19


def worker_init(parent_pid: int) -> None:
  """Ties a worker process to the process that started it, and yields it
  the CPU.

  The worker dies with its parent (parent_pid), even when the parent is
  killed with SIGKILL: a worker left behind holds hundreds of MB for nothing.
  The ModelOptimizer's critical path (training the next candidate) runs in
  the parent; the worker's exports should use only the CPU time the parent
  leaves idle, so it runs at the lowest priority, with one TensorFlow
  thread of each kind.

  Args:
    parent_pid: the pid of the process that started the worker.
  """
  stopping.die_with_parent(parent_pid)
  os.nice(WORKER_NICENESS)
  tf.config.threading.set_intra_op_parallelism_threads(1)
  tf.config.threading.set_inter_op_parallelism_threads(1)


def warm_up() -> None:
  """Imports what a worker's exports need (run first in a new worker).

  Each Exporter prepares the process first (OpenVINO's declines its and
  NNCF's telemetry before they are imported).
  """
  for runtime in SERVER_RUNTIMES:
    exporter = runtimes_lib.exporter(runtime)
    exporter.prepare_process()
    for module in (runtimes_lib.REQUIRED_MODULES[runtime] +
                   exporter.export_modules):
      if runtimes_lib.module_installed(module.split('.')[0]):
        importlib.import_module(module)


def export_in_worker(kwargs: Dict[str, Any]
                    ) -> Tuple[List[Built], List[Tuple[str, str, str]]]:
  """``export_and_score_saved_model`` in a worker process.

  Returns the built pairs and, for each pair that raised, (stage, error,
  traceback): exceptions and callbacks do not cross the process boundary.
  """
  failures = []

  def failed(stage, error):
    failures.append((stage, f'{type(error).__name__}: {error}',
                     traceback.format_exc()))

  built = export_and_score_saved_model(on_failure=failed, **kwargs)
  return built, failures


def timers_for(built: Sequence[Built], num_threads: int,
               features: Mapping[str, np.ndarray],
               on_failure: Optional[Callable[[str, Exception], None]] = None
              ) -> Tuple[List[measure.RuntimeTimer], List[Built]]:
  """A prepared timer per pair, and the pairs that got one.

  A pair that cannot be prepared for timing is left out (and passed to
  on_failure, as an export that raised is), not the whole candidate.
  """
  timers, timed = [], []
  for entry in built:
    try:
      timers.append(timer(entry.runtime, entry.label, entry.path, num_threads,
                          features))
    except Exception as e:  # pylint: disable=broad-except
      if on_failure is None:
        raise
      on_failure(f'{entry.runtime} {entry.mode} timing', e)
      continue
    timed.append(entry)
  return timers, timed


def variant_metrics(entry: Built, latency: measure.InterleavedLatency,
                    num_examples: int, num_threads: int
                   ) -> measure.VariantMetrics:
  """The VariantMetrics of a pair timed in ``latency``."""
  stats = latency.variants[entry.label]
  artifact = artifact_path(entry.runtime, entry.path)
  variant_facts = dict(entry.facts)
  variant_facts['latency'] = {
      'method': RUNTIME_CALLS[entry.runtime],
      'rounds': latency.rounds, 'attempts': latency.attempts,
      'stable': latency.stable,
      'max_round_spread': latency.max_round_spread,
      'round_spread': stats.spread,
      'interleaved_with': sorted(latency.variants),
  }
  return measure.VariantMetrics(
      name=entry.label, technique=entry.technique, tflite_mode=entry.mode,
      runtime=entry.runtime, path=artifact, num_examples=num_examples,
      **entry.quality_fields,
      size_bytes=measure.size_on_disk(artifact),
      gzipped_bytes=measure.gzipped_size(artifact),
      latency_p50_ms=stats.p50_ms, latency_p99_ms=stats.p99_ms,
      latency_runs=stats.runs, num_threads=num_threads, params=entry.params,
      sparsity=entry.sparsity, call_overhead_ms=stats.call_overhead_ms,
      latency_round_p50_ms=list(stats.round_p50_ms),
      details=variant_facts)


def time_built(built: Sequence[Built], eval_data: measure.LabeledData,
               num_threads: int, latency_runs: int, warmup_runs: int,
               on_failure: Optional[Callable[[str, Exception], None]] = None
              ) -> List[measure.VariantMetrics]:
  """Times the built pairs in one interleaved run; their VariantMetrics."""
  if not built:
    return []
  timers, built = timers_for(built, num_threads, eval_data.example(0),
                             on_failure)
  if not built:
    return []
  latency = measure.measure_latency_interleaved(
      timers, runs=latency_runs, warmup_runs=warmup_runs)
  del timers
  return [variant_metrics(entry, latency, len(eval_data), num_threads)
          for entry in built]


RUNTIME_CALLS = {runtime: runtimes_lib.get(runtime).timed_call
                 for runtime in SERVER_RUNTIMES}
