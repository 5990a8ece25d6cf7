"""A candidate's variants in the server runtimes: OpenVINO and ONNX Runtime.

For one optimized tf_keras model, ``build_runtime_variants`` exports each
(runtime, mode) pair (openvino_export.py, onnx_export.py), measures its
accuracy on the eval set through its own runtime at batch 1, and times all
of them in the same interleaved rounds (measure.measure_latency_interleaved,
the runtime's own call on inputs bound once; the one-line Python call path
for the per-call overhead). A pair whose export or measurement raises is
reported through ``on_failure`` and skipped; the others go on.
"""
import os
import tempfile
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from leantfx.components.optimize import measure
from leantfx.components.optimize import onnx_export
from leantfx.components.optimize import onnx_runtime
from leantfx.components.optimize import openvino_export
from leantfx.components.optimize import openvino_runtime
from leantfx.components.optimize import quality as quality_lib
from leantfx.components.optimize import runtimes as runtimes_lib
from leantfx.components.optimize import tflite_export

FLOAT32 = 'float32'
INT8 = 'int8'
MODES = (FLOAT32, INT8)
SERVER_RUNTIMES = (runtimes_lib.OPENVINO, runtimes_lib.ONNX)


def variant_dir_name(runtime: str, mode: str) -> str:
  return f'{runtime}_{mode}'


def export(runtime: str, model, mode: str, representative_data, out_dir: str,
           num_calibration_samples: int, cache: Dict[str, str]) -> str:
  """Exports one (runtime, mode) pair; returns the model file's path.

  `cache` keeps the intermediate files the int8 exports start from (the
  serving SavedModel, the float ONNX file) so they are made once per model;
  cache['scratch'] is a folder for them that the caller removes.
  """
  if runtime == runtimes_lib.OPENVINO:
    if 'saved_model' not in cache:
      cache['saved_model'] = tflite_export.save_serving_model(
          model, os.path.join(cache['scratch'], 'saved_model'))
    return openvino_export.export_openvino(
        model, mode, representative_data, output_dir=out_dir,
        num_calibration_samples=num_calibration_samples,
        saved_model_dir=cache['saved_model'])
  if runtime == runtimes_lib.ONNX:
    path = onnx_export.export_onnx(
        model, mode, representative_data, output_dir=out_dir,
        num_calibration_samples=num_calibration_samples,
        float_path=cache.get('onnx_float32'))
    if mode == FLOAT32:
      cache['onnx_float32'] = path
    return path
  raise ValueError(f'No server runtime {runtime!r}; use {SERVER_RUNTIMES}.')


def predictor(runtime: str, path: str, num_threads: int):
  if runtime == runtimes_lib.OPENVINO:
    return openvino_runtime.OpenVINOPredictor(path, num_threads)
  return onnx_runtime.ONNXPredictor(path, num_threads)


def timer(runtime: str, label: str, path: str, num_threads: int,
          features: Mapping[str, np.ndarray]) -> measure.RuntimeTimer:
  if runtime == runtimes_lib.OPENVINO:
    return openvino_runtime.OpenVINOTimer(label, path, num_threads, features)
  return onnx_runtime.ONNXTimer(label, path, num_threads, features)


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
  path = (os.path.join(artifact, openvino_export.XML_FILE)
          if runtime == runtimes_lib.OPENVINO else artifact)
  found = scores(predictor(runtime, path, num_threads), data, quality)
  return {k: found[k] for k in quality.fields}


def artifact_path(runtime: str, model_path: str) -> str:
  """What is sized and pushed: the IR directory, or the .onnx file."""
  if runtime == runtimes_lib.OPENVINO:
    return os.path.dirname(model_path)
  return model_path


