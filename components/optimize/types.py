"""Types shared by every optimization technique and the optimization component."""
import dataclasses
from typing import Any, Dict

# The trained model contract (written by leantfx.models.model.run_fn):
#   <Model artifact uri>/Format-Serving/  SavedModel with signatures
#       serving_default (raw features), predict_examples (serialized
#       tf.Example -> probabilities) and transform_features.
#   <Model artifact uri>/Format-Keras/    the bare tf_keras model (SavedModel
#       format, load with tf_keras.models.load_model): inputs are a dict of
#       transformed features, the layer named 'logits' is the last Dense layer
#       and the final layer is Activation('softmax', name='probabilities').
SERVING_MODEL_DIR = 'Format-Serving'
KERAS_MODEL_DIR = 'Format-Keras'
LOGITS_LAYER = 'logits'
PROBABILITIES_LAYER = 'probabilities'


@dataclasses.dataclass
class OptimizationResult:
  """What a technique returns.

  Attributes:
    technique: a short name, e.g. 'pruning', 'qat', 'pqat', 'distillation',
      'low_rank', 'clustering'; chains join with '+', e.g. 'pruning+qat'.
    model: the optimized tf_keras model, already stripped of tfmot wrappers
      (ready for saving and TFLite conversion), outputting probabilities.
    details: JSON-serialisable facts about the run (e.g. per-layer sparsity,
      ranks chosen, parameter counts, training history).
  """
  technique: str
  model: Any
  details: Dict[str, Any] = dataclasses.field(default_factory=dict)
