"""Figures: what each optimization technique buys on digits, against its anchor.

Model: the product's own digits CNN (``leantfx.models.model.build_model`` for
the bundled 'digits' DatasetSpec and the default TrainingConfig: two conv
blocks, Dense 64/32, 37,738 parameters), trained here on scikit-learn's
``load_digits()`` (pixels / 16 as {'image_xf': [64]}, a fixed 80/20 split).
Every TFLite figure is measured through ``tf.lite.Interpreter`` with one
thread (figure 5 also at the deploy target's count), the way the
ModelOptimizer measures variants.

Figures and anchors (each row names its source):
  1. int8 vs float32 TFLite: size ratio and accuracy drop. Anchor: the TFLite
     post-training quantization guide, full integer quantization "4x smaller".
  2. pruning to 80% sparsity: gzipped size of the pruned model vs the dense
     one, and of pruned + int8 TFLite vs the dense Keras model. Anchor: the
     tfmot "Pruning in Keras" example: "3x smaller" gzipped after pruning,
     "10x smaller" after pruning + post-training quantization (both against
     the gzipped dense Keras .h5; the same comparison is made here, plus the
     TFLite-to-TFLite one).
  3. distillation: a student with >= 4x fewer parameters distilled from the
     trained model vs the same student trained from scratch with the same
     budget (seed, epochs, batches, optimizer), 3 seeds. Anchor: the Keras
     "Knowledge Distillation" example on MNIST, distilled 98.1% vs scratch
     97.6%.
  4. low-rank factorization (SVD keeping 90% of the spectral energy, then
     fine-tuning): Dense kernel parameters before/after and accuracy drop.
     No published anchor for this model; the bound it respects is
     Eckart-Young (checked by the technique itself).
  5. latency, batch 1: MobileNetV2 (alpha 1.0, 224x224x3, random weights,
     1000 classes) as TF float32 (SavedModel signature, 1 thread), TFLite
     float32 and TFLite int8 at 1 thread and at the deploy target's thread
     count: ``invoke()`` on prepared interpreters in interleaved rounds
     (``measure.measure_latency_interleaved``, the ModelOptimizer's method),
     the SignatureRunner per-call overhead beside each, and the old method
     (a SignatureRunner call per run on an interpreter never allocated)
     re-timed for comparison. Anchor: the TFLite post-training quantization
     guide, full integer quantization "3x+ speedup" on CPU.
     In the same interleaved rounds, when the runtimes extra is installed:
     OpenVINO IR float32 and NNCF int8 (an infer request, inputs set once)
     and ONNX float32 (tf2onnx) and static QDQ int8 (an IO-bound ONNX Runtime
     session), exported as the ModelOptimizer exports them
     (components/optimize/export/runtime_variants.py): p50, p99, size, speed-up
     over TFLite float32, and each runtime's Python per-call overhead (its
     one-line call path minus the bound call). Targets (leantfx's): the best
     int8 >= 4x TFLite float32, TFLite int8 >= 2x.
  6. int8 accuracy on a real image model: the product's mobilenet_v2
     architecture (``build_model`` with TrainingConfig architecture
     'mobilenet_v2': tf_keras.applications.MobileNetV2, weights=None, alpha
     0.35, include_top=False with average pooling, then the MLP head scaled
     by alpha, dropout, 'logits' and softmax; Adam 3e-3 with 100 warm-up
     steps and a cosine decay), trained from scratch for 20 epochs (900
     steps) on the same digits train split, with the product's
     BatchNormalization momentum (architectures.MOBILENET_BN_MOMENTUM, 0.9;
     tf_keras's 0.999 left it at 0.075). The data are the digits with the
     grey channel repeated three times, {'image_xf': [192]}
     floats in [0, 1]; the model resizes them to 32x32 itself (its Resizing
     layer, as the product's architecture does for images under the
     application minimum), so every runtime's variant takes the same 8x8x3
     input and contains the resize. Exported as the ModelOptimizer exports:
     TFLite float32 and int8 (tflite_export, from one serving SavedModel),
     OpenVINO IR float32 and NNCF int8, ONNX float32 and static QDQ int8
     (runtime_variants.export), int8 calibrated on the first 100
     (DEFAULT_CALIBRATION_SAMPLES) train rows; each scored on all 360 held-out
     eval digits at batch 1 through its own runtime, as the ModelOptimizer
     scores variants (measure.measure_tflite; runtime_variants.predictor and
     scores). Rows: the Keras float accuracy, each runtime's float32 and int8
     accuracy (with how many int8 predictions match its float32's), int8
     drops against its own float32 and against the Keras model, and the
     float32 / int8 size. Target (leantfx's): every int8 drop <= 0.5 pt. A
     runtime not installed gets a row saying so.

  .venv/bin/python -m benchmarks.bench_optimize [--latency-runs N]
      [--latency-rounds N] [--deploy-threads N] [--seeds N]
      [--only-latency | --only-image-accuracy]

``--only-latency`` runs figure 5 alone and writes
``results/optimize_latency.json``; ``--only-image-accuracy`` runs figure 6
alone and writes ``results/optimize_image_accuracy.json`` (the full run
writes ``optimize.json``).
"""
import argparse
import dataclasses
import gzip
import os
import statistics
import tempfile
import time
from typing import Any, Dict, List

os.environ.setdefault('TF_USE_LEGACY_KERAS', '1')
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import tensorflow as tf  # pylint: disable=g-import-not-at-top,wrong-import-position
import tf_keras  # pylint: disable=g-import-not-at-top,wrong-import-position

