"""Gating optimized variants against a budget, and choosing one.

``gate`` compares every variant with the baseline (the trained model as it
would be served without optimization) and blesses those within the
``Budget``; each decision keeps its reasons, e.g. 'accuracy drop 0.031 >
0.01'. ``select`` picks one blessed variant by a policy; a variant outside the
budget can never be selected.
"""
import dataclasses
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from leantfx.components.optimize.measure import VariantMetrics
from leantfx.errors import ConfigError

SMALLEST = 'smallest'
FASTEST = 'fastest'
MOST_ACCURATE = 'most_accurate'
POLICIES = (SMALLEST, FASTEST, MOST_ACCURATE)


@dataclasses.dataclass(frozen=True)
class Budget:
  """What a variant may cost relative to the baseline, and at most absolutely.

  Attributes:
    max_accuracy_drop: baseline accuracy minus variant accuracy may be at
      most this (absolute, e.g. 0.01 is one percentage point).
    max_size_bytes: the variant's file may be at most this many bytes on
      disk (None: no limit).
    max_p99_ms: the variant's batch-1 p99 latency may be at most this
      (None: no limit).
  """
  max_accuracy_drop: float
  max_size_bytes: Optional[int] = None
  max_p99_ms: Optional[float] = None

  def __post_init__(self):
    if not (isinstance(self.max_accuracy_drop, (int, float)) and
            0.0 <= self.max_accuracy_drop <= 1.0):
      raise ConfigError(
          'Budget.max_accuracy_drop must be a number in [0, 1] (an absolute '
          f'accuracy difference), got {self.max_accuracy_drop!r}.')
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
class GateDecision:
  """The verdict on one variant.

  Attributes:
    variant: the measured variant.
    blessed: whether it is within the budget.
    reasons: one line per budget term, saying how it compared.
    accuracy_drop: baseline accuracy minus variant accuracy.
  """
  variant: VariantMetrics
  blessed: bool
  reasons: Tuple[str, ...]
  accuracy_drop: float

  def to_dict(self) -> Dict[str, Any]:
    return {
        'variant': self.variant.to_dict(),
        'blessed': self.blessed,
        'reasons': list(self.reasons),
        'accuracy_drop': self.accuracy_drop,
    }

  @classmethod
  def from_dict(cls, values: Mapping[str, Any]) -> 'GateDecision':
    return cls(
        variant=VariantMetrics.from_dict(values['variant']),
        blessed=bool(values['blessed']),
        reasons=tuple(values['reasons']),
        accuracy_drop=float(values['accuracy_drop']))


def _finite(value) -> bool:
  return value is not None and math.isfinite(value)


def gate(baseline: VariantMetrics, variants: Sequence[VariantMetrics],
         budget: Budget) -> List[GateDecision]:
  """Blesses the variants within the budget.

  Args:
    baseline: the unoptimized model's metrics; its accuracy is the reference.
    variants: the candidates.
    budget: the limits.

  Returns:
    One GateDecision per variant, in the order given.

  Raises:
    ConfigError: the baseline accuracy is not a number.
  """
  if not _finite(baseline.accuracy):
    raise ConfigError(
        f'The baseline {baseline.name!r} has no finite accuracy '
        f'({baseline.accuracy!r}); cannot gate variants against it.')
  decisions = []
  for variant in variants:
    reasons = []
    blessed = True
    drop = baseline.accuracy - variant.accuracy if _finite(
        variant.accuracy) else math.inf
    if drop > budget.max_accuracy_drop:
      blessed = False
      reasons.append(f'accuracy drop {drop:.3f} > {budget.max_accuracy_drop}')
    else:
      reasons.append(f'accuracy drop {drop:.3f} <= {budget.max_accuracy_drop}')
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
                     accuracy_drop=float(drop)))
  return decisions


def select(decisions: Sequence[GateDecision],
           policy: str = SMALLEST) -> Optional[GateDecision]:
  """Chooses one blessed variant.

  Policies: 'smallest' (fewest bytes on disk, then most accurate), 'fastest'
  (lowest p99, then lowest p50, then smallest), 'most_accurate' (highest
  accuracy, then smallest). Remaining ties keep the order given.

  Args:
    decisions: the output of gate().
    policy: one of POLICIES.

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
  keys = {
      SMALLEST: lambda d: (d.variant.size_bytes, -d.variant.accuracy),
      FASTEST: lambda d: (d.variant.latency_p99_ms, d.variant.latency_p50_ms,
                          d.variant.size_bytes),
      MOST_ACCURATE: lambda d: (-d.variant.accuracy, d.variant.size_bytes),
  }
  return min(blessed, key=keys[policy])


def _reject_unknown(cls, values: Mapping[str, Any]) -> None:
  names = {f.name for f in dataclasses.fields(cls)}
  unknown = sorted(set(values) - names)
  if unknown:
    raise ConfigError(f'Unknown {cls.__name__} field(s) {unknown}; known: '
                      f'{sorted(names)}.')
