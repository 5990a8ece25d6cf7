"""What a run did, read back from ML Metadata: the closing summary and the run record.

``summary_lines`` prints the data, training and optimization facts after
the accuracy and push lines; ``run_record`` is the same facts as JSON, which
``leantfx run`` writes beside its log and ``leantfx watch`` decides from.
"""
import json
import os
from typing import Any, Dict, List, Optional

from leantfx import row_counts
from leantfx import split_feasibility
from leantfx.cli import baseline_summary
from leantfx.runtimes import registry as runtimes_lib

OPTIMIZER_NODE = 'ModelOptimizer'


def _counts(text: Optional[str]) -> Dict[str, int]:
  try:
    return json.loads(text) if text else {}
  except ValueError:
    return {}


def _data_lines(summary, config) -> List[str]:
  """What the data steps did, from the run's ML Metadata summary."""
  lines = []
  for node in ('ImageExampleGen',):
    execution = summary.executions.get(node)
    if not execution or not execution.outputs.get('examples'):
      continue
    props = execution.outputs['examples'][0].custom_properties
    if 'bad_images' in props:
      bad = _counts(props['bad_images'].string_value)
      good = props['good_images'].int_value if 'good_images' in props else 0
      left_out = ', '.join(f'{n} {k.replace("_", " ")}' for k, n in
                           sorted(bad.items())) or 'none'
      lines.append(f'  images: {good} ingested; bad images left out: '
                   f'{left_out}')
  rows = rows_record(summary)
  if rows:
    lines.append(f'  rows: {rows["read"]:,} read, {rows["used"]:,} used'
                 + _dropped_text(rows, config))
  gate = summary.executions.get('ValidationGate')
  if gate and gate.outputs.get('report'):
    report = gate.outputs['report'][0]
    props = report.custom_properties
    allowed = props['allowed_anomalies'].int_value if (
        'allowed_anomalies' in props) else 0
    baseline = props['drift_baseline_span'].int_value if (
        'drift_baseline_span' in props) else -1
    drift = (f'drift vs span {baseline}' if baseline >= 0 else
             'no earlier span for drift')
    lines.append(f'  data validation: passed ({allowed} allowed anomalies, '
                 f'{drift}); report: {report.uri}/report.txt')
  augment = summary.executions.get('Augment')
  if augment and augment.outputs.get('augmented_examples'):
    props = augment.outputs['augmented_examples'][0].custom_properties
    before = _counts(props['class_counts_before'].string_value) if (
        'class_counts_before' in props) else {}
    after = _counts(props['class_counts_after'].string_value) if (
        'class_counts_after' in props) else {}
    if (before or after) and config.dataset.is_regression:
      # A regression's label values are no classes: only the totals.
      lines.append(f'  augment (train examples): {sum(before.values())}->'
                   f'{sum(after.values())}')
    elif before or after:
      classes = sorted(set(before) | set(after),
                       key=lambda c: (not c.lstrip('-').isdigit(),
                                      int(c) if c.lstrip('-').isdigit() else 0,
                                      c))
      per_class = ', '.join(
          f'{c} {before.get(c, 0)}->{after.get(c, 0)}' for c in classes)
      lines.append(f'  augment (train examples per class, before->after): '
                   f'{sum(before.values())}->{sum(after.values())}: '
                   f'{per_class}')
    noisy = _counts(props['noisy_rows'].string_value) if (
        'noisy_rows' in props) else {}
    parts = []
    for split in sorted(noisy):
      section = noisy[split]
      problems = section.get('problems', {})
      detail = ', '.join(
          f'{config.dataset.original_name(feature)}: ' + '/'.join(
              f'{n} {k.replace("_", " ")}'
              for k, n in sorted(kinds.items()) if n)
          for feature, kinds in sorted(problems.items()))
      parts.append(f'{split} {section.get("noisy_rows", 0)} noisy, '
                   f'{section.get("dropped_rows", 0)} dropped'
                   + (f' ({detail})' if detail else ''))
    if parts:
      lines.append('  noisy rows: ' + '; '.join(parts))
  return lines


