"""OptimizationConfig: which candidates the ModelOptimizer builds and how it gates them.

A candidate is a chain of technique steps applied one after the other to the
trained model (e.g. pruning, then prune-preserving QAT), and the TFLite modes
to export the result in. Each (candidate, mode) pair is one variant; every
variant is measured, gated against the ``Budget`` and one is selected by the
policy. The config travels to the component as JSON (``to_json``/
``from_json``) and validates itself, technique configs included, when built.

The techniques are looked up by name; each lives in its own module with one
function ``(model, train_ds, config, eval_ds=None) -> OptimizationResult``
whose ``config`` annotation names its config dataclass.
"""
import dataclasses
import importlib
import json
import typing
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

from leantfx.components.optimize.evaluation import quality as quality_lib
from leantfx.runtimes import registry as runtimes_lib
from leantfx.runtimes import serving_export
from leantfx.components.optimize.export import tflite as tflite_export
from leantfx.components.optimize.evaluation import selection
from leantfx.components.optimize.evaluation.selection import Budget
from leantfx.components.optimize.evaluation.selection import POLICIES
from leantfx.errors import ConfigError

# technique name -> (module, function).
TECHNIQUES: Dict[str, Tuple[str, str]] = {
    'pruning': ('leantfx.components.optimize.techniques.pruning', 'prune'),
    'qat': ('leantfx.components.optimize.techniques.qat', 'quantization_aware_train'),
    'distillation': ('leantfx.components.optimize.techniques.distillation', 'distill'),
    'low_rank': ('leantfx.components.optimize.techniques.low_rank', 'factorize'),
    'clustering': ('leantfx.components.optimize.techniques.clustering', 'cluster'),
}
# A QAT model keeps its quantization wrappers (the converter reads the ranges
# from them), so no other technique can run after it.
_MUST_BE_LAST = ('qat',)
BASELINE = 'baseline'
# Why each technique is not run on a regression model (the report lists
# them): every one fine-tunes or scores with a classifier's loss and metric
# (_keras_utils.compile_classifier: sparse cross-entropy and accuracy), and
# distillation's soft labels are class probabilities.
REGRESSION_LEFT_OUT: Dict[str, str] = {
    'pruning': 'fine-tunes with sparse cross-entropy and accuracy',
    'qat': 'fine-tunes with sparse cross-entropy and accuracy',
    'clustering': 'fine-tunes with sparse cross-entropy and accuracy',
    'low_rank': 'chooses ranks by an accuracy drop and fine-tunes with '
                'sparse cross-entropy',
    'distillation': "trains a student on the teacher's class probabilities "
                    '(soft labels)',
}


def technique_function(technique: str) -> Callable:
  """The technique's function, imported on first use.

  Raises:
    ConfigError: unknown technique, or its module is not installed.
  """
  if technique not in TECHNIQUES:
    raise ConfigError(f'Unknown optimization technique {technique!r}; use one '
                      f'of {sorted(TECHNIQUES)}.')
  module_name, function_name = TECHNIQUES[technique]
  try:
    module = importlib.import_module(module_name)
  except ImportError as e:
    raise ConfigError(
        f'Optimization technique {technique!r} is not available: importing '
        f'{module_name} failed ({e}). Remove it from the optimization '
        'config or install what it needs.') from e
  return getattr(module, function_name)


def technique_config_class(technique: str) -> type:
  """The config dataclass the technique's function takes (its annotation)."""
  function = technique_function(technique)
  return typing.get_type_hints(function)['config']


@dataclasses.dataclass(frozen=True)
class TechniqueStep:
  """One technique in a chain, with its own validated config.

  Attributes:
    technique: a key of TECHNIQUES.
    config: that technique's config object (None: its defaults).
  """
  technique: str
  config: Any = None

  def __post_init__(self):
    config_class = technique_config_class(self.technique)
    if self.config is None:
      object.__setattr__(self, 'config', config_class())
    elif isinstance(self.config, Mapping):
      object.__setattr__(self, 'config', config_class.from_dict(self.config))
    elif not isinstance(self.config, config_class):
      raise ConfigError(
          f'The {self.technique!r} step needs a {config_class.__name__}, got '
          f'{type(self.config).__name__}.')

  def to_dict(self) -> Dict[str, Any]:
    return {'technique': self.technique, 'config': self.config.to_dict()}

  @classmethod
  def from_dict(cls, values: Mapping[str, Any]) -> 'TechniqueStep':
    _reject_unknown(cls, values)
    if 'technique' not in values:
      raise ConfigError(f'A technique step needs a "technique" (one of '
                        f'{sorted(TECHNIQUES)}); got {dict(values)}.')
    return cls(technique=values['technique'], config=values.get('config'))


