"""Low-rank factorization: replace weight matrices by truncated SVD products.

A Dense kernel W (m x n) is replaced by W ~= A B with A = U_r sqrt(S_r)
(m x r) and B = sqrt(S_r) V_r^T (r x n): the layer becomes Dense(r, linear,
no bias) followed by Dense(n) with the original activation, bias and name.
A 1x1 Conv2D is a Dense applied at every pixel and is split the same way
(the first 1x1 convolution keeps the strides). A layer is only split when
r (m + n) < m n, i.e. when it saves parameters.

The rank r of each layer is chosen one of three ways:
  * ``max_accuracy_drop`` (the default): by the accuracy budget. Layers are
    taken largest kernel first; for each, the energy thresholds of
    ``search_energies`` are bisected for the lowest whose rank keeps the
    model (with the layers already chosen split too, before fine-tuning)
    within ``max_accuracy_drop`` of the original's accuracy on ``eval_ds``
    (the ModelOptimizer passes a fixed sample of train rows, never the
    split its gate judges on: ranks kept because they pass on the gate's
    own examples would be certified by luck). A layer no threshold
    keeps within the budget is not split. Each trial is recorded.
  * ``energy``: the smallest rank keeping that fraction of the squared
    singular values, the same for every layer (``max_accuracy_drop=None``).
  * ``rank``: a fixed rank for every layer.
One energy for all layers is a poor proxy: a hidden layer of an MLP whose
inputs span few directions can lose most of its spectrum without changing a
prediction, while a small layer next to the logits cannot.

The model is rebuilt from its functional config with the replaced layers and
every other weight copied. Before fine-tuning, each split layer is checked on
real inputs against the Eckart-Young bound: for inputs X,
||X W - X A B||_F <= ||X||_F * sigma_{r+1}, and an activation with Lipschitz
constant L keeps the output difference within L times that. At full rank the
rebuilt model matches the original to float32 round-off.
"""
import copy
import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
import tensorflow as tf
import tf_keras

from leantfx.components.optimize.techniques import _keras_utils
from leantfx.components.optimize.types import OptimizationResult
from leantfx.errors import ConfigError

TECHNIQUE = 'low_rank'
_U_SUFFIX = '_svd_u'
# Lipschitz constants (largest slope) of built-in activations, used for the
# verification bound: gelu 1.129 and swish 1.0998 are the maxima of their
# derivatives, selu = scale * alpha = 1.0507 * 1.6733, tf_keras hard_sigmoid
# has slope 0.2. Activations not listed (e.g. exponential) are not bounded.
_LIPSCHITZ = {
    'linear': 1.0, 'relu': 1.0, 'relu6': 1.0, 'tanh': 1.0, 'softmax': 1.0,
    'elu': 1.0, 'leaky_relu': 1.0, 'softplus': 1.0, 'softsign': 1.0,
    'sigmoid': 0.25, 'hard_sigmoid': 0.2, 'gelu': 1.13, 'swish': 1.1,
    'silu': 1.1, 'selu': 1.76,
}
# Slack for float32 round-off, relative to the size of the outputs compared.
_FLOAT_TOLERANCE = 1e-5


