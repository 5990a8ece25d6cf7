"""Mixed precision: float32, mixed_float16, mixed_bfloat16, and 'auto'.

'auto' picks, in order:
  * mixed_float16 when a GPU of compute capability >= 7.0 (tensor cores) is
    visible;
  * mixed_bfloat16 on a TPU;
  * on a CPU with bfloat16 units (AVX512_BF16 or AMX), whichever of float32
    and mixed_bfloat16 trains the actual model faster in a short probe: bf16
    units do not guarantee a gain on CPUs (MobileNetV2 ran at 0.65x-1.1x of
    float32's speed on this project's machine), so 'auto' must never be
    slower than float32. The decision is cached per model shape and machine;
  * float32 otherwise.

The output layer always computes in float32 (models build it with
dtype='float32'); mixed_float16 trains through a loss-scale optimizer.
mixed_float16 asked for on a machine without a GPU is refused: float16 has
no fast path on CPUs and its loss scaling only pays off on GPU tensor cores.
"""
import contextlib
import dataclasses
import datetime
import hashlib
import json
import math
import os
import platform
import statistics
import tempfile
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from absl import logging
import tensorflow as tf
import tf_keras

from leantfx.errors import ConfigError

FLOAT32 = 'float32'
MIXED_FLOAT16 = 'mixed_float16'
MIXED_BFLOAT16 = 'mixed_bfloat16'
AUTO = 'auto'
POLICIES = (FLOAT32, MIXED_FLOAT16, MIXED_BFLOAT16)
# Tensor cores (Volta and newer) are what make float16 fast; TF's own mixed
# precision guide names compute capability 7.0 as the threshold.
MIN_FLOAT16_COMPUTE_CAPABILITY = (7, 0)
# /proc/cpuinfo flags of CPU bfloat16 units (x86: AVX512_BF16, AMX).
CPU_BF16_FLAGS = ('avx512_bf16', 'amx_bf16')
# bf16 is kept only when it beats float32 by this much in the probe: below it
# the difference is within the probe's run-to-run noise on a shared machine,
# and float32 is the safe side of "never slower than float32".
PROBE_MARGIN = 0.05
# Each timed probe run lasts about this long (steps are calibrated to it),
# between PROBE_MIN_STEPS and PROBE_MAX_STEPS steps.
PROBE_TARGET_SECONDS = 0.5
PROBE_MIN_STEPS = 2
PROBE_MAX_STEPS = 50
# Rounds alternate the order (A B, B A, A B, ...) so drift hits both
# policies; each policy's figure is its best round: other processes' load
# only ever slows a round down, so the fastest round is the least disturbed
# estimate (the usual best-of-N rule of micro-benchmarks).
PROBE_ROUNDS = 5
# Bumped when the decision rule changes, so older decisions are re-probed.
CACHE_VERSION = 2


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
  """What the trainer can compute on.

  Attributes:
    gpus: (device name, compute capability or None) per visible GPU.
    tpus: number of TPU devices.
    cpu_bf16_flags: the CPU's bfloat16 flags from CPU_BF16_FLAGS it has.
    cpu_model: the CPU model name (part of the probe cache key).
  """
  gpus: Tuple[Tuple[str, Optional[Tuple[int, int]]], ...] = ()
  tpus: int = 0
  cpu_bf16_flags: Tuple[str, ...] = ()
  cpu_model: str = ''


@dataclasses.dataclass
class Decision:
  """The policy a run trains with, and why.

  Attributes:
    requested: the configured precision ('auto' or a policy).
    policy: the policy used.
    reason: one sentence on why.
    probe: the probe's figures (examples/s per policy, steps, rounds) when a
      probe decided, from this run or from the cache.
    cached: True when the decision came from the probe cache.
    cache_key: the key it is cached under.
  """
  requested: str
  policy: str
  reason: str
  probe: Optional[Dict[str, Any]] = None
  cached: bool = False
  cache_key: Optional[str] = None

  def to_json(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)


def _cpu_info() -> Tuple[str, Tuple[str, ...]]:
  model, flags = '', set()
  try:
    with open('/proc/cpuinfo', encoding='utf-8') as f:
      for line in f:
        key, _, value = line.partition(':')
        key = key.strip()
        if key == 'model name':
          model = model or value.strip()
        elif key in ('flags', 'Features'):
          flags.update(value.split())
  except OSError:
    pass  # Not Linux: no bf16 flags known, so 'auto' stays float32 there.
  return (model or platform.processor(),
          tuple(f for f in CPU_BF16_FLAGS if f in flags))


