"""Held-out comparisons: one arm against another over paired seeds.

A recipe or default chosen by a search is chosen on a selection split and
reported on a split the search never scored. On the report split both arms
run once per seed, paired (the same seed, initial weights and batches for
both), and the per-seed differences decide the verdict:

  the rule: "within noise" when |mean difference| <= t * SE, where SE is the
  standard error of the paired per-seed differences (their sample standard
  deviation / sqrt(seeds)) and t the two-sided 95% quantile of Student's t
  with seeds - 1 degrees of freedom (4.30 for 3 seeds, 2.78 for 5, about 2
  for many); otherwise "better" or "worse" by the sign of the mean. It is a
  paired t-test at 5%: stricter than "2 standard errors" for few seeds,
  where 2 SE would call 1 draw in 5 of pure noise a difference.

The standard deviation is never taken below the metric's resolution (one
report example's share for an accuracy; 0 for a continuous error such as
RMSE): per-seed differences are only known to one example, and seeds that
agree to the example (standard deviation 0) would otherwise make a
difference of a single example per seed "better" or "worse".
"""
import math
import statistics
from typing import Any, Dict, Sequence

WITHIN_NOISE = 'within noise'
BETTER = 'better'
WORSE = 'worse'
RULE = ('within noise: |mean of the paired per-seed differences| <= t(0.975, '
        'seeds - 1) x their standard error (a paired t-test at 5%; the '
        'standard deviation at least the resolution, one report example for '
        'an accuracy)')


def t_quantile(degrees_of_freedom: int) -> float:
  """The two-sided 95% quantile of Student's t (scipy's t.ppf(0.975, df))."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  return float(stats.t.ppf(0.975, degrees_of_freedom))


def compare(differences: Sequence[float], higher_is_better: bool = True,
            resolution: float = 0.0) -> Dict[str, Any]:
  """The verdict on paired per-seed differences (arm - other arm).

  Args:
    differences: one difference per seed, in the metric's units.
    higher_is_better: True for accuracy (a positive difference is better),
      False for an error such as RMSE.
    resolution: the smallest step a difference can take (1 / report
      examples for an accuracy), the floor of the standard deviation.

  Returns:
    {'mean', 'min', 'max', 'sd', 'se', 't', 'half_width', 'seeds',
    'verdict'}: the verdict is WITHIN_NOISE, BETTER or WORSE (for the first
    arm) by the module's rule.

  Raises:
    ValueError: fewer than 2 differences (no spread to judge by), or a
      difference that is not a finite number.
  """
  values = [float(d) for d in differences]
  if resolution < 0:
    raise ValueError(f'The resolution must be >= 0, got {resolution}.')
  if len(values) < 2:
    raise ValueError(
        f'A verdict needs the differences of at least 2 seeds, got '
        f'{len(values)}: one seed has no spread to compare the mean with.')
  if not all(math.isfinite(v) for v in values):
    raise ValueError(f'Every difference must be a finite number: {values}.')
  mean = statistics.mean(values)
  sd = statistics.stdev(values)
  se = max(sd, resolution) / math.sqrt(len(values))
  t = t_quantile(len(values) - 1)
  half_width = t * se
  # A tolerance for float noise in differences that are equal on paper.
  if abs(mean) <= half_width + 1e-12:
    verdict = WITHIN_NOISE
  elif (mean > 0) == higher_is_better:
    verdict = BETTER
  else:
    verdict = WORSE
  return {'mean': mean, 'min': min(values), 'max': max(values), 'sd': sd,
          'se': se, 't': t, 'half_width': half_width, 'seeds': len(values),
          'verdict': verdict}


def figure(result: Dict[str, Any], scale: float = 1.0, unit: str = '',
           digits: int = 2) -> str:
  """'+0.20 point (-0.56..+0.83 over 3 seeds), within noise' for a compare().

  Args:
    result: compare()'s dict.
    scale: multiplies the numbers (100 turns an accuracy into points).
    unit: printed after the mean.
    digits: decimals.
  """
  def number(value):
    return f'{value * scale:+.{digits}f}'
  return (f"{number(result['mean'])}{' ' + unit if unit else ''} "
          f"({number(result['min'])}..{number(result['max'])} over "
          f"{result['seeds']} seeds, 95% interval +-"
          f"{result['half_width'] * scale:.{digits}f}), {result['verdict']}")
