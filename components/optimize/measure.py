"""Measures a model variant through the runtime it ships in.

A ``.tflite`` file runs in ``tf.lite.Interpreter`` with a fixed thread count
(int8 inputs quantized with the input tensor's scale and zero point, int8
outputs dequantized); a SavedModel directory runs its ``serving_default``
signature in TensorFlow. Both are measured the same way: accuracy on the eval
set, size on disk and gzipped (what a download costs), and batch-1 latency
percentiles after a warm-up. Parameter count and kernel sparsity come from the
Keras model when it is given (a .tflite file no longer says which of its
buffers are kernels).
"""
import dataclasses
import gzip
import io
import os
import tarfile
import time
from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional, Tuple

import numpy as np
import tensorflow as tf

from leantfx.components.optimize import _keras_utils
from leantfx.errors import ConfigError

TFLITE = 'tflite'
TENSORFLOW = 'tensorflow'
SERVING_SIGNATURE = 'serving_default'
# Enough samples for a stable p99 on a quiet machine (the p99 of 200 runs is
# the 2nd-slowest run); the benchmark and the pipeline config can raise it.
DEFAULT_LATENCY_RUNS = 200
DEFAULT_WARMUP_RUNS = 20
DEFAULT_NUM_THREADS = 1
_SAVED_MODEL_BATCH = 256


class LabeledData(NamedTuple):
  """An eval set in memory: features keyed by input name, and int labels."""
  features: Mapping[str, np.ndarray]
  labels: np.ndarray

  @classmethod
  def from_dataset(cls, dataset: tf.data.Dataset) -> 'LabeledData':
    """Collects a (batched or not) dataset of (features dict, label)."""
    feature_parts: Dict[str, list] = {}
    label_parts = []
    for features, labels in dataset.as_numpy_iterator():
      labels = np.asarray(labels)
      batched = labels.ndim >= 1
      for name, value in features.items():
        value = np.asarray(value)
        feature_parts.setdefault(name, []).append(value if batched else
                                                  value[None])
      label_parts.append(labels.reshape(-1))
    if not label_parts:
      raise ConfigError('The eval dataset is empty; nothing to measure on.')
    return cls({n: np.concatenate(v) for n, v in feature_parts.items()},
               np.concatenate(label_parts))

  def __len__(self) -> int:
    return int(len(self.labels))

  def example(self, i: int) -> Dict[str, np.ndarray]:
    """The i-th example as a batch of one."""
    return {n: np.asarray(v[i:i + 1]) for n, v in self.features.items()}


@dataclasses.dataclass
class VariantMetrics:
  """What one variant measured.

  Attributes:
    name: unique variant id, e.g. 'pruning+qat/int8' or 'baseline/savedmodel'.
    technique: the technique chain ('baseline' when none ran).
    tflite_mode: the TFLite mode, or None for a SavedModel.
    runtime: 'tflite' or 'tensorflow'.
    path: the measured file or SavedModel directory.
    accuracy: top-1 accuracy on the eval set.
    num_examples: eval examples measured.
    size_bytes: bytes on disk (for a directory, the sum of its files).
    gzipped_bytes: gzip level 9 of the file (of a tar of the directory).
    latency_p50_ms: median batch-1 latency in milliseconds.
    latency_p99_ms: 99th-percentile batch-1 latency in milliseconds.
    latency_runs: timed runs behind the percentiles.
    num_threads: interpreter threads (None for TensorFlow).
    params: parameter count of the Keras model, when known.
    sparsity: fraction of exactly-zero kernel weights, when known.
    details: JSON facts: per-layer sparsity, the technique's details (e.g.
      its training history).
  """
  name: str
  technique: str
  tflite_mode: Optional[str]
  runtime: str
  path: str
  accuracy: float
  num_examples: int
  size_bytes: int
  gzipped_bytes: int
  latency_p50_ms: float
  latency_p99_ms: float
  latency_runs: int
  num_threads: Optional[int] = None
  params: Optional[int] = None
  sparsity: Optional[float] = None
  details: Dict[str, Any] = dataclasses.field(default_factory=dict)

  def to_dict(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, values: Mapping[str, Any]) -> 'VariantMetrics':
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - names)
    if unknown:
      raise ConfigError(f'Unknown VariantMetrics field(s) {unknown}.')
    return cls(**dict(values))


