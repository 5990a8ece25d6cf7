"""What every optimization technique returns to the optimization component.

The trained model the techniques start from is described by the model
contract in models/model_layout.py.
"""
import dataclasses
from typing import Any, Dict


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
