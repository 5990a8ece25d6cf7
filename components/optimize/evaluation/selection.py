"""Gating optimized variants against a budget, and choosing one.

``gate`` compares every variant with the baseline (the trained model as it
would be served without optimization) and blesses those within the
``Budget``; each decision keeps its reasons, e.g. 'accuracy drop 0.031 >
0.01' (for a regression model 'RMSE increase 0.084 > 0.05': the metric and
its drop come from ``quality.Quality``). ``select`` picks one blessed variant
by a policy; a variant outside the budget can never be selected.

Ranking many variants on one eval set and then reporting the winner's
accuracy on that same set reports a lucky draw: with ~16 variants, the best
of them on 347 examples is biased upwards. ``split_eval`` therefore cuts the
eval set into a *selection* split (gate and select see only it) and a
*report* split the choice never saw, on which ``held_out`` re-measures every
decision for the report. The techniques' own choices (low-rank's rank
search) are made on train rows, so that the gate is no second look at the
examples a search already fitted.

Size policies say which size they rank by: ``smallest`` the bytes on disk
(what a device stores and memory-maps), ``smallest_download`` the gzipped
bytes (what a download or an app bundle carries: a pruned model's zeros only
pay off there).
"""
import dataclasses
import math
from typing import (Any, Callable, Dict, List, Mapping, Optional, Sequence,
                    Tuple)

import numpy as np

from leantfx.components.optimize.evaluation import quality as quality_lib
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.evaluation.measure import LabeledData
from leantfx.components.optimize.evaluation.measure import VariantMetrics
from leantfx import config as leantfx_config
from leantfx.errors import ConfigError

SMALLEST = 'smallest'
SMALLEST_DOWNLOAD = 'smallest_download'
FASTEST = 'fastest'
MOST_ACCURATE = 'most_accurate'
POLICIES = (SMALLEST, SMALLEST_DOWNLOAD, FASTEST, MOST_ACCURATE)
# The VariantMetrics size field each policy ranks or breaks ties by.
SIZE_ON_DISK = 'size_bytes'
GZIPPED_SIZE = 'gzipped_bytes'
POLICY_SIZE = {
    SMALLEST: SIZE_ON_DISK,
    SMALLEST_DOWNLOAD: GZIPPED_SIZE,
    FASTEST: SIZE_ON_DISK,
    MOST_ACCURATE: SIZE_ON_DISK,
}
POLICY_DESCRIPTIONS = {
    SMALLEST: 'fewest bytes on disk (size_bytes), then most accurate',
    SMALLEST_DOWNLOAD: 'fewest gzipped bytes (gzipped_bytes: the download '
                       'size), then most accurate',
    FASTEST: 'lowest p99 latency, then lowest p50, then fewest bytes on disk',
    MOST_ACCURATE: 'highest selection-split accuracy, then fewest bytes on '
                   'disk',
}
# Half the eval set selects, the other half reports (see split_eval).
DEFAULT_SELECTION_FRACTION = 0.5
# The per-slice gate's sampling allowance, in standard errors of the
# baseline's metric on the slice (SliceGate): a variant no worse than the
# baseline on a slice exceeds them there by chance about 2.3% of the time
# (one-sided, normal approximation); with the
# default budget of 0.01 a variant still may not lose 2 of a 12-example
# slice the baseline gets right (0.167 > 0.01 + 0.148; docs/optimize.md,
# "Slices").
DEFAULT_SLICE_ALLOWANCE_SE = 2.0
# The permutation behind the split is fixed, so the same eval set always
# splits the same way (runs compare, a report can be re-derived).
_SPLIT_SEED = 0


