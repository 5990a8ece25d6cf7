"""`leantfx memory-plan`: the ZeRO paper's accounting and its worked example."""
import json

import pytest
import tf_keras

from leantfx.cli import main as cli
from leantfx import memory_plan
from leantfx.errors import ConfigError
from tests.helpers import run_cli

pytestmark = pytest.mark.unit

# Rajbhandari et al. 2020 (ZeRO), Figure 1: Psi = 7.5B, N_d = 64, K = 12,
# mixed-precision Adam -> 120 GB, 31.4 GB, 16.6 GB, 1.9 GB per device.
PSI = 7_500_000_000
N_D = 64


def test_the_papers_worked_example_exactly():
  plans = memory_plan.plan(PSI, N_D, 'mixed_float16', 'adam')
  totals = [p.total for p in plans]
  # Exact bytes from the paper's formulas (GB = 1e9 bytes):
  assert totals == [
      (2 + 2 + 12) * PSI,  # 120e9
      2 * PSI + 2 * PSI + 12 * PSI / N_D,  # 31.40625e9
      2 * PSI + (2 + 12) * PSI / N_D,  # 16.640625e9
      (2 + 2 + 12) * PSI / N_D,  # 1.875e9
  ]
  assert [round(t / 1e9, 1) for t in totals] == [120.0, 31.4, 16.6, 1.9]
  assert plans[0].optimizer == 12 * PSI and plans[3].parameters == 2 * PSI / 64


def test_the_cli_prints_the_four_figures(capsys):
  assert cli.main(['memory-plan', '--params', '7.5B', '--devices', '64',
                   '--precision', 'mixed_float16']) == 0
  out = capsys.readouterr().out
  rows = [line for line in out.splitlines() if line[:2] in ('0 ', '1 ', '2 ',
                                                            '3 ')]
  assert [r.split()[-2] for r in rows] == ['120.0', '31.4', '16.6', '1.9']
  assert 'K = 12' in out and '10^9 bytes' in out
  assert cli.main(['memory-plan', '--params', '7.5e9', '--devices', '64',
                   '--precision', 'mixed_bfloat16', '--stage', '2',
                   '--json']) == 0
  data = json.loads(capsys.readouterr().out)
  assert [s['stage'] for s in data['stages']] == [2]
  assert data['stages'][0]['total'] == 16.640625e9


@pytest.mark.parametrize('precision,optimizer,per_parameter', [
    ('float32', 'adam', (4, 4, 8)),  # fp32 weights/grads, Adam m and v.
    ('mixed_bfloat16', 'momentum', (2, 2, 8)),  # master + momentum.
    ('float32', 'sgd', (4, 4, 0)),
])
def test_bytes_per_parameter(precision, optimizer, per_parameter):
  per = memory_plan.bytes_per_parameter(precision, optimizer)
  assert (per.parameters, per.gradients, per.optimizer) == per_parameter


def test_activations_are_added_unpartitioned():
  plans = memory_plan.plan(1000, 4, 'float32', 'adam', activations_bytes=500)
  assert all(p.activations == 500 for p in plans)
  assert plans[3].total == 16 * 1000 / 4 + 500


def test_params_from_a_saved_keras_model(tmp_path, capsys):
  inputs = tf_keras.Input((10,))
  hidden = tf_keras.layers.Dense(20)(inputs)  # 220 parameters.
  model = tf_keras.Model(inputs, tf_keras.layers.Dense(3)(hidden))  # +63.
  path = str(tmp_path / 'model')
  model.save(path, save_format='tf')
  params, activations = memory_plan.model_facts(path, batch_size=8)
  assert params == 283
  # Outputs per example: 10 (input) + 20 + 3 elements, 4 bytes, batch 8.
  assert activations == (10 + 20 + 3) * 4 * 8
  assert cli.main(['memory-plan', '--model', path, '--devices', '2',
                   '--json']) == 0
  assert json.loads(capsys.readouterr().out)['parameters'] == 283


@pytest.mark.parametrize('text,expected', [
    ('7.5B', 7_500_000_000), ('125M', 125_000_000), ('7.5e9', 7_500_000_000),
    ('1,000', 1000), ('2k', 2000),
])
def test_parse_count(text, expected):
  assert memory_plan.parse_count(text) == expected


def test_bad_inputs_exit_2_with_a_reason(tmp_path):
  for args, message in (
      (['--params', 'lots'], 'not a parameter count'),
      (['--params', '1B', '--devices', '0'], '--devices must be >= 1'),
      (['--model', str(tmp_path / 'nope')], 'does not exist'),
      ([], 'exactly one of --params'),
  ):
    result = run_cli(['memory-plan'] + args, timeout=120)
    assert result.returncode == 2, (args, result.stderr)
    assert message in result.stderr
    assert 'Traceback' not in result.stderr
  with pytest.raises(ConfigError):
    memory_plan.plan(0, 1)