@dataclasses.dataclass(frozen=True)
class Candidate:
  """A chain of techniques and the TFLite modes to export its result in.

  Attributes:
    steps: techniques in order; empty = the trained model as it is.
    tflite_modes: modes of tflite_export.MODES.
    name: unique name; defaults to the techniques joined by '+', or
      'baseline' when there are none.
  """
  steps: Tuple[TechniqueStep, ...] = ()
  tflite_modes: Tuple[str, ...] = (tflite_export.FLOAT32, tflite_export.INT8)
  name: Optional[str] = None

  def __post_init__(self):
    object.__setattr__(self, 'steps', tuple(self.steps))
    object.__setattr__(self, 'tflite_modes', tuple(self.tflite_modes))
    if self.name is None:
      object.__setattr__(
          self, 'name',
          '+'.join(s.technique for s in self.steps) or BASELINE)
    if not self.name or '/' in self.name or self.name.startswith('.'):
      raise ConfigError(f'Candidate name {self.name!r} must be non-empty, '
                        'without "/" and not start with ".".')
    for step in self.steps[:-1]:
      if step.technique in _MUST_BE_LAST:
        raise ConfigError(
            f'Candidate {self.name!r} runs {step.technique!r} before other '
            'techniques; a quantization-aware model keeps its quantization '
            'wrappers, so it must be the last step (use '
            'QatConfig.preserve_sparsity after pruning for PQAT).')
    if not self.tflite_modes:
      raise ConfigError(f'Candidate {self.name!r} exports no TFLite mode; '
                        f'give at least one of {tflite_export.MODES}.')
    unknown = [m for m in self.tflite_modes if m not in tflite_export.MODES]
    if unknown:
      raise ConfigError(f'Candidate {self.name!r} has unknown TFLite mode(s) '
                        f'{unknown}; use {tflite_export.MODES}.')
    if len(set(self.tflite_modes)) != len(self.tflite_modes):
      raise ConfigError(f'Candidate {self.name!r} lists a TFLite mode twice.')

  def to_dict(self) -> Dict[str, Any]:
    return {
        'name': self.name,
        'steps': [s.to_dict() for s in self.steps],
        'tflite_modes': list(self.tflite_modes),
    }

  @classmethod
  def from_dict(cls, values: Mapping[str, Any]) -> 'Candidate':
    _reject_unknown(cls, values)
    return cls(
        steps=tuple(TechniqueStep.from_dict(s) for s in values.get('steps', ())),
        tflite_modes=tuple(values.get('tflite_modes', cls.tflite_modes)),
        name=values.get('name'))


def _step(technique: str, **config) -> TechniqueStep:
  """A step whose config changes only the named fields of the defaults.

  In the pipeline's defaults, layers tfmot cannot wrap (e.g. the one-hot
  CategoryEncoding of a tabular model, which has no weights) are left as they
  are and listed in the details, instead of failing the whole run; a config
  that sets skip_unsupported_layers=False refuses them instead.
  """
  defaults = technique_config_class(technique)().to_dict()
  if 'skip_unsupported_layers' in defaults:
    defaults['skip_unsupported_layers'] = True
  defaults.update(config)
  return TechniqueStep(technique, defaults)


def regression_candidates() -> Tuple[Candidate, ...]:
  """The trained regression model as it is, in every mode but int16x8.

  float32 is the reference for TFLite; float16 and dynamic-range halve and
  quarter the weights; int8 (calibrated on train examples, int8 input and
  output) is what a microcontroller runs. The techniques are left out
  (REGRESSION_LEFT_OUT says why).
  """
  return (Candidate((), (tflite_export.FLOAT32, tflite_export.FLOAT16,
                         tflite_export.DYNAMIC_RANGE, tflite_export.INT8)),)


