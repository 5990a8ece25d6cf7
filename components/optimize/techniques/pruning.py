"""Magnitude pruning: zero out the smallest kernel weights while fine-tuning.

Wraps the prunable layers with ``tfmot.sparsity.keras.prune_low_magnitude``
(a ``PolynomialDecay`` ramp or a ``ConstantSparsity`` target, or NVIDIA-style
2:4 structured sparsity), fine-tunes with the ``UpdatePruningStep`` callback,
strips the wrappers and measures the sparsity it actually reached.

Zeros alone do not shrink a SavedModel or speed up dense kernels; they pay off
once the model is compressed (gzip, TFLite) or run by a sparse-aware runtime
(XNNPACK sparse inference, 2:4 on Ampere GPUs).
"""
import dataclasses
from typing import Any, Dict, Mapping, Optional

import numpy as np
import tensorflow as tf
import tensorflow_model_optimization as tfmot
import tf_keras

from leantfx.components.optimize.techniques import _keras_utils
from leantfx.components.optimize.types import OptimizationResult
from leantfx.errors import ConfigError

TECHNIQUE = 'pruning'
SCHEDULES = ('polynomial', 'constant')
# 2:4 structured sparsity: two zeros in every four consecutive input-channel
# weights (the pattern Ampere sparse tensor cores accelerate).
_M_BY_N = (2, 4)


@dataclasses.dataclass(frozen=True)
class PruningConfig:
  """How to prune.

  Attributes:
    target_sparsity: fraction of each pruned kernel set to zero, in [0, 1).
      Ignored when ``structured_2_4`` is set (2:4 is 50% by construction).
    schedule: 'polynomial' ramps sparsity from 0 to the target between
      ``begin_step`` and ``end_step`` (tfmot PolynomialDecay, cubic);
      'constant' prunes to the target from ``begin_step`` on.
    begin_step: training step of the first mask update.
    end_step: last step at which the polynomial schedule updates the mask;
      None = the whole fine-tuning run (epochs * steps per epoch). Rounded
      down to ``begin_step`` + a multiple of ``frequency`` so the last update
      really happens (tfmot only updates on those steps).
    frequency: update the masks every this many steps.
    structured_2_4: prune to the 2:4 pattern instead of by magnitude rank.
      Needs each pruned kernel's input-channel count divisible by 4.
    epochs: fine-tuning passes over the training data (the tfmot pruning
      guide fine-tunes for 2).
    learning_rate: Adam learning rate for fine-tuning; Adam's default 1e-3
      as in the tfmot pruning guide (on the digits CNN, 80% sparsity after 2
      epochs kept 0.92 accuracy at 1e-3 but 0.90 at 3e-4).
    skip_unsupported_layers: leave layers tfmot cannot prune unwrapped (and
      list them in the details) instead of raising ConfigError.
    max_steps: at most this many fine-tuning steps (shorter epochs when
      the passes would take more); None: the epochs decide. The
      ModelOptimizer sets it from the Trainer's steps
      (config.tie_to_trainer).
  """
  target_sparsity: float = 0.8
  schedule: str = 'polynomial'
  begin_step: int = 0
  end_step: Optional[int] = None
  frequency: int = 100
  structured_2_4: bool = False
  epochs: int = 2
  learning_rate: float = 1e-3
  skip_unsupported_layers: bool = False
  max_steps: Optional[int] = None

  def __post_init__(self):
    _keras_utils.check_float(
        self, 'target_sparsity', 0.0, 1.0, high_inclusive=False)
    if self.schedule not in SCHEDULES:
      raise _keras_utils.config_error(self, 'schedule', self.schedule,
                                      f'it must be one of {list(SCHEDULES)}')
    _keras_utils.check_int(self, 'begin_step', 0)
    if self.end_step is not None:
      _keras_utils.check_int(self, 'end_step', 1)
      if self.end_step < self.begin_step + self.frequency:
        raise _keras_utils.config_error(
            self, 'end_step', self.end_step,
            f'it must be at least begin_step + frequency = '
            f'{self.begin_step + self.frequency} so at least one mask update '
            'happens; use None to prune over the whole fine-tuning run')
    _keras_utils.check_int(self, 'frequency', 1)
    _keras_utils.check_bool(self, 'structured_2_4')
    _keras_utils.check_int(self, 'epochs', 1)
    _keras_utils.check_learning_rate(self)
    _keras_utils.check_bool(self, 'skip_unsupported_layers')
    _keras_utils.check_max_steps(self)

  def to_dict(self) -> Dict[str, Any]:
    """Returns the fields as a JSON-serialisable dict."""
    return _keras_utils.config_to_dict(self)

  @classmethod
  def from_dict(cls, data: Mapping[str, Any]) -> 'PruningConfig':
    """Builds a config from ``to_dict`` output (unknown keys are an error)."""
    return _keras_utils.config_from_dict(cls, data)


