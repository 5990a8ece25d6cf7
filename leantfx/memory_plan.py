"""``leantfx memory-plan``: per-device training memory under data parallelism and ZeRO.

The accounting is ZeRO's (Rajbhandari et al. 2020, "ZeRO: Memory
Optimizations Toward Training Trillion Parameter Models", section 3.1 and
Figure 1). A model of Psi parameters trained with mixed precision and Adam
holds fp16 parameters (2 Psi bytes), fp16 gradients (2 Psi) and K Psi bytes
of optimizer state, K = 12 (fp32 master parameters, momentum and variance).
Over N_d data-parallel devices:

  stage 0  plain data parallel   (2 + 2 + K) Psi
  stage 1  optimizer states      2 Psi + 2 Psi + K Psi / N_d
  stage 2  + gradients           2 Psi + (2 + K) Psi / N_d
  stage 3  + parameters          (2 + 2 + K) Psi / N_d

The paper's worked example, Psi = 7.5B, N_d = 64, K = 12, gives 120 GB,
31.4 GB, 16.6 GB and 1.9 GB per device, with GB = 10^9 bytes (16 x 7.5e9
bytes = 120e9 bytes exactly); this module uses the same convention.

float32 training keeps 4-byte parameters and gradients and no master copy
(Adam: K = 8). Activations are not partitioned by ZeRO-DP: they are printed
per device as given (--activations-gb) or estimated from a model's layer
outputs for a per-device batch (--model with --batch-size).
"""
import dataclasses
import os
import re
from typing import List, Optional, Sequence, Tuple

from leantfx import decision_forests
from leantfx.errors import ConfigError

GB = 10**9  # The paper's (and this planner's) GB.
PRECISIONS = ('float32', 'mixed_float16', 'mixed_bfloat16')
OPTIMIZERS = ('adam', 'momentum', 'sgd')
STAGES = (0, 1, 2, 3)
STAGE_NAMES = {
    0: 'data parallel (baseline)',
    1: 'ZeRO-1 (P_os: optimizer states)',
    2: 'ZeRO-2 (P_os+g: + gradients)',
    3: 'ZeRO-3 (P_os+g+p: + parameters)',
}
# Optimizer-state bytes per parameter (K). Mixed precision keeps an fp32
# master copy of the parameters (4 bytes) besides the optimizer's own state.
_OPTIMIZER_STATE_BYTES = {
    # (mixed precision, float32)
    'adam': (12, 8),  # master 4 + momentum 4 + variance 4 / momentum + var.
    'momentum': (8, 4),  # master 4 + momentum 4 / momentum.
    'sgd': (4, 0),  # master 4 / nothing.
}
_SUFFIXES = {'': 1, 'K': 10**3, 'M': 10**6, 'B': 10**9, 'G': 10**9,
             'T': 10**12}


@dataclasses.dataclass(frozen=True)
class BytesPerParameter:
  """Bytes each parameter costs in each kind of model state."""
  parameters: int
  gradients: int
  optimizer: int  # K in the paper.


@dataclasses.dataclass(frozen=True)
class StagePlan:
  """Per-device bytes of one data-parallel / ZeRO stage."""
  stage: int
  parameters: float
  gradients: float
  optimizer: float
  activations: float

  @property
  def total(self) -> float:
    return self.parameters + self.gradients + self.optimizer + self.activations


def bytes_per_parameter(precision: str, optimizer: str) -> BytesPerParameter:
  """The ZeRO paper's per-parameter bytes for a precision and optimizer.

  Raises:
    ConfigError: for an unknown precision or optimizer.
  """
  if precision not in PRECISIONS:
    raise ConfigError(f'Unknown precision {precision!r}; use one of '
                      f'{PRECISIONS}.')
  if optimizer not in OPTIMIZERS:
    raise ConfigError(f'Unknown optimizer {optimizer!r}; use one of '
                      f'{OPTIMIZERS}.')
  mixed = precision != 'float32'
  state = _OPTIMIZER_STATE_BYTES[optimizer][0 if mixed else 1]
  width = 2 if mixed else 4
  return BytesPerParameter(parameters=width, gradients=width, optimizer=state)


def plan(num_parameters: int, devices: int, precision: str = 'mixed_float16',
         optimizer: str = 'adam', activations_bytes: float = 0.0,
         stages: Sequence[int] = STAGES) -> List[StagePlan]:
  """Per-device memory for each stage.

  Args:
    num_parameters: Psi, the trainable parameters.
    devices: N_d, data-parallel devices.
    precision: one of PRECISIONS.
    optimizer: one of OPTIMIZERS.
    activations_bytes: activation memory per device (not partitioned).
    stages: which of 0..3 to plan.

  Returns:
    One StagePlan per stage, in bytes.

  Raises:
    ConfigError: for non-positive sizes or unknown names.
  """
  if num_parameters < 1:
    raise ConfigError(f'The number of parameters must be >= 1, got '
                      f'{num_parameters}.')
  if devices < 1:
    raise ConfigError(f'--devices must be >= 1, got {devices}.')
  if activations_bytes < 0:
    raise ConfigError('Activation memory must be >= 0.')
  unknown = [s for s in stages if s not in STAGES]
  if unknown:
    raise ConfigError(f'Unknown ZeRO stage(s) {unknown}; use 0, 1, 2 or 3.')
  per = bytes_per_parameter(precision, optimizer)
  psi, n = float(num_parameters), float(devices)
  result = []
  for stage in stages:
    result.append(
        StagePlan(
            stage=stage,
            parameters=per.parameters * psi / (n if stage >= 3 else 1),
            gradients=per.gradients * psi / (n if stage >= 2 else 1),
            optimizer=per.optimizer * psi / (n if stage >= 1 else 1),
            activations=activations_bytes))
  return result


