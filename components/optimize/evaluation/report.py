"""The optimization report: a table of variants and four plots.

``write_report`` saves everything the report shows as ``variants.json`` and
then calls ``regenerate``, which rebuilds ``report.md``, ``report.html`` and the
PNG plots beside them from that file alone (``leantfx report <dir>`` calls it
too). The HTML is self-contained apart from the PNGs, which it references by
relative name, so the folder can be copied or served as it is.

The quality column is the task's metric (``quality.Quality``): accuracy and
its drop for a classifier, RMSE (target units) and its relative increase for
a regression model, with MAE beside it.

Plots (matplotlib, Agg canvas; no pyplot global state):
  accuracy_vs_size.png     accuracy against bytes on disk;
  accuracy_vs_p99.png      accuracy against batch-1 p99 latency;
  sparsity_per_layer.png   kernel sparsity per layer, for variants with zeros;
  training_curves.png      loss and accuracy per epoch of each technique run.

The two scatter plots name only the variants worth reading about: those on
the plot's Pareto front (``pareto_front``: no other variant is at least as
good on the metric and as small, or as fast, and better in one of the two)
and the picks of every runtime. The
other variants are drawn unnamed in grey. Names are placed one by one where
they overlap no name placed before (``_place_labels``), with a leader line
when they sit away from their point. An axis whose values span more than
10x is drawn on a log scale.
"""
import datetime
import html
import json
import math
import os
from typing import (AbstractSet, Any, Dict, List, Mapping, Optional,
                    Sequence, Tuple)

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.legend_handler import HandlerTuple
from matplotlib.transforms import Bbox

from leantfx.components.optimize.evaluation import quality as quality_lib
from leantfx.components.optimize.evaluation.measure import VariantMetrics
from leantfx.components.optimize.evaluation.selection import Budget
from leantfx.components.optimize.evaluation.selection import GateDecision
from leantfx.components.optimize.evaluation.selection import HeldOut
from leantfx.components.optimize.evaluation.selection import POLICY_DESCRIPTIONS
from leantfx.components.optimize.evaluation.selection import POLICY_SIZE
from leantfx.components.optimize.evaluation.selection import SliceGate
from leantfx.errors import ConfigError

VARIANTS_FILE = 'variants.json'
REPORT_MD = 'report.md'
REPORT_HTML = 'report.html'
ACCURACY_VS_SIZE = 'accuracy_vs_size.png'
ACCURACY_VS_P99 = 'accuracy_vs_p99.png'
SPARSITY_PER_LAYER = 'sparsity_per_layer.png'
TRAINING_CURVES = 'training_curves.png'
NO_VARIANT_BLESSED = 'no variant blessed'


def _columns(quality: quality_lib.Quality,
             sliced: bool = False) -> Tuple[str, ...]:
  drop = ('drop vs baseline' if quality.higher_is_better else
          'increase vs baseline')
  report_drop = 'report drop' if quality.higher_is_better else (
      'report increase')
  return (('variant', 'technique chain', 'tflite mode', 'runtime') +
          quality.fields + (drop,) + (('worst slice',) if sliced else ()) +
          ('size (B)', 'gzipped (B)', 'p50 (ms)', 'p99 (ms)', 'params',
           'sparsity', 'blessed', 'reasons', 'selected') +
          tuple(f'report {f}' for f in quality.fields) + (report_drop,))


def worst_slice_cell(worst: Optional[Mapping[str, Any]],
                     quality: quality_lib.Quality) -> str:
  """The worst slice as the table shows it: slice, count, metric, change.

  E.g. 'island=Dream (n=12): accuracy 0.75, -0.25 vs float' (the change
  is the variant's metric minus the float model's on that slice).
  """
  if not worst:
    return '-'
  value = worst[quality.name]
  return (f"{worst['slice']} (n={worst['count']}): {quality.name} "
          f"{_fmt(value)}, {value - worst['baseline']:+.4g} vs float")