def default_candidates() -> Tuple[Candidate, ...]:
  """Every technique once, on the technique defaults (digits-sized models).

  The baseline in every mode; pruning (80% sparsity, masks updated every 10
  steps, 4 epochs) as float and int8; pruning then prune-preserving QAT; QAT; weight
  clustering; distillation into a 3x smaller student; low-rank
  factorization. Their epochs suit a digits-sized split; on a larger one
  the ModelOptimizer caps each technique's steps by the Trainer's
  (tie_to_trainer).
  """
  int8_and_float = (tflite_export.FLOAT32, tflite_export.INT8)
  # Each value below held accuracy best among those tried on digits:
  # docs/measurements.md, "ModelOptimizer defaults: why".
  pruning = _step('pruning', frequency=10, epochs=4)
  return (
      Candidate((), (tflite_export.FLOAT32, tflite_export.FLOAT16,
                     tflite_export.DYNAMIC_RANGE, tflite_export.INT8,
                     tflite_export.INT16X8)),
      Candidate((pruning,), int8_and_float),
      Candidate((pruning, _step('qat', preserve_sparsity=True)),
                (tflite_export.INT8,), name='pruning+pqat'),
      Candidate((_step('qat'),), (tflite_export.INT8,)),
      Candidate((_step('clustering'),), int8_and_float),
      Candidate((_step('distillation', epochs=60, temperature=1.0,
                       alpha=0.5, mixup=0.4, min_compression=3.0),),
                int8_and_float),
      Candidate((_step('low_rank'),), int8_and_float),
  )


# How many of the Trainer's steps a technique may train for: fine-tuning a
# trained model at most as long as the Trainer trained it; distillation,
# whose student starts from scratch, at most twice as long.
TRAINER_STEP_MULTIPLES: Dict[str, int] = {'distillation': 2}
# All technique steps of all candidates together train for at most this many
# times the Trainer's steps, so that the ModelOptimizer's time follows the
# Trainer's: on a 1M-row span (Trainer 20,000 steps, ~115 s) every default
# technique step took about as long as the Trainer (~75 s each at the cap of
# 1x), 8 Trainer-lengths in all (docs/measurements.md).
OPTIMIZER_STEP_BUDGET = 3
# ...but a technique step may always take this many (within the Trainer's
# own): on a digits-sized split the techniques' epochs decide (pruning's 4
# epochs of ~45 steps are far below the Trainer's 1,000), and a share below
# this would cut distillation's passes on small spans.
MIN_TECHNIQUE_STEPS = 1000


def technique_step_unit(candidates: Tuple['Candidate', ...],
                        trainer_steps: int) -> int:
  """The steps one technique step of weight 1 may train for.

  OPTIMIZER_STEP_BUDGET x trainer_steps shared by every technique step of
  the candidates (distillation counts twice), at least MIN_TECHNIQUE_STEPS,
  never more than trainer_steps.
  """
  weight = sum(TRAINER_STEP_MULTIPLES.get(step.technique, 1)
               for candidate in candidates for step in candidate.steps)
  if not weight:
    return trainer_steps
  share = trainer_steps * OPTIMIZER_STEP_BUDGET // weight
  return min(trainer_steps, max(MIN_TECHNIQUE_STEPS, share))


def trainer_step_cap(technique: str, unit: int) -> int:
  """The most steps ``technique`` may take, for a technique_step_unit."""
  return TRAINER_STEP_MULTIPLES.get(technique, 1) * unit


def tie_to_trainer(candidates: Tuple['Candidate', ...],
                   trainer_steps: int) -> Tuple['Candidate', ...]:
  """The candidates with every technique's max_steps tied to the Trainer's.

  Each step may take trainer_step_cap(technique, technique_step_unit(...))
  steps; a step's own max_steps is kept when it is lower.

  Args:
    candidates: the candidates to build.
    trainer_steps: the steps the Trainer trained for (>= 1).

  Returns:
    New candidates with every step's max_steps set.
  """
  unit = technique_step_unit(candidates, trainer_steps)
  tied = []
  for candidate in candidates:
    steps = []
    for step in candidate.steps:
      cap = trainer_step_cap(step.technique, unit)
      own = step.config.max_steps
      steps.append(TechniqueStep(step.technique, dataclasses.replace(
          step.config, max_steps=cap if own is None else min(own, cap))))
    tied.append(dataclasses.replace(candidate, steps=tuple(steps)))
  return tuple(tied)


def candidate_names(task: str = quality_lib.CLASSIFICATION) -> Tuple[str, ...]:
  """The names of the task's default candidates, the baseline first."""
  return tuple(c.name for c in _task_candidates(task))


