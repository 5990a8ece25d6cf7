"""Tests of OptimizationConfig: validation, defaults and the JSON round trip."""
import json

import pytest

from leantfx.cli import options
from leantfx.components.optimize import config as config_lib
from leantfx.components.optimize.evaluation.selection import Budget
from leantfx.errors import ConfigError

pytestmark = pytest.mark.unit

Candidate = config_lib.Candidate
TechniqueStep = config_lib.TechniqueStep


def _pqat_chain():
  return Candidate(
      (TechniqueStep('pruning', {'target_sparsity': 0.5, 'epochs': 1}),
       TechniqueStep('qat', {'preserve_sparsity': True})), ('int8',),
      name='pruning+pqat')


def test_step_configs_are_the_techniques_own_validated_configs():
  from leantfx.components.optimize.techniques import pruning  # pylint: disable=g-import-not-at-top
  step = TechniqueStep('pruning', {'target_sparsity': 0.5})
  assert isinstance(step.config, pruning.PruningConfig)
  assert step.config.target_sparsity == 0.5
  assert TechniqueStep('pruning').config == pruning.PruningConfig()
  with pytest.raises(ConfigError, match='target_sparsity'):
    TechniqueStep('pruning', {'target_sparsity': 1.5})
  with pytest.raises(ConfigError, match='no field'):
    TechniqueStep('pruning', {'sparsity': 0.5})
  with pytest.raises(ConfigError, match='Unknown optimization technique'):
    TechniqueStep('dropout')


def test_candidate_names_default_to_the_chain():
  assert Candidate().name == 'baseline'
  assert Candidate((TechniqueStep('pruning'), TechniqueStep('qat'))).name == (
      'pruning+qat')


@pytest.mark.parametrize('kwargs, message', [
    ({'steps': (TechniqueStep('qat'), TechniqueStep('pruning'))},
     'must be the last step'),
    ({'tflite_modes': ()}, 'exports no TFLite mode'),
    ({'tflite_modes': ('int4',)}, r"unknown TFLite mode\(s\) \['int4'\]"),
    ({'tflite_modes': ('int8', 'int8')}, 'lists a TFLite mode twice'),
    ({'name': 'a/b'}, 'without "/"'),
])
def test_candidate_validates_itself(kwargs, message):
  with pytest.raises(ConfigError, match=message):
    Candidate(**kwargs)


def test_config_round_trips_through_json():
  config = config_lib.OptimizationConfig(
      candidates=(Candidate(), _pqat_chain()),
      budget=Budget(0.02, max_size_bytes=50_000, max_p99_ms=2.0),
      policy='fastest', latency_runs=50, warmup_runs=5,
      runtimes=('tflite', 'onnx'))
  text = config.to_json()
  assert json.loads(text)['runtimes'] == ['tflite', 'onnx']
  assert json.loads(text)['candidates'][1]['steps'][1] == {
      'technique': 'qat',
      'config': {'epochs': 1, 'learning_rate': 1e-4,
                 'preserve_sparsity': True, 'skip_unsupported_layers': False,
                 'max_steps': None}}
  assert config_lib.OptimizationConfig.from_json(text) == config


@pytest.mark.parametrize('values, message', [
    ({'candidates': []}, 'has no candidates'),
    ({'candidates': [{'steps': []}, {'steps': [], 'tflite_modes': ['int8']}]},
     r"\['baseline'\] appear more than once"),
    ({'policy': 'cheapest'}, 'Unknown selection policy'),
    ({'latency_runs': 0}, 'latency_runs must be an integer >= 1'),
    ({'batch_size': 2.5}, 'batch_size must be an integer'),
    ({'budget': {'max_accuracy_drop': 3}}, 'max_accuracy_drop'),
    ({'speed': 'fast'}, r"Unknown OptimizationConfig field\(s\) \['speed'\]"),
    ({'candidates': [{'steps': [{'config': {}}]}]}, 'needs a "technique"'),
    ({'runtimes': ['tflite', 'tensorrt']}, r"Unknown runtime\(s\) \['tensorrt'\]"),
    ({'runtimes': ['openvino']}, "leaves out 'tflite'"),
    ({'runtimes': 'tflite'}, 'must be a list of runtime names'),
    ({'runtimes': ['tflite', 'tflite']}, 'names a runtime twice'),
])
def test_config_validates_itself(values, message):
  values = dict(values)
  values.setdefault('candidates', [{'steps': []}])
  with pytest.raises(ConfigError, match=message):
    config_lib.OptimizationConfig.from_dict(values)


def test_default_config_runs_every_technique():
  config = config_lib.OptimizationConfig()
  techniques = {s.technique for c in config.candidates for s in c.steps}
  assert techniques == set(config_lib.TECHNIQUES)
  names = [c.name for c in config.candidates]
  assert names[0] == 'baseline' and 'pruning+pqat' in names
  pqat = config.candidates[names.index('pruning+pqat')]
  assert pqat.steps[1].config.preserve_sparsity
  assert config.budget == Budget(max_accuracy_drop=0.01)
  assert config_lib.OptimizationConfig.from_json(config.to_json()) == config


def test_the_cli_offers_exactly_the_technique_candidates():
  names = config_lib.candidate_names()
  assert names[0] == config_lib.BASELINE
  assert options.TECHNIQUES == names[1:]
  assert config_lib.candidate_names('regression') == (config_lib.BASELINE,)


def test_chosen_candidates_keep_the_baseline_and_round_trip():
  assert config_lib.chosen_candidates(None) == config_lib.default_candidates()
  chosen = config_lib.chosen_candidates(('distillation', 'pruning'))
  assert [c.name for c in chosen] == ['baseline', 'pruning', 'distillation']
  config = config_lib.OptimizationConfig(candidates=chosen)
  assert config_lib.OptimizationConfig.from_json(config.to_json()) == config
  alone = config_lib.OptimizationConfig(
      candidates=config_lib.chosen_candidates(()))
  assert [c.name for c in alone.candidates] == ['baseline']
  assert config_lib.OptimizationConfig.from_json(alone.to_json()) == alone
  with pytest.raises(ConfigError, match=r"Unknown technique candidate\(s\) "
                     r"\['baseline'\]"):
    config_lib.chosen_candidates(('baseline',))