def _is_prunable(layer: tf_keras.layers.Layer) -> bool:
  """Whether tfmot's pruning wrapper accepts ``layer``."""
  try:
    tfmot.sparsity.keras.prune_low_magnitude(layer)
  except ValueError:
    return False
  return True


def _supports_2_4(layer: tf_keras.layers.Layer) -> bool:
  """Whether every kernel of ``layer`` can hold the 2:4 pattern.

  tfmot groups a kernel's weights in fours along the input channels (axis 0
  of a Dense kernel, axis 2 of a Conv kernel) and silently pads the last
  group, so a channel count that is not a multiple of 4 yields no valid 2:4.
  """
  for kernel in _keras_utils.layer_kernels(layer):
    if kernel.ndim == 2:
      channels = kernel.shape[0]
    elif kernel.ndim == 4:
      channels = kernel.shape[2]
    else:
      return False
    if channels % _M_BY_N[1]:
      return False
  return True


def is_2_4_sparse(kernel: np.ndarray) -> bool:
  """Whether every group of 4 input-channel weights holds at least 2 zeros.

  Groups as tfmot does (``pruning_utils.weights_rearrange``): a Dense kernel
  [in, out] by rows of its transpose, a Conv kernel [h, w, in, out] by
  [out * h * w, in]; the input-channel count must be a multiple of 4.
  """
  if kernel.ndim == 2:
    rows = kernel.T
  elif kernel.ndim == 4:
    rows = np.transpose(kernel, (3, 0, 1, 2)).reshape(-1, kernel.shape[2])
  else:
    return False
  if rows.shape[1] % _M_BY_N[1]:
    return False
  groups = rows.reshape(-1, _M_BY_N[1])
  return bool(np.all(np.sum(groups == 0, axis=1) >= _M_BY_N[0]))


def _schedule(config: PruningConfig,
              end_step: int) -> tfmot.sparsity.keras.PruningSchedule:
  if config.schedule == 'constant':
    return tfmot.sparsity.keras.ConstantSparsity(
        config.target_sparsity,
        begin_step=config.begin_step,
        end_step=end_step,
        frequency=config.frequency)
  return tfmot.sparsity.keras.PolynomialDecay(
      initial_sparsity=0.0,
      final_sparsity=config.target_sparsity,
      begin_step=config.begin_step,
      end_step=end_step,
      frequency=config.frequency)


def _last_update_step(config: PruningConfig, total_steps: int) -> int:
  """The step of the last mask update, checked against the training length.

  tfmot counts steps from 1 and updates masks only on ``begin_step`` + k *
  ``frequency``; the polynomial schedule reaches its target at ``end_step``,
  so ``end_step`` must be such a step within the run.
  """
  requested = total_steps if config.end_step is None else config.end_step
  if requested > total_steps:
    raise _keras_utils.config_error(
        config, 'end_step', config.end_step,
        f'fine-tuning runs only {total_steps} steps ({config.epochs} epochs), '
        'so the target sparsity would never be reached; lower end_step, '
        'raise epochs, or use None')
  updates = (requested - config.begin_step) // config.frequency
  if updates < 1:
    raise ConfigError(
        f'PruningConfig: fine-tuning runs {total_steps} steps but the first '
        f'mask update is at step begin_step + frequency = '
        f'{config.begin_step + config.frequency}, so nothing would be pruned. '
        'Lower PruningConfig.frequency or begin_step, or raise epochs.')
  return config.begin_step + updates * config.frequency