def build_runtime_variants(
    model,
    *,
    candidate_name: str,
    technique: str,
    runtimes: Sequence[str],
    representative_data,
    eval_data: measure.LabeledData,
    out_dir: str,
    num_threads: int = measure.DEFAULT_NUM_THREADS,
    latency_runs: int = measure.DEFAULT_LATENCY_RUNS,
    warmup_runs: int = measure.DEFAULT_WARMUP_RUNS,
    num_calibration_samples: int = tflite_export.DEFAULT_CALIBRATION_SAMPLES,
    modes: Sequence[str] = MODES,
    details: Optional[Mapping[str, Any]] = None,
    on_failure: Optional[Callable[[str, Exception], None]] = None,
    quality: quality_lib.Quality = quality_lib.ACCURACY
) -> List[measure.VariantMetrics]:
  """Exports and measures one model in each server runtime and mode.

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
    num_threads: runtime threads for accuracy and latency.
    latency_runs: timed runs per variant.
    warmup_runs: untimed runs first.
    num_calibration_samples: int8 calibration examples.
    modes: the modes to build.
    details: facts to keep with each variant (the technique's details).
    on_failure: called with (stage, error) for a pair that raised.
    quality: what the variants are scored by (accuracy; RMSE and MAE).

  Returns:
    One VariantMetrics per pair built and measured.
  """
  with tempfile.TemporaryDirectory(prefix='leantfx-runtimes-') as scratch:
    built = _export_and_score(model, candidate_name, runtimes, modes,
                              representative_data, eval_data, out_dir,
                              num_threads, num_calibration_samples,
                              {'scratch': scratch}, on_failure, quality)
  if not built:
    return []
  return _timed_variants(model, built, technique, eval_data, num_threads,
                         latency_runs, warmup_runs, details, on_failure)


def _export_and_score(model, candidate_name, runtimes, modes,
                      representative_data, eval_data, out_dir, num_threads,
                      num_calibration_samples, cache, on_failure, quality):
  """Exports each pair and scores it; [(runtime, mode, label, path, scores)]."""
  built = []
  for runtime in runtimes:
    if runtime not in SERVER_RUNTIMES:
      continue
    for mode in modes:
      stage = f'{runtime} {mode}'
      label = f'{candidate_name}/{variant_dir_name(runtime, mode)}'
      try:
        path = export(runtime, model, mode, representative_data,
                      os.path.join(out_dir, variant_dir_name(runtime, mode)),
                      num_calibration_samples, cache)
        score = scores(predictor(runtime, path, num_threads), eval_data,
                       quality)
      except Exception as e:  # pylint: disable=broad-except
        if on_failure is None:
          raise
        on_failure(stage, e)
        continue
      built.append((runtime, mode, label, path, score))
  return built


def _timed_variants(model, built, technique, eval_data, num_threads,
                    latency_runs, warmup_runs, details, on_failure=None):
  """Times the built pairs in one interleaved run; their VariantMetrics.

  A pair that cannot be prepared for timing is left out (and passed to
  on_failure, as an export that raised is), not the whole candidate.
  """
  timers, timed = [], []
  for entry in built:
    runtime, mode, label, path, _ = entry
    try:
      timers.append(timer(runtime, label, path, num_threads,
                          eval_data.example(0)))
    except Exception as e:  # pylint: disable=broad-except
      if on_failure is None:
        raise
      on_failure(f'{runtime} {mode} timing', e)
      continue
    timed.append(entry)
  built = timed
  if not built:
    return []
  latency = measure.measure_latency_interleaved(
      timers, runs=latency_runs, warmup_runs=warmup_runs)
  del timers
  params, sparsity, facts = measure._model_facts(model, details)  # pylint: disable=protected-access
  variants = []
  for runtime, mode, label, path, quality_fields in built:
    stats = latency.variants[label]
    artifact = artifact_path(runtime, path)
    variant_facts = dict(facts)
    variant_facts['latency'] = {
        'method': RUNTIME_CALLS[runtime],
        'rounds': latency.rounds, 'attempts': latency.attempts,
        'stable': latency.stable,
        'max_round_spread': latency.max_round_spread,
        'round_spread': stats.spread,
        'interleaved_with': sorted(latency.variants),
    }
    variants.append(measure.VariantMetrics(
        name=label, technique=technique, tflite_mode=mode, runtime=runtime,
        path=artifact, num_examples=len(eval_data), **quality_fields,
        size_bytes=measure.size_on_disk(artifact),
        gzipped_bytes=measure.gzipped_size(artifact),
        latency_p50_ms=stats.p50_ms, latency_p99_ms=stats.p99_ms,
        latency_runs=stats.runs, num_threads=num_threads, params=params,
        sparsity=sparsity, call_overhead_ms=stats.call_overhead_ms,
        latency_round_p50_ms=list(stats.round_p50_ms),
        details=variant_facts))
  return variants


RUNTIME_CALLS = {
    runtimes_lib.OPENVINO: 'InferRequest.infer() on a compiled model, '
                           'inputs set once',
    runtimes_lib.ONNX: 'InferenceSession.run_with_iobinding(), inputs '
                       'bound once',
}