def detect_devices() -> DeviceInfo:
  """Returns the GPUs (with compute capability), TPUs and CPU bf16 units."""
  gpus = []
  for gpu in tf.config.list_physical_devices('GPU'):
    details = tf.config.experimental.get_device_details(gpu)
    gpus.append((gpu.name, details.get('compute_capability')))
  tpus = len(tf.config.list_logical_devices('TPU'))
  model, flags = _cpu_info()
  return DeviceInfo(gpus=tuple(gpus), tpus=tpus, cpu_bf16_flags=flags,
                    cpu_model=model)


def check_supported(precision: str,
                    devices: Optional[DeviceInfo] = None) -> None:
  """Refuses a precision this machine cannot train with usefully.

  Args:
    precision: 'auto' or a policy name.
    devices: the machine (detected when None).

  Raises:
    ConfigError: for an unknown precision, or mixed_float16 without a GPU.
  """
  if precision != AUTO and precision not in POLICIES:
    raise ConfigError(f'Unknown precision {precision!r}; use one of '
                      f'{(AUTO,) + POLICIES}.')
  if precision != MIXED_FLOAT16:
    return
  devices = devices or detect_devices()
  if not devices.gpus:
    bf16 = (' This CPU has bfloat16 units '
            f'({", ".join(devices.cpu_bf16_flags)}): mixed_bfloat16 is the '
            'CPU mixed precision.' if devices.cpu_bf16_flags else '')
    raise ConfigError(
        'precision mixed_float16 needs a GPU, and this machine has none '
        f'(CPU {devices.cpu_model or "unknown"}). float16 has no fast path '
        'on CPUs, and its loss scaling only pays off on GPU tensor cores, so '
        'training would be slower than float32 for nothing.' + bf16 +
        ' Use --precision auto (it probes and keeps the faster of float32 '
        'and mixed_bfloat16), float32 or mixed_bfloat16.')


def _decide_without_probe(requested: str,
                          devices: DeviceInfo) -> Optional[Decision]:
  """The decision when no probe is needed; None when 'auto' must probe."""
  if requested != AUTO:
    if requested == MIXED_BFLOAT16 and not devices.gpus and not (
        devices.tpus or devices.cpu_bf16_flags):
      logging.warning(
          'precision mixed_bfloat16 on a CPU without bfloat16 units '
          '(avx512_bf16/amx_bf16): TensorFlow emulates bf16 there, expect '
          'float32 speed or worse.')
    return Decision(requested, requested, 'configured explicitly')
  good_gpus = [
      name for name, cc in devices.gpus
      if cc is not None and tuple(cc) >= MIN_FLOAT16_COMPUTE_CAPABILITY
  ]
  if good_gpus:
    return Decision(
        AUTO, MIXED_FLOAT16,
        f'GPU(s) {good_gpus} have compute capability >= '
        f'{MIN_FLOAT16_COMPUTE_CAPABILITY[0]}.{MIN_FLOAT16_COMPUTE_CAPABILITY[1]}'
        ' (tensor cores)')
  if devices.gpus:
    return Decision(
        AUTO, FLOAT32,
        f'GPU(s) {[n for n, _ in devices.gpus]} are older than compute '
        'capability 7.0: float16 would not use tensor cores')
  if devices.tpus:
    return Decision(AUTO, MIXED_BFLOAT16, 'TPUs compute natively in bfloat16')
  if not devices.cpu_bf16_flags:
    return Decision(
        AUTO, FLOAT32,
        'CPU without bfloat16 units (no avx512_bf16/amx_bf16): bf16 would be '
        'emulated')
  return None


@contextlib.contextmanager
def policy_scope(policy: str) -> Iterator[None]:
  """Sets the global tf_keras dtype policy for models built inside."""
  previous = tf_keras.mixed_precision.global_policy()
  tf_keras.mixed_precision.set_global_policy(policy)
  try:
    yield
  finally:
    tf_keras.mixed_precision.set_global_policy(previous)


def wrap_optimizer(optimizer: tf_keras.optimizers.Optimizer,
                   policy: str) -> tf_keras.optimizers.Optimizer:
  """Wraps the optimizer in a dynamic loss-scale optimizer for float16.

  float16's 5 exponent bits underflow small gradients to zero; scaling the
  loss up (and the gradients back down) keeps them. bfloat16 has float32's
  exponent range and needs no scaling.
  """
  if policy == MIXED_FLOAT16 and not isinstance(
      optimizer, tf_keras.mixed_precision.LossScaleOptimizer):
    return tf_keras.mixed_precision.LossScaleOptimizer(optimizer)
  return optimizer


