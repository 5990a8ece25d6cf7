"""Tests for leantfx.components.optimize.techniques.low_rank on the digits CNN fixture."""
import json

import numpy as np
import pytest
import tf_keras

from leantfx.components.optimize.techniques import _keras_utils
from leantfx.components.optimize.techniques import low_rank
from leantfx.errors import ConfigError

# Eligible layers of conftest.build_digits_cnn and their kernel shapes
# (inputs x outputs): conv1x1 16x32, hidden 512x64 (4x4x32 flattened),
# logits 64x10. conv3x3 is 3x3, so it is not eligible.
FULL_RANKS = {'conv1x1': 16, 'hidden': 64, 'logits': 10}
# Allowed accuracy drop on the 397 eval digits (1 digit = 0.0025) after
# fine-tuning. Measured on this fixture at energy 0.8: 0.985 before, 0.982
# right after factorizing, 0.977 after two epochs of fine-tuning.
ACCURACY_TOLERANCE = 0.03


@pytest.mark.unit
def test_full_rank_factorization_reproduces_the_model(
    teacher, digits, teacher_weights_unchanged):
  factorized = low_rank.factorize_layers(teacher, FULL_RANKS)

  features, _ = _keras_utils.first_examples(digits.eval_ds(), 397)
  before = teacher(features).numpy()
  after = factorized(features).numpy()
  # float64 SVD, float32 factors: the products differ from the kernels by
  # round-off only; 1e-5 on probabilities is the brief's bar.
  assert np.max(np.abs(before - after)) < 1e-5
  assert factorized.get_layer('conv1x1_svd_u').kernel.shape == (1, 1, 16, 16)
  assert factorized.get_layer('hidden_svd_u').kernel.shape == (512, 64)
  assert factorized.get_layer('logits').kernel.shape == (10, 10)
  # The contract's names survive.
  assert factorized.layers[-1].name == 'probabilities'
  assert factorized.input_names == ['image_xf']


@pytest.mark.unit
def test_energy_rank_saves_params_within_bound_and_recovers(
    teacher, teacher_accuracy, digits, teacher_weights_unchanged):
  config = low_rank.LowRankConfig(
      max_accuracy_drop=None, energy=0.8, fine_tune_epochs=2,
      learning_rate=1e-3)

  result = low_rank.factorize(teacher, digits.train_ds(), config,
                              digits.eval_ds())

  assert result.technique == 'low_rank'
  json.dumps(result.details)  # types.py: details are JSON-serialisable
  plans = {plan['layer']: plan for plan in result.details['layers']}
  assert set(plans) == set(FULL_RANKS)
  # Measured ranks at energy 0.8: conv1x1 8/16, hidden 32/64, logits 7/10.
  assert all(plan['factorized'] for plan in plans.values())
  saved = 0
  for name, plan in plans.items():
    m, n = plan['shape']
    assert plan['max_rank'] == FULL_RANKS[name]
    if plan['factorized']:
      assert plan['rank'] * (m + n) < m * n, name
      assert plan['energy_kept'] >= 0.8, name
      # Eckart-Young bound checked on real inputs before fine-tuning.
      check = plan['verification']
      assert check['output_error'] <= check['bound'], name
      saved += m * n - plan['rank'] * (m + n)
  # Only kernels change size: the saving is exactly the kernel saving.
  assert result.details['params_after'] == (
      result.details['params_before'] - saved)
  assert result.details['params_before'] == 34186
  assert result.details['params_after'] < 0.6 * 34186  # measured 19,600
  assert result.details['verification']['argmax_agreement'] > 0.9
  assert result.details['accuracy_after'] >= (
      teacher_accuracy - ACCURACY_TOLERANCE)


@pytest.mark.unit
def test_verification_catches_a_wrong_rebuild(teacher, digits):
  factorized, u_names = low_rank._factorize_layers(teacher, {'hidden': 64})
  kernel = factorized.get_layer('hidden').kernel
  kernel.assign(kernel * 1.01)  # what a mis-copied weight would look like
  plans = [{'layer': 'hidden', 'rank': 64, 'factorized': True,
            'u_layer': u_names['hidden']}]
  features, _ = _keras_utils.first_examples(digits.eval_ds(), 64)
  with pytest.raises(RuntimeError, match="layer 'hidden' is wrong"):
    low_rank._verify(teacher, factorized, plans, features)


@pytest.mark.unit
def test_layers_are_split_only_when_they_save_params(teacher, digits):
  # rank 12: conv1x1 12*(16+32)=576 > 512 and logits 10*(64+10)=740 > 640
  # save nothing; hidden 12*(512+64)=6912 < 32768 does.
  config = low_rank.LowRankConfig(rank=12, fine_tune_epochs=0)

  result = low_rank.factorize(teacher, digits.train_ds(), config,
                              digits.eval_ds())

  plans = {plan['layer']: plan for plan in result.details['layers']}
  assert [n for n, p in plans.items() if p['factorized']] == ['hidden']
  assert plans['hidden']['rank'] == 12
  assert plans['logits']['rank'] == 10  # capped at the full rank
  assert 'saves nothing' in plans['conv1x1']['reason']
  assert result.details['params_after'] == 34186 - (32768 - 6912)