def chosen_candidates(names: Optional[Tuple[str, ...]],
                      task: str = quality_lib.CLASSIFICATION
                     ) -> Tuple[Candidate, ...]:
  """The task's default candidates that ``names`` keeps, in their order.

  The baseline (the trained model in every mode) is always kept: it is the
  reference the other variants' drops are measured against and the variant
  a run pushes when nothing else is inside the budget.

  Args:
    names: candidate names (of candidate_names(task), without 'baseline');
      None keeps them all, () the baseline alone.
    task: the model's task (a regression model has the baseline only).

  Raises:
    ConfigError: a name that is not one of the task's candidates.
  """
  candidates = _task_candidates(task)
  if names is None:
    return candidates
  known = [c.name for c in candidates if c.name != BASELINE]
  unknown = [n for n in names if n not in known]
  if unknown:
    if task == quality_lib.REGRESSION:
      raise ConfigError(
          f'Technique(s) {unknown} are not run on a regression model (' +
          '; '.join(f'{t} {REGRESSION_LEFT_OUT[t]}'
                    for t in dict.fromkeys(
                        part for n in unknown for part in n.split('+'))
                    if t in REGRESSION_LEFT_OUT) +
          '): a regression builds the trained model in its TFLite modes '
          'only. Drop the list (or pass none).')
    raise ConfigError(f'Unknown technique candidate(s) {unknown}; choose '
                      f'from {known}, or all, or none (the baseline alone).')
  return tuple(c for c in candidates if c.name == BASELINE or c.name in names)


def _task_candidates(task: str) -> Tuple[Candidate, ...]:
  quality_lib.for_task(task)
  return (regression_candidates() if task == quality_lib.REGRESSION else
          default_candidates())