@dataclasses.dataclass(frozen=True)
class LowRankConfig:
  """How to factorize.

  Attributes:
    max_accuracy_drop: choose each layer's rank by this budget (absolute
      accuracy, before fine-tuning, on eval_ds; see the module docstring),
      in [0, 1]; None = use ``energy`` for every layer. 0.005 is half the
      ModelOptimizer's default gate budget, leaving the rest to the TFLite
      conversion.
    search_energies: the energy thresholds the budget search bisects,
      strictly increasing, each in (0, 1].
    energy: with max_accuracy_drop None, keep the smallest rank whose
      singular values hold this fraction of the kernel's squared
      singular-value sum, in (0, 1].
    rank: a fixed rank for every layer (capped at the layer's full rank);
      when set it takes precedence over the budget and ``energy``.
    min_params_saving: only split a layer that saves at least this fraction
      of its kernel's parameters, in [0, 1); 0 = any saving at all.
    fine_tune_epochs: passes over the training data after factorizing; 0
      returns the factorized model untrained.
    learning_rate: Adam learning rate for fine-tuning (1e-4: a tenth of
      Adam's default, usual for fine-tuning a trained model).
    verify_examples: examples from eval_ds (else train_ds) used to check the
      factorization before fine-tuning.
    max_steps: at most this many fine-tuning steps (shorter epochs when
      the passes would take more); None: the epochs decide. The
      ModelOptimizer sets it from the Trainer's steps
      (config.tie_to_trainer).
  """
  max_accuracy_drop: Optional[float] = 0.005
  search_energies: Tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7,
                                        0.8, 0.9, 0.95, 0.99, 1.0)
  energy: float = 0.9
  rank: Optional[int] = None
  min_params_saving: float = 0.0
  fine_tune_epochs: int = 2
  learning_rate: float = 1e-4
  verify_examples: int = 256
  max_steps: Optional[int] = None

  def __post_init__(self):
    if self.max_accuracy_drop is not None:
      _keras_utils.check_float(self, 'max_accuracy_drop', 0.0, 1.0)
    energies = self.search_energies
    if isinstance(energies, (list, tuple)):
      object.__setattr__(self, 'search_energies', tuple(energies))
    if not (isinstance(energies, (list, tuple)) and energies and all(
        isinstance(e, (int, float)) and not isinstance(e, bool) and
        0 < e <= 1 for e in energies) and all(
            a < b for a, b in zip(energies, energies[1:]))):
      raise ConfigError(
          'LowRankConfig.search_energies must be a non-empty, strictly '
          f'increasing list of numbers in (0, 1], got {energies!r}.')
    _keras_utils.check_float(self, 'energy', 0.0, 1.0, low_inclusive=False)
    if self.rank is not None:
      _keras_utils.check_int(self, 'rank', 1)
    _keras_utils.check_float(
        self, 'min_params_saving', 0.0, 1.0, high_inclusive=False)
    _keras_utils.check_int(self, 'fine_tune_epochs', 0)
    _keras_utils.check_learning_rate(self)
    _keras_utils.check_int(self, 'verify_examples', 1)
    _keras_utils.check_max_steps(self)

  def to_dict(self) -> Dict[str, Any]:
    """Returns the fields as a JSON-serialisable dict."""
    return _keras_utils.config_to_dict(self)

  @classmethod
  def from_dict(cls, data: Mapping[str, Any]) -> 'LowRankConfig':
    """Builds a config from ``to_dict`` output (unknown keys are an error)."""
    return _keras_utils.config_from_dict(cls, data)


def _matrix(layer: tf_keras.layers.Layer) -> Optional[np.ndarray]:
  """The layer's kernel as an (inputs x outputs) matrix, or None if not eligible."""
  if type(layer) is tf_keras.layers.Dense:  # pylint: disable=unidiomatic-typecheck
    return layer.kernel.numpy()
  if (type(layer) is tf_keras.layers.Conv2D and  # pylint: disable=unidiomatic-typecheck
      tuple(layer.kernel_size) == (1, 1) and layer.groups == 1):
    return layer.kernel.numpy()[0, 0]
  return None


def _eligible_layers(model: tf_keras.Model) -> Dict[str, np.ndarray]:
  """Dense and 1x1 Conv2D layers called exactly once in ``model``."""
  eligible = {}
  for layer in _keras_utils.layers_to_wrap(model):
    matrix = _matrix(layer)
    if matrix is not None and len(layer.inbound_nodes) == 1:
      eligible[layer.name] = matrix
  return eligible


def _svd(matrix: np.ndarray):
  # float64 so the full-rank product reproduces the float32 kernel exactly.
  return np.linalg.svd(matrix.astype(np.float64), full_matrices=False)


