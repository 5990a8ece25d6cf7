"""Measures a model variant through the runtime it ships in.

A ``.tflite`` file runs in ``tf.lite.Interpreter`` with a fixed thread count
(int8 inputs quantized with the input tensor's scale and zero point, int8
outputs dequantized); a SavedModel directory runs its ``serving_default``
signature in TensorFlow. Both are measured for accuracy on the eval set, size
on disk and gzipped (what a download costs), and batch-1 latency percentiles
after a warm-up. Parameter count and kernel sparsity come from the Keras model
when it is given (a .tflite file no longer says which of its buffers are
kernels).

TFLite latency is the time of the kernels as ``leantfx serve`` runs them: the
interpreter is prepared once (``allocate_tensors()`` on the whole interpreter,
which is what applies TFLite's default XNNPACK delegate; the signature bound to
its tensor indices, resized for the batch once; the inputs set once), then
only ``interpreter.invoke()`` is timed (:func:`measure_latency_interleaved`).
Calling the model through ``SignatureRunner`` instead, once per run, times
something else: in TF 2.16 ``SignatureRunner.__call__`` resizes every input
and re-allocates on each call, and it allocates only its own subgraph, so on
an interpreter that never saw ``allocate_tensors()`` the XNNPACK delegate is
never applied and the slower built-in kernels run. That is how this module
measured before: about 2x the ``invoke()`` time for MobileNetV2 1.0 224px
(docs/measurements.md), while the Python per-call overhead itself is a few
microseconds.

The Python per-call overhead is reported separately as ``call_overhead_ms``:
in each round, the p50 of a ``SignatureRunner`` call (resize, AllocateTensors,
set_tensor, invoke, get_tensor: the whole one-line Python call path) minus the
p50 of ``invoke()`` alone, both on the same prepared interpreter; the figure
is the median over rounds of that difference (it can come out slightly
negative when the overhead is below the noise).
"""
import dataclasses
import gzip
import io
import os
import tarfile
import time
import math
from typing import (Any, Callable, Dict, List, Mapping, NamedTuple, Optional,
                    Sequence, Tuple)

import numpy as np
import tensorflow as tf

from leantfx.components.optimize.techniques import _keras_utils
from leantfx.components.optimize.evaluation import quality as quality_lib
from leantfx.errors import ConfigError
from leantfx.runtimes import tflite as tflite_runtime
from leantfx.runtimes.serving_export import SERVING_SIGNATURE
from leantfx.runtimes.tflite import TFLitePredictor
from leantfx.runtimes.tflite import TFLiteTimer
from leantfx.runtimes.timing import DEFAULT_NUM_THREADS
from leantfx.runtimes.timing import LatencyVariant
from leantfx.runtimes.timing import RuntimeTimer

TFLITE = tflite_runtime.RUNTIME.name
TENSORFLOW = 'tensorflow'
# Enough samples for a stable p99 on a quiet machine (the p99 of 200 runs is
# the 2nd-slowest run); the benchmark and the pipeline config can raise it.
DEFAULT_LATENCY_RUNS = 200
DEFAULT_WARMUP_RUNS = 20
# Timed runs are split into interleaved rounds: every variant takes its turn
# in each round (A B, B A, A B, ...), so load from other work hits all alike.
DEFAULT_LATENCY_ROUNDS = 5
# Untimed invokes at the start of each variant's turn in a round: the other
# variants' turns evicted its weights from the caches.
ROUND_WARMUP_RUNS = 2
# The re-measure rule: a variant's round spread is (slowest round p50 -
# fastest round p50) / median round p50. When any variant's spread exceeds
# this bound, all variants are measured again, up to DEFAULT_MAX_ATTEMPTS
# attempts in all; the attempt with the smallest worst spread is kept, and
# `stable` says whether it met the bound.
DEFAULT_MAX_ROUND_SPREAD = 0.25
DEFAULT_MAX_ATTEMPTS = 3
_SAVED_MODEL_BATCH = 256