def gzipped_size(path: str) -> int:
  """Bytes of gzip level 9 of a file, or of an uncompressed tar of a directory.

  Args:
    path: a file or a directory.

  Returns:
    The compressed size in bytes.
  """
  if os.path.isdir(path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode='w') as tar:
      # Sorted names and zeroed metadata: the same directory gives the same
      # size on every run.
      for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
          full = os.path.join(root, name)
          info = tar.gettarinfo(full, arcname=os.path.relpath(full, path))
          info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, '', ''
          with open(full, 'rb') as f:
            tar.addfile(info, f)
    data = buf.getvalue()
  else:
    with open(path, 'rb') as f:
      data = f.read()
  return len(gzip.compress(data, compresslevel=9, mtime=0))


def size_on_disk(path: str) -> int:
  """Bytes of a file, or of every file below a directory."""
  if not os.path.isdir(path):
    return os.path.getsize(path)
  return sum(
      os.path.getsize(os.path.join(root, name))
      for root, _, files in os.walk(path)
      for name in files)


def weight_stats(model) -> Tuple[int, float, Dict[str, float]]:
  """Parameter count and the fraction of zero kernel weights of a Keras model.

  Kernels are what tfmot prunes (Dense and convolution kernels, depthwise
  and pointwise kernels, embeddings), seen through tfmot wrappers; biases and
  normalization statistics are never pruned, so they are left out.

  Args:
    model: a tf_keras model (plain, stripped or quantization-wrapped).

  Returns:
    (params, overall kernel sparsity, {layer name: kernel sparsity}).
  """
  sparsity = _keras_utils.kernel_sparsity(model)
  return (_keras_utils.count_params(model), float(sparsity['overall']),
          dict(sparsity['per_layer']))


def _percentiles(durations_s) -> Tuple[float, float]:
  ms = np.asarray(durations_s) * 1000.0
  return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def _time_batch1(predict_one: Callable[[int], Any], num_examples: int,
                 runs: int, warmup: int) -> Tuple[float, float]:
  for i in range(warmup):
    predict_one(i % num_examples)
  durations = []
  for i in range(runs):
    start = time.perf_counter()
    predict_one(i % num_examples)
    durations.append(time.perf_counter() - start)
  return _percentiles(durations)


def _quantize(value: np.ndarray, detail: Mapping[str, Any]) -> np.ndarray:
  """Casts a float input to the tensor's dtype, quantizing int8/int16."""
  dtype = detail['dtype']
  scale, zero_point = detail['quantization']
  if np.issubdtype(dtype, np.integer) and scale:
    info = np.iinfo(dtype)
    q = np.round(np.asarray(value, np.float32) / scale + zero_point)
    return np.clip(q, info.min, info.max).astype(dtype)
  return np.asarray(value).astype(dtype)


def _dequantize(value: np.ndarray, detail: Mapping[str, Any]) -> np.ndarray:
  scale, zero_point = detail['quantization']
  if np.issubdtype(detail['dtype'], np.integer) and scale:
    return (value.astype(np.float32) - zero_point) * scale
  return value.astype(np.float32)