from benchmarks import harness  # pylint: disable=g-import-not-at-top,wrong-import-position
from leantfx import config as config_lib  # pylint: disable=g-import-not-at-top,wrong-import-position
from leantfx import datasets  # pylint: disable=g-import-not-at-top,wrong-import-position
from leantfx.components.optimize.techniques import _keras_utils  # pylint: disable=g-import-not-at-top,wrong-import-position
from leantfx.components.optimize.techniques import distillation  # pylint: disable=g-import-not-at-top,wrong-import-position
from leantfx.components.optimize.techniques import low_rank  # pylint: disable=g-import-not-at-top,wrong-import-position
from leantfx.components.optimize.evaluation import measure  # pylint: disable=g-import-not-at-top,wrong-import-position
from leantfx.runtimes import openvino as openvino_runtime  # pylint: disable=g-import-not-at-top,wrong-import-position
from leantfx.components.optimize.techniques import pruning  # pylint: disable=g-import-not-at-top,wrong-import-position
from leantfx.components.optimize.export import runtime_variants  # pylint: disable=g-import-not-at-top,wrong-import-position
from leantfx.runtimes import registry as runtimes  # pylint: disable=g-import-not-at-top,wrong-import-position
from leantfx.runtimes import serving_export  # pylint: disable=g-import-not-at-top,wrong-import-position
from leantfx.components.optimize.export import tflite as tflite_export  # pylint: disable=g-import-not-at-top,wrong-import-position
from leantfx.models import architectures  # pylint: disable=g-import-not-at-top,wrong-import-position
from leantfx.models import model as model_lib  # pylint: disable=g-import-not-at-top,wrong-import-position

FEATURE = 'image_xf'
SEED = 0
BATCH_SIZE = 32
TRAIN_FRACTION = 0.8
# The default TrainingConfig trains 2000 steps; 15 epochs of 45 batches is
# ~700 steps, enough for ~0.97 eval accuracy on digits.
TRAIN_EPOCHS = 15
# tfmot's pruning example prunes to 80% with PolynomialDecay over 2 epochs
# of MNIST (~900 steps); digits has ~45 steps per epoch, so 4 epochs with a
# mask update every 10 steps.
PRUNING = pruning.PruningConfig(target_sparsity=0.8, frequency=10, epochs=4)
# The default student is the teacher with widths divided until it has >= 4x
# fewer parameters; 20 epochs (~900 steps) train it to a plateau on digits.
DISTILLATION_EPOCHS = 20
SEEDS = 3
LOW_RANK = low_rank.LowRankConfig(max_accuracy_drop=None, energy=0.9,
                                  fine_tune_epochs=2)
LATENCY_RUNS = 200
WARMUP_RUNS = 20
MOBILENET_CALIBRATION = 32
# Figure 6: the product's mobilenet_v2 architecture on the digits as 3-channel
# images. Measured on 1 core (2026-12-04): at 32 px, 20 epochs reach 0.95
# eval accuracy here (0.98 in a trial with another shuffle), ~2-5 s an epoch
# after a first epoch of ~40 s (tracing); 48 px reached 0.98 in 1.6x the
# time; alpha 0.35 is tf_keras's smallest ImageNet width.
IMAGE_SIDE = 32
IMAGE_ALPHA = 0.35
IMAGE_EPOCHS = 20
IMAGE_WARMUP_STEPS = 100
IMAGE_CALIBRATION = serving_export.DEFAULT_CALIBRATION_SAMPLES
# The bundled digits with the grey channel repeated three times, pixels in
# row-major (height, width, channel) order: the input is {'image_xf': [192]}.
IMAGE_SPEC = dataclasses.replace(
    datasets.BUNDLED['digits'], name='digits_rgb',
    image_features=tuple(f'pixel_{i:02d}_{c}' for i in range(64)
                         for c in 'rgb'),
    image_shape=(8, 8, 3))


def _digits() -> Dict[str, Any]:
  from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top
  digits = load_digits()
  order = np.random.default_rng(SEED).permutation(len(digits.target))
  x = (digits.data[order] / 16.0).astype(np.float32)
  y = digits.target[order].astype(np.int64)
  cut = int(TRAIN_FRACTION * len(y))

  def dataset(xs, ys, shuffle):
    ds = tf.data.Dataset.from_tensor_slices(({FEATURE: xs}, ys))
    if shuffle:
      ds = ds.shuffle(len(ys), seed=SEED)
    return ds.batch(BATCH_SIZE)

  return {
      'train_ds': dataset(x[:cut], y[:cut], True),
      'eval_ds': dataset(x[cut:], y[cut:], False),
      'eval': measure.LabeledData({FEATURE: x[cut:]}, y[cut:]),
      'train_x': {FEATURE: x[:cut]},
  }


def _train_baseline(data) -> tf_keras.Model:
  tf_keras.utils.set_random_seed(SEED)
  model = model_lib.build_model(datasets.BUNDLED['digits'],
                                config_lib.TrainingConfig(), {})
  model.fit(data['train_ds'], epochs=TRAIN_EPOCHS, verbose=0)
  return model


def _tflite(model, mode, data, work, name) -> measure.VariantMetrics:
  path = os.path.join(work, f'{name}_{mode}.tflite')
  tflite_export.export_tflite(model, mode, data['train_x'], output_path=path)
  return measure.measure_tflite(path, data['eval'], name=f'{name}/{mode}',
                                tflite_mode=mode, latency_runs=20,
                                warmup_runs=2, keras_model=model)


def _gzipped_h5(model, work, name) -> int:
  """The tfmot example's measure: gzip of the .h5 saved without optimizer."""
  path = os.path.join(work, f'{name}.h5')
  tf_keras.models.save_model(model, path, include_optimizer=False)
  with open(path, 'rb') as f:
    return len(gzip.compress(f.read(), 9))


def quantization_rows(model, data, work):
  """Rows for figure 1, and the dense float32 TFLite metrics."""
  f32 = _tflite(model, 'float32', data, work, 'dense')
  rows = []
  for mode in ('float16', 'dynamic_range', 'int8'):
    m = _tflite(model, mode, data, work, 'dense')
    rows.append({
        'figure': f'{mode} / float32 TFLite size',
        'measured': m.size_bytes / f32.size_bytes,
        'detail': (f'{m.size_bytes} / {f32.size_bytes} B; accuracy '
                   f'{m.accuracy:.4f} vs {f32.accuracy:.4f} '
                   f'(drop {f32.accuracy - m.accuracy:+.4f})'),
        'anchor': {'float16': '0.5 (2x smaller)',
                   'dynamic_range': '0.25 (4x smaller)',
                   'int8': '0.25 (4x smaller)'}[mode],
        'anchor source': 'TFLite post-training quantization guide',
    })
  return rows, f32


