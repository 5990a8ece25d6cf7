"""Build the variants: each candidate's chain, in TFLite and server runtimes.

For each candidate in config order: run its technique chain
(chains.run_chain), save its serving SavedModel once, build its TFLite modes
(tflite_variants), and, when it can still win, send its OpenVINO and ONNX
modes to the worker process (server_variants) while the next candidate
trains. Then collect the worker's pairs and time every variant together
(interleaved_timing).
"""
import concurrent.futures
import os
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

from absl import logging
import tensorflow as tf
import tf_keras

from leantfx import stopping
from leantfx.components.optimize import config as config_lib
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.steps import chains
from leantfx.components.optimize.steps import interleaved_timing
from leantfx.components.optimize.steps import server_variants
from leantfx.components.optimize.steps import tflite_variants


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
      (flow.optimize passes technique_sample's train rows, never the gate's).
    eval_data: the selection split in memory, which every variant is
      measured on (and gated on, by the caller).
    config: candidates and measurement settings.
    variants_dir: where <candidate>/<mode>.tflite files go.
    failures: a list the skipped candidates and modes are appended to, as
      {'candidate', 'stage', 'error'}.
    server_runtimes: runtimes beside TFLite (openvino, onnx) to build
      float32 and int8 variants in, for the candidates that can still win:
      those with a TFLite variant inside the quality budget (the other
      runtimes cost conversion time). Their exports run in a worker process
      beside the next candidate; then every variant, TFLite's too, is timed
      in one interleaved run (interleaved_timing.time_together).
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
    # A stop that a library's cleanup turned into its own error, or that a
    # library swallowed: the run stops, the candidate did not fail.
    stop = stopping.stop_behind(error) or stopping.stop_in_progress()
    if stop is not None:
      raise stop
    logging.exception('Candidate %s failed at %s; skipped.', candidate_name,
                      stage)
    failures.append({'candidate': candidate_name, 'stage': stage,
                     'error': f'{type(error).__name__}: {error}'})

  by_candidate: Dict[str, List[measure.VariantMetrics]] = {}
  submitted: List[server_variants.Submitted] = []
  own_pool = pool is None and bool(server_runtimes)
  if own_pool:
    pool = server_variants.runtime_pool()
  elif not server_runtimes:
    pool = None
  scratch = tempfile.TemporaryDirectory(prefix='leantfx-variants-')
  try:
    for candidate in config.candidates:
      started = time.perf_counter()
      chained = chains.run_chain(model, candidate, train_ds, eval_ds, record)
      if chained is None:
        continue
      current, results = chained
      chain = chains.chain_name(results)
      details = chains.chain_details(results)
      trained = time.perf_counter()
      if models is not None:
        models[candidate.name] = current
      out_dir = os.path.join(variants_dir, candidate.name)
      os.makedirs(out_dir, exist_ok=True)
      found = by_candidate.setdefault(candidate.name, [])
      saved_model = tflite_variants.save_serving_model(
          current, candidate.name, scratch.name, record)
      if saved_model is None:
        continue
      found.extend(tflite_variants.build_tflite_variants(
          current, candidate.name, candidate.tflite_modes, saved_model, chain,
          details, train_ds, eval_data, config, out_dir, record,
          log_each=pool is None))
      if timings is not None:
        timings[candidate.name] = {
            'techniques_s': round(trained - started, 2),
            'tflite_s': round(time.perf_counter() - trained, 2),
            'train_steps': sum(chains.technique_steps(r.details)
                               for r in results)}
      if pool is not None and server_variants.can_still_win(
          current, candidate.name, found, eval_data, config,
          server_runtimes, baseline):
        job = server_variants.submit(
            pool, current, candidate.name, chain, details, train_ds,
            eval_data, config, out_dir, server_runtimes, saved_model, record)
        if job is not None:
          submitted.append(job)
    built = server_variants.collect(submitted, server_runtimes, record,
                                    failures)
  finally:
    if own_pool:
      server_variants.shut_down(pool)
    scratch.cleanup()
  if pool is None:
    return [v for found in by_candidate.values() for v in found]
  return interleaved_timing.time_together(by_candidate, built, eval_data,
                                          config, record)
