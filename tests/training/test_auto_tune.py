"""--tune auto: the rule (models/auto_tune.py) and the AutoTuner's executor.

The rule's figures are made up to sit on either side of its bounds; the
executor runs for real on artifacts whose decision needs no training (the
trees exported, no strong baseline), and its wiring into a run is
tests/training/test_auto_tune_e2e.py.
"""
import json
import os

import pytest
from tfx.dsl.components.base import base_executor
from tfx.types import standard_artifacts

from leantfx import config as config_lib
from leantfx.cli import argtypes
from leantfx.components.auto_tuner import executor as executor_lib
from leantfx.components.auto_tuner import spec as spec_lib
from leantfx.components.baselines import spec as baselines_spec
from leantfx.models import auto_tune
from leantfx.models import hyperparameters

pytestmark = pytest.mark.unit


@pytest.mark.parametrize('probe, search', [
    (0.95, False),   # Ahead of the strong baseline.
    (0.89, False),   # 0.90 - 0.01 = 0.89: on the bound is within it.
    (0.8899, True),  # Just behind the bound.
    (0.50, True),
])
def test_the_search_runs_only_when_the_probe_trails_past_the_margin(
    probe, search):
  decision = auto_tune.decide(probe, 0.90, 'HistGradientBoosting', 0.01, 8)
  assert decision.search is search
  assert decision.trials == (8 if search else 0)
  assert 'HistGradientBoosting 0.9000' in decision.reason
  assert ('searched 8 trials' in decision.reason) is search


@pytest.mark.parametrize('best, kept', [(0.70, True), (0.60, False),
                                        (None, False)])
def test_the_trials_values_are_kept_only_when_they_beat_the_probe(best, kept):
  searching = auto_tune.decide(0.60, 0.90, 'HGB', 0.01, 8)
  decision = auto_tune.keep_search(searching, best)
  assert decision.search is kept
  assert ('untuned values are trained' in decision.reason) is not kept


def test_no_probe_for_the_trees_or_without_a_strong_baseline():
  assert 'trees are exported' in auto_tune.needs_probe('trees', 0.9)
  assert 'no strong baseline' in auto_tune.needs_probe('auto', None)
  assert auto_tune.needs_probe('auto', 0.9) is None
  assert auto_tune.needs_probe('network', 0.9) is None


def test_the_margin_is_the_relative_gates_or_its_default_when_off():
  assert auto_tune.margin_of(0.05) == 0.05
  assert auto_tune.margin_of(None) == config_lib.DEFAULT_BASELINE_MARGIN


def test_tune_takes_a_budget_or_auto():
  assert argtypes.trials_or_auto('auto') == 'auto'
  assert argtypes.trials_or_auto(' AUTO ') == 'auto'
  assert argtypes.trials_or_auto('3') == 3


def test_tune_auto_needs_tune():
  with pytest.raises(config_lib.ConfigError, match='--tune auto'):
    config_lib.TrainingConfig(tune_auto=True)


def _artifacts(tmp_path, doc):
  baselines = baselines_spec.Baselines()
  baselines.uri = str(tmp_path / 'baselines')
  if doc is not None:
    baselines.set_string_custom_property(baselines_spec.FIGURES_PROPERTY,
                                         json.dumps(doc))
  examples = standard_artifacts.Examples()
  examples.uri = str(tmp_path / 'examples')
  examples.split_names = '["train", "eval"]'
  outputs = {}
  for key, kind in ((spec_lib.BEST_HYPERPARAMETERS_KEY,
                     standard_artifacts.HyperParameters),
                    (spec_lib.TUNER_RESULTS_KEY,
                     standard_artifacts.TunerResults)):
    artifact = kind()
    artifact.uri = str(tmp_path / key)
    os.makedirs(artifact.uri)
    outputs[key] = [artifact]
  inputs = {'examples': [examples], spec_lib.BASELINES_KEY: [baselines]}
  return inputs, outputs


def _executor(tmp_path):
  return executor_lib.Executor(base_executor.BaseExecutor.Context(
      tmp_dir=str(tmp_path / 'tmp'), unique_id='1'))


def _properties(model_family):
  training = config_lib.TrainingConfig(tune=True, tune_auto=True,
                                       model_family=model_family)
  return {
      'tuner_fn': 'leantfx.models.tuning.tuner_fn',
      'train_args': '{"num_steps": 2}', 'eval_args': '{"num_steps": 1}',
      'custom_config': json.dumps(
          {'training': config_lib.to_json_dict(training)}),
      spec_lib.MARGIN_KEY: 0.01,
  }


_DOC = {'metric': 'accuracy', 'task': 'classification',
        'baselines': {'strong': {'model': 'HistGradientBoosting on 9 columns',
                                 'value': 0.97}}}


@pytest.mark.parametrize('model_family, doc, reason', [
    ('trees', _DOC, 'trees are exported'),
    ('auto', dict(_DOC, baselines={}), 'no strong baseline'),
])
def test_without_a_probe_the_untuned_values_go_to_the_trainer(
    tmp_path, model_family, doc, reason):
  inputs, outputs = _artifacts(tmp_path, doc)
  _executor(tmp_path).Do(inputs, outputs, _properties(model_family))
  best = outputs[spec_lib.BEST_HYPERPARAMETERS_KEY][0]
  with open(os.path.join(best.uri,
                         executor_lib.BEST_HYPERPARAMETERS_FILE)) as f:
    values = json.load(f)
  # The Trainer's config, as configured: nothing of the search applies.
  training = config_lib.TrainingConfig()
  assert hyperparameters.apply_hyperparameters(training, values) == training
  decision = json.loads(best.get_string_custom_property(
      auto_tune.DECISION_PROPERTY))
  assert decision['search'] is False and reason in decision['reason']
  assert decision['probe'] is None
  with open(os.path.join(outputs[spec_lib.TUNER_RESULTS_KEY][0].uri,
                         executor_lib.TUNER_RESULTS_FILE)) as f:
    assert json.load(f) == []


def test_baselines_without_figures_are_a_clear_error(tmp_path):
  inputs, outputs = _artifacts(tmp_path, None)
  with pytest.raises(ValueError, match="has no 'figures' property"):
    _executor(tmp_path).Do(inputs, outputs, _properties('auto'))