def write_report(report_dir: str,
                 baseline: VariantMetrics,
                 decisions: Sequence[GateDecision],
                 selected: Optional[GateDecision],
                 *,
                 budget: Budget,
                 policy: str,
                 title: str = 'Model optimization report',
                 source_model_uri: Optional[str] = None,
                 pushed_to: Optional[str] = None,
                 failures: Sequence[Mapping[str, str]] = (),
                 runtime_picks: Optional[Mapping[str, Mapping[str, Any]]] = None,
                 held_out: Optional[Mapping[str, HeldOut]] = None,
                 quality: quality_lib.Quality = quality_lib.ACCURACY,
                 left_out: Optional[Mapping[str, str]] = None,
                 budgets: Optional[Mapping[str, Any]] = None,
                 served: Optional[Mapping[str, Mapping[str, Any]]] = None,
                 slices: Optional[SliceGate] = None
                ) -> Dict[str, str]:
  """Writes variants.json and the report built from it.

  Args:
    report_dir: output directory (created if missing).
    baseline: the unoptimized model's metrics.
    decisions: gate() output, one per variant.
    selected: select() output, or None when nothing was blessed.
    budget: the budget the variants were gated against.
    policy: the selection policy used.
    title: the report's heading.
    source_model_uri: the trained model the variants came from.
    pushed_to: where the selected variant was pushed, if it was.
    failures: candidates or modes that raised and were skipped
      ({'candidate', 'stage', 'error'}).
    runtime_picks: per server runtime (openvino, onnx), the policy's pick
      among its variants and where it was pushed ({'selected', 'pushed_to'}).
    held_out: variant name -> its accuracy on the report split
      (selection.held_out), shown beside the selection-split accuracy.
    quality: the metric measured and gated on (accuracy, or RMSE).
    left_out: techniques not run for this task, with the reason.
    budgets: the Trainer's steps the techniques were capped by, the
      samples scored and calibrated on, the train split's caching, and
      each candidate's seconds and steps (flow.optimize).
    served: per runtime, what serving its pick in ``leantfx serve`` before
      the push found ({'passed', 'reason', 'figures'}:
      steps/serve_check.py).
    slices: the gate's per-slice term, when it had one (the table then
      shows each variant's worst slice).

  Returns:
    {'variants': path, 'markdown': path, 'html': path, 'plots': [paths]}.
  """
  os.makedirs(report_dir, exist_ok=True)
  record = {
      'title': title,
      'created_at': datetime.datetime.now(
          datetime.timezone.utc).isoformat(timespec='seconds'),
      'source_model_uri': source_model_uri,
      'task': quality.task,
      'metric': quality.name,
      'left_out': dict(left_out or {}),
      'budget': budget.to_dict(),
      'slices': slices.to_dict() if slices is not None else None,
      'policy': policy,
      'policy_size': POLICY_SIZE.get(policy),
      'policy_description': POLICY_DESCRIPTIONS.get(policy),
      'held_out': {name: h.to_dict() for name, h in (held_out or {}).items()},
      'baseline': baseline.to_dict(),
      'decisions': [d.to_dict() for d in decisions],
      'selected': selected.variant.name if selected else None,
      'pushed_to': pushed_to,
      'failures': [dict(f) for f in failures],
      'runtime_picks': {r: dict(p) for r, p in (runtime_picks or {}).items()},
      'budgets': dict(budgets or {}),
      'infra_validation': {r: dict(v) for r, v in (served or {}).items()},
  }
  with open(os.path.join(report_dir, VARIANTS_FILE), 'w',
            encoding='utf-8') as f:
    json.dump(record, f, indent=2, default=_json_default)
  return regenerate(report_dir)


def _json_default(value):
  # numpy scalars sneak into details (e.g. a float32 loss); keep their value.
  if hasattr(value, 'item'):
    return value.item()
  return str(value)


def regenerate(report_dir: str) -> Dict[str, Any]:
  """Rebuilds report.md, report.html and the plots from variants.json.

  Args:
    report_dir: a directory holding variants.json.

  Returns:
    {'variants': path, 'markdown': path, 'html': path, 'plots': [paths]}.

  Raises:
    ConfigError: variants.json is missing or not a report record.
  """
  path = os.path.join(report_dir, VARIANTS_FILE)
  if not os.path.isfile(path):
    raise ConfigError(
        f'{report_dir} has no {VARIANTS_FILE}; point at the report '
        'directory of an optimization run (the ModelOptimizer report '
        'artifact).')
  try:
    with open(path, encoding='utf-8') as f:
      record = json.load(f)
    baseline = VariantMetrics.from_dict(record['baseline'])
    decisions = [GateDecision.from_dict(d) for d in record['decisions']]
  except (ValueError, KeyError, TypeError) as e:
    raise ConfigError(f'{path} is not a leantfx optimization report record: '
                      f'{e}. Re-run the optimizer to rewrite it.') from e

  quality = quality_lib.for_task(
      record.get('task', quality_lib.CLASSIFICATION))
  picks = [record.get('selected')] + [
      p.get('selected') for p in (record.get('runtime_picks') or {}).values()]
  plots = _plot_all(report_dir, baseline, decisions, quality,
                    {name for name in picks if name})
  rows = _rows(baseline, decisions, picks, record.get('held_out') or {},
               quality, sliced=_sliced(record))
  md_path = os.path.join(report_dir, REPORT_MD)
  with open(md_path, 'w', encoding='utf-8') as f:
    f.write(_markdown(record, rows, plots, quality))
  html_path = os.path.join(report_dir, REPORT_HTML)
  with open(html_path, 'w', encoding='utf-8') as f:
    f.write(_html(record, rows, plots, quality))
  return {'variants': path, 'markdown': md_path, 'html': html_path,
          'plots': [os.path.join(report_dir, p) for p in plots]}