def pruning_rows(model, data, work, dense_f32) -> List[Dict[str, Any]]:
  result = pruning.prune(model, data['train_ds'], PRUNING, data['eval_ds'])
  pruned = result.model
  sparse_f32 = _tflite(pruned, 'float32', data, work, 'pruned')
  sparse_int8 = _tflite(pruned, 'int8', data, work, 'pruned')
  dense_h5 = _gzipped_h5(model, work, 'dense')
  pruned_h5 = _gzipped_h5(pruned, work, 'pruned')
  sparsity = result.details['sparsity']['overall']
  accuracy = (f'accuracy {sparse_f32.accuracy:.4f} vs dense '
              f'{dense_f32.accuracy:.4f}; kernel sparsity {sparsity:.3f}')
  source = 'tfmot "Pruning in Keras" example'
  return [
      {'figure': 'dense / pruned-80% gzipped Keras .h5',
       'measured': dense_h5 / pruned_h5,
       'detail': f'{dense_h5} / {pruned_h5} B; {accuracy}',
       'anchor': '3x smaller', 'anchor source': source},
      {'figure': 'dense / pruned-80% gzipped TFLite float32',
       'measured': dense_f32.gzipped_bytes / sparse_f32.gzipped_bytes,
       'detail': f'{dense_f32.gzipped_bytes} / {sparse_f32.gzipped_bytes} B',
       'anchor': '3x smaller', 'anchor source': source},
      {'figure': 'dense .h5 / pruned+int8 TFLite (gzipped)',
       'measured': dense_h5 / sparse_int8.gzipped_bytes,
       'detail': (f'{dense_h5} / {sparse_int8.gzipped_bytes} B; int8 '
                  f'accuracy {sparse_int8.accuracy:.4f}'),
       'anchor': '10x smaller', 'anchor source': source},
      {'figure': 'dense / pruned+int8 gzipped TFLite (float32 vs int8)',
       'measured': dense_f32.gzipped_bytes / sparse_int8.gzipped_bytes,
       'detail': f'{dense_f32.gzipped_bytes} / {sparse_int8.gzipped_bytes} B',
       'anchor': '10x smaller', 'anchor source': source},
  ]


def distillation_rows(model, data, seeds) -> List[Dict[str, Any]]:
  distilled, scratch, compression = [], [], None
  for seed in range(seeds):
    config = distillation.DistillationConfig(epochs=DISTILLATION_EPOCHS,
                                             seed=seed)
    d = distillation.distill(model, data['train_ds'], config, data['eval_ds'])
    s = distillation.train_from_scratch(model, data['train_ds'], config,
                                        data['eval_ds'])
    distilled.append(d.details['accuracy_after'])
    scratch.append(s.details['accuracy_after'])
    compression = d.details.get('compression')

  def summary(values):
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return (f'{statistics.mean(values):.4f} +- {spread:.4f} '
            f'({", ".join(f"{v:.4f}" for v in values)})')

  teacher = _keras_utils.accuracy(model, data['eval_ds'])
  return [{
      'figure': 'distilled - scratch student accuracy (mean of seeds)',
      'measured': statistics.mean(distilled) - statistics.mean(scratch),
      'detail': (f'distilled {summary(distilled)}; scratch {summary(scratch)}; '
                 f'teacher {teacher:.4f}; student has {compression:.1f}x '
                 f'fewer params; {DISTILLATION_EPOCHS} epochs, {seeds} seeds'),
      'anchor': '+0.005 (98.1% vs 97.6% on MNIST)',
      'anchor source': 'Keras "Knowledge Distillation" example',
  }]


def low_rank_rows(model, data) -> List[Dict[str, Any]]:
  result = low_rank.factorize(model, data['train_ds'], LOW_RANK,
                              data['eval_ds'])
  details = result.details
  split = [p for p in details['layers'] if p.get('factorized')]
  before = sum(p['kernel_params'] for p in split)
  after = sum(p['factorized_kernel_params'] for p in split)
  ranks = ', '.join(f"{p['layer']} {p['shape'][0]}x{p['shape'][1]} -> r"
                    f"{p['rank']}" for p in split)
  return [{
      'figure': 'low-rank: factorized kernel params after / before',
      'measured': after / before if before else float('nan'),
      'detail': (f'{before} -> {after} kernel params ({ranks}); model '
                 f"{details['params_before']} -> {details['params_after']} "
                 f"params; accuracy {details['accuracy_before']:.4f} -> "
                 f"{details['accuracy_after']:.4f} (before fine-tuning "
                 f"{details['accuracy_factorized']:.4f})"),
      'anchor': '-',
      'anchor source': 'none published; Eckart-Young bound checked',
  }]