def _training_lines(summary) -> List[str]:
  """Where the TensorBoard logs are, and how the model trained."""
  trainer = summary.executions.get('Trainer')
  if not trainer or not trainer.outputs.get('model_run'):
    return []
  model_run = trainer.outputs['model_run'][0]
  lines = []
  props = model_run.custom_properties
  if 'precision_policy' in props:
    strategy = props['strategy'].string_value if 'strategy' in props else '?'
    lines.append(f'  training: precision {props["precision_policy"].string_value}'
                 f' ({props["precision_reason"].string_value}); strategy '
                 f'{strategy}')
  budget = training_budget(summary)
  if budget:
    lines.append('  ' + budget_line(budget))
  family = model_family(summary)
  if family:
    lines.append(f"  model family: {family['chosen']} ({family['reason']})")
  tuner = summary.executions.get('Tuner')
  if tuner and tuner.outputs.get('best_hyperparameters'):
    decision = tune_decision(summary)
    if decision is not None:
      lines.append(f"  tuner (--tune auto): {decision['reason']}")
    lines.append('  tuner: best hyperparameters in '
                 f'{tuner.outputs["best_hyperparameters"][0].uri}')
  lines.append(f'  tensorboard: tensorboard --logdir {model_run.uri}')
  return lines


def tune_decision(summary) -> Optional[Dict[str, Any]]:
  """--tune auto's decision (models/auto_tune.py), or None without it."""
  tuner = summary.executions.get('Tuner')
  if not tuner or not tuner.outputs.get('best_hyperparameters'):
    return None
  text = _custom(tuner.outputs['best_hyperparameters'][0], 'auto_tune')
  return json.loads(text) if text else None


def training_budget(summary) -> Optional[Dict[str, Any]]:
  """What the Trainer trained for: steps, examples, rows, passes, rule.

  From the model-run artifact's custom properties
  (models/training/trainer_executor.py); None before the Trainer ran.
  """
  trainer = summary.executions.get('Trainer')
  if not trainer or not trainer.outputs.get('model_run'):
    return None
  props = trainer.outputs['model_run'][0].custom_properties
  if 'train_steps' not in props:
    return None
  result = {'steps': props['train_steps'].int_value,
            'examples': props['train_examples'].int_value,
            'rule': props['train_budget_rule'].string_value}
  if 'train_rows' in props:
    result['train_rows'] = props['train_rows'].int_value
  if 'train_passes' in props:
    result['passes'] = float(props['train_passes'].string_value)
  if 'train_rows_at_least' in props and props['train_rows_at_least'].int_value:
    result['train_rows_at_least'] = True
  return result


def model_family(summary) -> Optional[Dict[str, Any]]:
  """The Trainer's family choice (models/model_family.py), or None.

  From the model-run artifact's 'model_family_record' (JSON: chosen, reason,
  both eval figures); None before the Trainer ran or from an older Trainer.
  """
  trainer = summary.executions.get('Trainer')
  if not trainer or not trainer.outputs.get('model_run'):
    return None
  props = trainer.outputs['model_run'][0].custom_properties
  if 'model_family_record' not in props:
    return None
  return json.loads(props['model_family_record'].string_value)


def budget_line(budget: Dict[str, Any]) -> str:
  """'trained 2,500 steps = 80,000 examples, 1 pass over 80,000 rows'."""
  line = (f"trained {budget['steps']:,} steps = {budget['examples']:,} "
          'examples')
  if budget.get('passes') is not None:
    line += (f", {budget['passes']:.2f} passes over "
             f"{budget['train_rows']:,} train rows")
  elif budget.get('train_rows_at_least'):
    line += (f", the step cap: the train split holds more than "
             f"{budget['train_rows']:,} rows")
  rule = {'exact': '--train-steps', 'passes': 'the passes rule'}.get(
      budget['rule'], budget['rule'])
  return f'{line} ({rule})'


def _custom(artifact, key: str):
  value = artifact.custom_properties.get(key)
  if value is None:
    return None
  return value.string_value or value.int_value