# ------------------------------------------------------------------ table ---


def _sliced(record: Mapping[str, Any]) -> bool:
  """Whether the record's gate had slices (its table has a worst slice)."""
  return bool((record.get('slices') or {}).get('columns'))


def _fmt(value, digits=4) -> str:
  if value is None:
    return '-'
  if isinstance(value, bool):
    return 'yes' if value else 'no'
  if isinstance(value, float):
    if not math.isfinite(value):
      return str(value)
    return f'{value:.{digits}g}'
  return str(value)


def _rows(baseline: VariantMetrics, decisions: Sequence[GateDecision],
          selected: Sequence[Optional[str]],
          held_out: Mapping[str, Mapping[str, Any]],
          quality: quality_lib.Quality,
          sliced: bool = False) -> List[List[str]]:
  """Table rows; `selected` names the pick of each runtime."""
  rows = [_row(baseline, None, False, quality, sliced) + _held_out_cells(
      held_out.get(baseline.name), True, quality)]
  for d in decisions:
    rows.append(_row(d.variant, d, d.variant.name in selected, quality,
                     sliced)
                + _held_out_cells(held_out.get(d.variant.name), False,
                                  quality))
  return rows


def _held_out_cells(values: Optional[Mapping[str, Any]],
                    is_baseline: bool,
                    quality: quality_lib.Quality) -> List[str]:
  if not values:
    return ['-'] * (len(quality.fields) + 1)
  return [_fmt(values.get(f)) for f in quality.fields] + [
      '(reference)' if is_baseline else
      f"{values[quality.drop_name]:+.4f}"]


def _row(m: VariantMetrics, decision: Optional[GateDecision],
         selected: bool, quality: quality_lib.Quality,
         sliced: bool = False) -> List[str]:
  worst = []
  if sliced:
    worst = ['(reference)' if decision is None else
             worst_slice_cell(decision.worst_slice, quality)]
  return [
      m.name, m.technique, m.tflite_mode or '-', m.runtime,
      *[_fmt(getattr(m, f)) for f in quality.fields],
      ('(reference)' if decision is None else
       f'{decision.drop(quality):+.4f}'),
      *worst,
      _fmt(m.size_bytes), _fmt(m.gzipped_bytes),
      _fmt(m.latency_p50_ms, 3), _fmt(m.latency_p99_ms, 3), _fmt(m.params),
      _fmt(m.sparsity, 3),
      '(baseline)' if decision is None else _fmt(decision.blessed),
      '' if decision is None else '; '.join(decision.reasons),
      'SELECTED' if selected else ''
  ]


def served_lines(served: Mapping[str, Mapping[str, Any]],
                 seconds: Optional[float] = None) -> List[str]:
  """One line per pick served by ``leantfx serve`` before its push, and
  what serving them all cost."""
  lines = []
  if seconds is not None and any(
      (o.get('figures') or {}) for o in served.values()):
    lines.append(f'Serving the picks in one leantfx serve before the push '
                 f'took {seconds:.1f} s.')
  for runtime, outcome in sorted(served.items()):
    figures = outcome.get('figures') or {}
    if not outcome.get('passed') or 'latency_p50_ms_batch1' not in figures:
      if outcome.get('passed') and outcome.get('reason'):
        lines.append(f'Served before the push ({runtime}): '
                     f"{outcome['reason']}.")
      continue
    worst = max(figures['rest_max_abs_diff'], figures['grpc_max_abs_diff'],
                figures['batch1_max_abs_diff'])
    lines.append(
        f'Served before the push ({runtime}): leantfx serve answered '
        f"{int(figures['rows_checked'])} raw eval rows as the pick does "
        f'offline (max abs difference {worst:.2g}, REST and gRPC); batch 1 '
        f"p50 {figures['latency_p50_ms_batch1']:.2f} ms, p99 "
        f"{figures['latency_p99_ms_batch1']:.2f} ms; "
        f"{int(figures['concurrent_clients'])} clients p50 "
        f"{figures['latency_p50_ms_concurrent']:.2f} ms, p99 "
        f"{figures['latency_p99_ms_concurrent']:.2f} ms (REST, the request "
        'and its JSON included).')
  return lines


