"""Build the variants: each candidate's techniques, its TFLite modes, its
server-runtime modes (in a worker process), then every variant timed together.
"""
import concurrent.futures
import dataclasses
import multiprocessing
import os
import tempfile
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging
import tensorflow as tf
import tf_keras

from leantfx.components.optimize import config as config_lib
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.evaluation import quality as quality_lib
from leantfx.components.optimize.export import runtime_variants
from leantfx.components.optimize.evaluation import selection
from leantfx.components.optimize.export import tflite as tflite_export


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
