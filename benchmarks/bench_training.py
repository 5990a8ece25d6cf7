"""Training figures: mixed precision on this CPU, activation checkpointing, and
multi-worker scaling, each measured side by side in one run.

1. Throughput (examples/s) of float32, mixed_bfloat16 and 'auto' for three
   models on scikit-learn's digits (1400 train / 397 test): the digits CNN
   (the Trainer's default digits model), an MLP with wide Dense layers
   (3 x 2048: bf16 matmuls are where a CPU gain is likeliest) and MobileNetV2
   alpha 0.35 at 96x96 (weights=None; digits upsampled). The three models of
   one architecture train in interleaved rounds (A B C, C B A, ...) so load
   drift hits them alike; the figure is the median round. 'auto' is the
   Trainer's own decision (models/training/precision.py: a probe with a fresh
   cache, its time reported separately), trained as a third model. Accuracy
   is on the 397 test digits after the same number of steps for all three.
2. Peak memory of one training step of a deep MLP (64 Dense layers of 256,
   batch 4096) with and without activation checkpointing (the CPU
   allocator's peak, tf.config.experimental.get_memory_info), and the step
   time it costs.
3. Multi-worker: examples/s of 1 worker process vs a 2-worker
   MultiWorkerMirroredStrategy cluster on loopback, same global batch.

Run: python -m benchmarks.run_all training   (or make bench)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import leantfx  # noqa: F401  Keras 2 before TensorFlow (leantfx/__init__.py).
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# pylint: disable=g-import-not-at-top
import numpy as np

from benchmarks import harness
from leantfx import config as config_lib

DIGITS = config_lib.DatasetSpec(
    name='digits', label='digit', classes=tuple(str(d) for d in range(10)),
    image_features=tuple(f'pixel_{i:02d}' for i in range(64)),
    image_shape=(8, 8, 1), image_max_value=16.0, model='cnn')
# (name, TrainingConfig changes, batch, steps per round, steps in total).
# Steps per round are sized so one round of one model lasts roughly a second
# on 2 idle cores; every model trains the same total steps before its test
# accuracy is taken (rounds, then untimed steps up to the total).
MODELS = (
    ('digits CNN', {}, 32, 60, 400),
    ('MLP 3x2048', {'architecture': 'mlp', 'hidden_units': (2048,) * 3}, 64,
     12, 200),
    ('MobileNetV2 a=0.35 96x96', {'architecture': 'mobilenet_v2',
                                  'width_multiplier': 0.35,
                                  'image_size': 96}, 32, 4, 200),
)
ROUNDS = 5
AUTO_MIN_RATIO = 0.95  # leantfx's bar: auto >= 0.95x the faster policy.
MW_GLOBAL_BATCH = 256
MW_STEPS = 40
MW_TIMEOUT_S = 900


def _digits():
  from sklearn.datasets import load_digits
  digits = load_digits()
  order = np.random.default_rng(0).permutation(len(digits.target))
  x = (digits.data[order] / 16.0).astype(np.float32)
  y = digits.target[order].astype(np.int64)
  return (x[:1400], y[:1400]), (x[1400:], y[1400:])


def _dataset(x, y, batch):
  import tensorflow as tf
  return tf.data.Dataset.from_tensor_slices(
      ({'image_xf': x}, y)).shuffle(len(y), seed=0).repeat().batch(
          batch, drop_remainder=True).prefetch(2)


def _train_steps(model, iterator, steps):
  start = time.perf_counter()
  logs = None
  for _ in range(steps):
    logs = model.train_function(iterator)
  float(logs['loss'])
  return time.perf_counter() - start


def precision_rows():
  import tensorflow as tf
  import tf_keras
  from leantfx.models import architectures
  from leantfx.models.training import precision
  (x, y), (tx, ty) = _digits()
  rows, notes = [], []
  devices = precision.detect_devices()
  # The first training step of a process pays TensorFlow's one-time set-up
  # (~18 s here); in the Trainer the real training would pay it anyway, so
  # it is taken out of the probe's figure by one throwaway step first.
  warm = architectures.build_compiled(
      DIGITS, config_lib.TrainingConfig(architecture='mlp',
                                        hidden_units=(8,)), {})
  warm.fit(_dataset(x, y, 8), steps_per_epoch=1, verbose=0)
  for name, changes, batch, steps, total_steps in MODELS:
    training = config_lib.TrainingConfig(batch_size=batch, seed=1, **changes)

    def build():
      tf_keras.utils.set_random_seed(1)
      return architectures.build_compiled(DIGITS, training, {})

    ds = _dataset(x, y, batch)
    with tempfile.TemporaryDirectory() as cache:
      started = time.perf_counter()
      decision = precision.resolve(
          'auto', build, lambda: ds.take(4).cache().repeat(), batch,
          'default x1', cache_path=os.path.join(cache, 'probe.json'),
          devices=devices)
      probe_seconds = time.perf_counter() - started
    models, iterators = {}, {}
    for label, policy in (('float32', 'float32'),
                          ('mixed_bfloat16', 'mixed_bfloat16'),
                          ('auto', decision.policy)):
      with precision.policy_scope(policy):
        models[label] = build()
      models[label].make_train_function()
      iterators[label] = iter(ds)
      # A whole untimed round first: the first steps after tracing run
      # slower (allocator, thread pools) and would bias round one.
      _train_steps(models[label], iterators[label], steps)
    throughput = {label: [] for label in models}
    order = list(models)
    for r in range(ROUNDS):
      for label in (order if r % 2 == 0 else order[::-1]):
        seconds = _train_steps(models[label], iterators[label], steps)
        throughput[label].append(steps * batch / seconds)
    median = {k: statistics.median(v) for k, v in throughput.items()}
    best = {k: max(v) for k, v in throughput.items()}
    faster = max(median['float32'], median['mixed_bfloat16'])
    best_faster = max(best['float32'], best['mixed_bfloat16'])
    for label, model in models.items():
      _train_steps(model, iterators[label],
                   max(0, total_steps - (ROUNDS + 1) * steps))
      accuracy = float(
          (model.predict({'image_xf': tx}, batch_size=256, verbose=0).argmax(1)
           == ty).mean())
      rows.append({
          'model': name,
          'precision': label if label != 'auto' else
                       f'auto -> {decision.policy}',
          'examples_per_s': round(median[label], 1),
          'best_round': round(best[label], 1),
          'vs_float32': round(median[label] / median['float32'], 3),
          'vs_faster': round(median[label] / faster, 3),
          'best_vs_faster': round(best[label] / best_faster, 3),
          'accuracy': round(accuracy, 4),
          'steps': total_steps,
          'probe_s': round(probe_seconds, 1) if label == 'auto' else '',
      })
    verdicts = []
    for kind, ratio in (('median', median['auto'] / faster),
                        ('best round', best['auto'] / best_faster)):
      verdicts.append(f'{kind} {ratio:.3f} '
                      f'({"meets" if ratio >= AUTO_MIN_RATIO else "MISSES"} '
                      f'the {AUTO_MIN_RATIO}x bar)')
    rounds_text = json.dumps(
        {k: [round(v) for v in vs] for k, vs in throughput.items()})
    notes.append(
        f'{name}: auto chose {decision.policy} ({decision.reason}); auto / '
        f'faster policy: {", ".join(verdicts)}; rounds {rounds_text}')
    del models, iterators
    tf_keras.backend.clear_session()
  return rows, notes


def recompute_rows():
  import tensorflow as tf
  import tf_keras
  from leantfx.models import architectures
  from leantfx.models.training import recompute
  spec = config_lib.DatasetSpec(
      name='deep', label='y', classes=('a', 'b', 'c'),
      numeric_features=tuple(f'f{i}' for i in range(8)))
  rng = np.random.default_rng(0)
  batch = 4096
  x = {f'f{i}_xf': tf.constant(rng.normal(size=(batch, 1)), tf.float32)
       for i in range(8)}
  y = tf.constant(rng.integers(0, 3, batch))
  rows, peaks, times = [], {}, {}
  for on in (False, True):
    training = config_lib.TrainingConfig(hidden_units=(256,) * 8,
                                         depth_multiplier=8.0, recompute=on,
                                         dropout=0.0)
    tf_keras.utils.set_random_seed(1)
    model = architectures.build_compiled(spec, training, {})
    loss_fn = tf_keras.losses.SparseCategoricalCrossentropy()

    @tf.function
    def step(x, y, model=model, loss_fn=loss_fn):
      with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
      return tape.gradient(loss, model.trainable_variables)

    step(x, y)
    tf.config.experimental.reset_memory_stats('CPU:0')
    base = tf.config.experimental.get_memory_info('CPU:0')['current']
    step(x, y)
    peaks[on] = tf.config.experimental.get_memory_info('CPU:0')['peak'] - base
    runs = []
    for _ in range(3):
      started = time.perf_counter()
      step(x, y)
      runs.append(time.perf_counter() - started)
    times[on] = statistics.median(runs)
    rows.append({
        'model': 'deep MLP 64x256, batch 4096',
        'recompute': on,
        'blocks': architectures.count_layers(model, recompute.RecomputeBlock),
        'peak_MB': round(peaks[on] / 1e6, 1),
        'step_s': round(times[on], 3),
    })
  notes = [f'peak memory ratio (without / with recompute): '
           f'{peaks[False] / peaks[True]:.2f}x; step time ratio (with / '
           f'without): {times[True] / times[False]:.2f}x']
  return rows, notes


def worker(args) -> int:
  """One process of the multi-worker figure (strategy first, then TF)."""
  from leantfx.models import architectures
  from leantfx.models.training import plan as plan_lib
  import tf_keras
  training = config_lib.TrainingConfig(
      strategy=args.strategy, global_batch_size=MW_GLOBAL_BATCH,
      hidden_units=(1024, 1024), dropout=0.0, architecture='mlp', seed=1)
  plan = plan_lib.prepare(training)
  tf_keras.utils.set_random_seed(1)
  with plan.strategy.scope():
    model = architectures.build_compiled(DIGITS, training, {})
  (x, y), _ = _digits()
  ds = plan.input(_dataset(x, y, plan.batches.dataset_batch))
  model.fit(ds, epochs=1, steps_per_epoch=3, verbose=0)  # Warm-up.
  started = time.perf_counter()
  model.fit(ds, epochs=1, steps_per_epoch=MW_STEPS, verbose=0)
  seconds = time.perf_counter() - started
  with open(args.out, 'w') as f:
    json.dump({'examples_per_s': MW_STEPS * MW_GLOBAL_BATCH / seconds,
               'replicas': plan.strategy.num_replicas_in_sync}, f)
  return 0


def multi_worker_rows():
  from leantfx.models.training import local_cluster
  here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  results = {}
  with tempfile.TemporaryDirectory() as tmp:
    worker_command = [sys.executable, '-m', 'benchmarks.bench_training',
                      '--worker', '--out']
    env = dict(os.environ)
    env.pop('TF_CONFIG', None)
    single = subprocess.run(
        worker_command + [os.path.join(tmp, 'one.json'), '--strategy',
                          'auto'], cwd=here, env=env, timeout=MW_TIMEOUT_S,
        capture_output=True, text=True, check=False)
    if single.returncode:
      raise RuntimeError(single.stderr[-2000:])
    cluster = local_cluster.run(
        worker_command + [os.path.join(tmp, 'w{index}.json'), '--strategy',
                          'multi_worker'],
        workers=2, timeout=MW_TIMEOUT_S, log_dir=tmp, env=env, cwd=here)
    if not cluster.ok:
      raise RuntimeError(open(os.path.join(tmp, 'worker0.log')).read()[-2000:])
    for tag in ('one', 'w0'):
      with open(os.path.join(tmp, tag + '.json')) as f:
        results[tag] = json.load(f)
  one, two = results['one']['examples_per_s'], results['w0']['examples_per_s']
  rows = [
      {'workers': 1, 'examples_per_s': round(one, 1), 'scaling': 1.0},
      {'workers': 2, 'examples_per_s': round(two, 1),
       'scaling': round(two / one, 3)},
  ]
  network = ('a private loopback-only network namespace'
             if cluster.private_network else "the host's loopback")
  notes = [f'MLP 2x1024 on digits, global batch {MW_GLOBAL_BATCH}, '
           f'{MW_STEPS} timed steps after 3 warm-up steps; the 2 workers run '
           f'on {network} on this machine\'s {os.cpu_count()} cores, so they '
           'share the CPUs one worker already uses: the figure measures the '
           'strategy\'s overhead here (collectives over gRPC, two processes '
           'contending), not the speed-up of workers on separate machines.']
  return rows, notes


def main(argv=None) -> int:
  parser = argparse.ArgumentParser()
  parser.add_argument('--worker', action='store_true')
  parser.add_argument('--strategy', default='auto')
  parser.add_argument('--out')
  parser.add_argument('--only', choices=('precision', 'recompute',
                                         'multi_worker'),
                      help='measure one figure (default: all three)')
  args = parser.parse_args(argv)
  if args.worker:
    return worker(args)
  if args.only in (None, 'precision'):
    from leantfx.models.training import precision
    devices = precision.detect_devices()
    rows, notes = precision_rows()
    harness.report(
        'training_precision',
        'Training throughput on this CPU: float32 vs mixed_bfloat16 vs auto',
        rows, [f'CPU: {devices.cpu_model}, bf16 flags '
               f'{list(devices.cpu_bf16_flags)}, {os.cpu_count()} cores; '
               f'{ROUNDS} interleaved rounds after an untimed one; '
               'examples_per_s is the median round, best_round the fastest; '
               'vs_faster compares with the faster of float32 and '
               'mixed_bfloat16; probe_s is auto\'s probe (once per model '
               'shape and machine, then cached). Accuracy: the 397 test '
               'digits after the same steps; MobileNetV2\'s stays near '
               'chance because its BatchNormalization moving averages '
               '(momentum 0.999) barely move in 200 steps, for every policy '
               'alike; auto and its policy differ only by dropout masks.'
              ] + notes)
  if args.only in (None, 'recompute'):
    rows, notes = recompute_rows()
    harness.report(
        'training_recompute',
        'Activation checkpointing: peak memory of one training step', rows,
        notes)
  if args.only in (None, 'multi_worker'):
    rows, notes = multi_worker_rows()
    harness.report('training_multi_worker',
                   'Multi-worker (MultiWorkerMirroredStrategy) vs one worker',
                   rows, notes)
  return 0


if __name__ == '__main__':
  sys.exit(main())