def default_cache_path() -> str:
  """~/.cache/leantfx/precision_probe.json (XDG_CACHE_HOME respected)."""
  base = os.environ.get('XDG_CACHE_HOME') or os.path.join(
      os.path.expanduser('~'), '.cache')
  return os.path.join(base, 'leantfx', 'precision_probe.json')


def model_signature(model: tf_keras.Model) -> List[Any]:
  """The model's shape: layer types, output shapes and parameter count."""
  layers = []
  for layer in model.layers:
    shape = getattr(layer, 'output_shape', None)
    layers.append([type(layer).__name__, str(shape)])
  return [layers, int(model.count_params())]


def cache_key(model: tf_keras.Model, examples_per_step: int,
              strategy_description: str, devices: DeviceInfo) -> str:
  """A key for one model shape, batch and strategy on one machine."""
  parts = {
      'version': CACHE_VERSION,
      'model': model_signature(model),
      'examples_per_step': examples_per_step,
      'strategy': strategy_description,
      'cpu_model': devices.cpu_model,
      'cpu_bf16_flags': list(devices.cpu_bf16_flags),
      'cpus': os.cpu_count(),
      'tensorflow': tf.__version__,
  }
  blob = json.dumps(parts, sort_keys=True).encode('utf-8')
  return hashlib.sha256(blob).hexdigest()[:24]


def _read_cache(path: str) -> Dict[str, Any]:
  try:
    with open(path, encoding='utf-8') as f:
      data = json.load(f)
    return data if isinstance(data, dict) else {}
  except (OSError, ValueError):
    return {}  # No cache yet, or an unreadable one: probe again.


def _write_cache(path: str, key: str, entry: Dict[str, Any]) -> None:
  try:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    data = _read_cache(path)
    data[key] = entry
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)),
                               prefix='.precision-', suffix='.json')
    with os.fdopen(fd, 'w', encoding='utf-8') as f:
      json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
  except OSError as e:
    # The cache only saves time; a read-only home must not fail training.
    logging.warning('Could not write the precision probe cache %s: %s', path,
                    e)


def _train_steps(model: tf_keras.Model, iterator, steps: int) -> float:
  """Runs `steps` training steps; returns the seconds they took."""
  start = time.perf_counter()
  logs = None
  for _ in range(steps):
    logs = model.train_function(iterator)
  # Reading a value waits for the queued steps to finish.
  float(tf.nest.flatten(logs)[0])
  return time.perf_counter() - start


def probe(build_fns: Dict[str, Callable[[], tf_keras.Model]],
          dataset: tf.data.Dataset, examples_per_step: int,
          rounds: int = PROBE_ROUNDS,
          target_seconds: float = PROBE_TARGET_SECONDS) -> Dict[str, Any]:
  """Times a few training steps of each policy's model, alternating.

  Args:
    build_fns: policy -> a function building the compiled model in that
      policy (inside the right strategy scope).
    dataset: repeating batches of real training data.
    examples_per_step: global examples per training step.
    rounds: timed rounds per policy (the order alternates every round).
    target_seconds: each timed run's calibrated length.

  Returns:
    {'examples_per_s': {policy: best round}, 'median_examples_per_s':
     {policy: median round}, 'runs': {policy: [...]}, 'steps_per_run': n,
     'rounds': rounds, 'seconds': total probe time}.
  """
  started = time.perf_counter()
  policies = list(build_fns)
  models, iterators = {}, {}
  for policy in policies:
    with policy_scope(policy):
      model = build_fns[policy]()
    model.make_train_function()
    models[policy] = model
    iterators[policy] = iter(
        model.distribute_strategy.experimental_distribute_dataset(dataset))
    _train_steps(model, iterators[policy], 2)  # Tracing and first-step setup.
  one_step = min(
      _train_steps(models[p], iterators[p], 1) for p in policies)
  steps = int(min(PROBE_MAX_STEPS,
                  max(PROBE_MIN_STEPS,
                      math.ceil(target_seconds / max(one_step, 1e-6)))))
  runs: Dict[str, List[float]] = {p: [] for p in policies}
  for r in range(rounds):
    order = policies if r % 2 == 0 else list(reversed(policies))
    for policy in order:
      seconds = _train_steps(models[policy], iterators[policy], steps)
      runs[policy].append(steps * examples_per_step / seconds)
  return {
      'examples_per_s': {p: max(v) for p, v in runs.items()},
      'median_examples_per_s': {
          p: statistics.median(v) for p, v in runs.items()
      },
      'runs': runs,
      'steps_per_run': steps,
      'rounds': rounds,
      'examples_per_step': examples_per_step,
      'seconds': round(time.perf_counter() - started, 3),
  }