def _plan_layer(name: str, matrix: np.ndarray, config: LowRankConfig,
                energy: Optional[float] = None,
                singular_values: Optional[np.ndarray] = None
               ) -> Dict[str, Any]:
  """Chooses the rank of one layer and whether splitting it pays off.

  ``energy`` overrides config.energy (the budget search tries several);
  ``singular_values`` spares recomputing the SVD.
  """
  m, n = matrix.shape
  if singular_values is None:
    singular_values = _svd(matrix)[1]
  energy = config.energy if energy is None else energy
  full_rank = len(singular_values)
  squared = singular_values**2
  plan = {'layer': name, 'shape': [int(m), int(n)], 'max_rank': full_rank}
  if squared.sum() == 0:
    return {**plan, 'rank': 0, 'factorized': False,
            'reason': 'the kernel is all zeros'}
  if config.rank is not None:
    rank = min(config.rank, full_rank)
  else:
    cumulative = np.cumsum(squared) / squared.sum()
    # The small slack stops round-off in the cumsum from demanding one more.
    rank = int(np.searchsorted(cumulative, energy - 1e-12) + 1)
    rank = min(rank, full_rank)
  factorized_params = rank * (m + n)
  saving = 1.0 - factorized_params / (m * n)
  plan.update({
      'rank': rank,
      'energy_kept': float(squared[:rank].sum() / squared.sum()),
      'kernel_params': int(m * n),
      'factorized_kernel_params': int(factorized_params),
      'saving': float(saving),
  })
  if factorized_params >= m * n:
    return {**plan, 'factorized': False,
            'reason': f'rank {rank} saves nothing: r(m+n) >= m*n'}
  if saving < config.min_params_saving:
    return {**plan, 'factorized': False,
            'reason': f'saving {saving:.3f} < min_params_saving '
                      f'{config.min_params_saving}'}
  return {**plan, 'factorized': True}


def _unique_name(base: str, taken: set) -> str:
  name, index = base, 1
  while name in taken:
    name, index = f'{base}_{index}', index + 1
  return name


def _split_entries(entry: Dict[str, Any], layer: tf_keras.layers.Layer,
                   rank: int, u_name: str) -> List[Dict[str, Any]]:
  """Config entries for the rank-r layer and the re-wired original layer."""
  dtype = entry['config'].get('dtype')
  if isinstance(layer, tf_keras.layers.Conv2D):
    first = tf_keras.layers.Conv2D(
        rank, 1, strides=layer.strides, padding=layer.padding,
        data_format=layer.data_format, dilation_rate=layer.dilation_rate,
        use_bias=False, name=u_name, dtype=dtype)
  else:
    first = tf_keras.layers.Dense(rank, use_bias=False, name=u_name,
                                  dtype=dtype)
  u_entry = tf_keras.layers.serialize(first)
  u_entry.update({'name': u_name, 'inbound_nodes': entry['inbound_nodes']})
  v_entry = copy.deepcopy(entry)
  # Its input is now r wide; a stale build shape would build the wrong kernel.
  v_entry.pop('build_config', None)
  v_entry['inbound_nodes'] = [[[u_name, 0, 0, {}]]]
  if isinstance(layer, tf_keras.layers.Conv2D):
    v_entry['config'].update({'strides': (1, 1), 'dilation_rate': (1, 1)})
  return [u_entry, v_entry]


def factorize_layers(model: tf_keras.Model,
                     ranks: Mapping[str, int]) -> tf_keras.Model:
  """Rebuilds ``model`` with the named layers split at the given ranks.

  No profitability rule and no training: this is the exact surgery (used by
  ``factorize``, and by tests at full rank). Other weights are copied; the
  caller's model is not modified.

  Args:
    model: a functional or Sequential tf_keras model.
    ranks: layer name -> rank, for Dense or 1x1 Conv2D layers called once;
      each rank in [1, min(inputs, outputs)].

  Returns:
    The factorized model: same inputs, outputs and layer names, plus one
    '<name>_svd_u' layer in front of each split layer.

  Raises:
    ConfigError: a name is not an eligible layer or a rank is out of range.
  """
  return _factorize_layers(model, ranks)[0]


