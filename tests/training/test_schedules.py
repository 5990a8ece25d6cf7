"""Adam's learning rate: linear warm-up, then constant, linear or cosine."""
import math

import pytest

from leantfx.errors import ConfigError
from leantfx.models import architectures
from leantfx.models.training import schedules
from tests.training import helpers

pytestmark = pytest.mark.unit


@pytest.mark.parametrize('decay,step,expected', [
    # Warm-up: peak * (step + 1) / warmup (DeepSpeed WarmupLR's linear ramp).
    ('constant', 0, 0.1 * 1 / 10),
    ('constant', 4, 0.1 * 5 / 10),
    ('constant', 9, 0.1),
    ('constant', 99, 0.1),  # WarmupLR holds the peak.
    ('linear', 10, 0.1),  # Decay starts at the peak...
    ('linear', 55, 0.1 * (1 - 45 / 90)),  # ... halfway ...
    ('linear', 100, 0.0),  # ... and ends at 0 (WarmupDecayLR).
    ('cosine', 55, 0.1 * 0.5 * (1 + math.cos(math.pi * 0.5))),
    ('cosine', 100, 0.0),
])
def test_warmup_decay_values(decay, step, expected):
  schedule = schedules.WarmupDecay(0.1, warmup_steps=10, total_steps=100,
                                   decay=decay)
  assert float(schedule(step)) == pytest.approx(expected, abs=1e-7)


def test_round_trip_and_constant_default():
  schedule = schedules.WarmupDecay(0.01, 5, 50, 'cosine')
  again = schedules.WarmupDecay.from_config(schedule.get_config())
  assert float(again(20)) == pytest.approx(float(schedule(20)))
  assert schedules.learning_rate(0.01, 0, 50, 'constant') == 0.01


def test_the_trainer_optimizer_follows_the_schedule():
  training = helpers.training(warmup_steps=4, lr_decay='linear',
                              train_steps=8, learning_rate=0.02)
  model = architectures.build_compiled(helpers.TABULAR, training, {})
  x, y = helpers.tabular_arrays(32)
  rates = []
  for _ in range(8):
    model.train_on_batch(x, y)
    # The rate the step just applied (tf_keras updates it per apply).
    rates.append(float(model.optimizer.learning_rate))
  # Steps 0..3 ramp 0.005, 0.01, 0.015, 0.02; then linear decay over 4.
  assert rates == pytest.approx(
      [0.005, 0.01, 0.015, 0.02, 0.02, 0.015, 0.01, 0.005], abs=1e-7)


def test_warmup_longer_than_training_is_rejected():
  with pytest.raises(ConfigError, match='warmup_steps'):
    helpers.training(warmup_steps=20, train_steps=20)