@dataclasses.dataclass(frozen=True)
class Budget:
  """What a variant may cost relative to the baseline, and at most absolutely.

  Attributes:
    max_accuracy_drop: classification: baseline accuracy minus variant
      accuracy may be at most this (absolute, e.g. 0.01 is one percentage
      point).
    max_rmse_increase: regression: (variant RMSE - baseline RMSE) / baseline
      RMSE may be at most this (relative, e.g. 0.05 is 5% higher RMSE).
    max_size_bytes: the variant's file may be at most this many bytes on
      disk (None: no limit).
    max_p99_ms: the variant's batch-1 p99 latency may be at most this
      (None: no limit).
  """
  max_accuracy_drop: float
  max_size_bytes: Optional[int] = None
  max_p99_ms: Optional[float] = None
  max_rmse_increase: float = 0.05

  def __post_init__(self):
    if not (isinstance(self.max_accuracy_drop, (int, float)) and
            0.0 <= self.max_accuracy_drop <= 1.0):
      raise ConfigError(
          'Budget.max_accuracy_drop must be a number in [0, 1] (an absolute '
          f'accuracy difference), got {self.max_accuracy_drop!r}.')
    if isinstance(self.max_rmse_increase, bool) or not (
        isinstance(self.max_rmse_increase, (int, float)) and
        0.0 <= self.max_rmse_increase < math.inf):
      raise ConfigError(
          'Budget.max_rmse_increase must be a number >= 0 (a fraction of the '
          f'baseline RMSE), got {self.max_rmse_increase!r}.')
    if self.max_size_bytes is not None and not (
        isinstance(self.max_size_bytes, int) and self.max_size_bytes > 0):
      raise ConfigError('Budget.max_size_bytes must be a positive integer or '
                        f'None, got {self.max_size_bytes!r}.')
    if self.max_p99_ms is not None and not (
        isinstance(self.max_p99_ms, (int, float)) and self.max_p99_ms > 0):
      raise ConfigError('Budget.max_p99_ms must be a positive number or None, '
                        f'got {self.max_p99_ms!r}.')

  def to_dict(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, values: Mapping[str, Any]) -> 'Budget':
    _reject_unknown(cls, values)
    return cls(**dict(values))


@dataclasses.dataclass(frozen=True)
class SliceGate:
  """The gate's per-slice term: the budget on every slice, plus an allowance.

  A variant within the budget overall may still lose more on one slice (an
  island, a sex) than the budget allows, and the overall figure averages
  that away. Each slice of at least ``min_slice_size`` selection-split
  examples is gated on its own: the variant's drop there may be at most the
  budget plus ``allowance_se`` standard errors of the baseline's metric on
  that slice (``slice_allowance``), so that a small slice's sampling noise
  alone does not reject a variant.

  Attributes:
    columns: the slicing specs, each a tuple of feature keys of the raw
      eval examples (one key: a slice per value; several: a cross).
    names: the same specs in the column names as written (what reports
      say).
    min_slice_size: the fewest selection-split examples of a gated slice.
    allowance_se: the allowance in standard errors.
  """
  columns: Tuple[Tuple[str, ...], ...] = ()
  names: Tuple[Tuple[str, ...], ...] = ()
  min_slice_size: int = leantfx_config.DEFAULT_MIN_SLICE_SIZE
  allowance_se: float = DEFAULT_SLICE_ALLOWANCE_SE

  def __post_init__(self):
    object.__setattr__(self, 'columns',
                       leantfx_config.check_slices(self.columns))
    object.__setattr__(self, 'names', tuple(tuple(n) for n in self.names)
                       or self.columns)
    if len(self.names) != len(self.columns) or any(
        len(n) != len(c) for n, c in zip(self.names, self.columns)):
      raise ConfigError(
          f'SliceGate.names {self.names} must name the columns of '
          f'{self.columns}, one name per column.')
    if isinstance(self.min_slice_size, bool) or not isinstance(
        self.min_slice_size, int) or self.min_slice_size < 1:
      raise ConfigError('SliceGate.min_slice_size must be a whole number >= '
                        f'1, got {self.min_slice_size!r}.')
    if not (isinstance(self.allowance_se, (int, float)) and
            0 <= self.allowance_se < math.inf):
      raise ConfigError('SliceGate.allowance_se must be a number >= 0, got '
                        f'{self.allowance_se!r}.')

  def to_dict(self) -> Dict[str, Any]:
    return {'columns': [list(c) for c in self.columns],
            'names': [list(n) for n in self.names],
            'min_slice_size': self.min_slice_size,
            'allowance_se': self.allowance_se}

  @classmethod
  def from_dict(cls, values: Mapping[str, Any]) -> 'SliceGate':
    _reject_unknown(cls, values)
    values = dict(values)
    for key in ('columns', 'names'):
      if key in values:
        values[key] = tuple(tuple(v) for v in values[key])
    return cls(**values)