class LabeledData(NamedTuple):
  """An eval set in memory: features keyed by input name, and labels.

  Labels are class ids for a classifier and targets in their own units for a
  regression.
  """
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
    accuracy: top-1 accuracy on the eval set (None for a regression).
    num_examples: eval examples measured.
    size_bytes: bytes on disk (for a directory, the sum of its files).
    gzipped_bytes: gzip level 9 of the file (of a tar of the directory).
    latency_p50_ms: median batch-1 latency in milliseconds (TFLite: of
      ``invoke()`` on a prepared interpreter, see the module docstring).
    latency_p99_ms: 99th-percentile batch-1 latency in milliseconds.
    latency_runs: timed runs behind the percentiles.
    num_threads: interpreter threads (None for TensorFlow).
    params: parameter count of the Keras model, when known.
    sparsity: fraction of exactly-zero kernel weights, when known.
    call_overhead_ms: TFLite only: the Python per-call overhead of the
      SignatureRunner path over ``invoke()`` (see the module docstring).
    latency_round_p50_ms: TFLite only: the p50 of each interleaved round.
    details: JSON facts: per-layer sparsity, the technique's details (e.g.
      its training history).
    rmse: regression: root mean squared error in the target's units.
    mae: regression: mean absolute error in the target's units.
    class_ids: classification: the predicted class of each example, in
      order (the gate compares them with the baseline's).
    predictions: regression: the prediction of each example, in order
      (the gate's per-slice term scores each slice from them).
  """
  name: str
  technique: str
  tflite_mode: Optional[str]
  runtime: str
  path: str
  accuracy: Optional[float]
  num_examples: int
  size_bytes: int
  gzipped_bytes: int
  latency_p50_ms: float
  latency_p99_ms: float
  latency_runs: int
  num_threads: Optional[int] = None
  params: Optional[int] = None
  sparsity: Optional[float] = None
  call_overhead_ms: Optional[float] = None
  latency_round_p50_ms: Optional[List[float]] = None
  details: Dict[str, Any] = dataclasses.field(default_factory=dict)
  rmse: Optional[float] = None
  mae: Optional[float] = None
  class_ids: Optional[List[int]] = None
  predictions: Optional[List[float]] = None

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


@dataclasses.dataclass
class LatencyStats:
  """One variant's latency, from the kept attempt of an interleaved run.

  Attributes:
    label: the variant's label.
    num_threads: interpreter threads.
    batch_size: the timed batch.
    p50_ms: median ``invoke()`` time over every timed run of every round.
    p99_ms: 99th percentile of the same runs.
    runs: timed ``invoke()`` runs (rounds x runs per round).
    round_p50_ms: the median of each round.
    spread: (max - min) / median of ``round_p50_ms``.
    call_overhead_ms: median over rounds of (SignatureRunner call p50 -
      invoke p50); None when not measured.
    runner_round_p50_ms: the SignatureRunner call's median in each round
      (empty when not measured).
  """
  label: str
  num_threads: int
  batch_size: int
  p50_ms: float
  p99_ms: float
  runs: int
  round_p50_ms: List[float]
  spread: float
  call_overhead_ms: Optional[float] = None
  runner_round_p50_ms: List[float] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class InterleavedLatency:
  """What ``measure_latency_interleaved`` measured.

  Attributes:
    variants: label -> LatencyStats of the kept attempt.
    rounds: rounds per attempt.
    runs_per_round: timed invokes per variant per round.
    round_order: the variants' order in each round of the kept attempt.
    attempts: attempts made (1 + re-measures).
    attempt_spreads: the worst variant spread of each attempt.
    max_round_spread: the bound of the re-measure rule.
    stable: whether the kept attempt met the bound.
  """
  variants: Dict[str, LatencyStats]
  rounds: int
  runs_per_round: int
  round_order: List[List[str]]
  attempts: int
  attempt_spreads: List[float]
  max_round_spread: float
  stable: bool

  def to_dict(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)


def _round_spread(round_p50s: Sequence[float]) -> float:
  """(max - min) / median of the rounds' p50s; 0 for fewer than 2 rounds."""
  if len(round_p50s) < 2:
    return 0.0
  median = float(np.median(round_p50s))
  if median <= 0:
    return 0.0
  return float((max(round_p50s) - min(round_p50s)) / median)


def _ms(seconds: Sequence[float]) -> np.ndarray:
  return np.asarray(seconds, dtype=np.float64) * 1000.0


def _one_attempt(timed: Sequence[RuntimeTimer], rounds: int,
                 runs_per_round: int,
                 measure_overhead: bool, clock: Callable[[], float]
                ) -> Tuple[Dict[str, LatencyStats], List[List[str]]]:
  invokes: Dict[str, List[List[float]]] = {t.variant.label: [] for t in timed}
  runner: Dict[str, List[List[float]]] = {t.variant.label: [] for t in timed}
  order_log = []
  for r in range(rounds):
    order = list(timed) if r % 2 == 0 else list(reversed(timed))
    order_log.append([t.variant.label for t in order])
    for t in order:
      for _ in range(ROUND_WARMUP_RUNS):
        t.invoke()
      invokes[t.variant.label].append(t.time_invokes(runs_per_round, clock))
      if measure_overhead:
        runner[t.variant.label].append(
            t.time_runner_calls(runs_per_round, clock))
  stats = {}
  for t in timed:
    label = t.variant.label
    per_round = [_ms(d) for d in invokes[label]]
    pooled = np.concatenate(per_round)
    round_p50 = [float(np.percentile(d, 50)) for d in per_round]
    runner_p50 = [float(np.percentile(_ms(d), 50)) for d in runner[label]]
    overhead = (float(np.median([c - i for c, i in zip(runner_p50, round_p50)]))
                if runner_p50 else None)
    stats[label] = LatencyStats(
        label=label, num_threads=t.variant.num_threads,
        batch_size=t.batch_size,
        p50_ms=float(np.percentile(pooled, 50)),
        p99_ms=float(np.percentile(pooled, 99)),
        runs=int(pooled.size), round_p50_ms=round_p50,
        spread=_round_spread(round_p50), call_overhead_ms=overhead,
        runner_round_p50_ms=runner_p50)
  return stats, order_log


def measure_latency_interleaved(
    variants: Sequence[Any],
    *,
    runs: int = DEFAULT_LATENCY_RUNS,
    warmup_runs: int = DEFAULT_WARMUP_RUNS,
    rounds: int = DEFAULT_LATENCY_ROUNDS,
    max_round_spread: float = DEFAULT_MAX_ROUND_SPREAD,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    measure_overhead: bool = True,
    clock: Callable[[], float] = time.perf_counter) -> InterleavedLatency:
  """Times ``invoke()`` of several variants in interleaved rounds.

  A variant is a LatencyVariant (a .tflite file, prepared here) or a
  RuntimeTimer another runtime's module prepared (OpenVINO, ONNX Runtime):
  all are timed in the same rounds, so machine noise hits them alike.
  Each variant gets its own interpreter, prepared once (allocated, bound,
  inputs set once), then `warmup_runs` untimed invokes. The `runs` timed
  invokes per variant are split into `rounds` rounds; in each round every
  variant takes a turn (order A B ..., then reversed, alternating), starting
  with ROUND_WARMUP_RUNS untimed invokes. With `measure_overhead`, each turn
  also times as many SignatureRunner calls on the same interpreter, for
  ``call_overhead_ms`` (see the module docstring).

  Re-measure rule: when a variant's round spread ((max - min) / median of
  its round p50s) exceeds `max_round_spread`, every variant is measured
  again, up to `max_attempts` attempts in all; the attempt whose worst
  spread is smallest is kept, and ``stable`` says whether it met the bound.

  Args:
    variants: LatencyVariants and/or RuntimeTimers (unique labels).
    runs: timed invokes per variant per attempt (rounded up to a multiple of
      the rounds).
    warmup_runs: untimed invokes per variant before the first round.
    rounds: rounds per attempt (at most `runs`).
    max_round_spread: the re-measure bound.
    max_attempts: attempts at most (>= 1).
    measure_overhead: also time the SignatureRunner path.
    clock: a monotonic clock in seconds (tests inject one).

  Returns:
    The InterleavedLatency.

  Raises:
    ConfigError: bad counts, duplicate labels, a file without the
      serving_default signature, or features that lack an input.
  """
  _check_runs(runs, warmup_runs, None)
  if not variants:
    raise ConfigError('measure_latency_interleaved needs at least 1 variant.')
  specs = [v.variant if isinstance(v, RuntimeTimer) else v for v in variants]
  labels = [v.label for v in specs]
  if len(set(labels)) != len(labels):
    raise ConfigError(f'Variant labels must be unique, got {labels}.')
  if rounds < 1 or max_attempts < 1:
    raise ConfigError(
        f'rounds and max_attempts must be >= 1, got {rounds} and '
        f'{max_attempts}.')
  if not max_round_spread > 0:
    raise ConfigError(
        f'max_round_spread must be > 0, got {max_round_spread}.')
  for v in specs:
    _check_runs(runs, warmup_runs, v.num_threads)
  rounds = min(rounds, runs)
  runs_per_round = int(math.ceil(runs / rounds))
  timed = [v if isinstance(v, RuntimeTimer) else TFLiteTimer(v)
           for v in variants]
  for t in timed:
    for _ in range(warmup_runs):
      t.invoke()
  kept = None
  spreads = []
  for _ in range(max_attempts):
    stats, order = _one_attempt(timed, rounds, runs_per_round,
                                measure_overhead, clock)
    worst = max(s.spread for s in stats.values())
    spreads.append(worst)
    if kept is None or worst < kept[0]:
      kept = (worst, stats, order)
    if worst <= max_round_spread:
      break
  worst, stats, order = kept
  return InterleavedLatency(
      variants=stats, rounds=rounds, runs_per_round=runs_per_round,
      round_order=order, attempts=len(spreads), attempt_spreads=spreads,
      max_round_spread=max_round_spread,
      stable=worst <= max_round_spread)


def score_fields(quality: quality_lib.Quality, predictions: np.ndarray,
                 labels: np.ndarray) -> Dict[str, Optional[float]]:
  """The quality fields of a VariantMetrics (accuracy None in a regression).

  A classifier's also hold its predicted class of every example
  (class_ids), for the gate's agreement with the baseline; a regression's
  its prediction of every example (predictions), for the gate's per-slice
  term.
  """
  fields = {'accuracy': None, **quality.scores(predictions, labels)}
  if quality.task == quality_lib.CLASSIFICATION:
    fields['class_ids'] = np.argmax(predictions, axis=-1).reshape(-1).tolist()
  else:
    fields['predictions'] = np.asarray(
        predictions, np.float64).reshape(-1).tolist()
  return fields


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
                   latency_rounds: int = DEFAULT_LATENCY_ROUNDS,
                   keras_model=None,
                   details: Optional[Mapping[str, Any]] = None,
                   quality: quality_lib.Quality = quality_lib.ACCURACY
                  ) -> VariantMetrics:
  """Measures a .tflite file in tf.lite.Interpreter.

  Accuracy: every eval example at batch 1 through set_tensor, invoke and
  get_tensor on a prepared interpreter. Latency: ``invoke()`` alone on
  another prepared interpreter with the first eval example bound once,
  in `latency_rounds` rounds with the re-measure rule of
  :func:`measure_latency_interleaved` (whose facts land in
  ``details['latency']``); the per-call overhead of the SignatureRunner path
  goes to ``call_overhead_ms``.

  Args:
    path: the .tflite file (with a 'serving_default' signature).
    eval_data: the eval set.
    name: the variant id (defaults to '<technique>/<tflite_mode>').
    technique: the technique chain that produced the model.
    tflite_mode: the conversion mode, recorded as given.
    num_threads: interpreter threads (fixed so runs compare).
    latency_runs: timed batch-1 invocations.
    warmup_runs: untimed invocations first.
    latency_rounds: rounds the timed runs are split into.
    keras_model: the model the file was converted from, for parameter count
      and sparsity.
    details: extra facts to keep (e.g. the technique's details).
    quality: what to score the predictions by (accuracy; RMSE and MAE for
      a regression).

  Returns:
    The VariantMetrics.
  """
  _check_runs(latency_runs, warmup_runs, num_threads)
  predictor = TFLitePredictor(path, num_threads=num_threads)
  scores = np.concatenate(
      [predictor.predict(eval_data.example(i)) for i in range(len(eval_data))])
  label = name or f'{technique}/{tflite_mode or TFLITE}'
  latency = measure_latency_interleaved(
      [LatencyVariant(label, path, num_threads, eval_data.example(0))],
      runs=latency_runs, warmup_runs=warmup_runs, rounds=latency_rounds)
  stats = latency.variants[label]
  params, sparsity, facts = _model_facts(keras_model, details)
  facts['latency'] = {
      'method': tflite_runtime.RUNTIME.timed_call,
      'rounds': latency.rounds, 'attempts': latency.attempts,
      'stable': latency.stable,
      'max_round_spread': latency.max_round_spread,
      'round_spread': stats.spread,
  }
  return VariantMetrics(
      name=label,
      technique=technique,
      tflite_mode=tflite_mode,
      runtime=TFLITE,
      path=path,
      num_examples=len(eval_data),
      size_bytes=size_on_disk(path),
      gzipped_bytes=gzipped_size(path),
      latency_p50_ms=stats.p50_ms,
      latency_p99_ms=stats.p99_ms,
      latency_runs=stats.runs,
      num_threads=num_threads,
      params=params,
      sparsity=sparsity,
      call_overhead_ms=stats.call_overhead_ms,
      latency_round_p50_ms=list(stats.round_p50_ms),
      details=facts,
      **score_fields(quality, scores, eval_data.labels))


def measure_saved_model(path: str,
                        eval_data: LabeledData,
                        *,
                        name: Optional[str] = None,
                        technique: str = 'baseline',
                        latency_runs: int = DEFAULT_LATENCY_RUNS,
                        warmup_runs: int = DEFAULT_WARMUP_RUNS,
                        keras_model=None,
                        details: Optional[Mapping[str, Any]] = None,
                        quality: quality_lib.Quality = quality_lib.ACCURACY
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
    quality: what to score the predictions by.

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
      num_examples=len(eval_data),
      size_bytes=size_on_disk(path),
      gzipped_bytes=gzipped_size(path),
      latency_p50_ms=p50,
      latency_p99_ms=p99,
      latency_runs=latency_runs,
      params=params,
      sparsity=sparsity,
      details=facts,
      **score_fields(quality, np.concatenate(scores), eval_data.labels))


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


def scores_on(path: str, data: LabeledData,
              quality: quality_lib.Quality = quality_lib.ACCURACY,
              num_threads: int = DEFAULT_NUM_THREADS) -> Dict[str, float]:
  """The quality of a .tflite file or a SavedModel on ``data``, nothing else.

  The same predictions as ``measure_tflite``/``measure_saved_model`` (batch 1
  on a prepared interpreter; batches in TensorFlow), without the latency
  runs: used to re-measure variants on the report split.

  Returns:
    ``quality.scores``: {'accuracy': ...} or {'rmse': ..., 'mae': ...}.
  """
  if os.path.isdir(path):
    metrics = measure_saved_model(path, data, latency_runs=1, warmup_runs=0,
                                  quality=quality)
    return {k: getattr(metrics, k) for k in quality.fields}
  predictor = TFLitePredictor(path, num_threads=num_threads)
  predictions = np.concatenate(
      [predictor.predict(data.example(i)) for i in range(len(data))])
  return quality.scores(predictions, data.labels)
