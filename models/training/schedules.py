"""Adam's learning rate: linear warm-up, then constant, linear or cosine decay.

The guide's DeepSpeed example trains with ``WarmupLR`` (warm up from 0 to the
peak over ``warmup_num_steps``, then hold it); DeepSpeed's ``WarmupDecayLR``
then decays linearly to 0 at ``total_num_steps``. ``WarmupDecay`` covers both
('constant' and 'linear') plus a cosine decay:

  step < warmup:  lr = peak * (step + 1) / warmup
  afterwards:     constant  lr = peak
                  linear    lr = peak * (1 - p)
                  cosine    lr = peak * 0.5 * (1 + cos(pi * p))
  where p = (step - warmup) / (total - warmup), clipped to [0, 1].

``step`` is the optimizer's iteration count, i.e. optimizer steps, not
micro-batches when gradients are accumulated.
"""
import math
from typing import Any, Dict

import tensorflow as tf
import tf_keras

DECAYS = ('constant', 'linear', 'cosine')


@tf_keras.utils.register_keras_serializable(package='leantfx')
class WarmupDecay(tf_keras.optimizers.schedules.LearningRateSchedule):
  """Linear warm-up to ``peak_learning_rate``, then the chosen decay.

  Args:
    peak_learning_rate: the learning rate at the end of warm-up.
    warmup_steps: optimizer steps of warm-up (0: start at the peak).
    total_steps: optimizer steps of the whole run (the decay ends there).
    decay: one of DECAYS.
  """

  def __init__(self, peak_learning_rate: float, warmup_steps: int,
               total_steps: int, decay: str = 'constant'):
    super().__init__()
    if peak_learning_rate <= 0:
      raise ValueError(f'peak_learning_rate must be > 0, got '
                       f'{peak_learning_rate}.')
    if not 0 <= warmup_steps < max(total_steps, 1):
      raise ValueError(f'warmup_steps must be in [0, total_steps='
                       f'{total_steps}), got {warmup_steps}.')
    if decay not in DECAYS:
      raise ValueError(f'Unknown decay {decay!r}; use one of {DECAYS}.')
    self.peak_learning_rate = float(peak_learning_rate)
    self.warmup_steps = int(warmup_steps)
    self.total_steps = int(total_steps)
    self.decay = decay

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    peak = tf.constant(self.peak_learning_rate, tf.float32)
    warmup = float(self.warmup_steps)
    if self.warmup_steps > 0:
      warm = peak * tf.minimum(1.0, (step + 1.0) / warmup)
    else:
      warm = peak
    span = float(max(1, self.total_steps - self.warmup_steps))
    progress = tf.clip_by_value((step - warmup) / span, 0.0, 1.0)
    if self.decay == 'linear':
      decayed = peak * (1.0 - progress)
    elif self.decay == 'cosine':
      decayed = peak * 0.5 * (1.0 + tf.cos(math.pi * progress))
    else:
      decayed = peak
    return tf.where(step < warmup, warm, decayed)

  def get_config(self) -> Dict[str, Any]:
    return {
        'peak_learning_rate': self.peak_learning_rate,
        'warmup_steps': self.warmup_steps,
        'total_steps': self.total_steps,
        'decay': self.decay,
    }


def learning_rate(peak: float, warmup_steps: int, total_steps: int,
                  decay: str):
  """A float for a constant rate (today's behaviour), else a WarmupDecay."""
  if warmup_steps == 0 and decay == 'constant':
    return peak
  return WarmupDecay(peak, warmup_steps, total_steps, decay)