def _fastest_line(fastest: Dict[str, Any]) -> str:
  """The fastest blessed variant of every runtime, and its speed-ups."""
  versus = []
  if fastest.get('vs_float32') is not None and fastest['runtime'] != runtimes_lib.TFLITE:
    versus.append(f"{fastest['vs_float32']:.1f}x the trained model's "
                  f"{fastest['runtime']} float32")
  if fastest.get('vs_tflite_float32') is not None:
    versus.append(f"{fastest['vs_tflite_float32']:.1f}x the trained model's "
                  'TFLite float32')
  timed = (f": {', '.join(versus)}" if versus else '')
  return (f"  fastest blessed variant: {fastest['name']} ({fastest['runtime']}"
          f" {fastest['mode']}), p50 {fastest['p50_ms']:.3f} ms at batch 1 "
          f"(one thread, inputs bound once){timed}")


def serving_inputs_line(inputs: Dict[str, Any],
                        runtime: str = runtimes_lib.TFLITE) -> str:
  """What a pushed model takes, and how it scored taking it."""
  if inputs.get('inputs') != 'raw':
    return (f'  {runtime}: takes the transformed features, not the raw '
            'columns (a failed fold is listed below and in the report)')
  score = next((k for k in ('accuracy', 'rmse') if k in inputs), None)
  scored = (f"{score} {inputs[score]:.4f} on {inputs['eval_examples']} raw "
            'eval rows, ' if score else '')
  overhead = inputs.get('call_overhead_ms')
  call = (f', +{overhead:.3f} ms for the Python call' if overhead is not None
          else '')
  lookups = inputs.get('vocabulary_ids_in')
  outside = (f"; {', '.join(lookups)} looked up by leantfx serve (ids in "
             'the model; OVMS clients send the ids)' if lookups else '')
  return (f'  {runtime}: takes the raw columns, as serving_default does (the '
          f"Transform folded in): {scored}p50 {inputs['latency_p50_ms']:.3f} "
          f'ms at batch 1, preprocessing included{call}{outside}')


def _failure_line(failure: Dict[str, str]) -> str:
  """One skipped candidate, a pick that could not take raw columns, or one
  that failed in leantfx serve before its push."""
  candidate = failure['candidate']
  if failure.get('not_pushed'):
    return (f"  {failure['not_pushed']}: {candidate} not pushed, it failed "
            f"in leantfx serve: {failure['error']}")
  mode = candidate.split('/')[-1]
  runtime = next((r for r in runtimes_lib.SERVER_RUNTIMES
                  if mode.startswith(r + '_')), runtimes_lib.TFLITE)
  if failure.get('replaced_by'):
    return (f'  {runtime}: {candidate} could not take the raw columns, '
            f"{failure['replaced_by']} is pushed in its place: "
            f"{failure['error']}")
  if failure.get('pushed_inputs') != 'transformed':
    return (f'  tflite: candidate {candidate} skipped, it failed at '
            f"{failure['stage']}: {failure['error']}")
  return (f'  {runtime}: {candidate} could not take the raw columns: '
          f"{failure['error']}")


def slice_rejection_lines(rejections) -> List[str]:
  """One line per variant the optimizer's gate rejected on a slice.

  Args:
    rejections: {variant: [its slice lines]}, as the ModelOptimizer records
      them (executor.SLICE_REJECTIONS_PROPERTY).
  """
  return [f'  rejected on a slice: {name} ({"; ".join(lines)})'
          for name, lines in sorted(rejections.items())]