def budget_lines(budgets: Mapping[str, Any]) -> List[str]:
  """The report's lines on step budgets, samples and time per candidate."""
  lines = []
  steps = budgets.get('trainer_steps')
  if 'trainer_steps' in budgets:
    caps = budgets.get('technique_step_caps') or {}
    unit = min(caps.values()) if caps else steps
    shared = (f" (all together at most {budgets['step_budget']}x the "
              f"Trainer's steps, at least {budgets['min_technique_steps']:,}"
              ' each)' if 'step_budget' in budgets else '')
    lines.append(
        f'Technique budgets: the Trainer trained {steps:,} steps; each '
        f'technique fine-tunes at most {unit:,} steps, distillation at most '
        f'{caps.get("distillation", 2 * unit):,}{shared}.' if steps else
        'Technique budgets: the model records no Trainer steps; each '
        'technique trained for its own epochs.')
  split = budgets.get('train_split') or {}
  if split:
    lines.append(
        f"Train split: {split['batches']:,} batches, " + (
            'cached in memory.' if split['cached'] else
            f"above {split['cache_max_records']:,} records: streamed from "
            f"its files every pass (shuffle buffer "
            f"{split['shuffle_buffer']:,})."))
  samples = budgets.get('samples') or {}
  if samples:
    scored = (f"the first {samples['eval_rows_scored']:,} eval rows (a "
              f"sample: the eval split holds more than "
              f"{samples['scoring_max_examples']:,})"
              if samples.get('eval_sampled') else
              f"all {samples['eval_rows_scored']:,} eval rows")
    lines.append(
        f'Samples: variants scored on {scored}; int8 calibrated on '
        f"{samples['calibration_samples']:,} train rows; techniques search "
        f"on {samples['technique_examples']:,} train rows" + (
            f"; raw-feature exports checked on {samples['raw_eval_rows']:,} "
            'raw eval rows.' if samples.get('raw_eval_rows') else '.'))
  times = budgets.get('candidates') or {}
  if times:
    lines.append('Time per candidate (techniques + TFLite exports): ' +
                 ', '.join(candidate_time(name, t)
                           for name, t in times.items()) + '.')
  return lines


def candidate_time(name: str, timing: Mapping[str, Any]) -> str:
  """'pruning 12.3 s (540 steps)'."""
  seconds = timing.get('techniques_s', 0) + timing.get('tflite_s', 0)
  steps = timing.get('train_steps')
  return f'{name} {seconds:.1f} s' + (f' ({steps:,} steps)' if steps else '')


def _summary_lines(record: Mapping[str, Any],
                   quality: quality_lib.Quality) -> List[str]:
  budget = record['budget']
  terms = [f"{quality.label} <= {budget[quality.budget_field]}"]
  if budget.get('max_size_bytes') is not None:
    terms.append(f"size <= {budget['max_size_bytes']} B")
  if budget.get('max_p99_ms') is not None:
    terms.append(f"p99 <= {budget['max_p99_ms']} ms")
  slices = record.get('slices') or {}
  if slices.get('columns'):
    terms.append(
        f"on every slice of {', '.join(','.join(n) for n in slices['names'])}"
        f" with at least {slices['min_slice_size']} examples: {quality.label}"
        f" <= {budget[quality.budget_field]} + {slices['allowance_se']:g} "
        "standard errors of the float model's figure on the slice")
  description = record.get('policy_description')
  lines = [
      f"Source model: {record.get('source_model_uri') or '-'}",
      f"Budget: {', '.join(terms)}; selection policy: {record['policy']}" + (
          f' ({description}).' if description else '.'),
  ]
  held_out = record.get('held_out') or {}
  if held_out:
    report_examples = next(iter(held_out.values()))['num_examples']
    lines.append(
        f"{quality.name}, {quality.label} and the gate: the selection "
        f"split ({record['baseline']['num_examples']} eval examples). "
        f'Report {quality.name} and {quality.label}: the other '
        f'{report_examples} eval examples, which neither the gate, the '
        'policy nor the techniques saw.')
  if record.get('selected'):
    lines.append(f"Selected: {record['selected']}" + (
        f" (pushed to {record['pushed_to']})" if record.get('pushed_to')
        else ''))
  else:
    lines.append(f'Selected: none ({NO_VARIANT_BLESSED}); nothing pushed.')
  for runtime, pick in sorted((record.get('runtime_picks') or {}).items()):
    if pick.get('selected'):
      lines.append(f"Selected for {runtime}: {pick['selected']}" + (
          f" (pushed to {pick['pushed_to']})" if pick.get('pushed_to')
          else ''))
    else:
      lines.append(f'Selected for {runtime}: none ({NO_VARIANT_BLESSED}); '
                   'nothing pushed.')
  lines += served_lines(record.get('infra_validation') or {},
                        (record.get('budgets') or {}).get('serve_check_s'))
  for failure in record.get('failures') or ():
    if failure.get('not_pushed'):
      lines.append(f"Not pushed ({failure['not_pushed']}): "
                   f"{failure['candidate']} failed at {failure['stage']} "
                   f"in leantfx serve: {failure['error']}")
      continue
    if failure.get('replaced_by'):
      lines.append(f"Gave way: {failure['candidate']} failed at "
                   f"{failure['stage']}, so {failure['replaced_by']} is "
                   f"pushed in its place: {failure['error']}")
      continue
    if failure.get('pushed_inputs') == 'transformed':
      lines.append("Pushed taking the transformed features: "
                   f"{failure['candidate']} failed at {failure['stage']}: "
                   f"{failure['error']}")
      continue
    lines.append(f"Skipped: candidate {failure['candidate']} failed at "
                 f"{failure['stage']}: {failure['error']}")
  lines += budget_lines(record.get('budgets') or {})
  for technique, reason in sorted((record.get('left_out') or {}).items()):
    lines.append(f"Not run for a {record.get('task')} model: {technique} "
                 f'({reason}).')
  if quality.higher_is_better:
    drop = ('Drop vs baseline = baseline accuracy - variant accuracy '
            '(positive is worse).')
  else:
    drop = ('Increase vs baseline = (variant RMSE - baseline RMSE) / '
            'baseline RMSE (positive is worse); RMSE and MAE in the '
            "target's units.")
  lines.append(
      f'{drop} Latency: batch 1, after warm-up, in the runtime the '
      'variant ships in, on transformed features: it excludes the Transform '
      '(preprocessing), which a raw-feature export adds in front. Sparsity: '
      'fraction of exactly-zero kernel weights.')
  return lines


