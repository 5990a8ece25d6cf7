"""Tests of the budget gate and the selection policies (no TensorFlow models)."""
import pytest

from leantfx.components.optimize import selection
from leantfx.components.optimize.measure import VariantMetrics
from leantfx.errors import ConfigError

pytestmark = pytest.mark.unit


def metrics(name, accuracy, size, p99, p50=None):
  return VariantMetrics(
      name=name, technique=name.split('/')[0], tflite_mode=name.split('/')[-1],
      runtime='tflite', path=f'/tmp/{name}', accuracy=accuracy,
      num_examples=400, size_bytes=size, gzipped_bytes=size // 2,
      latency_p50_ms=p50 if p50 is not None else p99 / 2, latency_p99_ms=p99,
      latency_runs=200)


BASELINE = metrics('baseline/savedmodel', 0.970, 500_000, 2.0)
FLOAT = metrics('baseline/float32', 0.970, 140_000, 0.30)
INT8 = metrics('baseline/int8', 0.965, 40_000, 0.20)
PRUNED = metrics('pruning/int8', 0.939, 38_000, 0.25)  # drop 0.031
SLOW = metrics('distillation/int16x8', 0.975, 30_000, 9.0)


def test_gate_rejects_an_accuracy_drop_over_budget_with_the_reason():
  decisions = selection.gate(BASELINE, [INT8, PRUNED],
                             selection.Budget(max_accuracy_drop=0.01))
  assert [d.blessed for d in decisions] == [True, False]
  assert decisions[1].reasons == ('accuracy drop 0.031 > 0.01',)
  assert decisions[1].accuracy_drop == pytest.approx(0.031)
  assert decisions[0].reasons == ('accuracy drop 0.005 <= 0.01',)


def test_gate_rejects_size_and_latency_over_budget():
  budget = selection.Budget(max_accuracy_drop=0.05, max_size_bytes=39_000,
                            max_p99_ms=1.0)
  by_name = {d.variant.name: d for d in selection.gate(
      BASELINE, [FLOAT, INT8, PRUNED, SLOW], budget)}
  assert 'size 140000 B > 39000 B' in by_name['baseline/float32'].reasons
  assert 'size 40000 B > 39000 B' in by_name['baseline/int8'].reasons
  assert 'p99 latency 9.000 ms > 1.0 ms' in by_name[
      'distillation/int16x8'].reasons
  assert [n for n, d in by_name.items() if d.blessed] == ['pruning/int8']
  # A blessed variant's reasons say how every term compared.
  assert by_name['pruning/int8'].reasons == (
      'accuracy drop 0.031 <= 0.05', 'size 38000 B <= 39000 B',
      'p99 latency 0.250 ms <= 1.0 ms')


def test_a_nan_accuracy_is_never_blessed():
  broken = metrics('low_rank/int8', float('nan'), 1000, 0.1)
  decision, = selection.gate(BASELINE, [broken],
                             selection.Budget(max_accuracy_drop=1.0))
  assert not decision.blessed


@pytest.mark.parametrize('policy, expected', [
    ('smallest', 'pruning/int8'),
    ('fastest', 'baseline/int8'),
    ('most_accurate', 'baseline/float32'),
])
def test_select_policies(policy, expected):
  decisions = selection.gate(BASELINE, [FLOAT, INT8, PRUNED, SLOW],
                             selection.Budget(max_accuracy_drop=0.05,
                                              max_p99_ms=1.0))
  assert selection.select(decisions, policy).variant.name == expected


def test_nothing_outside_the_budget_is_ever_selected():
  # SLOW is the smallest and the most accurate, but over the latency budget.
  decisions = selection.gate(BASELINE, [FLOAT, SLOW],
                             selection.Budget(max_accuracy_drop=0.01,
                                              max_p99_ms=1.0))
  for policy in selection.POLICIES:
    assert selection.select(decisions, policy).variant.name == (
        'baseline/float32')


def test_select_returns_none_when_nothing_passes():
  decisions = selection.gate(BASELINE, [FLOAT, INT8, PRUNED],
                             selection.Budget(max_accuracy_drop=0.0,
                                              max_size_bytes=1000))
  assert not any(d.blessed for d in decisions)
  for policy in selection.POLICIES:
    assert selection.select(decisions, policy) is None
  assert selection.select([], 'smallest') is None


def test_unknown_policy_is_a_config_error():
  with pytest.raises(ConfigError, match='Unknown selection policy'):
    selection.select([], 'cheapest')


@pytest.mark.parametrize('kwargs, message', [
    ({'max_accuracy_drop': -0.1}, 'max_accuracy_drop must be a number in'),
    ({'max_accuracy_drop': 2}, 'max_accuracy_drop must be a number in'),
    ({'max_accuracy_drop': 0.01, 'max_size_bytes': 0}, 'max_size_bytes'),
    ({'max_accuracy_drop': 0.01, 'max_size_bytes': 1.5}, 'max_size_bytes'),
    ({'max_accuracy_drop': 0.01, 'max_p99_ms': -1}, 'max_p99_ms'),
])
def test_budget_validates_itself(kwargs, message):
  with pytest.raises(ConfigError, match=message):
    selection.Budget(**kwargs)


def test_budget_and_decision_round_trip():
  budget = selection.Budget(0.02, max_size_bytes=10_000, max_p99_ms=3.5)
  assert selection.Budget.from_dict(budget.to_dict()) == budget
  with pytest.raises(ConfigError, match='Unknown Budget field'):
    selection.Budget.from_dict({'max_accuracy_drop': 0.1, 'max_size': 1})
  decision, = selection.gate(BASELINE, [INT8], budget)
  assert selection.GateDecision.from_dict(decision.to_dict()) == decision