def slice_allowance(quality: quality_lib.Quality, baseline: np.ndarray,
                    labels: np.ndarray, allowance_se: float) -> float:
  """The sampling allowance of a slice: ``allowance_se`` standard errors.

  Classification: the binomial standard error of the baseline's accuracy
  on the slice's n examples, sqrt(p (1 - p) / n), with p = (right + 1) /
  (n + 2) (a slice the baseline gets all right still has an error bar).
  Regression: the delta-method standard error of the baseline's RMSE,
  relative like the budget: sd(e^2) / (2 mean(e^2) sqrt(n)) for its errors
  e (0 when it is exact).

  Args:
    quality: the metric.
    baseline: the baseline's class ids (classification) or predictions
      (regression) on the slice's examples.
    labels: their labels.
    allowance_se: the number of standard errors.
  """
  n = len(labels)
  if quality.higher_is_better:
    right = float(np.sum(np.asarray(baseline) == np.asarray(labels)))
    p = (right + 1.0) / (n + 2.0)
    return float(allowance_se * math.sqrt(p * (1.0 - p) / n))
  squared = (np.asarray(baseline, np.float64).reshape(-1) -
             np.asarray(labels, np.float64).reshape(-1)) ** 2
  mean = float(np.mean(squared))
  if mean == 0:
    return 0.0
  return float(allowance_se * np.std(squared) / (2.0 * mean * math.sqrt(n)))


@dataclasses.dataclass(frozen=True)
class GateDecision:
  """The verdict on one variant.

  Attributes:
    variant: the measured variant.
    blessed: whether it is within the budget.
    reasons: one line per budget term, saying how it compared.
    accuracy_drop: classification: baseline accuracy minus variant accuracy
      (None for a regression).
    rmse_increase: regression: (variant RMSE - baseline RMSE) / baseline
      RMSE (None for a classifier).
    agreement: classification: the fraction of examples where the variant
      predicts the baseline's class (None when either has no class_ids).
    lost: classification: the fraction of examples the baseline classifies
      right and the variant wrong, its negative flips (None without the
      labels or class_ids); the gate's second accuracy term.
    worst_slice: with a SliceGate, the gated slice where the variant came
      closest to (or went furthest past) its slice bound: {'slice',
      'count', the metric, 'baseline', the drop, 'allowance', 'bound'}
      (None: no slices, or none large enough to gate).
    slice_rejections: the slices the variant lost too much on, one line
      each (they are among the reasons too).
  """
  variant: VariantMetrics
  blessed: bool
  reasons: Tuple[str, ...]
  accuracy_drop: Optional[float] = None
  rmse_increase: Optional[float] = None
  agreement: Optional[float] = None
  lost: Optional[float] = None
  worst_slice: Optional[Dict[str, Any]] = None
  slice_rejections: Tuple[str, ...] = ()

  def to_dict(self) -> Dict[str, Any]:
    return {
        'variant': self.variant.to_dict(),
        'blessed': self.blessed,
        'reasons': list(self.reasons),
        'accuracy_drop': self.accuracy_drop,
        'rmse_increase': self.rmse_increase,
        'agreement': self.agreement,
        'lost': self.lost,
        'worst_slice': self.worst_slice,
        'slice_rejections': list(self.slice_rejections),
    }

  @classmethod
  def from_dict(cls, values: Mapping[str, Any]) -> 'GateDecision':
    def number(key):
      value = values.get(key)
      return None if value is None else float(value)
    return cls(
        variant=VariantMetrics.from_dict(values['variant']),
        blessed=bool(values['blessed']),
        reasons=tuple(values['reasons']),
        accuracy_drop=number('accuracy_drop'),
        rmse_increase=number('rmse_increase'),
        agreement=number('agreement'),
        lost=number('lost'),
        worst_slice=values.get('worst_slice'),
        slice_rejections=tuple(values.get('slice_rejections') or ()))

  def drop(self, quality: quality_lib.Quality) -> float:
    """The variant's drop in the quality's metric (positive is worse)."""
    return getattr(self, quality.drop_name)