def _optimization_lines(summary, config) -> List[str]:
  """The run summary's lines about optimization (empty when it was off)."""
  if config.optimization is None:
    return []
  execution = summary.executions.get(OPTIMIZER_NODE)
  if execution is None:
    return ['  tflite: not built (the float model was not blessed)']
  lines = []
  optimized = (execution.outputs.get('optimized_model') or [None])[0]
  report = (execution.outputs.get('report') or [None])[0]
  skipped_reason = (_custom(optimized, 'skipped_reason')
                    if optimized is not None else None)
  if skipped_reason:
    lines.append(f'  optimizer: skipped ({skipped_reason})')
    if report is not None:
      lines.append(f"  report: {os.path.join(report.uri, 'report.html')}")
    return lines
  if optimized is not None and _custom(optimized, 'blessed'):
    lines.append(
        f"  tflite: {_custom(optimized, 'selected_variant')} pushed to "
        f"{_custom(optimized, 'pushed_destination')}")
    inputs = _custom(optimized, 'serving_inputs')
    if inputs:
      lines.append(serving_inputs_line(json.loads(inputs)))
  else:
    lines.append('  tflite: no variant blessed (nothing pushed; see the '
                 'report for each variant\'s figures)')
  for runtime in runtimes_lib.SERVER_RUNTIMES:
    destination = (_custom(optimized, f'{runtime}_pushed_destination')
                   if optimized is not None else None)
    if destination:
      lines.append(
          f"  {runtime}: {_custom(optimized, f'{runtime}_selected_variant')} "
          f'pushed to {destination}')
      inputs = _custom(optimized, f'{runtime}_serving_inputs')
      if inputs and json.loads(inputs):
        lines.append(serving_inputs_line(json.loads(inputs), runtime))
  fastest = _custom(optimized, 'fastest_variant') if optimized else None
  if fastest:
    lines.append(_fastest_line(json.loads(fastest)))
  times = _custom(optimized, 'candidate_times') if optimized else None
  if times and json.loads(times):
    lines.append('  optimizer time per candidate: ' + ', '.join(
        f"{name} {t['techniques_s'] + t['tflite_s']:.1f} s"
        + (f" ({t['train_steps']:,} steps)" if t.get('train_steps') else '')
        for name, t in json.loads(times).items()))
  skipped = _custom(optimized, 'skipped_candidates') if optimized else None
  for failure in json.loads(skipped) if skipped else ():
    lines.append(_failure_line(failure))
  rejected = _custom(optimized, 'slice_rejections') if optimized else None
  lines.extend(slice_rejection_lines(json.loads(rejected) if rejected
                                     else {}))
  if report is not None:
    lines.append(f"  report: {os.path.join(report.uri, 'report.html')}")
  return lines




# The regression figures the summary prints, by TFMA metric name.
REGRESSION_METRICS = (('mean_absolute_error', 'MAE'),
                      ('root_mean_squared_error', 'RMSE'),
                      ('r2_score', 'R^2'))


def slice_lines(summary, config) -> List[str]:
  """Each slice's example count and figure, and the slices the gate failed."""
  if not config.evaluation.slices or not summary.slices:
    return []
  evaluation = config.evaluation
  name, label = (('root_mean_squared_error', 'RMSE')
                 if config.dataset.is_regression else
                 ('sparse_categorical_accuracy', 'accuracy'))
  lines = []
  for slice_name, metrics in sorted(summary.slices.items()):
    count = int(metrics.get('example_count', 0))
    value = metrics.get(name)
    judged = ('' if count >= evaluation.min_slice_size else
              f' (below {evaluation.min_slice_size}: not gated)')
    lines.append(f'  slice {slice_name}: {count} examples'
                 + (f', {label} {value:.4f}' if value is not None else '')
                 + judged)
  lines.extend(f'  not blessed on slice {failure}'
               for failure in summary.slice_failures)
  return lines