def choose_from_probe(figures: Dict[str, Any],
                      margin: float = PROBE_MARGIN) -> Tuple[str, str]:
  """float32 unless mixed_bfloat16 is faster by more than the margin.

  bf16 must win on the best round and on the median round alike: on a
  loaded machine one lucky round can favour either policy, and when the two
  estimates disagree the safe side of "never slower than float32" is
  float32.
  """
  best = figures['examples_per_s']
  median = figures.get('median_examples_per_s', best)
  ratios = {}
  for name, values in (('best', best), ('median', median)):
    f32 = values[FLOAT32]
    ratios[name] = values[MIXED_BFLOAT16] / f32 if f32 > 0 else 0.0
  summary = (f'probe: mixed_bfloat16 {best[MIXED_BFLOAT16]:.0f} ex/s vs '
             f'float32 {best[FLOAT32]:.0f} ex/s on the best round '
             f'({ratios["best"]:.2f}x), {ratios["median"]:.2f}x on the median')
  if min(ratios.values()) >= 1.0 + margin:
    return MIXED_BFLOAT16, f'{summary}: both above the {1 + margin:.2f}x bar'
  return FLOAT32, (f'{summary}: not both above the {1 + margin:.2f}x bar, so '
                   'float32 (auto is never slower than float32)')


def resolve(requested: str,
            build_fn: Callable[[], tf_keras.Model],
            dataset_fn: Callable[[], tf.data.Dataset],
            examples_per_step: int,
            strategy_description: str,
            cache_path: Optional[str] = None,
            devices: Optional[DeviceInfo] = None,
            can_probe: bool = True) -> Decision:
  """Decides the policy a run trains with (see the module docstring).

  Args:
    requested: 'auto' or a policy name.
    build_fn: builds the compiled model under the current global policy
      (and the strategy scope); called once per probed policy.
    dataset_fn: returns repeating batches of real training data.
    examples_per_step: global examples per training step.
    strategy_description: e.g. 'mirrored x2'; part of the cache key.
    cache_path: the probe cache file (default_cache_path() when None).
    devices: the machine (detected when None).
    can_probe: False where workers could not agree on a probe's outcome
      (multi-worker): 'auto' then keeps float32 on CPUs.

  Returns:
    The Decision; it has been logged.

  Raises:
    ConfigError: for mixed_float16 without a GPU, or an unknown precision.
  """
  devices = devices or detect_devices()
  check_supported(requested, devices)
  decision = _decide_without_probe(requested, devices)
  if decision is None and not can_probe:
    decision = Decision(
        AUTO, FLOAT32,
        'CPU with bf16 units, but multi-worker training cannot probe (each '
        'worker would time its own run and they could disagree); set the '
        'precision explicitly to use mixed_bfloat16')
  if decision is not None:
    logging.info('Precision: %s (%s, requested %s).', decision.policy,
                 decision.reason, requested)
    return decision
  cache_path = cache_path or default_cache_path()
  with policy_scope(FLOAT32):
    reference = build_fn()
  key = cache_key(reference, examples_per_step, strategy_description, devices)
  del reference
  entry = _read_cache(cache_path).get(key)
  if entry and entry.get('policy') in (FLOAT32, MIXED_BFLOAT16):
    decision = Decision(AUTO, entry['policy'],
                        entry.get('reason', '') + f' [cached {key}, decided '
                        f'{entry.get("decided_at", "?")}]',
                        probe=entry.get('probe'), cached=True, cache_key=key)
    logging.info('Precision: %s (%s).', decision.policy, decision.reason)
    return decision
  figures = probe({FLOAT32: build_fn, MIXED_BFLOAT16: build_fn}, dataset_fn(),
                  examples_per_step)
  policy, reason = choose_from_probe(figures)
  _write_cache(cache_path, key, {
      'policy': policy,
      'reason': reason,
      'probe': figures,
      'decided_at': datetime.datetime.now(
          datetime.timezone.utc).isoformat(timespec='seconds'),
  })
  decision = Decision(AUTO, policy, reason, probe=figures, cached=False,
                      cache_key=key)
  logging.info('Precision: %s (%s); probe figures %s, cached in %s as %s.',
               policy, reason, json.dumps(figures), cache_path, key)
  return decision


def layer_dtypes(model: tf_keras.Model) -> Dict[str, Tuple[str, str]]:
  """layer name -> (compute dtype, variable dtype), for checks and logs."""
  return {
      layer.name: (layer.compute_dtype, layer.variable_dtype)
      for layer in model.layers
  }


def output_dtypes(model: tf_keras.Model) -> Sequence[tf.DType]:
  return [t.dtype for t in tf.nest.flatten(model.outputs)]
