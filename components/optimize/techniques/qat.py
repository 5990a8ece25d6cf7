"""Quantization-aware training (QAT), optionally preserving pruned zeros (PQAT).

QAT inserts fake-quantization (8-bit weights per channel, 8-bit activations)
with ``tfmot.quantization.keras.quantize_apply`` and fine-tunes so the model
learns to live with int8 rounding; the TFLite converter then turns it into a
full-int8 model from the ranges it learned, without representative data.

With ``preserve_sparsity`` the prune-preserving scheme (PQAT,
``tfmot.experimental.combine.Default8BitPrunePreserveQuantizeScheme``) keeps
the exact zeros of an already pruned and stripped model; plain QAT would
regrow them.

The returned model is the QAT model itself, wrappers included: unlike pruning
and clustering wrappers, tfmot has no "strip" for quantization, because the
learned quantization ranges live in the wrappers and the TFLite converter
reads them from there. Load a saved QAT model inside
``tfmot.quantization.keras.quantize_scope()``. Its layers are renamed
'quant_<name>' (so the 'logits' layer is 'quant_logits'); it still outputs
probabilities.

Post-training quantization (float16, dynamic range, int8, 16x8 at conversion
time, no training) is export/tflite.py.
"""
import dataclasses
from typing import Any, Dict, Mapping, Optional

import tensorflow as tf
import tensorflow_model_optimization as tfmot
import tf_keras

from leantfx.components.optimize.techniques import _keras_utils
from leantfx.components.optimize.types import OptimizationResult
from leantfx.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class QatConfig:
  """How to run quantization-aware training.

  Attributes:
    epochs: fine-tuning passes over the training data (the tfmot QAT guide
      fine-tunes for 1).
    learning_rate: Adam learning rate (1e-4: a tenth of Adam's default, usual
      for fine-tuning a trained model).
    preserve_sparsity: use prune-preserving QAT so the zeros of a pruned
      model survive; the model must already contain zeros.
    skip_unsupported_layers: leave layers the quantization scheme does not
      support in float (listed in the details) instead of raising
      ConfigError. TFLite then keeps float ops around them.
    max_steps: at most this many fine-tuning steps (shorter epochs when
      the passes would take more); None: the epochs decide. The
      ModelOptimizer sets it from the Trainer's steps
      (config.tie_to_trainer).
  """
  epochs: int = 1
  learning_rate: float = 1e-4
  preserve_sparsity: bool = False
  skip_unsupported_layers: bool = False
  max_steps: Optional[int] = None

  def __post_init__(self):
    _keras_utils.check_int(self, 'epochs', 1)
    _keras_utils.check_learning_rate(self)
    _keras_utils.check_bool(self, 'preserve_sparsity')
    _keras_utils.check_bool(self, 'skip_unsupported_layers')
    _keras_utils.check_max_steps(self)

  def to_dict(self) -> Dict[str, Any]:
    """Returns the fields as a JSON-serialisable dict."""
    return _keras_utils.config_to_dict(self)

  @classmethod
  def from_dict(cls, data: Mapping[str, Any]) -> 'QatConfig':
    """Builds a config from ``to_dict`` output (unknown keys are an error)."""
    return _keras_utils.config_from_dict(cls, data)


def quantization_aware_train(model: tf_keras.Model,
                             train_ds: tf.data.Dataset,
                             config: QatConfig,
                             eval_ds: Optional[tf.data.Dataset] = None
                            ) -> OptimizationResult:
  """Fine-tunes a trained model with fake 8-bit quantization.

  The caller's model is not modified.

  Args:
    model: a trained functional/Sequential tf_keras classifier that outputs
      probabilities; with ``preserve_sparsity``, a pruned and stripped one.
    train_ds: finite dataset of (features, int64 labels) batches; one pass is
      one epoch.
    config: the QAT settings.
    eval_ds: optional held-out batches to measure accuracy before and after.

  Returns:
    OptimizationResult with technique 'qat' (or 'pqat'), the QAT model (not
    stripped; see the module docstring) and details: config, quantized and
    skipped layers, kernel sparsity before and after, parameter count of the
    float model, accuracy before/after and the training history.

  Raises:
    ConfigError: a layer is not supported by the quantization scheme and
      ``skip_unsupported_layers`` is False; ``preserve_sparsity`` is set but
      the model has no zero weights; the model is not a functional/Sequential
      tf_keras model.
  """
  technique = 'pqat' if config.preserve_sparsity else 'qat'
  if config.preserve_sparsity:
    scheme = tfmot.experimental.combine.Default8BitPrunePreserveQuantizeScheme()
  else:
    scheme = tfmot.quantization.keras.default_8bit.Default8BitQuantizeScheme()
  registry = scheme.get_quantize_registry()

  working = _keras_utils.copy_model(model)
  skipped = _keras_utils.unsupported_layers(working, registry.supports)
  _keras_utils.raise_for_unsupported(
      'quantization-aware training', config, skipped,
      f'the {type(scheme).__name__} quantization scheme has no 8-bit '
      'implementation for them')
  skipped_names = {s['name'] for s in skipped}

  sparsity_before = _keras_utils.kernel_sparsity(working)
  if config.preserve_sparsity and sparsity_before['zeros'] == 0:
    raise ConfigError(
        f'QatConfig.preserve_sparsity is True but model {model.name!r} has no '
        'zero kernel weights to preserve. Prune it first (pruning.prune), or '
        'set preserve_sparsity to False.')

  annotated = _keras_utils.wrap_supported_layers(
      working, lambda layer: layer.name not in skipped_names,
      tfmot.quantization.keras.quantize_annotate_layer)
  # quantize_apply rebuilds the model from its config: unregistered custom
  # layer classes (kept in float when skipped) must be in scope.
  with tfmot.quantization.keras.quantize_scope(
      _keras_utils.custom_objects(working)):
    qat_model = tfmot.quantization.keras.quantize_apply(annotated, scheme)

  _keras_utils.compile_classifier(qat_model, config.learning_rate)
  history = _keras_utils.fit(qat_model, train_ds, config.epochs,
                             max_steps=config.max_steps)

  quantized_layers = [
      _keras_utils.unwrap(layer).name
      for layer in qat_model.layers
      if isinstance(layer, tf_keras.layers.Wrapper)
  ]
  details = {
      'config': config.to_dict(),
      'stripped': False,
      'quantized_layers': quantized_layers,
      'skipped_layers': skipped,
      'sparsity_before': sparsity_before,
      'sparsity_after': _keras_utils.kernel_sparsity(qat_model),
      'params': _keras_utils.count_params(working),
      'accuracy_before': _keras_utils.accuracy(model, eval_ds),
      'accuracy_after': _keras_utils.accuracy(qat_model, eval_ds),
      'training_steps': _keras_utils.planned_steps(
          train_ds, config.epochs, config.max_steps),
      'history': history,
  }
  return OptimizationResult(technique=technique, model=qat_model,
                            details=details)