def metric_lines(summary, config) -> List[str]:
  """The Evaluator's figures and gate: accuracy, or a regression's errors."""
  count = (f', {summary.example_count} examples'
           if summary.example_count is not None else '')
  evaluation = config.evaluation
  if config.dataset.is_regression:
    found = [f'{label} {summary.metrics[name]:.4f}'
             for name, label in REGRESSION_METRICS if name in summary.metrics]
    if not found:
      return []
    relative = baseline_summary.gate_text(summary)
    bound = (f', RMSE {relative}' if relative else
             '' if evaluation.max_rmse is None else
             f', RMSE <= {evaluation.max_rmse}')
    return [f'  regression (eval split{count}): {", ".join(found)} (gate: '
            f'R^2 >= {evaluation.min_r2}{bound}, RMSE at most '
            f'{evaluation.max_rmse_increase:.0%} above the last blessed '
            'model)']
  if summary.accuracy is None:
    return []
  bound = baseline_summary.gate_text(summary) or (
      f'>= {evaluation.min_accuracy}' if evaluation.min_accuracy is not None
      else 'no absolute bound')
  lines = [f'  accuracy (eval split{count}): {summary.accuracy:.4f} '
           f'(gate: {bound}; at most {evaluation.max_accuracy_drop} below '
           'the last blessed model)']
  binary = [f'{name} {summary.metrics[name]:.4f}'
            for name in ('auc', 'precision', 'recall')
            if name in summary.metrics]
  if binary:
    second = config.dataset.classes[1] if len(
        config.dataset.classes) == 2 else '?'
    gate = ('' if evaluation.min_auc is None else
            f' (gate: auc >= {evaluation.min_auc})')
    lines.append(f'  binary, class {second!r} positive: '
                 f'{", ".join(binary)}{gate}')
  return lines


def serving_graph_lines(summary) -> List[str]:
  """The pushed serving graph's size and call cost, when measured."""
  graph = summary.serving_graph
  if 'ops' not in graph:
    return []
  batches = sorted(int(key[len('call_ms_batch'):]) for key in graph
                   if key.startswith('call_ms_batch'))
  calls = [f'{graph[f"call_ms_batch{b}"]:.2f} ms at batch {b}'
           for b in batches]
  cost = (f'; a call costs {", ".join(calls)} (TensorFlow, in the Pusher)'
          if calls else '')
  return [f'  serving graph (raw columns in, Transform included): '
          f'{graph["ops"]} ops{cost}']


def infra_lines(summary) -> List[str]:
  """The InfraValidator's line: what serving the model cost and measured."""
  infra = summary.infra
  if summary.infra_blessed is None or 'seconds' not in infra:
    return []
  if not summary.infra_blessed:
    return [f'  infra validation: failed in {infra["seconds"]:.1f} s']
  return [
      f'  infra validation: served by leantfx serve in '
      f'{infra["seconds"]:.1f} s ({infra["load_s"]:.1f} s to start); '
      f'{int(infra["rows_checked"])} eval rows answered as offline over REST '
      f'and gRPC; batch 1 p50 {infra["latency_p50_ms_batch1"]:.2f} ms, p99 '
      f'{infra["latency_p99_ms_batch1"]:.2f} ms; '
      f'{int(infra["concurrent_clients"])} clients p50 '
      f'{infra["latency_p50_ms_concurrent"]:.2f} ms, p99 '
      f'{infra["latency_p99_ms_concurrent"]:.2f} ms (REST)']


def summary_lines(summary, config) -> List[str]:
  """The summary's lines after accuracy, blessing and push."""
  return (_data_lines(summary, config) + _training_lines(summary) +
          _optimization_lines(summary, config))


RECORD_VERSION = 1
# Run record statuses and the exit codes of `leantfx run` they go with.
STATUS_EXIT_CODES = {'pushed': 0, 'rejected': 2, 'failed': 3,
                     'not_blessed': 4}


def _dropped_text(rows: Dict[str, Any], config) -> str:
  """', N dropped (--min-rows-per-class M: classes)' or ''."""
  if 'dropped' not in rows:
    return ''
  by_class = rows['dropped']
  named = split_feasibility.named_classes(
      split_feasibility.rare_classes(by_class, float('inf')))
  return (f', {sum(by_class.values()):,} dropped (--min-rows-per-class '
          f'{config.ingestion.min_rows_per_class}: {len(by_class)} '
          f'class(es){": " + named if by_class else ""})')