def prune(model: tf_keras.Model,
          train_ds: tf.data.Dataset,
          config: PruningConfig,
          eval_ds: Optional[tf.data.Dataset] = None) -> OptimizationResult:
  """Prunes a trained model by weight magnitude while fine-tuning it.

  The caller's model is not modified: a copy is wrapped, trained and stripped.

  Args:
    model: a trained functional/Sequential tf_keras classifier that outputs
      probabilities (see types.py).
    train_ds: finite dataset of (features, int64 labels) batches; one pass is
      one epoch.
    config: the pruning settings.
    eval_ds: optional held-out batches to measure accuracy before and after.

  Returns:
    OptimizationResult with technique 'pruning', the stripped model, and
    details: config, pruned_layers, skipped_layers, sparsity (per layer and
    overall, measured as exact zeros in each kernel), effective end step,
    parameter counts, accuracy before/after and the training history.

  Raises:
    ConfigError: a layer cannot be pruned (or cannot hold 2:4) and
      ``skip_unsupported_layers`` is False; the schedule does not fit the
      training length; the model is not a functional/Sequential tf_keras model.
  """
  working = _keras_utils.copy_model(model)
  unsupported = _keras_utils.unsupported_layers(working, _is_prunable)
  _keras_utils.raise_for_unsupported(
      TECHNIQUE, config, unsupported,
      'tfmot.sparsity.keras.prune_low_magnitude does not support them')
  skipped = list(unsupported)
  if config.structured_2_4:
    not_2_4 = [
        {
            'name': layer.name,
            'class': type(layer).__name__
        }
        for layer in _keras_utils.layers_to_wrap(working)
        if _is_prunable(layer) and not _supports_2_4(layer)
    ]
    _keras_utils.raise_for_unsupported(
        'structured 2:4 pruning', config, not_2_4,
        'their kernels have an input-channel count that is not a multiple of '
        '4, so no valid 2:4 pattern exists')
    skipped.extend(not_2_4)
  skipped_names = {s['name'] for s in skipped}

  epochs, per_epoch = _keras_utils.epoch_plan(train_ds, config.epochs,
                                              config.max_steps)
  total_steps = epochs * per_epoch
  end_step = _last_update_step(config, total_steps)
  wrapper_args = {'pruning_schedule': _schedule(config, end_step)}
  if config.structured_2_4:
    wrapper_args['sparsity_m_by_n'] = _M_BY_N

  wrappers = []

  def wrap(layer):
    wrappers.append(
        tfmot.sparsity.keras.prune_low_magnitude(layer, **wrapper_args))
    return wrappers[-1]

  wrapped = _keras_utils.wrap_supported_layers(
      working, lambda layer: layer.name not in skipped_names, wrap)
  _keras_utils.compile_classifier(wrapped, config.learning_rate)
  history = _keras_utils.fit(
      wrapped, train_ds, config.epochs,
      callbacks=[tfmot.sparsity.keras.UpdatePruningStep()],
      max_steps=config.max_steps)
  stripped = tfmot.sparsity.keras.strip_pruning(wrapped)

  # Reshape, Dropout, ... are wrapped too but have nothing to prune.
  pruned_layers = [w.layer.name for w in wrappers if w.prunable_weights]
  sparsity = _keras_utils.kernel_sparsity(stripped, pruned_layers)
  details = {
      'config': config.to_dict(),
      'pruned_layers': pruned_layers,
      'skipped_layers': skipped,
      'sparsity': sparsity,
      'target_sparsity': 0.5 if config.structured_2_4 else
                         config.target_sparsity,
      'training_steps': total_steps,
      'last_mask_update_step': end_step,
      'params': _keras_utils.count_params(stripped),
      'nonzero_params': _keras_utils.count_params(stripped) -
                        sparsity['zeros'],
      'accuracy_before': _keras_utils.accuracy(model, eval_ds),
      'accuracy_after': _keras_utils.accuracy(stripped, eval_ds),
      'history': history,
  }
  if config.structured_2_4:
    details['is_2_4'] = {
        layer.name: all(
            is_2_4_sparse(kernel)
            for kernel in _keras_utils.layer_kernels(layer))
        for layer in stripped.layers
        if layer.name in pruned_layers
    }
  return OptimizationResult(technique=TECHNIQUE, model=stripped,
                            details=details)