def _finite(value) -> bool:
  return value is not None and math.isfinite(value)


def gate(baseline: VariantMetrics, variants: Sequence[VariantMetrics],
         budget: Budget,
         quality: quality_lib.Quality = quality_lib.ACCURACY,
         labels: Optional[Sequence[int]] = None,
         slices: Optional[Mapping[str, np.ndarray]] = None,
         slice_gate: Optional[SliceGate] = None
        ) -> List[GateDecision]:
  """Blesses the variants within the budget.

  Args:
    baseline: the unoptimized model's metrics; its quality is the reference.
    variants: the candidates.
    budget: the limits.
    quality: the metric and its drop's bound (accuracy and
      ``max_accuracy_drop``; RMSE and ``max_rmse_increase``).
    labels: the true class (or target) of each example the variants were
      scored on, in their class_ids' (predictions') order: with them the
      gate also bounds the examples a classifier loses (see ``_lost``).
    slices: {slicing spec name: each scored example's slice name}
      (slice_keys), for the per-slice term; needs labels and slice_gate.
    slice_gate: the per-slice term's size floor and allowance.

  Returns:
    One GateDecision per variant, in the order given.

  Raises:
    ConfigError: the baseline's metric is not a number.
    ValueError: slices without labels, or not one slice per scored example.
  """
  reference = quality.value(baseline)
  if not _finite(reference):
    raise ConfigError(
        f'The baseline {baseline.name!r} has no finite {quality.name} '
        f'({reference!r}); cannot gate variants against it.')
  bound = getattr(budget, quality.budget_field)
  decisions = []
  for variant in variants:
    reasons = []
    blessed = True
    value = quality.value(variant)
    drop = quality.drop(reference, value) if _finite(value) else math.inf
    if drop > bound:
      blessed = False
      reasons.append(f'{quality.label} {drop:.3f} > {bound}')
    else:
      reasons.append(f'{quality.label} {drop:.3f} <= {bound}')
    worst, rejections = None, ()
    if slices:
      worst, rejections = _slice_term(baseline, variant, labels, slices,
                                      slice_gate or SliceGate(), bound,
                                      quality)
      if rejections:
        blessed = False
        reasons.extend(rejections)
      elif worst is not None:
        reasons.append(
            f"worst slice {worst['slice']}: {quality.label} "
            f"{worst[quality.drop_name]:.3f} <= {bound} + "
            f"{worst['allowance']:.3f} allowance (n={worst['count']})")
    agreement = _agreement(baseline, variant)
    lost = _lost(baseline, variant, labels)
    if lost is not None:
      if lost > bound + 1e-9:
        blessed = False
        reasons.append(f'lost {lost:.3f} of the examples (right in the '
                       f'baseline, wrong here) > {bound}')
      else:
        reasons.append(f'lost {lost:.3f} of the examples (right in the '
                       f'baseline, wrong here) <= {bound}')
    if budget.max_size_bytes is not None:
      if variant.size_bytes > budget.max_size_bytes:
        blessed = False
        reasons.append(
            f'size {variant.size_bytes} B > {budget.max_size_bytes} B')
      else:
        reasons.append(
            f'size {variant.size_bytes} B <= {budget.max_size_bytes} B')
    if budget.max_p99_ms is not None:
      p99 = variant.latency_p99_ms
      if not _finite(p99) or p99 > budget.max_p99_ms:
        blessed = False
        reasons.append(f'p99 latency {p99:.3f} ms > {budget.max_p99_ms} ms')
      else:
        reasons.append(f'p99 latency {p99:.3f} ms <= {budget.max_p99_ms} ms')
    decisions.append(
        GateDecision(variant=variant, blessed=blessed, reasons=tuple(reasons),
                     agreement=agreement, lost=lost, worst_slice=worst,
                     slice_rejections=tuple(rejections),
                     **{quality.drop_name: float(drop)}))
  return decisions


