"""The summary's word on the baselines: their figures, the gate they set, and
what to try when a model falls short of it.

Reads what the run recorded (pipeline/run_summary.py: the Baselines
document and the gate on the Evaluator's blessing), so that the printed
summary, the run record and ``watch`` say the same.
"""
from typing import Any, Dict, List, Optional

from leantfx.components.baselines import report
from leantfx.components.relative_gate import rule

# The model's figure in the Evaluator's metrics, by the gate's metric.
_METRIC_NAMES = {rule.ACCURACY: 'sparse_categorical_accuracy',
                 rule.RMSE: 'root_mean_squared_error'}


def _gate(summary) -> Optional[rule.Gate]:
  return rule.Gate.from_json(summary.gate) if summary.gate else None


def model_figure(summary) -> Optional[float]:
  """The candidate's eval figure the gate bounds (accuracy or RMSE)."""
  gate = _gate(summary)
  if gate is None:
    return None
  return summary.metrics.get(_METRIC_NAMES[gate.metric])


def baseline_lines(summary) -> List[str]:
  """The baselines' figures, one line each, after a line with their rows."""
  doc = summary.baselines
  if not doc:
    return []
  lines = [f'  baselines (the same split, {report.rows_text(doc)}; '
           f'{doc["seconds"]:.1f} s):']
  lines += [f'    {line}' for line in report.lines(doc)]
  return lines


def gate_text(summary) -> Optional[str]:
  """'>= 0.9594 (beats ...; at most 0.01 below ...)', or None: no gate."""
  gate = _gate(summary)
  if gate is None or gate.combined is None:
    return None
  sign = '>=' if gate.higher_is_better else '<='
  return (f'{sign} {gate.combined:.4f}: '
          + '; '.join(b.reason for b in gate.bounds))


def failed_bounds(summary) -> List[rule.Bound]:
  """The gate's bounds the candidate missed (empty: it met them all)."""
  gate, value = _gate(summary), model_figure(summary)
  if gate is None or value is None:
    return []
  return gate.failed(value)


def _advice(summary, failed: List[rule.Bound]) -> List[str]:
  sources = {b.source for b in failed}
  tips = []
  if rule.TRIVIAL in sources:
    tips.append('the model does no better than the trivial baseline: check '
                'that the features carry the label (the column roles the '
                'plan printed) and that the run trained at all')
  tips.append('train longer (--train-steps N, --epochs N) or search the '
              "network's hyperparameters (--tune TRIALS, or --tune auto: "
              'only when the network trails the strong baseline)')
  if rule.STRONG in sources:
    tips.append('accept a wider gap to the strong baseline with '
                '--baseline-margin POINTS, or gate on an absolute bound '
                'alone with --baseline-margin off --min-accuracy X')
  return [f'  try: {tip}' for tip in tips]


def not_blessed_lines(summary) -> List[str]:
  """Why the gate refused the model, with the baselines' figures and tips."""
  if summary.blessed is not False or not summary.gate:
    return []
  failed = failed_bounds(summary)
  value = model_figure(summary)
  if not failed:
    return ['  not blessed, though it met the baselines\' bound: another '
            'threshold failed (no worse than the last blessed model, a '
            'slice, AUC or R^2)']
  metric = summary.gate['metric']
  lines = [f'  not blessed: {metric} {value:.4f} misses '
           f'{b.value:.4f}, {b.reason}' for b in failed]
  return lines + _advice(summary, failed)


def record(summary) -> Dict[str, Any]:
  """The run record's 'baselines' and 'gate' entries."""
  gate = None
  if summary.gate:
    gate = dict(summary.gate, model=model_figure(summary),
                failed=[b.source for b in failed_bounds(summary)])
  return {'baselines': summary.baselines, 'gate': gate}