@pytest.mark.unit
def test_no_profitable_layer_is_a_config_error(teacher, digits):
  # hidden at rank 12 saves 1 - 6912/32768 = 0.79 < 0.9.
  config = low_rank.LowRankConfig(
      rank=12, min_params_saving=0.9, fine_tune_epochs=0)
  with pytest.raises(ConfigError, match='would split no layer'):
    low_rank.factorize(teacher, digits.train_ds(), config)


@pytest.mark.unit
def test_factorize_layers_rejects_ineligible_layers_and_ranks(teacher):
  with pytest.raises(ConfigError, match="'conv3x3' cannot be factorized"):
    low_rank.factorize_layers(teacher, {'conv3x3': 2})
  with pytest.raises(ConfigError, match=r'outside \[1, 10\]'):
    low_rank.factorize_layers(teacher, {'logits': 11})


@pytest.mark.unit
def test_sequential_models_are_factorized_too():
  tf_keras.utils.set_random_seed(0)
  model = tf_keras.Sequential([
      tf_keras.Input(shape=(6,)),
      tf_keras.layers.Dense(5, activation='tanh', name='a'),
      tf_keras.layers.Dense(3, activation='softmax', name='b'),
  ])
  factorized = low_rank.factorize_layers(model, {'a': 5, 'b': 3})
  x = np.random.default_rng(0).normal(size=(8, 6)).astype(np.float32)
  np.testing.assert_allclose(factorized(x), model(x), atol=1e-5)


@pytest.mark.unit
@pytest.mark.parametrize('field, value', [
    ('energy', 0.0),
    ('energy', 1.5),
    ('max_accuracy_drop', -0.01),
    ('max_accuracy_drop', 1.5),
    ('search_energies', ()),
    ('search_energies', (0.5, 0.4)),
    ('search_energies', (0.0, 0.5)),
    ('search_energies', (0.5, 1.2)),
    ('rank', 0),
    ('min_params_saving', 1.0),
    ('fine_tune_epochs', -1),
    ('learning_rate', 2.0),
    ('verify_examples', 0),
])
def test_invalid_config_values_raise(field, value):
  with pytest.raises(ConfigError, match=f'LowRankConfig.{field}'):
    low_rank.LowRankConfig(**{field: value})


@pytest.mark.unit
def test_config_round_trips_through_dict():
  config = low_rank.LowRankConfig(
      energy=0.95, rank=8, min_params_saving=0.2, fine_tune_epochs=0,
      learning_rate=3e-4, verify_examples=64, max_accuracy_drop=0.02,
      search_energies=(0.5, 0.9))
  assert low_rank.LowRankConfig.from_dict(config.to_dict()) == config
  # Through JSON (the component's custom_config) the tuple becomes a list.
  assert low_rank.LowRankConfig.from_dict(
      json.loads(json.dumps(config.to_dict()))) == config
  with pytest.raises(ConfigError, match='energy_fraction'):
    low_rank.LowRankConfig.from_dict({'energy_fraction': 0.9})


@pytest.mark.unit
def test_ranks_are_chosen_by_the_accuracy_budget(
    teacher, digits, teacher_weights_unchanged):
  budget = 0.01
  # A short grid keeps the test quick (each trial rebuilds and scores the
  # model); the default grid has 12 thresholds.
  energies = (0.3, 0.6, 0.8, 0.95)
  config = low_rank.LowRankConfig(max_accuracy_drop=budget,
                                  search_energies=energies,
                                  fine_tune_epochs=0)

  result = low_rank.factorize(teacher, digits.train_ds(), config,
                              digits.eval_ds())

  details = result.details
  json.dumps(details)
  search = details['rank_search']
  assert search['max_accuracy_drop'] == budget
  assert search['eval_examples'] == 397
  reference = search['reference_accuracy']
  assert reference == details['accuracy_before']
  # Every layer split together (fine_tune_epochs=0) stays within the budget
  # on the data the search scored: the last trial of the last layer searched
  # is exactly this model.
  assert details['accuracy_factorized'] >= reference - budget - 1e-9
  plans = {plan['layer']: plan for plan in details['layers']}
  assert any(p['factorized'] for p in plans.values())
  scored = 0
  for name, plan in plans.items():
    trials = plan['search']
    scored += len(trials)
    if not plan['factorized']:
      continue
    passed = [t for t in trials if t['passed']]
    # The kept rank passed, and it is the smallest rank that passed.
    assert plan['rank'] == min(t['rank'] for t in passed), name
    for t in trials:
      assert t['passed'] == (reference - t['accuracy'] <= budget + 1e-12)
      # A smaller rank than the one kept was tried and failed, or none was.
      if t['rank'] < plan['rank']:
        assert not t['passed'], name
  assert scored == search['models_scored']
  # A looser budget never needs more parameters.
  loose = low_rank.factorize(
      teacher, digits.train_ds(),
      low_rank.LowRankConfig(max_accuracy_drop=0.2, search_energies=energies,
                             fine_tune_epochs=0),
      digits.eval_ds())
  assert loose.details['params_after'] <= details['params_after']


@pytest.mark.unit
def test_the_budget_search_needs_held_out_data(teacher, digits):
  with pytest.raises(ConfigError, match='needs eval_ds'):
    low_rank.factorize(teacher, digits.train_ds(),
                       low_rank.LowRankConfig(max_accuracy_drop=0.01))