def _per_example(record: VariantMetrics,
                 quality: quality_lib.Quality) -> Optional[np.ndarray]:
  """A variant's class id (or prediction) of every scored example."""
  values = (record.class_ids if quality.higher_is_better else
            record.predictions)
  return None if values is None else np.asarray(values)


def _slice_term(baseline: VariantMetrics, variant: VariantMetrics,
                labels, slices: Mapping[str, np.ndarray],
                slice_gate: SliceGate, bound: float,
                quality: quality_lib.Quality
               ) -> Tuple[Optional[Dict[str, Any]], List[str]]:
  """The worst gated slice and the lines of the slices past their bound.

  A variant without per-example results (figures recorded without them)
  fails the term: it cannot be shown to keep every slice.
  """
  if labels is None:
    raise ValueError('gate() got slices without labels: the per-slice term '
                     'scores each slice against its labels.')
  truth = np.asarray(labels).reshape(-1)
  reference = _per_example(baseline, quality)
  values = _per_example(variant, quality)
  if reference is None or values is None or len(values) != len(truth) or (
      len(reference) != len(truth)):
    return None, [f'per-slice {quality.label} unknown: {variant.name!r} '
                  'has no per-example results on the scored examples']
  worst, rejections = None, []
  for spec, keys in slices.items():
    keys = np.asarray(keys)
    if len(keys) != len(truth):
      raise ValueError(
          f'gate() got {len(keys)} slice keys of {spec!r} for {len(truth)} '
          'scored examples; pass the slices of the split the variants were '
          'measured on.')
    for name in sorted({k for k in keys.tolist() if k is not None}):
      rows = keys == name
      count = int(np.sum(rows))
      if count < slice_gate.min_slice_size:
        continue
      before = quality.value(quality.scores(
          _as_scores(reference[rows], quality), truth[rows]))
      after = quality.value(quality.scores(
          _as_scores(values[rows], quality), truth[rows]))
      drop = quality.drop(before, after)
      allowance = slice_allowance(quality, reference[rows], truth[rows],
                                  slice_gate.allowance_se)
      record = {'slice': name, 'count': count, quality.name: after,
                'baseline': before, quality.drop_name: drop,
                'allowance': allowance, 'bound': bound + allowance}
      if worst is None or (drop - record['bound'] >
                           worst[quality.drop_name] - worst['bound']):
        worst = record
      if drop > bound + allowance + 1e-9:
        rejections.append(
            f'slice {name}: {quality.label} {drop:.3f} > {bound} + '
            f'{allowance:.3f} allowance (n={count})')
  return worst, rejections


def _as_scores(values: np.ndarray, quality: quality_lib.Quality) -> np.ndarray:
  """Per-example results in the form Quality.scores takes.

  A classifier's class ids become one-hot scores (argmax gives them back);
  a regression's predictions are scores already.
  """
  if not quality.higher_is_better:
    return values
  ids = values.astype(np.int64).reshape(-1)
  scores = np.zeros((len(ids), int(ids.max(initial=0)) + 1))
  scores[np.arange(len(ids)), ids] = 1.0
  return scores