def _markdown(record, rows, plots, quality) -> str:
  columns = _columns(quality, _sliced(record))
  out = [f"# {record['title']}", '']
  out += [f'- {line}' for line in _summary_lines(record, quality)]
  out += ['', '| ' + ' | '.join(columns) + ' |',
          '|' + '---|' * len(columns)]
  for row in rows:
    out.append('| ' + ' | '.join(c.replace('|', '\\|') for c in row) + ' |')
  out.append('')
  for name, caption in plots.items():
    out += [f'![{caption}]({name})', '']
  return '\n'.join(out)


def _html(record, rows, plots, quality) -> str:
  esc = html.escape
  columns = _columns(quality, _sliced(record))
  blessed_at, selected_at = columns.index('blessed'), columns.index('selected')
  reasons_at = columns.index('reasons') + 1  # CSS nth-child counts from 1
  head = ''.join(f'<th>{esc(c)}</th>' for c in columns)
  body = []
  for row in rows:
    css = ' class="selected"' if row[selected_at] else (
        ' class="rejected"' if row[blessed_at] == 'no' else '')
    body.append(f'<tr{css}>' + ''.join(f'<td>{esc(c)}</td>' for c in row) +
                '</tr>')
  figures = ''.join(
      f'<figure><img src="{esc(name)}" alt="{esc(caption)}">'
      f'<figcaption>{esc(caption)}</figcaption></figure>'
      for name, caption in plots.items())
  summary = ''.join(f'<li>{esc(line)}</li>'
                    for line in _summary_lines(record, quality))
  return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{esc(record['title'])}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; font-size: 0.85em; }}
