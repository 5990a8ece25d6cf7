"""The optimization techniques: each takes a trained tf_keras model and returns
an ``OptimizationResult`` (types.py) with a smaller or faster model.

- pruning.py: magnitude pruning (polynomial ramp, constant target, or 2:4
  structured sparsity) with tfmot's ``prune_low_magnitude``, wrappers stripped.
- qat.py: quantization-aware training, optionally keeping a pruned model's
  zeros (PQAT); the TFLite converter turns it into a full-int8 model.
- clustering.py: weight clustering with tfmot's ``cluster_weights``; every
  kernel keeps ``number_of_clusters`` values.
- distillation.py: a smaller student trained on the teacher's soft targets
  (Hinton et al., 2015).
- low_rank.py: Dense and 1x1 Conv2D kernels replaced by truncated SVD
  products, ranks chosen by the accuracy budget, an energy threshold or a
  fixed rank.
- _keras_utils.py: helpers the techniques share (config messages and round
  trip, model copying, compile/fit, accuracy, kernel statistics).

The executor runs them through config.py's technique table
(``module path, function``); nothing here is imported until a technique runs.
"""