def rows_record(summary) -> Optional[Dict[str, Any]]:
  """{'read': rows in the files, 'used': rows in the splits}, from the gate.

  The ValidationGate stops a run where they differ (leantfx/row_counts.py),
  so a finished run shows them equal, or, with --min-rows-per-class, read
  == used + the rows of the classes dropped, recorded as 'dropped'
  ({class: rows}). None before the gate ran.
  """
  gate = summary.executions.get('ValidationGate')
  if not gate or not gate.outputs.get('report'):
    return None
  props = gate.outputs['report'][0].custom_properties
  if 'rows_read' not in props or 'rows_used' not in props:
    return None
  rows: Dict[str, Any] = {'read': props['rows_read'].int_value,
                          'used': props['rows_used'].int_value}
  if row_counts.ROWS_DROPPED_PROPERTY in props:
    rows['dropped'] = _counts(
        props[row_counts.ROWS_DROPPED_PROPERTY].string_value)
  return rows


def run_record(summary, config) -> Dict[str, Any]:
  """The facts of a finished run as JSON-ready values (from ML Metadata).

  Args:
    summary: pipeline.run_summary.RunSummary of the run.
    config: the run's PipelineConfig.

  Returns:
    status, task, rows ({'read': rows in the files, 'used': rows in the
    splits}, or None before the gate ran), metrics (every overall TFMA metric
    of the candidate), slices (with --slice-by: each slice's metrics and the
    failed per-slice checks), accuracy, example_count, blessed, pushed_path,
    reused_version, model_card (the pushed version's card folder),
    per-node execution states and ids, and the TFLite push when there was one.
  """
  record: Dict[str, Any] = {
      'status': 'pushed' if summary.pushed else 'not_blessed',
      'task': config.dataset.task,
      'rows': rows_record(summary),
      'metrics': dict(summary.metrics),
      'slices': ({'metrics': dict(summary.slices),
                  'failures': list(summary.slice_failures)}
                 if config.evaluation.slices else None),
      'accuracy': summary.accuracy,
      'example_count': summary.example_count,
      'blessed': summary.blessed,
      'pushed_path': summary.pushed_path if summary.pushed else None,
      'reused_version': summary.reused_version,
      'serving_graph': dict(summary.serving_graph) or None,
      'infra_validation': None if summary.infra_blessed is None else {
          'blessed': summary.infra_blessed,
          'reason': summary.infra_reason,
          'figures': dict(summary.infra)},
      'training': training_budget(summary),
      'model_family': model_family(summary),
      'tune_auto': tune_decision(summary),
      'model_card': summary.model_card_dir,
      'executions': {
          node: {'state': e.state, 'execution_id': e.execution_id}
          for node, e in sorted(summary.executions.items())
      },
  }
  record.update(baseline_summary.record(summary))
  optimizer = summary.executions.get(OPTIMIZER_NODE)
  if config.optimization is not None and optimizer is not None:
    optimized = (optimizer.outputs.get('optimized_model') or [None])[0]
    if optimized is not None and _custom(optimized, 'skipped_reason'):
      record['optimizer_skipped'] = _custom(optimized, 'skipped_reason')
    if optimized is not None and _custom(optimized, 'blessed'):
      record[runtimes_lib.TFLITE] = {
          'selected_variant': _custom(optimized, 'selected_variant'),
          'pushed_destination': _custom(optimized, 'pushed_destination'),
          'serving_inputs': json.loads(
              _custom(optimized, 'serving_inputs') or 'null'),
      }
  return record


def write_record(path: str, record: Dict[str, Any]) -> None:
  """Writes the run record atomically (a reader never sees half of it)."""
  record = dict(record, version=RECORD_VERSION)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  tmp = f'{path}.tmp-{os.getpid()}'
  with open(tmp, 'w', encoding='utf-8') as f:
    json.dump(record, f, indent=2, sort_keys=True, default=str)
    f.write('\n')
  os.replace(tmp, path)


def read_record(path: str) -> Optional[Dict[str, Any]]:
  """The run record at path, or None when it is missing or unreadable."""
  try:
    with open(path, encoding='utf-8') as f:
      record = json.load(f)
  except (OSError, ValueError):
    return None
  if not isinstance(record, dict) or record.get('version') != RECORD_VERSION:
    return None
  return record