th, td {{ border: 1px solid #bbb; padding: 0.25em 0.5em; text-align: right; }}
td:nth-child(-n+4), td:nth-child({reasons_at}) {{ text-align: left; }}
tr.selected {{ background: #d8f5d8; font-weight: bold; }}
tr.rejected {{ color: #777; }}
figure {{ display: inline-block; margin: 1em; }}
img {{ max-width: 100%; }}
</style></head><body>
<h1>{esc(record['title'])}</h1>
<ul>{summary}</ul>
<table><thead><tr>{head}</tr></thead><tbody>
{''.join(body)}
</tbody></table>
{figures}
<p><small>Generated {esc(record.get('created_at') or '')} from {VARIANTS_FILE}.</small></p>
</body></html>
"""


# ------------------------------------------------------------------ plots ---

_BLESSED_COLOR = '#2a9d2a'
_REJECTED_COLOR = '#c0392b'
_OTHER_COLOR = '#c4c4c4'
_PICK_COLOR = '#1f5fbf'
_LABEL_FONT_SIZE = 7
# A name is tried at eight directions around its point on rings of growing
# radius (points), nearest first: it stays beside its point when it can.
_LABEL_OFFSETS = tuple(
    (radius * dx, radius * dy) for radius in (7, 16, 27, 40, 56, 75)
    for dx, dy in ((1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (-1, 0),
                   (0, 1), (0, -1)))
# From the second ring on, a leader line joins a name to its point.
_LEADER_FROM_POINTS = 12
# Space kept clear around a name and around a marker, in points.
_LABEL_PAD_POINTS = 1.5
_MARKER_RADIUS_POINTS = 4
# An axis whose values span more than this factor is drawn on a log scale.
_LOG_SPAN = 10.0


def pareto_front(points: Sequence[Sequence[float]]) -> List[int]:
  """The indices of the points that no other point dominates.

  Every coordinate is a cost, lower is better: pass -accuracy, not accuracy
  (``Quality.better_first`` gives that key). A point dominates another when
  it is no worse in every coordinate and better in at least one, so points
  that tie exactly are all on the front, and of two points with the same
  latency only the better one is. A point with a non-finite coordinate (a
  latency that was not measured) is neither on the front nor dominates.

  Args:
    points: one sequence of costs per point, all of the same length.

  Returns:
    The indices of the points on the front, in input order.

  Raises:
    ValueError: the points do not all have the same number of coordinates.
  """
  lengths = sorted({len(p) for p in points})
  if len(lengths) > 1:
    raise ValueError('pareto_front needs points with the same number of '
                     f'coordinates; got lengths {lengths}.')
  finite = [i for i, p in enumerate(points)
            if all(math.isfinite(c) for c in p)]

  def dominates(a, b):
    return (all(x <= y for x, y in zip(a, b)) and
            any(x < y for x, y in zip(a, b)))

  return [i for i in finite
          if not any(dominates(points[j], points[i]) for j in finite)]


def _figure(width=6.4, height=4.4):
  # A bare Figure on the Agg canvas: no pyplot, no global backend switch.
  figure = Figure(figsize=(width, height), dpi=100)
  FigureCanvasAgg(figure)
  return figure


def _plot_all(report_dir, baseline, decisions, quality,
              picks: AbstractSet[str] = frozenset()) -> Dict[str, str]:
  # The file names stay: a regression's plots show RMSE on the same axes.
  plots = {}
  for name, caption, field, axis, unit in (
      (ACCURACY_VS_SIZE, f'{quality.title} vs size on disk', 'size_bytes',
       'size on disk', 'bytes'),
      (ACCURACY_VS_P99, f'{quality.title} vs batch-1 p99 latency',
       'latency_p99_ms', 'p99 latency', 'ms')):
    plots[name] = caption
    _scatter_figure(baseline, decisions, field, axis, unit, quality,
                    picks).savefig(os.path.join(report_dir, name))
  if _plot_sparsity(os.path.join(report_dir, SPARSITY_PER_LAYER), decisions):
    plots[SPARSITY_PER_LAYER] = 'Kernel sparsity per layer'
  if _plot_history(os.path.join(report_dir, TRAINING_CURVES), decisions):
    plots[TRAINING_CURVES] = 'Training curves of the technique runs'
  return plots


def _log_scale(values: Sequence[float]) -> bool:
  """Whether values spanning more than _LOG_SPAN x read best on a log axis."""
  finite = [v for v in values if v is not None and math.isfinite(v)]
  return (bool(finite) and min(finite) > 0 and
          max(finite) > _LOG_SPAN * min(finite))


def _scatter_figure(baseline, decisions, field, axis, unit,
                    quality=quality_lib.ACCURACY,
                    picks: AbstractSet[str] = frozenset()) -> Figure:
  """The metric against `field`: the front and the picks named, others grey.

  Args:
    baseline: the unoptimized model, drawn as a star.
    decisions: the gated variants.
    field: the VariantMetrics field on the x axis (a cost: lower is better).
    axis: the x axis's name; unit: its unit.
    quality: the metric on the y axis.
    picks: names of the variants picked for a runtime (and pushed).

  Returns:
    The figure, laid out and with its names placed, ready to save.
  """
  points = [(getattr(d.variant, field), quality.value(d.variant))
            for d in decisions]
  front = pareto_front([(x, quality.better_first(y)) for x, y in points])
  picked = [i for i, d in enumerate(decisions) if d.variant.name in picks]
  # Picks are named first, so they get the places nearest their points.
  named = picked + [i for i in front if i not in picked]
  figure = _figure(8.4, 4.8)
  ax = figure.add_subplot()
  handles, labels = [], []

  def scatter(indices, **style):
    return ax.scatter([points[i][0] for i in indices],
                      [points[i][1] for i in indices], **style)

  ax.scatter([getattr(baseline, field)], [quality.value(baseline)],
             c='black', marker='*', s=120, zorder=4)
  handles.append(ax.collections[-1])
  labels.append(f'baseline ({baseline.name})')
  for blessed, label, color, marker in (
      (True, 'blessed', _BLESSED_COLOR, 'o'),
      (False, 'rejected', _REJECTED_COLOR, 'x')):
    members = [i for i in named if decisions[i].blessed == blessed]
    if members:
      handles.append(scatter(members, c=color, marker=marker, zorder=3))
      labels.append(label)
  if picked:
    handles.append(scatter(picked, s=150, facecolors='none',
                           edgecolors=_PICK_COLOR, linewidths=1.4, zorder=3))
    labels.append('pick (per runtime)')
  if len(front) > 1:
    steps = sorted(points[i] for i in front)
    handles.append(ax.step([x for x, _ in steps], [y for _, y in steps],
                           where='post', linestyle='--', linewidth=0.8,
                           color='0.55', zorder=1)[0])
    labels.append('Pareto front')
  others = []
  for blessed, marker in ((True, 'o'), (False, 'x')):
    members = [i for i, d in enumerate(decisions)
               if i not in named and d.blessed == blessed]
    if members:
      others.append(scatter(members, c=_OTHER_COLOR, marker=marker, s=20,
                            zorder=2))
  if others:
    # One legend entry showing both markers (blessed o, rejected x).
    handles.append(tuple(others))
    labels.append('other variants')
  ax.legend(handles, labels, loc='upper left', bbox_to_anchor=(1.02, 1.0),
            borderaxespad=0.0, fontsize=7,
            handler_map={tuple: HandlerTuple(ndivide=None)})
  log = _log_scale([x for x, _ in points] + [getattr(baseline, field)])
  if log:
    ax.set_xscale('log')
  ax.set_xlabel(f'{axis} ({unit}, log scale)' if log else f'{axis} ({unit})')
  ax.set_ylabel(f'eval {quality.name}')
  ax.grid(True, alpha=0.3)
  ax.margins(x=0.08, y=0.12)
  # Names are placed in display space on the final layout, so the limits
  # are fixed first (a leader line must not rescale the axes) and
  # tight_layout, which moves the axes, runs before.
  ax.set_xlim(ax.get_xlim())
  ax.set_ylim(ax.get_ylim())
  figure.tight_layout()
  _place_labels(ax, [points[i] for i in named],
                [decisions[i].variant.name for i in named],
                [i in picked for i in named],
                points + [(getattr(baseline, field), quality.value(baseline))])
  return figure


def _overlap(a: Bbox, b: Bbox) -> float:
  """The area two display boxes share (0 when they only touch)."""
  width = min(a.x1, b.x1) - max(a.x0, b.x0)
  height = min(a.y1, b.y1) - max(a.y0, b.y0)
  return width * height if width > 0 and height > 0 else 0.0


def _place_labels(ax, anchors, texts, strong, markers) -> None:
  """Names each anchor where its name overlaps no name placed before it.

  Greedy, in the order given: each name tries _LABEL_OFFSETS nearest first
  and takes the first place that stays inside the axes, clear of the names
  already placed and of the markers; where none is clear, the cheapest
  place: overlapping a name costs most, then leaving the axes, then each
  pixel of a marker covered and each pixel away from the point alike (so a
  name near its point may graze a marker rather than move far off).

  Args:
    ax: axes whose figure is laid out (tight_layout already applied).
    anchors: (x, y) in data coordinates, one per name.
    texts: the names.
    strong: per name, whether to set it in bold (a pick).
    markers: (x, y) of every point drawn, which names should not cover.
  """
  renderer = ax.figure.canvas.get_renderer()
  frame = ax.get_window_extent(renderer)
  pad = renderer.points_to_pixels(_LABEL_PAD_POINTS)
  radius = renderer.points_to_pixels(_MARKER_RADIUS_POINTS)
  marker_boxes = [
      Bbox.from_extents(u - radius, v - radius, u + radius, v + radius)
      for u, v in (ax.transData.transform(m) for m in markers
                   if all(math.isfinite(c) for c in m))]
  placed: List[Bbox] = []
  for (x, y), text, bold in zip(anchors, texts, strong):
    if not (math.isfinite(x) and math.isfinite(y)):
      continue  # no point drawn, nothing to name
    best = None
    for dx, dy in _LABEL_OFFSETS:
      label = ax.annotate(
          text, (x, y), xytext=(dx, dy), textcoords='offset points',
          ha='left' if dx > 0 else 'right' if dx < 0 else 'center',
          va='bottom' if dy > 0 else 'top' if dy < 0 else 'center',
          fontsize=_LABEL_FONT_SIZE, fontweight='bold' if bold else 'normal',
          zorder=5,
          # Keeps a name legible over grid and front lines; its padding
          # stays inside _LABEL_PAD_POINTS.
          bbox={'boxstyle': 'square,pad=0.1', 'facecolor': 'white',
                'edgecolor': 'none', 'alpha': 0.75})
      box = label.get_window_extent(renderer).padded(pad)
      clash = (1e6 * sum(_overlap(box, other) for other in placed) +
               1e3 * (box.width * box.height - _overlap(box, frame)) +
               sum(_overlap(box, m) for m in marker_boxes))
      # The ring's radius: every place of a ring is equally near.
      cost = clash + renderer.points_to_pixels(max(abs(dx), abs(dy)))
      if best is None or cost < best[0]:
        if best is not None:
          best[1].remove()
        best = (cost, label, box, dx, dy)
      else:
        label.remove()
      if clash == 0:
        break  # the rings grow: no later place can be cheaper
    _, label, box, dx, dy = best
    placed.append(box)
    if math.hypot(dx, dy) >= _LEADER_FROM_POINTS:
      _leader_line(ax, (x, y), box, radius)


def _leader_line(ax, anchor, box: Bbox, gap: float) -> None:
  """A thin line from a name's box to its point, stopping short of it."""
  to_display = ax.transData
  u, v = to_display.transform(anchor)
  # The nearest point of the box to the anchor.
  end_u, end_v = min(max(u, box.x0), box.x1), min(max(v, box.y0), box.y1)
  length = math.hypot(end_u - u, end_v - v)
  if length <= gap:
    return
  start_u = u + (end_u - u) * gap / length
  start_v = v + (end_v - v) * gap / length
  (x0, y0), (x1, y1) = to_display.inverted().transform(
      [(start_u, start_v), (end_u, end_v)])
  ax.plot([x0, x1], [y0, y1], color='0.45', linewidth=0.6, zorder=4)


def _plot_sparsity(path, decisions) -> bool:
  """Grouped bars of per-layer sparsity for variants that have zeros."""
  series = {}
  for d in decisions:
    per_layer = d.variant.details.get('layer_sparsity') or {}
    if any(v > 0 for v in per_layer.values()):
      # One bar group per technique chain: every TFLite mode of a chain
      # comes from the same Keras model.
      series.setdefault(d.variant.technique, per_layer)
  if not series:
    return False
  layers = []
  for per_layer in series.values():
    layers += [name for name in per_layer if name not in layers]
  figure = _figure(max(6.4, 0.9 * len(layers) + 2))
  ax = figure.add_subplot()
  width = 0.8 / len(series)
  for i, (technique, per_layer) in enumerate(series.items()):
    ax.bar([j + i * width for j in range(len(layers))],
           [per_layer.get(name, 0.0) for name in layers], width,
           label=technique)
  ax.set_xticks([j + 0.4 - width / 2 for j in range(len(layers))])
  ax.set_xticklabels(layers, rotation=30, ha='right', fontsize=7)
  ax.set_ylim(0, 1)
  ax.set_ylabel('fraction of zero kernel weights')
  ax.legend(fontsize=7)
  figure.tight_layout()
  figure.savefig(path)
  return True


def _plot_history(path, decisions) -> bool:
  """Loss and accuracy per epoch: one row of two panels per technique chain."""
  histories = {}
  for d in decisions:
    history = d.variant.details.get('history') or {}
    if history:
      histories.setdefault(d.variant.technique, history)
  if not histories:
    return False
  figure = _figure(10, 2.4 * len(histories) + 0.6)
  for row, (technique, history) in enumerate(histories.items()):
    loss_ax = figure.add_subplot(len(histories), 2, 2 * row + 1)
    acc_ax = figure.add_subplot(len(histories), 2, 2 * row + 2)
    for key, values, first_epoch in _epochs_in_sequence(history):
      # Distillation's loss is on the T^2-scaled soft-target scale, so each
      # chain gets its own axes rather than one shared scale.
      ax = loss_ax if 'loss' in key else acc_ax if 'acc' in key else None
      if ax is not None:
        ax.plot(range(first_epoch, first_epoch + len(values)), values,
                marker='.', label=key)
    for ax, name in ((loss_ax, 'loss'), (acc_ax, 'accuracy')):
      ax.set_title(f'{technique}: {name}', fontsize=8)
      ax.set_xlabel('epoch (a chain\'s steps in sequence)', fontsize=7)
      ax.tick_params(labelsize=7)
      ax.grid(True, alpha=0.3)
      if ax.lines:
        ax.legend(fontsize=6)
  figure.tight_layout()
  figure.savefig(path)
  return True


def _epochs_in_sequence(history: Mapping[str, Sequence[float]]):
  """Yields (key, values, first epoch): a chain's steps follow one another.

  Keys are '<step technique>/<metric>' (e.g. 'pruning/loss', 'pqat/loss');
  the second step's epochs start after the first step's last epoch.
  """
  lengths: Dict[str, int] = {}
  for key, values in history.items():
    step = key.split('/')[0] if '/' in key else ''
    lengths[step] = max(lengths.get(step, 0), len(values or ()))
  starts, epoch = {}, 1
  for step, length in lengths.items():
    starts[step] = epoch
    epoch += length
  for key, values in history.items():
    if values:
      yield key, values, starts[key.split('/')[0] if '/' in key else '']
