"""Build one candidate's TFLite variants: each mode converted and measured.

Every mode converts the candidate's serving SavedModel (saved once; the
worker's OpenVINO and ONNX exports convert the same one) and is measured on
the selection split: quality, size and batch-1 latency.
"""
import os
from typing import Any, Callable, Dict, List, Optional, Sequence

from absl import logging
import tensorflow as tf
import tf_keras

from leantfx.components.optimize import config as config_lib
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.evaluation import quality as quality_lib
from leantfx.components.optimize.export import tflite as tflite_export
from leantfx.runtimes import serving_export


def build_tflite_variants(keras_model: tf_keras.Model, candidate_name: str,
                          modes: Sequence[str], saved_model: str, chain: str,
                          details: Dict[str, Any], train_ds: tf.data.Dataset,
                          eval_data: measure.LabeledData,
                          config: config_lib.OptimizationConfig, out_dir: str,
                          record: Callable[[str, str, Exception], None],
                          log_each: bool) -> List[measure.VariantMetrics]:
  """One VariantMetrics per mode that converted and measured.

  A mode whose conversion or measurement raises is passed to ``record`` as
  (candidate, 'tflite <mode>', error) and left out; the other modes go on.

  Args:
    keras_model: the candidate's model after its chain.
    candidate_name: names the variants '<candidate>/<mode>'.
    modes: the candidate's TFLite modes.
    saved_model: its serving SavedModel (serving_export.save_serving_model).
    chain: the technique chain, as the variants record it.
    details: the chain's details, kept with each variant.
    train_ds: train batches the calibrated modes draw from.
    eval_data: the selection split every variant is measured on.
    config: calibration and measurement settings.
    out_dir: the candidate's folder; each mode is <out_dir>/<mode>.tflite.
    record: called with a failed mode.
    log_each: log each variant as it is measured (nothing retimes it later).
  """
  variants = []
  quantization_aware = tflite_export.is_quantization_aware(keras_model)
  for mode in modes:
    path = os.path.join(out_dir, f'{mode}.tflite')
    try:
      tflite_export.export_saved_model_tflite(
          saved_model, mode, train_ds,
          quantization_aware=quantization_aware, output_path=path,
          num_calibration_samples=config.calibration_samples)
      metrics = measure.measure_tflite(
          path, eval_data, name=f'{candidate_name}/{mode}',
          technique=chain, tflite_mode=mode,
          num_threads=config.num_threads,
          latency_runs=config.latency_runs,
          warmup_runs=config.warmup_runs, keras_model=keras_model,
          details=details, quality=config.quality)
    except Exception as e:  # pylint: disable=broad-except
      record(candidate_name, f'tflite {mode}', e)
      continue
    if log_each:
      log_variant(metrics, config.quality)
    variants.append(metrics)
  return variants


def save_serving_model(keras_model: tf_keras.Model, candidate_name: str,
                       scratch: str,
                       record: Callable[[str, str, Exception], None]
                      ) -> Optional[str]:
  """The candidate's serving SavedModel, saved once under ``scratch``.

  Every TFLite mode and the worker's OpenVINO/ONNX exports convert it (a
  save is 0.5-0.7 s on digits after the first). None when the save raised
  (passed to ``record``).
  """
  saved_model = os.path.join(scratch, candidate_name, 'saved_model')
  try:
    serving_export.save_serving_model(keras_model, saved_model)
  except Exception as e:  # pylint: disable=broad-except
    record(candidate_name, 'serving SavedModel', e)
    return None
  return saved_model


def log_variant(metrics: measure.VariantMetrics,
                quality: quality_lib.Quality) -> None:
  logging.info('Variant %s: %s %.4f, %d bytes, p99 %.3f ms', metrics.name,
               quality.name, quality.value(metrics), metrics.size_bytes,
               metrics.latency_p99_ms)