def _factorize_layers(model: tf_keras.Model, ranks: Mapping[str, int],
                      svds: Optional[Dict[str, Tuple[np.ndarray, ...]]] = None
                     ) -> Tuple[tf_keras.Model, Dict[str, str]]:
  """``factorize_layers``, also returning split layer -> its rank-r layer.

  ``svds`` caches each layer's SVD across calls (the rank search rebuilds
  the model many times; a 2048x2048 SVD takes seconds).
  """
  svds = {} if svds is None else svds
  _keras_utils.ensure_graph_model(model, 'low-rank factorization')
  if isinstance(model, tf_keras.Sequential):
    model = tf_keras.Model(model.inputs, model.outputs, name=model.name)
  eligible = _eligible_layers(model)
  for name, rank in ranks.items():
    if name not in eligible:
      raise ConfigError(
          f'Layer {name!r} cannot be factorized: only Dense and 1x1 Conv2D '
          f'layers used once can; eligible here: {sorted(eligible)}.')
    full_rank = min(eligible[name].shape)
    if not 1 <= rank <= full_rank:
      raise ConfigError(
          f'Rank {rank} for layer {name!r} is outside [1, {full_rank}].')

  config = model.get_config()
  taken = {layer.name for layer in model.layers}
  u_names = {}
  layers = []
  for entry in config['layers']:
    name = entry['name']
    if name in ranks:
      u_names[name] = _unique_name(name + _U_SUFFIX, taken)
      taken.add(u_names[name])
      layers.extend(
          _split_entries(entry, model.get_layer(name), ranks[name],
                         u_names[name]))
    else:
      layers.append(entry)
  config['layers'] = layers
  rebuilt = tf_keras.Model.from_config(
      config, custom_objects=_keras_utils.custom_objects(model))

  for layer in model.layers:
    if layer.name in ranks:
      if layer.name not in svds:
        svds[layer.name] = _svd(eligible[layer.name])
      u, s, vt = svds[layer.name]
      r = ranks[layer.name]
      root = np.sqrt(s[:r])
      first = (u[:, :r] * root).astype(np.float32)
      second = (root[:, None] * vt[:r]).astype(np.float32)
      target = rebuilt.get_layer(layer.name)
      first = first.reshape(rebuilt.get_layer(u_names[layer.name]).kernel.shape)
      second = second.reshape(target.kernel.shape)
      rebuilt.get_layer(u_names[layer.name]).set_weights([first])
      target.set_weights([second] + layer.get_weights()[1:])
    else:
      rebuilt.get_layer(layer.name).set_weights(layer.get_weights())
  return rebuilt, u_names


def _activation_name(layer: tf_keras.layers.Layer) -> str:
  activation = layer.get_config().get('activation', 'linear')
  if isinstance(activation, dict):  # a serialized custom activation
    return activation.get('config', {}).get('name', str(activation))
  return str(activation)


def _verify(original: tf_keras.Model, factorized: tf_keras.Model,
            plans: List[Dict[str, Any]], features: Any,
            svds: Optional[Mapping[str, Tuple[np.ndarray, ...]]] = None
           ) -> Dict[str, Any]:
  """Checks each split layer on real inputs against the truncation bound.

  For the inputs X reaching the rank-r layer inside the factorized model, the
  original layer applied to X and the split pair applied to X must differ by
  at most L * sigma_{r+1} * ||X||_F (+ float32 slack).

  Returns:
    Model-level facts (max |probability difference|, argmax agreement).

  Raises:
    RuntimeError: a layer breaks its bound, i.e. the rebuild is wrong.
  """
  split = [p for p in plans if p['factorized']]
  probe_outputs = []
  for plan in split:
    probe_outputs.append(factorized.get_layer(plan['u_layer']).input)
    probe_outputs.append(factorized.get_layer(plan['layer']).output)
  probed = tf_keras.Model(factorized.input, probe_outputs)(features)
  for index, plan in enumerate(split):
    inputs = probed[2 * index]
    outputs = probed[2 * index + 1].numpy()
    reference = original.get_layer(plan['layer'])(inputs).numpy()
    singular_values = (svds[plan['layer']][1] if svds and plan['layer'] in svds
                       else _svd(_matrix(original.get_layer(plan['layer'])))[1])
    next_sigma = (float(singular_values[plan['rank']])
                  if plan['rank'] < len(singular_values) else 0.0)
    input_norm = float(np.linalg.norm(inputs.numpy()))
    activation = _activation_name(original.get_layer(plan['layer']))
    lipschitz = _LIPSCHITZ.get(activation)
    error = float(np.linalg.norm(outputs - reference))
    slack = _FLOAT_TOLERANCE * (
        float(np.linalg.norm(reference)) +
        (lipschitz or 1.0) * float(singular_values[0]) * input_norm)
    plan['verification'] = {
        'output_error': error,
        'bound': (None if lipschitz is None else
                  lipschitz * next_sigma * input_norm + slack),
        'activation': activation,
    }
    if lipschitz is not None and error > plan['verification']['bound']:
      raise RuntimeError(
          f"Low-rank rebuild of layer {plan['layer']!r} is wrong: its outputs "
          f"differ by {error:.3g} from the original's, more than the "
          f"truncation bound {plan['verification']['bound']:.3g}.")
  before = original(features, training=False).numpy()
  after = factorized(features, training=False).numpy()
  return {
      'examples': int(before.shape[0]),
      'max_abs_probability_difference': float(np.max(np.abs(before - after))),
      'argmax_agreement': float(
          np.mean(np.argmax(before, -1) == np.argmax(after, -1))),
  }