def _comparable(baseline: VariantMetrics, variant: VariantMetrics) -> bool:
  return not (baseline.class_ids is None or variant.class_ids is None or
              len(baseline.class_ids) != len(variant.class_ids) or
              not baseline.class_ids)


def _agreement(baseline: VariantMetrics,
               variant: VariantMetrics) -> Optional[float]:
  """The fraction of examples where variant predicts baseline's class.

  Reported beside the gate's terms. Returns None when either has no
  class_ids (a regression, or figures recorded without them) or their
  lengths differ.
  """
  if not _comparable(baseline, variant):
    return None
  return float(np.mean(np.asarray(baseline.class_ids) ==
                       np.asarray(variant.class_ids)))


def _lost(baseline: VariantMetrics, variant: VariantMetrics,
          labels: Optional[Sequence[int]]) -> Optional[float]:
  """The fraction of examples right in the baseline and wrong in variant.

  The negative flip rate of a model update (Yan et al., "Positive-Congruent
  Training", CVPR 2021). The classifier's gate asks for it to be at most
  max_accuracy_drop as well as the accuracy drop. On the selection half of
  a small eval split (digits: 174 examples, where one point is 1.7
  examples) a drop within the budget can be luck for a variant whose errors
  are its own (a distilled student, a fine-tuned model): gains on some
  examples hide losses on others, and a distillation/int8 variant passed at
  <= 1 point there and lost 2.3 points on the report half. The accuracy
  drop is the lost share minus the gained share, so bounding the lost share
  bounds the drop by itself, without the gains; unlike agreement with the
  baseline (the term before it), it does not count against a variant the
  examples it gets right where the baseline was wrong. It does not make
  174 examples enough: an 8x distilled student 5 points short on the report
  half lost one selection example (docs/measurements.md).

  Returns:
    The share, or None without labels or comparable class_ids.

  Raises:
    ValueError: labels given, but not one per scored example (the term
      would otherwise vanish from the gate without a word).
  """
  if labels is None or not _comparable(baseline, variant):
    return None
  truth = np.asarray(labels).reshape(-1)
  if len(truth) != len(baseline.class_ids):
    raise ValueError(
        f'gate() got {len(truth)} labels for the {len(baseline.class_ids)} '
        f'examples {baseline.name!r} and {variant.name!r} were scored on; '
        'pass the labels of the split they were measured on.')
  right_before = np.asarray(baseline.class_ids) == truth
  wrong_now = np.asarray(variant.class_ids) != truth
  return float(np.mean(right_before & wrong_now))


def select(decisions: Sequence[GateDecision],
           policy: str = SMALLEST,
           quality: quality_lib.Quality = quality_lib.ACCURACY
          ) -> Optional[GateDecision]:
  """Chooses one blessed variant.

  Policies (POLICY_DESCRIPTIONS): 'smallest' (fewest bytes on disk, then
  most accurate), 'smallest_download' (fewest gzipped bytes, then most
  accurate), 'fastest' (lowest p99, then lowest p50, then smallest on disk),
  'most_accurate' (highest accuracy, then smallest on disk). Remaining ties
  keep the order given. For a regression model "accurate" means lowest RMSE
  (the ``quality``'s direction).

  Args:
    decisions: the output of gate().
    policy: one of POLICIES.
    quality: the metric the accuracy terms rank by.

  Returns:
    The chosen decision, or None when no variant is blessed.

  Raises:
    ConfigError: unknown policy.
  """
  if policy not in POLICIES:
    raise ConfigError(f'Unknown selection policy {policy!r}; use one of '
                      f'{POLICIES}.')
  blessed = [d for d in decisions if d.blessed]
  if not blessed:
    return None
  def better(d):
    return quality.better_first(quality.value(d.variant))

  keys = {
      SMALLEST: lambda d: (d.variant.size_bytes, better(d)),
      SMALLEST_DOWNLOAD: lambda d: (d.variant.gzipped_bytes, better(d)),
      FASTEST: lambda d: (d.variant.latency_p99_ms, d.variant.latency_p50_ms,
                          d.variant.size_bytes),
      MOST_ACCURATE: lambda d: (better(d), d.variant.size_bytes),
  }
  return min(blessed, key=keys[policy])


