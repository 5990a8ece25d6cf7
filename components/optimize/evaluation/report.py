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
  accuracy_vs_size.png     accuracy against bytes on disk (log scale);
  accuracy_vs_p99.png      accuracy against batch-1 p99 latency;
  sparsity_per_layer.png   kernel sparsity per layer, for variants with zeros;
  training_curves.png      loss and accuracy per epoch of each technique run.
"""
import datetime
import html
import json
import math
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from leantfx.components.optimize.evaluation import quality as quality_lib
from leantfx.components.optimize.evaluation.measure import VariantMetrics
from leantfx.components.optimize.evaluation.selection import Budget
from leantfx.components.optimize.evaluation.selection import GateDecision
from leantfx.components.optimize.evaluation.selection import HeldOut
from leantfx.components.optimize.evaluation.selection import POLICY_DESCRIPTIONS
from leantfx.components.optimize.evaluation.selection import POLICY_SIZE
from leantfx.errors import ConfigError

VARIANTS_FILE = 'variants.json'
REPORT_MD = 'report.md'
REPORT_HTML = 'report.html'
ACCURACY_VS_SIZE = 'accuracy_vs_size.png'
ACCURACY_VS_P99 = 'accuracy_vs_p99.png'
SPARSITY_PER_LAYER = 'sparsity_per_layer.png'
TRAINING_CURVES = 'training_curves.png'
NO_VARIANT_BLESSED = 'no variant blessed'


def _columns(quality: quality_lib.Quality) -> Tuple[str, ...]:
  drop = ('drop vs baseline' if quality.higher_is_better else
          'increase vs baseline')
  report_drop = 'report drop' if quality.higher_is_better else (
      'report increase')
  return (('variant', 'technique chain', 'tflite mode', 'runtime') +
          quality.fields + (drop, 'size (B)', 'gzipped (B)', 'p50 (ms)',
                            'p99 (ms)', 'params', 'sparsity', 'blessed',
                            'reasons', 'selected') +
          tuple(f'report {f}' for f in quality.fields) + (report_drop,))


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
                 budgets: Optional[Mapping[str, Any]] = None
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
      each candidate's seconds and steps (executor.optimize).

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
  plots = _plot_all(report_dir, baseline, decisions, quality)
  rows = _rows(baseline, decisions, [record.get('selected')] + [
      p.get('selected') for p in (record.get('runtime_picks') or {}).values()],
               record.get('held_out') or {}, quality)
  md_path = os.path.join(report_dir, REPORT_MD)
  with open(md_path, 'w', encoding='utf-8') as f:
    f.write(_markdown(record, rows, plots, quality))
  html_path = os.path.join(report_dir, REPORT_HTML)
  with open(html_path, 'w', encoding='utf-8') as f:
    f.write(_html(record, rows, plots, quality))
  return {'variants': path, 'markdown': md_path, 'html': html_path,
          'plots': [os.path.join(report_dir, p) for p in plots]}


# ------------------------------------------------------------------ table ---


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
          quality: quality_lib.Quality) -> List[List[str]]:
  """Table rows; `selected` names the pick of each runtime."""
  rows = [_row(baseline, None, False, quality) + _held_out_cells(
      held_out.get(baseline.name), True, quality)]
  for d in decisions:
    rows.append(_row(d.variant, d, d.variant.name in selected, quality)
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
         selected: bool, quality: quality_lib.Quality) -> List[str]:
  return [
      m.name, m.technique, m.tflite_mode or '-', m.runtime,
      *[_fmt(getattr(m, f)) for f in quality.fields],
      ('(reference)' if decision is None else
       f'{decision.drop(quality):+.4f}'),
      _fmt(m.size_bytes), _fmt(m.gzipped_bytes),
      _fmt(m.latency_p50_ms, 3), _fmt(m.latency_p99_ms, 3), _fmt(m.params),
      _fmt(m.sparsity, 3),
      '(baseline)' if decision is None else _fmt(decision.blessed),
      '' if decision is None else '; '.join(decision.reasons),
      'SELECTED' if selected else ''
  ]


def budget_lines(budgets: Mapping[str, Any]) -> List[str]:
  """The report's lines on step budgets, samples and time per candidate."""
  lines = []
  steps = budgets.get('trainer_steps')
  if 'trainer_steps' in budgets:
    lines.append(
        f'Technique budgets: each fine-tuning at most the Trainer\'s {steps:,}'
        f' steps, distillation at most {2 * steps:,}.' if steps else
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
  for failure in record.get('failures') or ():
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
  columns = _columns(quality)
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
  columns = _columns(quality)
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
img {{ max-width: 560px; }}
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


def _figure(width=6.4, height=4.4):
  # A bare Figure on the Agg canvas: no pyplot, no global backend switch.
  figure = Figure(figsize=(width, height), dpi=100)
  FigureCanvasAgg(figure)
  return figure


def _plot_all(report_dir, baseline, decisions, quality) -> Dict[str, str]:
  # The file names stay: a regression's plots show RMSE on the same axes.
  plots = {}
  plots[ACCURACY_VS_SIZE] = f'{quality.title} vs size on disk'
  _scatter(os.path.join(report_dir, ACCURACY_VS_SIZE), baseline, decisions,
           'size_bytes', 'size on disk (bytes, log scale)', log=True,
           quality=quality)
  plots[ACCURACY_VS_P99] = f'{quality.title} vs batch-1 p99 latency'
  _scatter(os.path.join(report_dir, ACCURACY_VS_P99), baseline, decisions,
           'latency_p99_ms', 'p99 latency (ms, log scale)', log=True,
           quality=quality)
  if _plot_sparsity(os.path.join(report_dir, SPARSITY_PER_LAYER), decisions):
    plots[SPARSITY_PER_LAYER] = 'Kernel sparsity per layer'
  if _plot_history(os.path.join(report_dir, TRAINING_CURVES), decisions):
    plots[TRAINING_CURVES] = 'Training curves of the technique runs'
  return plots


def _scatter(path, baseline, decisions, field, xlabel, log,
             quality=quality_lib.ACCURACY) -> None:
  figure = _figure()
  ax = figure.add_subplot()
  groups = (('blessed', '#2a9d2a', 'o', [d for d in decisions if d.blessed]),
            ('rejected', '#c0392b', 'x',
             [d for d in decisions if not d.blessed]))
  for label, color, marker, members in groups:
    if members:
      ax.scatter([getattr(d.variant, field) for d in members],
                 [quality.value(d.variant) for d in members], c=color,
                 marker=marker, label=label)
  ax.scatter([getattr(baseline, field)], [quality.value(baseline)],
             c='black',
             marker='*', s=120, label=f'baseline ({baseline.name})')
  for d in decisions:
    ax.annotate(d.variant.name, (getattr(d.variant, field),
                                 quality.value(d.variant)),
                fontsize=6, xytext=(3, 3), textcoords='offset points')
  if log:
    ax.set_xscale('log')
  ax.set_xlabel(xlabel)
  ax.set_ylabel(f'eval {quality.name}')
  ax.grid(True, alpha=0.3)
  ax.legend(fontsize=7)
  figure.tight_layout()
  figure.savefig(path)


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