def _search_ranks(model: tf_keras.Model, eligible: Mapping[str, np.ndarray],
                  config: LowRankConfig, eval_ds: tf.data.Dataset,
                  svds: Dict[str, Tuple[np.ndarray, ...]]
                 ) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
  """Per-layer ranks chosen by the accuracy budget (see the module docstring).

  Returns:
    (plans in the model's layer order, each with its 'search' trials; facts:
    the reference accuracy, the budget and the number of models scored).
  """
  reference = _keras_utils.accuracy(model, eval_ds)
  budget = config.max_accuracy_drop
  chosen: Dict[str, int] = {}
  plans: Dict[str, Dict[str, Any]] = {}
  scored = 0
  for name in sorted(eligible, key=lambda n: -eligible[n].size):
    matrix = eligible[name]
    if name not in svds:
      svds[name] = _svd(matrix)
    singular_values = svds[name][1]
    candidates, ranks_seen = [], set()
    for energy in config.search_energies:
      plan = _plan_layer(name, matrix, config, energy, singular_values)
      if plan['factorized'] and plan['rank'] not in ranks_seen:
        ranks_seen.add(plan['rank'])
        candidates.append({**plan, 'energy_threshold': energy})
    if not candidates:
      plans[name] = {
          **_plan_layer(name, matrix, config, config.search_energies[0],
                        singular_values),
          'factorized': False,
          'reason': 'no energy in search_energies gives a rank that saves '
                    'parameters', 'search': []}
      continue
    # Bisection for the lowest passing threshold: accuracy grows with the
    # energy kept (not strictly, so a pass is only ever taken as measured).
    low, high, best, trials = 0, len(candidates) - 1, None, []
    while low <= high:
      middle = (low + high) // 2
      plan = candidates[middle]
      trial_model, _ = _factorize_layers(
          model, {**chosen, name: plan['rank']}, svds)
      accuracy = _keras_utils.accuracy(trial_model, eval_ds)
      scored += 1
      passed = reference - accuracy <= budget + 1e-12
      trials.append({'energy_threshold': plan['energy_threshold'],
                     'rank': plan['rank'], 'accuracy': accuracy,
                     'passed': passed})
      if passed:
        best, high = middle, middle - 1
      else:
        low = middle + 1
    if best is None:
      plans[name] = {
          **candidates[-1], 'factorized': False,
          'reason': f'no threshold in search_energies keeps the accuracy '
                    f'drop within {budget} (tried '
                    f"{', '.join(str(t['rank']) for t in trials)})",
          'search': trials}
    else:
      chosen[name] = candidates[best]['rank']
      plans[name] = {**candidates[best], 'search': trials}
  facts = {'reference_accuracy': reference, 'max_accuracy_drop': budget,
           'models_scored': scored, 'eval_examples': _count(eval_ds)}
  return [plans[name] for name in eligible], facts


def _count(dataset: tf.data.Dataset) -> int:
  return int(sum(len(labels) for _, labels in dataset))