def split_eval(data: LabeledData,
               selection_fraction: float = DEFAULT_SELECTION_FRACTION
              ) -> Tuple[LabeledData, LabeledData]:
  """Cuts the eval set into a selection split and a report split.

  Deterministic: a fixed-seed permutation of the example indices, the first
  round(fraction * n) of it selecting (each split keeps the original order).
  The same eval set always gives the same two splits.

  Args:
    data: the eval set.
    selection_fraction: share of the examples that select, in (0, 1).

  Returns:
    (selection, report), disjoint, together the whole eval set.

  Raises:
    ConfigError: the fraction is outside (0, 1), or the eval set is too
      small to give both splits at least one example.
  """
  if isinstance(selection_fraction, bool) or not isinstance(
      selection_fraction, (int, float)) or not 0 < selection_fraction < 1:
    raise ConfigError(
        'The selection fraction must be a number strictly between 0 and 1 '
        '(the rest of the eval set is the report split), got '
        f'{selection_fraction!r}.')
  selecting, reporting = _split_indices(len(data), selection_fraction)

  def subset(indices):
    return LabeledData({k: np.asarray(v)[indices]
                        for k, v in data.features.items()},
                       np.asarray(data.labels)[indices])

  return subset(selecting), subset(reporting)


def _split_indices(n: int, selection_fraction: float
                  ) -> Tuple[np.ndarray, np.ndarray]:
  """The example indices of the selection and the report split (sorted)."""
  cut = int(round(selection_fraction * n))
  if cut < 1 or cut >= n:
    raise ConfigError(
        f'The eval split has {n} example(s): too few to hold out a report '
        f'split with selection fraction {selection_fraction} (each split '
        'needs at least one). Give the eval split more examples.')
  order = np.random.default_rng(_SPLIT_SEED).permutation(n)
  return np.sort(order[:cut]), np.sort(order[cut:])


def split_slices(slices: Mapping[str, np.ndarray],
                 selection_fraction: float = DEFAULT_SELECTION_FRACTION
                ) -> Tuple[Dict[str, np.ndarray], Dict[str, np.ndarray]]:
  """The slice keys of split_eval's selection and report splits.

  Args:
    slices: {spec name: every eval example's slice name}, in the order of
      the eval set given to split_eval.
    selection_fraction: as given to split_eval.

  Returns:
    (selection's slice keys, report's), each example where split_eval puts
    it.
  """
  if not slices:
    return {}, {}
  n = len(next(iter(slices.values())))
  selecting, reporting = _split_indices(n, selection_fraction)
  return ({k: np.asarray(v)[selecting] for k, v in slices.items()},
          {k: np.asarray(v)[reporting] for k, v in slices.items()})