@dataclasses.dataclass(frozen=True)
class OptimizationConfig:
  """What the ModelOptimizer runs, and how it measures, gates and selects.

  Attributes:
    candidates: the chains to build (None: default_candidates()).
    budget: what a variant may cost (default: at most 1 point of accuracy).
    policy: one of selection.POLICIES: 'smallest' (bytes on disk),
      'smallest_download' (gzipped bytes), 'fastest' or 'most_accurate'.
    selection_fraction: share of the eval split the gate and the policy
      see (the selection split; the techniques search on train rows); the rest is
      the report split, on which every variant is re-measured for the
      report (selection.split_eval). In (0, 1).
    batch_size: batch size of the train/eval datasets fed to the techniques.
    latency_runs: timed batch-1 runs per variant.
    warmup_runs: untimed runs first.
    num_threads: TFLite interpreter threads (1: comparable across machines).
    calibration_samples: train examples used to calibrate 'int8'/'int16x8'
      (every runtime's int8).
    runtimes: the runtimes to build variants in, of runtimes.RUNTIMES
      ('tflite', 'openvino', 'onnx'); None: every one installed where the
      optimizer runs. This dataclass defaults to TFLite only, for a caller
      of the library; every leantfx command passes its --runtimes, whose
      default is all installed. TFLite builds every candidate; the server
      runtimes (OpenVINO, ONNX Runtime) build float32 and int8 of the
      candidates whose TFLite variants are inside the accuracy budget. A
      named runtime that is not installed is skipped with a message naming
      the pip extra.
    task: 'classification' (accuracy, gated by budget.max_accuracy_drop) or
      'regression' (RMSE in target units, gated by
      budget.max_rmse_increase; the trained model in every TFLite mode,
      regression_candidates(), and in the server runtimes asked for). The
      pipeline config's task, never guessed from the model.
    slices: the per-slice term of the gate (selection.SliceGate: the
      Evaluator's slices, gated at the budget plus a sampling allowance);
      no columns: the gate looks at the whole selection split only.
  """
  candidates: Optional[Tuple[Candidate, ...]] = None
  budget: Budget = Budget(max_accuracy_drop=0.01)
  policy: str = 'smallest'
  selection_fraction: float = selection.DEFAULT_SELECTION_FRACTION
  batch_size: int = 32
  latency_runs: int = 200
  warmup_runs: int = 20
  num_threads: int = 1
  calibration_samples: int = serving_export.DEFAULT_CALIBRATION_SAMPLES
  runtimes: Optional[Tuple[str, ...]] = (runtimes_lib.TFLITE,)
  task: str = quality_lib.CLASSIFICATION
  slices: selection.SliceGate = selection.SliceGate()

  def __post_init__(self):
    quality_lib.for_task(self.task)
    regression = self.task == quality_lib.REGRESSION
    if self.candidates is None:
      object.__setattr__(self, 'candidates', regression_candidates()
                         if regression else default_candidates())
    object.__setattr__(self, 'candidates', tuple(self.candidates))
    if not self.candidates:
      raise ConfigError('OptimizationConfig has no candidates; list at least '
                        'one (a candidate without steps is the baseline).')
    names = [c.name for c in self.candidates]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
      raise ConfigError(f'Candidate names must be unique; {duplicates} '
                        'appear more than once. Give them distinct "name"s.')
    if self.runtimes is not None:
      if isinstance(self.runtimes, str):
        raise ConfigError('OptimizationConfig.runtimes must be a list of '
                          f'runtime names, got the string {self.runtimes!r}.')
      object.__setattr__(self, 'runtimes',
                         runtimes_lib.check_names(self.runtimes))
      if runtimes_lib.TFLITE not in self.runtimes:
        raise ConfigError(
            f'The runtime list {list(self.runtimes)} leaves out '
            f"'{runtimes_lib.TFLITE}': the TFLite variants are built for "
            'every candidate and decide which candidates the server runtimes '
            f"build; list it (e.g. '{','.join(runtimes_lib.RUNTIMES)}').")
    if regression:
      self._check_regression()
    if not isinstance(self.budget, Budget):
      raise ConfigError('OptimizationConfig.budget must be a Budget.')
    if not isinstance(self.slices, selection.SliceGate):
      raise ConfigError('OptimizationConfig.slices must be a SliceGate.')
    if self.policy not in POLICIES:
      raise ConfigError(f'Unknown selection policy {self.policy!r}; use one '
                        f'of {POLICIES}.')
    if isinstance(self.selection_fraction, bool) or not isinstance(
        self.selection_fraction, (int, float)) or not (
            0 < self.selection_fraction < 1):
      raise ConfigError(
          'OptimizationConfig.selection_fraction must be a number strictly '
          'between 0 and 1 (the rest of the eval split reports), got '
          f'{self.selection_fraction!r}.')
    for field, minimum in (('batch_size', 1), ('latency_runs', 1),
                           ('warmup_runs', 0), ('num_threads', 1),
                           ('calibration_samples', 1)):
      value = getattr(self, field)
      if isinstance(value, bool) or not isinstance(value, int) or (
          value < minimum):
        raise ConfigError(f'OptimizationConfig.{field} must be an integer >= '
                          f'{minimum}, got {value!r}.')

  @property
  def quality(self) -> quality_lib.Quality:
    """The metric the variants are measured, gated and reported by."""
    return quality_lib.for_task(self.task)

  def _check_regression(self) -> None:
    """Refuses what a regression model cannot run, naming it."""
    for candidate in self.candidates:
      for step in candidate.steps:
        raise ConfigError(
            f'Candidate {candidate.name!r} runs {step.technique!r} on a '
            f'regression model, and {step.technique} '
            f'{REGRESSION_LEFT_OUT[step.technique]}; a regression runs the '
            'trained model in its TFLite modes only. Remove the step.')

  def to_dict(self) -> Dict[str, Any]:
    return {
        'task': self.task,
        'candidates': [c.to_dict() for c in self.candidates],
        'budget': self.budget.to_dict(),
        'policy': self.policy,
        'selection_fraction': self.selection_fraction,
        'batch_size': self.batch_size,
        'latency_runs': self.latency_runs,
        'warmup_runs': self.warmup_runs,
        'num_threads': self.num_threads,
        'calibration_samples': self.calibration_samples,
        'runtimes': (None if self.runtimes is None else
                     list(self.runtimes)),
        'slices': self.slices.to_dict(),
    }

  @classmethod
  def from_dict(cls, values: Mapping[str, Any]) -> 'OptimizationConfig':
    if not isinstance(values, Mapping):
      raise ConfigError('The optimization config must be a JSON object, got '
                        f'{type(values).__name__}.')
    _reject_unknown(cls, values)
    kwargs = dict(values)
    if kwargs.get('candidates') is not None:
      kwargs['candidates'] = tuple(
          Candidate.from_dict(c) for c in kwargs['candidates'])
    if 'budget' in kwargs:
      kwargs['budget'] = Budget.from_dict(kwargs['budget'])
    if 'slices' in kwargs:
      kwargs['slices'] = selection.SliceGate.from_dict(kwargs['slices'])
    return cls(**kwargs)

  def to_json(self) -> str:
    return json.dumps(self.to_dict(), sort_keys=True)

  @classmethod
  def from_json(cls, text: str) -> 'OptimizationConfig':
    try:
      values = json.loads(text)
    except (TypeError, ValueError) as e:
      raise ConfigError(f'The optimization config is not valid JSON: {e}.'
                       ) from e
    return cls.from_dict(values)


def _reject_unknown(cls, values: Mapping[str, Any]) -> None:
  names = {f.name for f in dataclasses.fields(cls)}
  unknown = sorted(set(values) - names)
  if unknown:
    raise ConfigError(f'Unknown {cls.__name__} field(s) {unknown}; known: '
                      f'{sorted(names)}.')
