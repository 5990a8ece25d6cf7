"""benchmarks/bench_baselines.row: a run record's figures as the table's row.

The record is shaped as cli/summary.py and cli/baseline_summary.py write it
(the gate keeps its bounds; the bound applied is their highest for an
accuracy).
"""
import pytest

from benchmarks import bench_baselines

pytestmark = pytest.mark.unit


def test_a_row_carries_the_model_the_baselines_and_the_bound_applied():
  record = {
      'seconds': 200.0, 'exit': 0, 'blessed': True,
      'model_family': {'chosen': 'trees', 'reason': '...'},
      'baselines': {'metric': 'accuracy', 'seconds': 10.0,
                    'rows': {'sampled': True},
                    'baselines': {'majority': {'value': 0.4},
                                  'strong': {'value': 0.9}}},
      'gate': {'metric': 'accuracy', 'model': 0.91, 'failed': [], 'bounds': [
          {'value': 0.45, 'reason': 'beats the majority', 'source': 'trivial'},
          {'value': 0.89, 'reason': 'at most 0.01 below', 'source': 'strong'}]}}
  row = bench_baselines.row('span', record)
  assert row['model'] == 0.91 and row['family'] == 'trees'
  assert (row['majority'], row['strong']) == (0.4, 0.9)
  assert row['gate_bound'] == 0.89
  assert row['baselines_share'] == 0.05 and row['sampled'] is True