def _legacy_runner_p50(paths: Dict[str, str], inputs: Dict[str, Any],
                       runs: int, rounds: int) -> Dict[str, float]:
  """The method measure.py used before: per timed run, one SignatureRunner
  call on an interpreter whose allocate_tensors() never ran (so the default
  XNNPACK delegate was never applied). p50 ms per label, interleaved rounds."""
  runners = {}
  for label, path in paths.items():
    interpreter = tf.lite.Interpreter(model_path=path, num_threads=1)
    runners[label] = interpreter.get_signature_runner(measure.SERVING_SIGNATURE)
  durations: Dict[str, List[float]] = {label: [] for label in paths}
  per_round = max(1, runs // rounds)
  labels = list(paths)
  for label in labels:
    for _ in range(WARMUP_RUNS):
      runners[label](**inputs[label])
  for r in range(rounds):
    for label in labels if r % 2 == 0 else labels[::-1]:
      runner, feed = runners[label], inputs[label]
      for _ in range(measure.ROUND_WARMUP_RUNS):
        runner(**feed)
      for _ in range(per_round):
        start = time.perf_counter()
        runner(**feed)
        durations[label].append(time.perf_counter() - start)
  return {label: float(np.percentile(np.asarray(d) * 1000, 50))
          for label, d in durations.items()}


# Profiled batch-1 infers per OpenVINO variant (after PROFILE_WARMUP).
PROFILE_RUNS = 50
PROFILE_WARMUP = 20
# What int8 can gain on a convolution at most, from its arithmetic: an
# AVX-512 VNNI instruction (vpdpbusd) does 4 int8 multiply-adds per 32-bit
# lane where an FMA does one float32 multiply-add.
VNNI_MACS_PER_LANE = 4


def layer_kind(node_type: str, exec_type: str) -> str:
  """'1x1 conv', 'depthwise conv' or 'other', from OpenVINO's profiling."""
  if node_type == 'Convolution' and '1x1' in exec_type:
    return '1x1 conv'
  if node_type == 'GroupConvolution':
    return 'depthwise conv'
  return 'other'


def openvino_layer_ms(xml_path: str, example: Dict[str, np.ndarray],
                      runs: int = PROFILE_RUNS) -> Dict[str, float]:
  """Median ms per layer kind (layer_kind) of a batch-1 OpenVINO infer.

  The CPU plugin's own per-layer profiling on the model compiled as
  leantfx runs batch 1 (openvino_runtime.compile_model: a static batch of
  1, 1 thread, f32 precision), inputs set once; each kind's total per
  infer, median over ``runs`` infers.
  """
  import openvino as ov  # pylint: disable=g-import-not-at-top
  (value,) = example.values()
  compiled = openvino_runtime.compile_model(xml_path, 1, batch_size=1,
                                            profiling=True)
  request = compiled.create_infer_request()
  request.set_input_tensor(0, ov.Tensor(np.ascontiguousarray(value)))
  for _ in range(PROFILE_WARMUP):
    request.infer()
  per_kind = {}
  for _ in range(runs):
    request.infer()
    totals = {}
    for layer in request.profiling_info:
      if layer.status != layer.Status.EXECUTED:
        continue
      kind = layer_kind(layer.node_type, layer.exec_type)
      totals[kind] = (totals.get(kind, 0.0) +
                      layer.real_time.total_seconds() * 1e3)
    for kind, ms in totals.items():
      per_kind.setdefault(kind, []).append(ms)
  return {kind: float(np.median(v)) for kind, v in per_kind.items()}


def int8_ceiling_rows(xml_paths: Dict[str, str], example, tflite_f32_ms: float
                     ) -> List[Dict[str, Any]]:
  """Where OpenVINO's batch-1 time goes, and what int8 could reach at most.

  Per layer kind, float32 and int8 (openvino_layer_ms). The ceiling: the
  int8 model's time with its 1x1 convolutions at a quarter of their float32
  time (VNNI_MACS_PER_LANE: the arithmetic limit) and every other layer as
  measured in int8; TFLite float32's p50 over that is the largest speed-up
  over TFLite float32 any int8 MobileNetV2 can show on this CPU without
  faster depthwise convolutions.
  """
  layers = {mode: openvino_layer_ms(path, example)
            for mode, path in xml_paths.items()}
  rows = []
  for mode, kinds in layers.items():
    total = sum(kinds.values())
    rows.append({
        'figure': f'MobileNetV2 OpenVINO {mode} per-layer ms, 1 thread '
                  '(plugin profiling, summed per infer)',
        'measured': total,
        'detail': '; '.join(f'{kind} {ms:.2f} ms ({ms / total:.0%})'
                            for kind, ms in sorted(kinds.items(),
                                                   key=lambda kv: -kv[1])),
        'anchor': '-', 'anchor source': '-',
    })
  f32, int8 = layers['float32'], layers['int8']
  ceiling = (sum(int8.values()) - int8.get('1x1 conv', 0.0) +
             f32.get('1x1 conv', 0.0) / VNNI_MACS_PER_LANE)
  rows.append({
      'figure': 'MobileNetV2 int8 ceiling (computed from the per-layer '
                'profile, not measured): speed-up over TFLite float32 if '
                'every 1x1 conv ran at 4x its float32 speed',
      'computed': tflite_f32_ms / ceiling,
      'detail': (f"int8 1x1 convs {int8.get('1x1 conv', 0.0):.2f} ms -> "
                 f"{f32.get('1x1 conv', 0.0) / VNNI_MACS_PER_LANE:.2f} ms "
                 f"(float32 {f32.get('1x1 conv', 0.0):.2f} / "
                 f"{VNNI_MACS_PER_LANE}); depthwise int8 "
                 f"{int8.get('depthwise conv', 0.0):.2f} ms vs float32 "
                 f"{f32.get('depthwise conv', 0.0):.2f} ms; other int8 "
                 f"{int8.get('other', 0.0):.2f} ms; {ceiling:.2f} ms against "
                 f'TFLite float32 {tflite_f32_ms:.2f} ms'),
      'anchor': '>= 4x (best int8)', 'anchor source': "leantfx's target",
  })
  return rows


def latency_rows(work, runs, rounds=measure.DEFAULT_LATENCY_ROUNDS,
                 deploy_threads=None) -> List[Dict[str, Any]]:
  """Figure 5: MobileNetV2 1.0 224px, batch 1, TF vs TFLite float32 vs int8.

  TFLite rows time invoke() on prepared interpreters in interleaved rounds
  (measure.measure_latency_interleaved, as the ModelOptimizer does), with the
  SignatureRunner per-call overhead beside them; the last rows re-time the
  old method (a SignatureRunner call per run on an interpreter never
  allocated) for comparison.
  """
  tf_keras.utils.set_random_seed(SEED)
  model = tf_keras.applications.MobileNetV2(
      alpha=1.0, input_shape=(224, 224, 3), weights=None, classes=1000)
  rng = np.random.default_rng(SEED)
  name = serving_export.serving_input_specs(model).popitem()[0]
  images = rng.random((MOBILENET_CALIBRATION, 224, 224, 3), dtype=np.float32)
  # Random weights and inputs: the labels only make measure() run; accuracy
  # is meaningless here and not reported.
  data = measure.LabeledData({name: images[:4]}, np.zeros(4, np.int64))
  saved = os.path.join(work, 'mobilenet_savedmodel')
  serving_export.save_serving_model(model, saved)
  tf32 = measure.measure_saved_model(saved, data, latency_runs=runs,
                                     warmup_runs=WARMUP_RUNS)
  paths = {}
  for mode in ('float32', 'int8'):
    paths[mode] = os.path.join(work, f'mobilenet_{mode}.tflite')
    with open(paths[mode], 'wb') as f:
      f.write(tflite_export.convert_saved_model(
          saved, mode, {name: images},
          num_calibration_samples=MOBILENET_CALIBRATION))
  example = data.example(0)
  thread_counts = [1] + ([deploy_threads] if deploy_threads and
                         deploy_threads != 1 else [])
  variants = [measure.LatencyVariant(f'{mode} {t}t', paths[mode], t, example)
              for t in thread_counts for mode in ('float32', 'int8')]
  # The server runtimes, exported as the ModelOptimizer exports them
  # (runtime_variants.export), timed at 1 thread in the same rounds.
  server = [r for r in runtimes.installed()
            if r in runtime_variants.SERVER_RUNTIMES]
  server_paths, export_seconds = {}, {}
  for runtime in server:
    cache = {'saved_model': saved}
    for mode in ('float32', 'int8'):
      began = time.perf_counter()
      server_paths[(runtime, mode)] = runtime_variants.export(
          runtime, model, mode, {name: images},
          os.path.join(work, f'{runtime}_{mode}'), MOBILENET_CALIBRATION,
          cache)
      export_seconds[(runtime, mode)] = time.perf_counter() - began
      variants.append(runtime_variants.timer(
          runtime, f'{runtime} {mode} 1t', server_paths[(runtime, mode)], 1,
          example))
  load_before = os.getloadavg()
  result = measure.measure_latency_interleaved(
      variants, runs=runs, warmup_runs=WARMUP_RUNS, rounds=rounds)
  legacy_inputs = {}
  for mode, path in paths.items():
    legacy_inputs[mode] = measure.TFLitePredictor(path).prepare(example)
  legacy = _legacy_runner_p50(paths, legacy_inputs, runs, rounds)
  load_after = os.getloadavg()
  stats = result.variants

  def rounds_text(s):
    return ', '.join(f'{x:.2f}' for x in s.round_p50_ms)

  rows = [{
      'figure': 'MobileNetV2 1.0 224px p50 ms: TF float32 (SavedModel, 1 '
                'intra-op thread)',
      'measured': tf32.latency_p50_ms,
      'detail': f'p99 {tf32.latency_p99_ms:.2f} ms; {tf32.size_bytes} B',
      'anchor': '-', 'anchor source': '-',
  }]
  for t in thread_counts:
    for mode in ('float32', 'int8'):
      s = stats[f'{mode} {t}t']
      rows.append({
          'figure': f'MobileNetV2 1.0 224px p50 ms: TFLite {mode}, {t} '
                    'thread(s), invoke()',
          'measured': s.p50_ms,
          'detail': (f'p99 {s.p99_ms:.2f} ms; {s.runs} runs; round p50s '
                     f'{rounds_text(s)} (spread {s.spread:.2f})'),
          'anchor': '-', 'anchor source': '-',
      })
      rows.append({
          'figure': f'  SignatureRunner per-call overhead ms: TFLite {mode}, '
                    f'{t} thread(s)',
          'measured': s.call_overhead_ms,
          'detail': ('runner call p50 per round ' + ', '.join(
              f'{x:.2f}' for x in s.runner_round_p50_ms) +
                     ' ms, same prepared interpreter'),
          'anchor': '-', 'anchor source': '-',
      })
    f32, int8 = stats[f'float32 {t}t'], stats[f'int8 {t}t']
    rows.append({
        'figure': f'MobileNetV2 speedup, {t} thread(s): TFLite float32 p50 / '
                  'int8 p50',
        'measured': f32.p50_ms / int8.p50_ms,
        'detail': (f'TF float32 / TFLite int8: '
                   f'{tf32.latency_p50_ms / int8.p50_ms:.2f}x' if t == 1
                   else f'deploy target: {t} threads'),
        'anchor': '3x+ speedup',
        'anchor source': ('TFLite post-training quantization guide (its '
                          'latency tables: Pixel 2, one big ARM core)'),
    })
  tflite_f32 = stats['float32 1t'].p50_ms
  rows.append({
      'figure': 'MobileNetV2 speedup over TFLite float32, 1 thread: TFLite '
                'int8',
      'measured': tflite_f32 / stats['int8 1t'].p50_ms,
      'detail': f"p50 {stats['int8 1t'].p50_ms:.2f} ms",
      'anchor': '>= 2x', 'anchor source': "leantfx's target",
  })
  for (runtime, mode), path in server_paths.items():
    s = stats[f'{runtime} {mode} 1t']
    artifact = runtime_variants.artifact_path(runtime, path)
    rows.append({
        'figure': f'MobileNetV2 1.0 224px p50 ms: {runtime} {mode}, 1 thread, '
                  'inputs bound once',
        'measured': s.p50_ms,
        'detail': (f'p99 {s.p99_ms:.2f} ms; {measure.size_on_disk(artifact)} '
                   f'B; {s.runs} runs; round p50s {rounds_text(s)} (spread '
                   f'{s.spread:.2f}); export '
                   f'{export_seconds[(runtime, mode)]:.0f} s; '
                   f'{runtime_variants.RUNTIME_CALLS[runtime]}'),
        'anchor': '-', 'anchor source': '-',
    })
    rows.append({
        'figure': f'MobileNetV2 speedup over TFLite float32, 1 thread: '
                  f'{runtime} {mode}',
        'measured': tflite_f32 / s.p50_ms,
        'detail': f'TF float32 / this: {tf32.latency_p50_ms / s.p50_ms:.2f}x',
        'anchor': '>= 4x (best int8)' if mode == 'int8' else '-',
        'anchor source': "leantfx's target" if mode == 'int8' else '-',
    })
    rows.append({
        'figure': f'  Python per-call overhead ms: {runtime} {mode}, 1 thread',
        'measured': s.call_overhead_ms,
        'detail': ('one-line call p50 per round ' + ', '.join(
            f'{x:.2f}' for x in s.runner_round_p50_ms) +
                   ' ms (OpenVINO: compiled_model(inputs); ONNX Runtime: '
                   'session.run(None, feed)) minus the bound call'),
        'anchor': '-', 'anchor source': '-',
    })
  if (runtimes.OPENVINO, 'int8') in server_paths:
    rows += int8_ceiling_rows(
        {mode: server_paths[(runtimes.OPENVINO, mode)]
         for mode in ('float32', 'int8')}, example, tflite_f32)
  for mode in ('float32', 'int8'):
    rows.append({
        'figure': f'old method p50 ms: TFLite {mode}, 1 thread, '
                  'SignatureRunner call per run, never allocate_tensors()',
        'measured': legacy[mode],
        'detail': (f'{legacy[mode] / stats[f"{mode} 1t"].p50_ms:.2f}x the '
                   'invoke() p50'),
        'anchor': '-', 'anchor source': '-',
    })
  rows.append({
      'figure': 'old method speedup: TFLite float32 p50 / int8 p50',
      'measured': legacy['float32'] / legacy['int8'],
      'detail': 'what docs/measurements.md used to report',
      'anchor': '-', 'anchor source': '-',
  })
  f32_size, int8_size = (os.path.getsize(paths['float32']),
                         os.path.getsize(paths['int8']))
  rows.append({
      'figure': 'MobileNetV2 size: TFLite float32 / int8',
      'measured': f32_size / int8_size,
      'detail': f'{f32_size} / {int8_size} B',
      'anchor': '4x smaller',
      'anchor source': 'TFLite post-training quantization guide',
  })
  rows.append({
      'figure': 'latency measurement: attempts / stable',
      'measured': float(result.attempts),
      'detail': (f'stable={result.stable} (bound {result.max_round_spread}; '
                 'worst spread per attempt ' + ', '.join(
                     f'{x:.2f}' for x in result.attempt_spreads) +
                 f'); load average {load_before[0]:.2f} before, '
                 f'{load_after[0]:.2f} after'),
      'anchor': '-', 'anchor source': '-',
  })
  return rows


def _latency_notes(rows, args) -> List[str]:
  speedup = _measured(rows, 'MobileNetV2 speedup')
  old = _measured(rows, 'old method speedup')
  notes = [
      f'Latency: TFLite int8 runs at {speedup:.2f}x the speed of TFLite '
      'float32 (1 thread, invoke() on prepared interpreters); the old method '
      f'(a SignatureRunner call per run on an interpreter never allocated, so '
      f'without the XNNPACK delegate) gave {old:.2f}x. int8 makes '
      f"MobileNetV2 {_measured(rows, 'MobileNetV2 size'):.1f}x smaller.",
      f'Latency: batch 1, {args.latency_runs} timed invoke() runs per variant '
      f'in {args.latency_rounds} interleaved rounds after {WARMUP_RUNS} '
      'warm-up runs; SignatureRunner overhead = median over rounds of (runner '
      'call p50 - invoke p50) on the same interpreter. The machine is shared '
      f'with other work (p99 is noisy). {_cpu_note()}',
  ]
  return notes


def _three_channels(pixels) -> tf.Tensor:
  """[n, 64] grey digits -> [n, 192]: each pixel's value three times (HWC)."""
  image = tf.reshape(tf.convert_to_tensor(pixels), [-1, 8, 8, 1])
  return tf.reshape(tf.tile(image, [1, 1, 1, 3]), [-1, 8 * 8 * 3])


def _image_data(data) -> Dict[str, Any]:
  """_digits()'s split and batches, as 3-channel images."""

  def to_rgb(features, labels):
    return {FEATURE: _three_channels(features[FEATURE])}, labels

  return {
      'train_ds': data['train_ds'].map(to_rgb),
      'eval_ds': data['eval_ds'].map(to_rgb),
      'eval': measure.LabeledData(
          {FEATURE: _three_channels(data['eval'].features[FEATURE]).numpy()},
          data['eval'].labels),
      'train_x': {FEATURE: _three_channels(data['train_x'][FEATURE]).numpy()},
  }


def build_image_model(train_steps: int, *, alpha=IMAGE_ALPHA,
                      side=IMAGE_SIDE) -> tf_keras.Model:
  """The product's mobilenet_v2 model for IMAGE_SPEC, compiled, untrained.

  Args:
    train_steps: optimizer steps the cosine decay spans.
    alpha: MobileNetV2 width (TrainingConfig.width_multiplier; it scales the
      MLP head too).
    side: the side the model resizes its 8x8 input to (>= 32).

  Returns:
    ``model_lib.build_model``'s model (its BatchNormalization momentum is
    the product's, architectures.MOBILENET_BN_MOMENTUM).
  """
  training = config_lib.TrainingConfig(
      architecture='mobilenet_v2', width_multiplier=alpha, image_size=side,
      train_steps=train_steps, epochs=1, lr_decay='cosine',
      warmup_steps=min(IMAGE_WARMUP_STEPS, train_steps - 1))
  tf_keras.utils.set_random_seed(SEED)
  return model_lib.build_model(IMAGE_SPEC, training, {})


def train_image_model(data, *, epochs=IMAGE_EPOCHS, alpha=IMAGE_ALPHA,
                      side=IMAGE_SIDE) -> tf_keras.Model:
  """``build_image_model`` trained from scratch on ``_image_data``'s split.

  Args:
    data: ``_image_data``'s datasets.
    epochs: passes over the train split (the cosine decay ends at the last).
    alpha: MobileNetV2 width.
    side: the model's resized image side.

  Returns:
    The trained model.
  """
  steps = epochs * _keras_utils.steps_per_epoch(data['train_ds'])
  model = build_image_model(steps, alpha=alpha, side=side)
  model.fit(data['train_ds'], epochs=epochs, verbose=0)
  return model


def image_accuracy_rows(work, *, epochs=IMAGE_EPOCHS, alpha=IMAGE_ALPHA,
                        side=IMAGE_SIDE,
                        calibration_samples=IMAGE_CALIBRATION,
                        server_runtimes=runtime_variants.SERVER_RUNTIMES
                       ) -> List[Dict[str, Any]]:
  """Figure 6: int8 accuracy drop of each runtime on a trained MobileNetV2.

  Args:
    work: scratch folder for the exports.
    epochs: training epochs (train_image_model).
    alpha: MobileNetV2 width.
    side: the model's resized image side.
    calibration_samples: int8 calibration rows, taken from the train split.
    server_runtimes: the server runtimes to export (of SERVER_RUNTIMES); one
      not installed gets a row saying so.

  Returns:
    The rows: the Keras float accuracy, then per runtime its float32 and
    int8 accuracies, the int8 drops and the float32 / int8 size.
  """
  data = _image_data(_digits())
  began = time.perf_counter()
  model = train_image_model(data, epochs=epochs, alpha=alpha, side=side)
  train_seconds = time.perf_counter() - began
  keras = _keras_utils.accuracy(model, data['eval_ds'])
  steps = epochs * _keras_utils.steps_per_epoch(data['train_ds'])
  eval_data = data['eval']
  prefix = f'MobileNetV2 {alpha:g} {side}px digits'
  rows = [{
      'figure': f'{prefix}: Keras float32 eval accuracy',
      'measured': keras,
      'detail': (f'{len(eval_data)} held-out eval digits; '
                 f'{model.count_params()} params; from scratch, {epochs} '
                 f'epochs ({steps} steps of {BATCH_SIZE}) in '
                 f'{train_seconds:.0f} s; BN momentum '
                 f'{architectures.MOBILENET_BN_MOMENTUM}'),
      'anchor': '>= 0.90',
      'anchor source': "leantfx's target: trained until its accuracy is real",
  }]
  saved = serving_export.save_serving_model(
      model, os.path.join(work, 'image_saved_model'))
  # runtime -> mode -> (quality fields with class_ids, bytes, export seconds)
  found: Dict[str, Dict[str, Any]] = {}
  for mode in ('float32', 'int8'):
    path = os.path.join(work, f'image_{mode}.tflite')
    began = time.perf_counter()
    tflite_export.export_saved_model_tflite(
        saved, mode, data['train_x'], output_path=path,
        num_calibration_samples=calibration_samples)
    seconds = time.perf_counter() - began
    # Accuracy is what counts here; the latency runs are kept to a minimum.
    metrics = measure.measure_tflite(path, eval_data, tflite_mode=mode,
                                     latency_runs=5, warmup_runs=0)
    found.setdefault(runtimes.TFLITE, {})[mode] = (
        {'accuracy': metrics.accuracy, 'class_ids': metrics.class_ids},
        metrics.size_bytes, seconds)
  missing = {}
  cache = {'saved_model': saved}
  for runtime in server_runtimes:
    if runtimes.missing_modules(runtime):
      missing[runtime] = runtimes.not_installed_message(runtime)
      continue
    for mode in ('float32', 'int8'):
      began = time.perf_counter()
      path = runtime_variants.export(
          runtime, model, mode, data['train_x'],
          os.path.join(work, f'image_{runtime}_{mode}'), calibration_samples,
          cache)
      seconds = time.perf_counter() - began
      # As the ModelOptimizer scores a variant (export_and_score_saved_model).
      fields = runtime_variants.scores(
          runtime_variants.predictor(runtime, path,
                                     measure.DEFAULT_NUM_THREADS), eval_data)
      found.setdefault(runtime, {})[mode] = (
          fields,
          measure.size_on_disk(runtime_variants.artifact_path(runtime, path)),
          seconds)
  target = {'anchor': '<= 0.005', 'anchor source': "leantfx's target"}
  for runtime in (runtimes.TFLITE,) + tuple(server_runtimes):
    label = runtimes.LABELS[runtime]
    if runtime in missing:
      rows.append({'figure': f'{prefix}: {label} float32 / int8',
                   'measured': float('nan'), 'detail': missing[runtime],
                   'anchor': '-', 'anchor source': '-'})
      continue
    (f32_fields, f32_bytes, f32_s), (int8_fields, int8_bytes, int8_s) = (
        found[runtime]['float32'], found[runtime]['int8'])
    f32, int8 = f32_fields['accuracy'], int8_fields['accuracy']
    agree = sum(a == b for a, b in zip(f32_fields['class_ids'],
                                       int8_fields['class_ids']))
    rows += [
        {'figure': f'{prefix}: {label} float32 eval accuracy',
         'measured': f32,
         'detail': (f'vs Keras {f32 - keras:+.4f}; {f32_bytes} B; export '
                    f'{f32_s:.0f} s'),
         'anchor': '-', 'anchor source': '-'},
        {'figure': f'{prefix}: {label} int8 eval accuracy',
         'measured': int8,
         'detail': (f'same class as {label} float32 on {agree}/'
                    f'{len(eval_data)}; predicts '
                    f"{len(set(int8_fields['class_ids']))} distinct classes; "
                    f'{int8_bytes} B; export {int8_s:.0f} s; calibrated on '
                    f'{calibration_samples} train rows'),
         'anchor': '-', 'anchor source': '-'},
        dict({'figure': f'{prefix}: {label} int8 drop vs {label} float32',
              'measured': f32 - int8,
              'detail': f'{f32:.4f} - {int8:.4f}'}, **target),
        dict({'figure': f'{prefix}: {label} int8 drop vs Keras float32',
              'measured': keras - int8,
              'detail': f'{keras:.4f} - {int8:.4f}'}, **target),
        {'figure': f'{prefix}: {label} size float32 / int8',
         'measured': f32_bytes / int8_bytes,
         'detail': f'{f32_bytes} / {int8_bytes} B',
         'anchor': '4x smaller' if runtime == runtimes.TFLITE else '-',
         'anchor source': ('TFLite post-training quantization guide'
                           if runtime == runtimes.TFLITE else '-')},
    ]
  return rows


def _image_accuracy_notes(rows) -> List[str]:
  keras = rows[0]['measured']
  drops = [r for r in rows if ' int8 drop vs ' in r['figure']]
  over = [r['figure'].split(': ', 1)[1] for r in drops
          if r['measured'] > 0.005]
  notes = [
      'Image accuracy: the product\'s mobilenet_v2 architecture trained from '
      'scratch on the digits as 3-channel images (resized to the model side '
      'inside the model), scored on the held-out 20% (360 digits) at batch '
      '1 in each runtime with 1 thread; one eval digit is 0.0028 of '
      'accuracy, so the 0.005 target allows one digit to change class.',
  ]
  if keras < 0.9:
    notes.append(f'Image accuracy: the Keras model reaches only {keras:.4f} '
                 '(< 0.90): the int8 drops are measured on a model that has '
                 'not learned the task well.')
  notes.append('Image accuracy: every int8 drop is within 0.005.' if not over
               else 'Image accuracy: over the 0.005 target: ' +
               '; '.join(over) + '.')
  measured = {r['figure'].split(': ', 1)[1]: r['measured'] for r in rows}
  for label in runtimes.LABELS.values():
    f32 = measured.get(f'{label} float32 eval accuracy')
    int8 = measured.get(f'{label} int8 eval accuracy')
    if f32 is not None and int8 is not None and int8 < 0.5 * f32:
      notes.append(
          f'Image accuracy: {label} int8 scores {int8:.4f} against its '
          f'float32 {f32:.4f}: its predictions collapsed (its row counts '
          'the distinct classes it predicts), a failure rather than a '
          'small quantization loss.')
  return notes


def _cpu_note() -> str:
  """Which SIMD extensions the CPU reports (int8 kernels depend on them)."""
  try:
    with open('/proc/cpuinfo', encoding='utf-8') as f:
      flags = next((line.split(':', 1)[1].split() for line in f
                    if line.startswith('flags')), [])
  except OSError:
    return ''
  wanted = ('avx', 'fma', 'avx2', 'avx512f', 'avx512_vnni', 'avx_vnni')
  have = [w for w in wanted if w in flags]
  missing = [w for w in wanted if w not in flags]
  return (f'CPU flags: has {", ".join(have) or "none"} of {", ".join(wanted)}'
          f'{"; lacks " + ", ".join(missing) if missing else ""}. The '
          "guide's 3x+ comes from mobile ARM CPUs.")


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--latency-runs', type=int, default=LATENCY_RUNS)
  parser.add_argument('--latency-rounds', type=int,
                      default=measure.DEFAULT_LATENCY_ROUNDS)
  parser.add_argument('--deploy-threads', type=int, default=os.cpu_count(),
                      help='TFLite thread count of the deploy target, timed '
                      'beside 1 thread (default: this machine\'s CPUs)')
  parser.add_argument('--seeds', type=int, default=SEEDS)
  only = parser.add_mutually_exclusive_group()
  only.add_argument('--only-latency', action='store_true',
                    help='run figure 5 only (results/optimize_latency.json)')
  only.add_argument('--only-image-accuracy', action='store_true',
                    help='run figure 6 only '
                    '(results/optimize_image_accuracy.json)')
  args = parser.parse_args(argv)
  # One thread for TensorFlow too, so TF and TFLite latencies compare; set
  # before any op runs.
  tf.config.threading.set_intra_op_parallelism_threads(1)
  tf.config.threading.set_inter_op_parallelism_threads(1)
  start = time.perf_counter()
  seconds: Dict[str, float] = {}

  def timed(section, fn, *fn_args):
    began = time.perf_counter()
    result = fn(*fn_args)
    seconds[section] = time.perf_counter() - began
    return result

  rows: List[Dict[str, Any]] = []
  latency_args = (args.latency_runs, args.latency_rounds, args.deploy_threads)
  if args.only_latency:
    with tempfile.TemporaryDirectory(prefix='leantfx-bench-optimize-') as work:
      rows += timed('latency', latency_rows, work, *latency_args)
    elapsed = time.perf_counter() - start
    notes = _latency_notes(rows, args) + [f'Run time {elapsed:.0f} s.']
    harness.report('optimize_latency',
                   'TFLite latency, MobileNetV2 1.0 224px: invoke() on '
                   'prepared interpreters', rows, notes)
    return
  if args.only_image_accuracy:
    with tempfile.TemporaryDirectory(prefix='leantfx-bench-optimize-') as work:
      rows += timed('image_accuracy', image_accuracy_rows, work)
    elapsed = time.perf_counter() - start
    notes = _image_accuracy_notes(rows) + [f'Run time {elapsed:.0f} s.']
    harness.report('optimize_image_accuracy',
                   'int8 accuracy drop per runtime on a trained MobileNetV2 '
                   '(digits as images)', rows, notes)
    return
  with tempfile.TemporaryDirectory(prefix='leantfx-bench-optimize-') as work:
    data = _digits()
    model = timed('train', _train_baseline, data)
    quant, dense_f32 = timed('quantization', quantization_rows, model, data,
                             work)
    rows += quant
    rows += timed('pruning', pruning_rows, model, data, work, dense_f32)
    rows += timed('distillation', distillation_rows, model, data, args.seeds)
    rows += timed('low_rank', low_rank_rows, model, data)
    rows += timed('latency', latency_rows, work, *latency_args)
    image_rows = timed('image_accuracy', image_accuracy_rows, work)
    rows += image_rows
  elapsed = time.perf_counter() - start
  notes = [
      f'digits CNN: {model.count_params()} params, eval accuracy '
      f'{dense_f32.accuracy:.4f} (TFLite float32), {len(data["eval"])} '
      'eval examples; TFLite interpreter with 1 thread, TF with 1 intra-op '
      'and 1 inter-op thread.',
      'A small model carries ~3-4 KB of TFLite metadata and per-channel '
      'scales, so its int8 ratio sits above the 0.25 the guide quotes for '
      'weights alone.',
  ]
  gain = _measured(rows, 'distilled - scratch')
  if gain < 0.005:
    notes.append(
        f'Distillation: the anchor\'s +0.005 does not reproduce here '
        f'({gain:+.4f}); the per-seed accuracies are in the row. The '
        'anchor is MNIST (60k training images); digits has 1.4k.')
  notes += _latency_notes(rows, args)
  notes += _image_accuracy_notes(image_rows)
  notes.append(f'Run time {elapsed:.0f} s (' + ', '.join(
      f'{k} {v:.0f} s' for k, v in seconds.items()) + ').')
  harness.report('optimize',
                 'Model optimization on digits: measured vs anchors', rows,
                 notes)


def _measured(rows: List[Dict[str, Any]], prefix: str) -> float:
  return next(r['measured'] for r in rows if r['figure'].startswith(prefix))


if __name__ == '__main__':
  main()