def parse_count(text: str) -> int:
  """'7.5B', '125M', '7.5e9', '1,000' -> an integer count.

  Raises:
    ConfigError: when it is not a positive count.
  """
  cleaned = text.strip().replace(',', '').replace('_', '')
  match = re.fullmatch(r'([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBgGtT]?)',
                       cleaned)
  if not match:
    raise ConfigError(
        f'--params {text!r} is not a parameter count: use a number such as '
        '7500000000, 7.5e9 or 7.5B (K, M, B/G, T suffixes).')
  value = float(match.group(1)) * _SUFFIXES[match.group(2).upper()]
  if value < 1:
    raise ConfigError(f'--params must be >= 1, got {text!r}.')
  return int(round(value))


def _is_keras_savedmodel(path: str) -> bool:
  return os.path.isfile(os.path.join(path, 'keras_metadata.pb'))


def model_facts(path: str, batch_size: Optional[int] = None,
                precision: str = 'float32') -> Tuple[int, Optional[float]]:
  """Trainable parameters of a saved model, and its activation estimate.

  Args:
    path: a Keras model (SavedModel with keras_metadata.pb, .keras or .h5), a
      plain SavedModel, or a Trainer model artifact (its Format-Keras or
      Format-Serving folder is used).
    batch_size: per-device batch for the activation estimate (Keras models
      only; None: no estimate).
    precision: activation element width (2 bytes for mixed, else 4).

  Returns:
    (trainable parameters, activation bytes per device or None).

  Raises:
    ConfigError: when nothing readable is there.
  """
  if not os.path.exists(path):
    raise ConfigError(f'--model {path} does not exist: give a SavedModel '
                      'folder, a .keras/.h5 file or a Trainer model artifact.')
  for sub in ('Format-Keras', 'Format-Serving'):
    if os.path.isdir(os.path.join(path, sub)):
      path = os.path.join(path, sub)
      break
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  try:
    if os.path.isfile(path) or _is_keras_savedmodel(path):
      model = tf_keras.models.load_model(path, compile=False)
      params = int(sum(int(tf.size(w)) for w in model.trainable_weights))
      activations = None
      if batch_size:
        width = 2 if precision != 'float32' else 4
        elements = 0
        for layer in _all_layers(model):
          for shape in _output_shapes(layer):
            elements += _product(d for d in shape[1:] if d is not None)
        activations = float(elements * batch_size * width)
      return params, activations
    decision_forests.ensure_ops(path)
    loaded = tf.saved_model.load(path)
    variables = getattr(loaded, 'trainable_variables', None) or getattr(
        loaded, 'variables', [])
    params = int(sum(int(tf.size(v)) for v in variables))
  except (OSError, ValueError, tf.errors.OpError) as e:
    raise ConfigError(f'--model {path} could not be read as a Keras model or '
                      f'SavedModel: {type(e).__name__}: '
                      f'{str(e).strip()[:300]}') from None
  if params < 1:
    raise ConfigError(f'--model {path} has no trainable variables to plan.')
  return params, None


def _all_layers(model) -> list:
  layers = []
  for layer in model.layers:
    if hasattr(layer, 'layers') and layer.layers:
      layers.extend(_all_layers(layer))
    else:
      layers.append(layer)
  return layers


def _output_shapes(layer) -> List[tuple]:
  try:
    shape = layer.output_shape
  except (AttributeError, RuntimeError):
    return []
  if isinstance(shape, list):
    return [tuple(s) for s in shape if s is not None]
  if isinstance(shape, dict):
    return [tuple(s) for s in shape.values()]
  return [tuple(shape)] if shape is not None else []


def _product(values) -> int:
  result = 1
  for v in values:
    result *= int(v)
  return result


def format_plan(plans: Sequence[StagePlan], num_parameters: int, devices: int,
                precision: str, optimizer: str) -> str:
  """The printed table; GB = 10^9 bytes, one decimal like the paper."""
  per = bytes_per_parameter(precision, optimizer)
  lines = [
      f'Per-device training memory: {num_parameters:,} parameters (Psi), '
      f'{devices} data-parallel device(s) (N_d), {precision}, {optimizer} '
      f'(K = {per.optimizer}).',
      f'Bytes per parameter: parameters {per.parameters}, gradients '
      f'{per.gradients}, optimizer state {per.optimizer}.',
      '',
  ]
  header = ('stage', 'parameters', 'gradients', 'optimizer', 'activations',
            'total per device')
  rows = [header]
  for p in plans:
    rows.append((f'{p.stage} {STAGE_NAMES[p.stage]}',
                 _gb(p.parameters), _gb(p.gradients), _gb(p.optimizer),
                 _gb(p.activations), _gb_total(p.total)))
  widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
  for i, row in enumerate(rows):
    lines.append('  '.join(
        c.ljust(w) if j == 0 else c.rjust(w)
        for j, (c, w) in enumerate(zip(row, widths))))
    if i == 0:
      lines.append('  '.join('-' * w for w in widths))
  lines += [
      '',
      'GB = 10^9 bytes (the convention of Rajbhandari et al. 2020, Figure 1).'
      ' Activations are per device and not partitioned by ZeRO-DP; add '
      'framework buffers and fragmentation on top.'
  ]
  return '\n'.join(lines)


def _gb(value: float) -> str:
  """Three significant digits: 15.0 GB, 1.41 GB, 0.234 GB."""
  if value == 0:
    return '0 GB'
  text = f'{value / GB:#.3g}'.rstrip('.')
  return f'{text} GB'


def _gb_total(value: float) -> str:
  """Totals to one decimal, as the paper prints them (31.4 GB, 1.9 GB)."""
  if 0 < value < 0.05 * GB:
    return _gb(value)
  return f'{value / GB:.1f} GB'
