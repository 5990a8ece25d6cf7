"""Build a candidate's server-runtime variants (OpenVINO, ONNX) in a worker.

The server-runtime exports of one candidate (conversion, calibration,
accuracy; no timing) run in a worker process while the next candidate
trains: the training step and tf2onnx/NNCF are both bound to one core
(Python), so a thread would wait for the GIL; a process uses the other core
(measured: the optimizer took as long with the other runtimes as without
them, docs/measurements.md "Foundation"). The process starts with the first
candidate and imports the runtimes while the baseline's TFLite modes
convert. Only candidates that can still win are built there.
"""
import concurrent.futures
import dataclasses
import multiprocessing
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from absl import logging
import tensorflow as tf

from leantfx.components.optimize import config as config_lib
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.evaluation import selection
from leantfx.components.optimize.export import runtime_variants
from leantfx.components.optimize.export import tflite as tflite_export
from leantfx.runtimes import registry as runtimes_lib

# A candidate's worker job, as submitted: (candidate name, its future).
Submitted = Tuple[str, concurrent.futures.Future]


def runtimes_to_build(config: config_lib.OptimizationConfig,
                      failures: List[Dict[str, str]]) -> List[str]:
  """The server runtimes of the config that are installed, in build order.

  A requested runtime that is not installed is logged and listed in
  ``failures`` (for every candidate), not built.
  """
  built_runtimes, missing = runtimes_lib.resolve(config.runtimes)
  for message in missing:
    logging.warning('ModelOptimizer: %s', message)
    failures.append({'candidate': '(all)', 'stage': 'runtime',
                     'error': message})
  return [r for r in built_runtimes if r in runtime_variants.SERVER_RUNTIMES]


def runtime_pool() -> concurrent.futures.ProcessPoolExecutor:
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


def shut_down(pool: Optional[concurrent.futures.Executor]) -> None:
  """Every job is done (or the caller raised): the worker's own exit
  (TensorFlow's finalization takes seconds) is not waited for."""
  if pool is not None:
    pool.shutdown(wait=False, cancel_futures=True)


def worker_job(model, candidate_name, chain, details, train_ds, eval_data,
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


def can_still_win(model, candidate_name, tflite_variants, eval_data, config,
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


def submit(pool: concurrent.futures.Executor, model, candidate_name: str,
           chain: str, details: Dict[str, Any], train_ds: tf.data.Dataset,
           eval_data: measure.LabeledData,
           config: config_lib.OptimizationConfig, out_dir: str,
           server_runtimes: Sequence[str], saved_model: str,
           record: Callable[[str, str, Exception], None]
          ) -> Optional[Submitted]:
  """Sends a candidate's server-runtime exports to the worker.

  None when the job could not be made or sent (passed to ``record``).
  """
  try:
    return (candidate_name, pool.submit(
        runtime_variants.export_in_worker, worker_job(
            model, candidate_name, chain, details, train_ds, eval_data,
            config, out_dir, server_runtimes, saved_model)))
  except Exception as e:  # pylint: disable=broad-except
    record(candidate_name, ', '.join(server_runtimes), e)
    return None


def collect(submitted: Sequence[Submitted], server_runtimes: Sequence[str],
            record: Callable[[str, str, Exception], None],
            failures: List[Dict[str, str]]
           ) -> Dict[str, List[runtime_variants.Built]]:
  """Waits for the worker: candidate name -> its pairs exported and scored.

  A pair that raised in the worker is logged with its traceback and listed
  in ``failures``; a job that raised outside a pair (or a worker that died)
  is passed to ``record``.
  """
  built = {}
  for name, future in submitted:
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
  return built