class TFLitePredictor:
  """Runs a .tflite signature on one example at a time, in float."""

  def __init__(self, path: str, num_threads: int = DEFAULT_NUM_THREADS,
               signature: str = SERVING_SIGNATURE):
    self.interpreter = tf.lite.Interpreter(model_path=path,
                                           num_threads=num_threads)
    signatures = self.interpreter.get_signature_list()
    if signature not in signatures:
      raise ConfigError(
          f'{path} has no TFLite signature {signature!r} (it has '
          f'{sorted(signatures)}); export it with leantfx tflite_export.')
    self.runner = self.interpreter.get_signature_runner(signature)
    self.input_details = self.runner.get_input_details()
    output_details = self.runner.get_output_details()
    self.output_name = sorted(output_details)[0]
    self.output_detail = output_details[self.output_name]

  @property
  def input_names(self):
    return sorted(self.input_details)

  def prepare(self, features: Mapping[str, np.ndarray]
             ) -> Dict[str, np.ndarray]:
    """Converts a float batch-1 example into the interpreter's input dtypes."""
    missing = sorted(set(self.input_details) - set(features))
    if missing:
      raise ConfigError(
          f'The eval features lack the TFLite input(s) {missing}; they have '
          f'{sorted(features)}.')
    return {
        n: _quantize(features[n], d) for n, d in self.input_details.items()
    }

  def run_prepared(self, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    return self.runner(**inputs)[self.output_name]

  def predict(self, features: Mapping[str, np.ndarray]) -> np.ndarray:
    """Float outputs (dequantized) for a batch-1 example."""
    return _dequantize(self.run_prepared(self.prepare(features)),
                       self.output_detail)


def _accuracy(scores: np.ndarray, labels: np.ndarray) -> float:
  return float(np.mean(np.argmax(scores, axis=-1) == labels.reshape(-1)))


def _model_facts(keras_model, details) -> Tuple[Optional[int], Optional[float],
                                                Dict[str, Any]]:
  facts = dict(details or {})
  if keras_model is None:
    return facts.get('params'), facts.get('sparsity'), facts
  params, sparsity, per_layer = weight_stats(keras_model)
  facts.setdefault('layer_sparsity', per_layer)
  return params, sparsity, facts


def measure_tflite(path: str,
                   eval_data: LabeledData,
                   *,
                   name: Optional[str] = None,
                   technique: str = 'baseline',
                   tflite_mode: Optional[str] = None,
                   num_threads: int = DEFAULT_NUM_THREADS,
                   latency_runs: int = DEFAULT_LATENCY_RUNS,
                   warmup_runs: int = DEFAULT_WARMUP_RUNS,
                   keras_model=None,
                   details: Optional[Mapping[str, Any]] = None
                  ) -> VariantMetrics:
  """Measures a .tflite file in tf.lite.Interpreter.

  Args:
    path: the .tflite file (with a 'serving_default' signature).
    eval_data: the eval set.
    name: the variant id (defaults to '<technique>/<tflite_mode>').
    technique: the technique chain that produced the model.
    tflite_mode: the conversion mode, recorded as given.
    num_threads: interpreter threads (fixed so runs compare).
    latency_runs: timed batch-1 invocations.
    warmup_runs: untimed invocations first.
    keras_model: the model the file was converted from, for parameter count
      and sparsity.
    details: extra facts to keep (e.g. the technique's details).

  Returns:
    The VariantMetrics.
  """
  _check_runs(latency_runs, warmup_runs, num_threads)
  predictor = TFLitePredictor(path, num_threads=num_threads)
  scores = np.concatenate(
      [predictor.predict(eval_data.example(i)) for i in range(len(eval_data))])
  prepared = [predictor.prepare(eval_data.example(i))
              for i in range(min(len(eval_data), latency_runs))]
  p50, p99 = _time_batch1(lambda i: predictor.run_prepared(prepared[i]),
                          len(prepared), latency_runs, warmup_runs)
  params, sparsity, facts = _model_facts(keras_model, details)
  return VariantMetrics(
      name=name or f'{technique}/{tflite_mode or "tflite"}',
      technique=technique,
      tflite_mode=tflite_mode,
      runtime=TFLITE,
      path=path,
      accuracy=_accuracy(scores, eval_data.labels),
      num_examples=len(eval_data),
      size_bytes=size_on_disk(path),
      gzipped_bytes=gzipped_size(path),
      latency_p50_ms=p50,
      latency_p99_ms=p99,
      latency_runs=latency_runs,
      num_threads=num_threads,
      params=params,
      sparsity=sparsity,
      details=facts)


def measure_saved_model(path: str,
                        eval_data: LabeledData,
                        *,
                        name: Optional[str] = None,
                        technique: str = 'baseline',
                        latency_runs: int = DEFAULT_LATENCY_RUNS,
                        warmup_runs: int = DEFAULT_WARMUP_RUNS,
                        keras_model=None,
                        details: Optional[Mapping[str, Any]] = None
                       ) -> VariantMetrics:
  """Measures a SavedModel's serving_default signature in TensorFlow.

  Args:
    path: the SavedModel directory.
    eval_data: the eval set.
    name: the variant id (defaults to '<technique>/savedmodel').
    technique: the technique chain that produced the model.
    latency_runs: timed batch-1 calls.
    warmup_runs: untimed calls first (the first call also traces).
    keras_model: the model that was saved, for parameter count and sparsity;
      without it they are read from the SavedModel's variables when it has
      them (sparsity then counts every variable named '...kernel...').
    details: extra facts to keep.

  Returns:
    The VariantMetrics.

  Raises:
    ConfigError: the directory has no serving_default signature.
  """
  _check_runs(latency_runs, warmup_runs, None)
  loaded = tf.saved_model.load(path)
  if SERVING_SIGNATURE not in loaded.signatures:
    raise ConfigError(
        f'SavedModel {path} has no {SERVING_SIGNATURE!r} signature (it has '
        f'{sorted(loaded.signatures)}).')
  fn = loaded.signatures[SERVING_SIGNATURE]
  _, input_specs = fn.structured_input_signature
  output_name = sorted(fn.structured_outputs)[0]

  def call(features):
    return fn(**{
        n: tf.constant(np.asarray(features[n]), dtype=s.dtype)
        for n, s in input_specs.items()
    })[output_name]

  scores = []
  for start in range(0, len(eval_data), _SAVED_MODEL_BATCH):
    batch = {n: v[start:start + _SAVED_MODEL_BATCH]
             for n, v in eval_data.features.items()}
    scores.append(call(batch).numpy())
  examples = [eval_data.example(i)
              for i in range(min(len(eval_data), latency_runs))]
  p50, p99 = _time_batch1(lambda i: call(examples[i]), len(examples),
                          latency_runs, warmup_runs)
  params, sparsity, facts = _model_facts(keras_model, details)
  if keras_model is None and params is None:
    params, sparsity = _variable_stats(loaded)
  return VariantMetrics(
      name=name or f'{technique}/savedmodel',
      technique=technique,
      tflite_mode=None,
      runtime=TENSORFLOW,
      path=path,
      accuracy=_accuracy(np.concatenate(scores), eval_data.labels),
      num_examples=len(eval_data),
      size_bytes=size_on_disk(path),
      gzipped_bytes=gzipped_size(path),
      latency_p50_ms=p50,
      latency_p99_ms=p99,
      latency_runs=latency_runs,
      params=params,
      sparsity=sparsity,
      details=facts)


def _variable_stats(loaded) -> Tuple[Optional[int], Optional[float]]:
  variables = getattr(loaded, 'variables', None)
  if not variables:
    return None, None
  params = zeros = total = 0
  for v in variables:
    values = v.numpy()
    params += int(values.size)
    if 'kernel' in v.name.split('/')[-1]:
      zeros += int(np.sum(values == 0))
      total += int(values.size)
  return params, (zeros / total if total else None)


def measure(path: str, eval_data: LabeledData, **kwargs) -> VariantMetrics:
  """Measures a .tflite file or a SavedModel directory (see the two above)."""
  if os.path.isdir(path):
    kwargs.pop('tflite_mode', None)
    kwargs.pop('num_threads', None)
    return measure_saved_model(path, eval_data, **kwargs)
  if path.endswith('.tflite'):
    return measure_tflite(path, eval_data, **kwargs)
  raise ConfigError(
      f'Cannot measure {path}: expected a .tflite file or a SavedModel '
      'directory.')


def _check_runs(runs: int, warmup: int, threads: Optional[int]) -> None:
  if runs < 1:
    raise ConfigError(f'latency_runs must be >= 1, got {runs}.')
  if warmup < 0:
    raise ConfigError(f'warmup_runs must be >= 0, got {warmup}.')
  if threads is not None and threads < 1:
    raise ConfigError(f'num_threads must be >= 1, got {threads}.')