@dataclasses.dataclass(frozen=True)
class HeldOut:
  """A decision re-measured on the report split the selection never saw.

  Attributes:
    name: the variant's name.
    num_examples: examples in the report split.
    accuracy: classification: its accuracy on the report split.
    accuracy_drop: classification: the baseline's report-split accuracy
      minus that.
    rmse: regression: its RMSE on the report split (target units).
    mae: regression: its MAE on the report split (target units).
    rmse_increase: regression: (its RMSE - the baseline's) / the baseline's,
      on the report split.
  """
  name: str
  num_examples: int
  accuracy: Optional[float] = None
  accuracy_drop: Optional[float] = None
  rmse: Optional[float] = None
  mae: Optional[float] = None
  rmse_increase: Optional[float] = None

  def to_dict(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Fastest:
  """The blessed variant with the lowest batch-1 p50, of every runtime.

  Its speed-ups compare like with like: p50s of the runtimes' own calls on
  one thread with the inputs bound once (leantfx/runtimes/timing.py), never
  the SavedModel's Python call with TensorFlow's default threads, which is
  timed another way.

  Attributes:
    name: the variant's name.
    runtime: 'tflite', 'openvino' or 'onnx'.
    mode: its mode (float32, int8, ...).
    p50_ms: its batch-1 p50 latency.
    vs_float32: the trained model's float32 p50 in the same runtime over
      this one's (1.0 when it is that variant), or None when that variant
      was not built or not timed.
    vs_tflite_float32: the trained model's TFLite float32 p50 over this
      one's, or None when that variant was not built.
  """
  name: str
  runtime: str
  mode: str
  p50_ms: float
  vs_float32: Optional[float]
  vs_tflite_float32: Optional[float]

  def to_dict(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)


def _trained_float32_p50(baseline: VariantMetrics,
                         decisions: Sequence[GateDecision],
                         runtime: str) -> Optional[float]:
  """The p50 of the trained model's float32 variant in ``runtime``."""
  for d in decisions:
    v = d.variant
    if (v.runtime == runtime and v.technique == baseline.technique
        and (v.tflite_mode or '').endswith('float32')
        and _finite(v.latency_p50_ms)):
      return v.latency_p50_ms
  return None


def fastest(baseline: VariantMetrics, decisions: Sequence[GateDecision]
           ) -> Optional[Fastest]:
  """The fastest blessed variant over all runtimes, or None if none is.

  Each runtime's variants were timed in their own interleaved rounds; the
  TFLite float32 speed-up compares p50s measured in different rounds on one
  machine, the same-runtime one p50s of the same rounds.
  """
  blessed = [d.variant for d in decisions
             if d.blessed and _finite(d.variant.latency_p50_ms)]
  if not blessed:
    return None
  best = min(blessed, key=lambda v: v.latency_p50_ms)
  same = _trained_float32_p50(baseline, decisions, best.runtime)
  tflite = _trained_float32_p50(baseline, decisions, measure.TFLITE)
  return Fastest(
      name=best.name, runtime=best.runtime, mode=best.tflite_mode,
      p50_ms=best.latency_p50_ms,
      vs_float32=same / best.latency_p50_ms if same else None,
      vs_tflite_float32=tflite / best.latency_p50_ms if tflite else None)


def held_out(baseline: VariantMetrics, decisions: Sequence[GateDecision],
             report_data: LabeledData,
             scores_of: Callable[[VariantMetrics, LabeledData],
                                 Mapping[str, float]],
             quality: quality_lib.Quality = quality_lib.ACCURACY
            ) -> Dict[str, HeldOut]:
  """Report-split quality of the baseline and every decision, by name.

  Args:
    baseline: the reference the gate used.
    decisions: the output of gate().
    report_data: the report split (see split_eval).
    scores_of: measures one variant on a data set, giving ``quality.scores``
      (e.g. measure.scores_on on its path).
    quality: the metric and its drop.

  Returns:
    variant name -> HeldOut, the baseline included (drop 0).
  """
  reference = dict(scores_of(baseline, report_data))
  result = {baseline.name: HeldOut(
      baseline.name, len(report_data), **reference,
      **{quality.drop_name: 0.0})}
  for decision in decisions:
    v = decision.variant
    scores = dict(scores_of(v, report_data))
    result[v.name] = HeldOut(
        v.name, len(report_data), **scores,
        **{quality.drop_name: quality.drop(quality.value(reference),
                                           quality.value(scores))})
  return result


def _reject_unknown(cls, values: Mapping[str, Any]) -> None:
  names = {f.name for f in dataclasses.fields(cls)}
  unknown = sorted(set(values) - names)
  if unknown:
    raise ConfigError(f'Unknown {cls.__name__} field(s) {unknown}; known: '
                      f'{sorted(names)}.')
