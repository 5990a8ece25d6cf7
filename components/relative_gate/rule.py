"""The relative gate's rule: the bound a model's eval figure must reach.

A classifier is blessed when its eval accuracy
  * beats the majority class significantly: a one-sided test of "no better
    than the majority class" at SIGNIFICANCE, by the normal approximation
    of the binomial on the n eval rows: accuracy >= p0 + z * sqrt(p0 (1 - p0)
    / n), p0 the majority baseline's eval accuracy, z the (1 - SIGNIFICANCE)
    normal quantile (2.326);
  * is at most ``margin`` (accuracy points) below the strong baseline's;
  * reaches ``--min-accuracy`` when one was given;
and, as before, is no worse than the last blessed model (the Evaluator's
change threshold, which this rule leaves as it is).

A regression is blessed when its eval RMSE
  * beats the train mean significantly: its mean squared error is below the
    mean's by more than chance on n rows allows. Under "no better than the
    mean" with normal errors, n * MSE / MSE0 is chi-square with n degrees of
    freedom, whose relative spread is sqrt(2 / n): RMSE <= RMSE0 * sqrt(1 -
    z * sqrt(2 / n));
  * is at most ``margin`` (a fraction) above the strong baseline's RMSE;
  * is at most ``--max-rmse`` when one was given.

A baseline that was not fit adds no bound (the summary says which).
"""
import dataclasses
import math
import statistics
from typing import Any, Dict, List, Optional, Tuple

ACCURACY = 'accuracy'
RMSE = 'rmse'
# One-sided: the chance that a model no better than the trivial baseline is
# blessed on the eval rows.
SIGNIFICANCE = 0.01
# Bound sources.
TRIVIAL = 'trivial'
STRONG = 'strong'
ABSOLUTE = 'absolute'


@dataclasses.dataclass(frozen=True)
class Bound:
  """One part of the gate: a bound on the eval figure, and where it is from."""
  source: str  # TRIVIAL, STRONG or ABSOLUTE.
  value: float
  reason: str


@dataclasses.dataclass(frozen=True)
class Gate:
  """The bounds on one eval figure: accuracy (at least) or RMSE (at most)."""
  metric: str
  bounds: Tuple[Bound, ...]

  @property
  def higher_is_better(self) -> bool:
    return self.metric == ACCURACY

  @property
  def combined(self) -> Optional[float]:
    """The one bound that holds them all (None: no bound)."""
    if not self.bounds:
      return None
    values = [b.value for b in self.bounds]
    return max(values) if self.higher_is_better else min(values)

  def failed(self, value: float) -> List[Bound]:
    """The bounds ``value`` misses."""
    if self.higher_is_better:
      return [b for b in self.bounds if value < b.value]
    return [b for b in self.bounds if value > b.value]

  def to_json(self) -> Dict[str, Any]:
    return {'metric': self.metric,
            'bounds': [dataclasses.asdict(b) for b in self.bounds]}

  @classmethod
  def from_json(cls, values: Dict[str, Any]) -> 'Gate':
    return cls(values['metric'],
               tuple(Bound(**b) for b in values['bounds']))


def _z(significance: float) -> float:
  return statistics.NormalDist().inv_cdf(1.0 - significance)


def majority_bound(p0: float, n: int,
                   significance: float = SIGNIFICANCE) -> float:
  """The accuracy that beats a majority-class accuracy p0 on n rows.

  Raises:
    ValueError: n < 1 or p0 outside [0, 1].
  """
  if n < 1 or not 0.0 <= p0 <= 1.0:
    raise ValueError(f'majority_bound needs n >= 1 and p0 in [0, 1], got '
                     f'n={n}, p0={p0}.')
  return p0 + _z(significance) * math.sqrt(p0 * (1.0 - p0) / n)


def mean_bound(rmse0: float, n: int,
               significance: float = SIGNIFICANCE) -> float:
  """The RMSE that beats the mean's RMSE rmse0 on n rows (0 if none can).

  Raises:
    ValueError: n < 1 or rmse0 < 0.
  """
  if n < 1 or rmse0 < 0:
    raise ValueError(f'mean_bound needs n >= 1 and rmse0 >= 0, got n={n}, '
                     f'rmse0={rmse0}.')
  return rmse0 * math.sqrt(max(0.0, 1.0 - _z(significance) *
                               math.sqrt(2.0 / n)))


def _trivial(metric: str, value: Optional[float], n: int,
             significance: float) -> List[Bound]:
  if value is None:
    return []
  if metric == ACCURACY:
    bound = majority_bound(value, n, significance)
    return [Bound(TRIVIAL, bound,
                  f'beats the majority class ({value:.4f}) on {n} eval rows '
                  f'(one-sided binomial test, p < {significance:g})')]
  bound = mean_bound(value, n, significance)
  return [Bound(TRIVIAL, bound,
                f'beats the train mean (RMSE {value:.4g}) on {n} eval rows '
                f'(one-sided chi-square test, p < {significance:g})')]


def _strong(metric: str, value: Optional[float], model: str,
            margin: float) -> List[Bound]:
  if value is None:
    return []
  if metric == ACCURACY:
    return [Bound(STRONG, value - margin,
                  f'at most {margin:g} below the strong baseline '
                  f'({model}: {value:.4f})')]
  return [Bound(STRONG, value * (1.0 + margin),
                f'at most {margin:.0%} above the strong baseline\'s RMSE '
                f'({model}: {value:.4g})')]


def gate(metric: str, trivial_value: Optional[float],
         strong_value: Optional[float], strong_model: str, eval_rows: int,
         margin: Optional[float], absolute: Optional[float] = None,
         significance: float = SIGNIFICANCE) -> Gate:
  """The gate's bounds.

  Args:
    metric: ACCURACY or RMSE.
    trivial_value: the majority class's eval accuracy, or the mean's RMSE
      (None: not fit).
    strong_value: the strong baseline's eval figure (None: not fit).
    strong_model: the strong baseline, in words.
    eval_rows: the eval rows the figures are measured on.
    margin: how far behind the strong baseline a model may be (accuracy
      points; RMSE: a fraction); None turns the relative bounds off.
    absolute: --min-accuracy or --max-rmse, when given.
    significance: the one-sided test's level.

  Returns:
    The Gate.

  Raises:
    ValueError: an unknown metric or a negative margin.
  """
  if metric not in (ACCURACY, RMSE):
    raise ValueError(f'Unknown gate metric {metric!r}.')
  if margin is not None and margin < 0:
    raise ValueError(f'The baseline margin must be >= 0, got {margin}.')
  bounds: List[Bound] = []
  if margin is not None:
    bounds += _trivial(metric, trivial_value, eval_rows, significance)
    bounds += _strong(metric, strong_value, strong_model, margin)
  if absolute is not None:
    flag = '--min-accuracy' if metric == ACCURACY else '--max-rmse'
    bounds.append(Bound(ABSOLUTE, absolute, f'{flag} {absolute:g}'))
  return Gate(metric, tuple(bounds))