def factorize(model: tf_keras.Model,
              train_ds: tf.data.Dataset,
              config: LowRankConfig,
              eval_ds: Optional[tf.data.Dataset] = None) -> OptimizationResult:
  """Splits Dense and 1x1 Conv2D layers by truncated SVD, checks, fine-tunes.

  The caller's model is not modified.

  Args:
    model: a trained functional/Sequential tf_keras classifier that outputs
      probabilities (see types.py).
    train_ds: finite dataset of (features, int64 labels) batches; one pass is
      one epoch.
    config: the factorization settings.
    eval_ds: optional held-out batches to measure accuracy (and, if given,
      to verify the factorization on).

  Returns:
    OptimizationResult with technique 'low_rank', the fine-tuned model and
    details: config, per-layer plan (shape, rank, energy kept, kernel
    parameters before/after, whether split and why not, verification
    error and bound, the budget search's trials), the search's facts
    ('rank_search', None without a budget), params before/after, the model-level verification,
    accuracy before, right after factorizing and after fine-tuning, and the
    training history.

  Raises:
    ConfigError: no layer would save parameters (or stay within the
      budget) with this config, the budget is set without eval_ds, or the
      model is not a functional/Sequential tf_keras model.
    RuntimeError: the rebuilt model breaks the truncation bound (a bug).
  """
  _keras_utils.ensure_graph_model(model, 'low-rank factorization')
  eligible = _eligible_layers(model)
  svds: Dict[str, Tuple[np.ndarray, ...]] = {}
  search = None
  if config.rank is None and config.max_accuracy_drop is not None:
    if eval_ds is None:
      raise ConfigError(
          'LowRankConfig.max_accuracy_drop chooses ranks by accuracy, which '
          'needs eval_ds (batches to score the trials on; the ModelOptimizer '
          'passes a sample of train rows). Pass eval_ds, or set '
          'max_accuracy_drop=None to '
          'use a fixed energy.')
    plans, search = _search_ranks(model, eligible, config, eval_ds, svds)
  else:
    plans = [_plan_layer(name, matrix, config)
             for name, matrix in eligible.items()]
  ranks = {p['layer']: p['rank'] for p in plans if p['factorized']}
  if not ranks:
    summary = ', '.join(
        f"{p['layer']} (rank {p['rank']} of {p['max_rank']})" for p in plans)
    raise ConfigError(
        f'Low-rank factorization would split no layer of {model.name!r}: '
        f'{summary or "it has no Dense or 1x1 Conv2D layer"}. '
        + ('No rank the search tried kept the accuracy drop within '
           f'{config.max_accuracy_drop}: raise LowRankConfig.'
           'max_accuracy_drop or add thresholds to search_energies.'
           if search is not None else
           'Lower LowRankConfig.energy, set a small rank, or lower '
           'min_params_saving.'))

  factorized, u_names = _factorize_layers(model, ranks, svds)
  for plan in plans:
    if plan['factorized']:
      plan['u_layer'] = u_names[plan['layer']]
  features, _ = _keras_utils.first_examples(
      eval_ds if eval_ds is not None else train_ds, config.verify_examples)
  verification = _verify(model, factorized, plans, features, svds)
  accuracy_factorized = _keras_utils.accuracy(factorized, eval_ds)

  _keras_utils.compile_classifier(factorized, config.learning_rate)
  history = _keras_utils.fit(factorized, train_ds, config.fine_tune_epochs,
                             max_steps=config.max_steps)
  details = {
      'config': config.to_dict(),
      'layers': plans,
      'rank_search': search,
      'params_before': _keras_utils.count_params(model),
      'params_after': _keras_utils.count_params(factorized),
      'verification': verification,
      'accuracy_before': _keras_utils.accuracy(model, eval_ds),
      'accuracy_factorized': accuracy_factorized,
      'accuracy_after': _keras_utils.accuracy(factorized, eval_ds),
      'training_steps': _keras_utils.planned_steps(
          train_ds, config.fine_tune_epochs, config.max_steps),
      'history': history,
  }
  return OptimizationResult(technique=TECHNIQUE, model=factorized,
                            details=details)
