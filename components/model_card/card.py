"""The model card of one push: its JSON (Model Card Toolkit's layout) and sections.

``build(facts)`` turns the facts read from ML Metadata (facts.py) into

  * the JSON card, with the Model Card Toolkit's sections and field names
    (schema_version 0.0.2), as model_card.schema.json beside this file
    (leantfx's own schema of the card) describes it; ``validate`` checks a
    card against it (the tests do, on every card they build):
    every figure is a ``quantitative_analysis.performance_metrics`` entry
    ``{type, value, slice}`` whose ``slice`` says what it was measured on:
    an evaluation slice by TFMA's name (``Overall``, ``species:Adelie``), or
    one of the subjects below; the data, the training choices and the
    limitations are the schema's text fields;
  * the same figures as titled sections of text and tables, which
    render.py writes as Markdown and HTML.

Subjects of the figures that are not evaluation slices (the ``slice`` of
their performance_metrics entries):
  ``data: <split> split``        rows and features of a split;
  ``training``                   steps, core-hours (and their price);
  ``InfraValidator``             the trained SavedModel served by leantfx
                                 serve before the push;
  ``<runtime> pick``             a runtime's pushed pick, its served
                                 figures and what a target load costs on it.
"""
import dataclasses
import json
import math
import os
import pathlib
from typing import Any, Dict, List, Mapping, Optional, Sequence

from leantfx import compute_cost
from leantfx import evaluation_results

SCHEMA_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           'model_card.schema.json')
SCHEMA_VERSION = '0.0.2'
INFRA_SUBJECT = 'InfraValidator'
TRAINING_SUBJECT = 'training'
DOCUMENTATION = (
    'Built by leantfx\'s ModelCardGenerator from the run\'s artifacts in ML '
    'Metadata. Each figure of quantitative_analysis.performance_metrics '
    'names in its slice what it was measured on: an evaluation slice by '
    'TFMA\'s name (Overall, feature:value), "data: <split> split", '
    '"training", "InfraValidator" (the pushed SavedModel served by leantfx '
    'serve) or "<runtime> pick" (the ModelOptimizer\'s pushed pick for that '
    'runtime). model_card.md and model_card.html show the same figures.')
# The InfraValidator's figures the card reports (leantfx/infra_check.py).
INFRA_FIGURES = ('latency_p50_ms_batch1', 'latency_p99_ms_batch1',
                 'latency_p50_ms_concurrent', 'latency_p99_ms_concurrent',
                 'throughput_rps_concurrent', 'concurrent_clients',
                 'cpu_cores', 'rest_max_abs_diff', 'grpc_max_abs_diff',
                 'rows_checked', 'seconds')
# A pick's figures from the optimizer's report, and from its serve check.
PICK_FIGURES = ('accuracy', 'rmse', 'mae', 'size_bytes', 'gzipped_bytes',
                'latency_p50_ms', 'latency_p99_ms')
SERVED_FIGURES = ('latency_p99_ms_concurrent', 'throughput_rps_concurrent')


def data_subject(split: str) -> str:
  return f'data: {split} split'


def pick_subject(runtime: str) -> str:
  return f'{runtime} pick'


@dataclasses.dataclass(frozen=True)
class Section:
  """A titled part of the card: paragraphs, then an optional table."""
  title: str
  paragraphs: Sequence[str] = ()
  columns: Sequence[str] = ()
  rows: Sequence[Sequence[str]] = ()


@dataclasses.dataclass(frozen=True)
class Card:
  """The JSON card and the sections the Markdown and HTML show."""
  title: str
  json: Dict[str, Any]
  sections: Sequence[Section]


def _uri(path: str) -> str:
  """A path as a URI (the schema's references are URIs): gs://... stays."""
  if '://' in path:
    return path
  return pathlib.Path(os.path.abspath(path)).as_uri()


def _fmt(value: Any) -> str:
  if value is None:
    return '-'
  if isinstance(value, bool):
    return 'yes' if value else 'no'
  if isinstance(value, int):
    return str(value)
  if isinstance(value, float):
    return f'{value:.6g}'
  return str(value)


class _Figures:
  """The performance_metrics list, added to in order."""

  def __init__(self):
    self.entries: List[Dict[str, Any]] = []

  def add(self, subject: str, kind: str, value: Any) -> None:
    # JSON has no NaN or infinity (an undefined AUC): such a figure is left
    # out of the JSON; the Markdown and HTML tables show it as TFMA gave it.
    if (value is None or isinstance(value, bool) or
        not math.isfinite(float(value))):
      return
    self.entries.append({'type': kind, 'value': float(value),
                         'slice': subject})


def _serving_cost(throughput: Optional[float], cores: Optional[float],
                  config: Mapping[str, Any]
                 ) -> Optional[compute_cost.ServingCost]:
  target = config.get('target_qps')
  if target is None or not throughput or not cores:
    return None
  return compute_cost.serving_cost(throughput, int(cores), target,
                                   config.get('core_hour_price'))


def _data_section(facts, figures: _Figures, datasets: List[Dict[str, str]]
                 ) -> Section:
  data = facts['data']
  paragraphs = []
  validation = data.get('validation')
  span = data.get('span')
  if validation is None:
    paragraphs.append('Validation: no ValidationGate ran.')
  else:
    verdict = 'passed' if validation['passed'] else 'did not pass'
    baseline = validation.get('drift_baseline_span')
    # The gate records -1 when no earlier span had passed.
    drift = (f'drift checked against span {baseline}'
             if baseline is not None and baseline >= 0 else
             'no earlier span to check drift against')
    paragraphs.append(
        f"Validation of span {validation['span']}: {verdict} "
        f"({_fmt(validation['blocking_anomalies'])} anomalies stopping the "
        f"run, {_fmt(validation['allowed_anomalies'])} allowed; {drift}).")
    if validation.get('rows_read') is not None:
      paragraphs.append(f"Rows read {_fmt(validation['rows_read'])}, used "
                        f"{_fmt(validation['rows_used'])}.")
    if validation['anomalies']:
      paragraphs.append('Anomalies: ' + '; '.join(validation['anomalies']) +
                        '.')
    # The gate's span: StatisticsGen's artifact may not carry one.
    span = validation['span'] if validation['span'] is not None else span
  rows = []
  for split, summary in data['splits'].items():
    missing = summary['with_missing']
    missing_text = (', '.join(f'{k} ({v})' for k, v in sorted(
        missing.items())) if missing else 'none')
    empty = summary.get('with_empty_values') or []
    empty_text = ', '.join(sorted(empty)) if empty else 'none'
    rows.append([split, _fmt(summary['rows']), _fmt(summary['features']),
                 _fmt(summary['numeric']), _fmt(summary['categorical']),
                 missing_text, empty_text])
    figures.add(data_subject(split), 'rows', summary['rows'])
    figures.add(data_subject(split), 'features', summary['features'])
    datasets.append({
        'name': f"{facts['dataset']['name']} span {_fmt(span)}, {split} split",
        'description': (
            f"{summary['rows']} rows, {summary['features']} features "
            f"({summary['numeric']} numeric, {summary['categorical']} "
            f"categorical); features missing from rows: {missing_text}; "
            f"features with an empty value in some rows: {empty_text}. "
            'Statistics by StatisticsGen (TFDV).')})
  return Section(
      f'Data (span {_fmt(span)})', paragraphs,
      ('split', 'rows', 'features', 'numeric', 'categorical',
       'missing (rows)', 'empty in some rows'), rows)


def _training_section(facts, figures: _Figures, config) -> Section:
  t = facts['training']
  choices = (f"precision {_fmt(t['precision'])}, strategy "
             f"{_fmt(t['strategy'])} ({_fmt(t['replicas'])} replicas), "
             f"{_fmt(t['steps'])} steps of a global batch of "
             f"{_fmt(t['global_batch'])} ({_fmt(t['train_examples'])} "
             f"examples seen")
  if t.get('train_passes'):
    choices += f", {t['train_passes']} passes over the train split"
  choices += ')'
  paragraphs = [f'Trained with {choices}.']
  if t.get('precision_reason'):
    paragraphs.append(f"Precision: {t['precision_reason']}")
  if t.get('model_family'):
    paragraphs.append(f"Model family: {t['model_family']} "
                      f"({t.get('model_family_reason') or 'no reason recorded'}).")
  figures.add(TRAINING_SUBJECT, 'train_steps', t['steps'])
  rows = []
  price = config.get('core_hour_price')
  total = 0.0
  measured = True
  for name, compute in (('Trainer', t if t.get('seconds') is not None
                         else None),
                        ('ModelOptimizer', facts.get('optimizer_compute'))):
    if name == 'ModelOptimizer' and facts.get('picks') is None:
      continue
    if compute is None:
      measured = False
      rows.append([name, '-', '-', 'not recorded', '-'])
      continue
    hours = compute_cost.core_hours(compute['seconds'], compute['cores'])
    total += hours
    rows.append([name, f"{compute['seconds']:.1f}", _fmt(compute['cores']),
                 f'{hours:.4f}',
                 '-' if price is None else f'{hours * price:.4f}'])
  if measured:
    figures.add(TRAINING_SUBJECT, 'core_hours', total)
    if price is not None:
      figures.add(TRAINING_SUBJECT, 'cost', total * price)
  paragraphs.append(
      'Cost: core-hours are each training component\'s wall seconds times '
      'the cores its process could run on (its CPU affinity; TensorFlow '
      f'sizes its thread pools to them): {total:.4f} core-hours in all' +
      ('' if price is None else
       f', {total * price:.4f} at {price:g} per core-hour') + '.')
  return Section('Training', paragraphs,
                 ('component', 'wall seconds', 'cores', 'core-hours',
                  'cost'), rows)


def _evaluation_section(facts, figures: _Figures) -> Section:
  evaluation = facts['evaluation']
  slices = evaluation['slices']
  names = sorted(slices, key=lambda s: (s != evaluation_results.OVERALL, s))
  metrics = sorted({m for s in names for m in slices[s]})
  rows = []
  for name in names:
    rows.append([name] + [_fmt(slices[name].get(m)) for m in metrics])
    for metric in metrics:
      figures.add(name, metric, slices[name].get(metric))
  configured = facts.get('slicing') or []
  feature_slices = [s for s in configured if s != evaluation_results.OVERALL]
  paragraphs = [
      f"The Evaluator (TFMA) on the eval split: "
      f"{'blessed' if evaluation['blessed'] else 'not blessed'}. Slices: " +
      (', '.join(feature_slices) if feature_slices else
       'the whole eval split only (no feature slices were configured)') + '.']
  return Section('Evaluation', paragraphs, ['slice'] + metrics, rows)


def baseline_subject(name: str) -> str:
  return f'baseline: {name}'


def _baselines_section(facts, figures: _Figures) -> Optional[Section]:
  """The baselines measured on the same split, and the gate they set."""
  recorded = facts['evaluation'].get('relative_gate')
  if not recorded:
    return None
  doc, gate = recorded['baselines'], recorded['gate']
  metric = doc['metric']
  rows = []
  for name, entry in sorted(doc['baselines'].items()):
    rows.append([name, _fmt(entry['value']), _fmt(entry['fit_seconds']),
                 entry['model'] + (f" ({entry['note']})"
                                   if entry.get('note') else '')])
    figures.add(baseline_subject(name), metric, entry['value'])
  rows_seen = doc['rows']
  paragraphs = [
      f"Fit on the same train split and measured on the same eval split as "
      f"the model ({rows_seen['train']} train and {rows_seen['eval']} eval "
      f"rows of {rows_seen['train_total']} and {rows_seen['eval_total']})"
      + ('; an even sample of the split' if rows_seen['sampled'] else '')
      + '.',
      'The Evaluator blessed against: ' + ('; '.join(
          f"{'>=' if metric == 'accuracy' else '<='} {b['value']:.4f}, "
          f"{b['reason']}" for b in gate['bounds']) or 'no baseline bound')
      + '.']
  return Section('Baselines', paragraphs,
                 ('baseline', metric, 'fit seconds', 'model'), rows)


def _infra_section(facts, figures: _Figures, config) -> Section:
  infra = facts['infra']
  f = infra['figures']
  if not infra['blessed']:
    return Section('Serving (InfraValidator)',
                   [f"Not blessed: {infra.get('reason') or 'no reason'}."])
  for name in INFRA_FIGURES:
    figures.add(INFRA_SUBJECT, name, f.get(name))
  paragraphs = [
      'The trained SavedModel (the pushed version, warm-up requests included) '
      'served by leantfx serve and queried with eval rows over REST and '
      f"gRPC: batch-1 p50 {_fmt(f.get('latency_p50_ms_batch1'))} ms, p99 "
      f"{_fmt(f.get('latency_p99_ms_batch1'))} ms alone; with "
      f"{_fmt(f.get('concurrent_clients'))} clients p50 "
      f"{_fmt(f.get('latency_p50_ms_concurrent'))} ms, p99 "
      f"{_fmt(f.get('latency_p99_ms_concurrent'))} ms, "
      f"{_fmt(f.get('throughput_rps_concurrent'))} predictions/s on "
      f"{_fmt(f.get('cpu_cores'))} cores."]
  cost = _serving_cost(f.get('throughput_rps_concurrent'), f.get('cpu_cores'),
                       config)
  if cost is not None:
    figures.add(INFRA_SUBJECT, 'cores_needed', cost.cores_needed)
    figures.add(INFRA_SUBJECT, 'cost_per_million_predictions',
                cost.cost_per_million)
    paragraphs.append(
        f'For {cost.target_qps:g} predictions/s: {cost.cores_needed} cores '
        f'at {_fmt(cost.per_core_rps)} predictions/s per core (p99 '
        f"{_fmt(f.get('latency_p99_ms_concurrent'))} ms)" +
        ('' if cost.cost_per_million is None else
         f', {_fmt(cost.cost_per_million)} per million predictions') + '.')
  return Section('Serving (InfraValidator)', paragraphs)


def _picks_section(facts, figures: _Figures, config) -> Section:
  picks = facts.get('picks')
  if picks is None:
    return Section('Runtime picks',
                   ['The ModelOptimizer did not run (--no-optimize): the '
                    'SavedModel above is the only pushed model.'])
  if not picks:
    return Section('Runtime picks', ['The ModelOptimizer blessed no '
                                     'variant: nothing was pushed for any '
                                     'runtime.'])
  quality = 'accuracy' if any('accuracy' in p for p in picks) else 'rmse'
  rows = []
  for pick in picks:
    subject = pick_subject(pick['runtime'])
    for name in PICK_FIGURES:
      figures.add(subject, name, pick.get(name))
    served = pick.get('served') or {}
    served_figures = served.get('figures') or {}
    for name in SERVED_FIGURES:
      figures.add(subject, f'served_{name}', served_figures.get(name))
    figures.add(subject, 'served_cpu_cores', served_figures.get('cpu_cores'))
    cost = _serving_cost(served_figures.get('throughput_rps_concurrent'),
                         served_figures.get('cpu_cores'), config)
    if cost is not None:
      figures.add(subject, 'cores_needed', cost.cores_needed)
      figures.add(subject, 'cost_per_million_predictions',
                  cost.cost_per_million)
    status = ('pushed' if pick.get('pushed_to') else 'not pushed')
    if served and not served.get('passed', True):
      status += f": refused by the serve check ({served.get('reason')})"
    elif served.get('reason'):
      status += f" ({served['reason']})"
    rows.append([
        pick['runtime'], pick['variant'], _fmt(pick.get(quality)),
        _fmt(pick.get('size_bytes')), _fmt(pick.get('latency_p50_ms')),
        _fmt(pick.get('latency_p99_ms')),
        _fmt(served_figures.get('latency_p99_ms_concurrent')),
        _fmt(served_figures.get('throughput_rps_concurrent')),
        '-' if cost is None else _fmt(cost.cores_needed),
        '-' if cost is None or cost.cost_per_million is None else
        _fmt(cost.cost_per_million), status])
  paragraphs = [
      f'Each runtime\'s pick: {quality} on the report half of the eval split '
      '(the selection never saw it); size on disk; batch-1 latency in the '
      'runtime (num_threads as --latency-threads, transformed features in); '
      'then served by leantfx serve before its push, with its clients: p99 '
      'and throughput.']
  return Section('Runtime picks', paragraphs,
                 ('runtime', 'variant', quality, 'bytes', 'p50 ms', 'p99 ms',
                  'served p99 ms', 'served predictions/s', 'cores needed',
                  'cost per million', 'status'), rows)


def _cost_paragraph(config) -> str:
  target = config.get('target_qps')
  if target is None:
    return ('No --target-qps was given: the card does not size or price '
            'serving (pass --target-qps N, and --core-hour-price P for a '
            'price).')
  text = (f'Serving {target:g} predictions/s: cores needed = ceil({target:g} '
          '/ (measured throughput / cores it was measured on)), from the '
          'served throughput with every client sending at once')
  price = config.get('core_hour_price')
  if price is None:
    return text + '; no --core-hour-price, so no price.'
  return text + (f'; cost per million predictions = {price:g} x cores needed '
                 f'/ ({target:g} x 3600) x 1e6.')


def limitations(facts) -> List[str]:
  """What was not checked, for the card's considerations."""
  cpu = facts.get('cpu') or {}
  flags = ', '.join(cpu.get('flags') or ()) or 'no bfloat16 flags'
  found = [
      'No fairness evaluation: no metric was computed per group of people, '
      'and the data says nothing about who it describes.',
      'Latencies and throughputs were measured on this CPU: '
      f"{cpu.get('model') or 'unknown'} ({flags}), "
      f"{_fmt(cpu.get('cores'))} cores, on a machine that may have been "
      'running other work; the clients of the served figures ran on the '
      'same cores as the server, so the throughput per core is a lower '
      'bound. Another CPU gives other figures.',
      'The eval split is one span\'s held-out rows: drift after this span is '
      'not checked until the next span arrives.',
  ]
  if not [s for s in (facts.get('slicing') or [])
          if s != evaluation_results.OVERALL]:
    found.append('No feature slices were evaluated: a group the model '
                 'serves badly can hide in the overall figures.')
  if facts.get('picks') is None:
    found.append('No TFLite, OpenVINO or ONNX model was built or checked '
                 '(the ModelOptimizer did not run).')
  else:
    for pick in facts['picks']:
      served = pick.get('served') or {}
      if not served.get('figures'):
        found.append(f"The {pick['runtime']} pick ({pick['variant']}) was "
                     'not served before its push' +
                     (f": {served['reason']}" if served.get('reason') else '')
                     + '.')
  if facts['model'].get('reused_version'):
    found.append('This model equalled the version already pushed: the card '
                 'was rebuilt from this run\'s evaluation of it.')
  return found


def build(facts: Mapping[str, Any]) -> Card:
  """The card of one push (see the module docstring).

  Args:
    facts: the executor's facts: 'model', 'dataset', 'data', 'training',
      'optimizer_compute', 'evaluation', 'slicing', 'infra', 'picks',
      'config', 'cpu'.

  Returns:
    The Card.
  """
  config = facts.get('config') or {}
  model = facts['model']
  dataset = facts['dataset']
  figures = _Figures()
  datasets: List[Dict[str, str]] = []
  task = dataset['task']
  classes = dataset.get('classes') or []
  overview = (f"{task} of {dataset['label']!r} on {dataset['name']}" +
              (f" ({len(classes)} classes: {', '.join(classes)})"
               if classes else '') + f", version {model['version']}.")
  sections = [
      Section('Model', [
          f'Task: {overview}',
          f"Pushed to {model['destination']}" +
          (' (the same model as that version: not pushed again)'
           if model.get('reused_version') else '') + '.']),
      _data_section(facts, figures, datasets),
      _training_section(facts, figures, config),
      _evaluation_section(facts, figures),
      _baselines_section(facts, figures),
      _infra_section(facts, figures, config),
      _picks_section(facts, figures, config),
  ]
  sections = [s for s in sections if s is not None]
  cost_text = _cost_paragraph(config)
  sections.append(Section('Cost', [cost_text]))
  limits = limitations(facts)
  sections.append(Section('Limitations: what was not checked', limits))
  t = facts['training']
  architecture = (f"{dataset.get('model_kind') or 'Keras'} model; precision "
                  f"{_fmt(t['precision'])}, strategy {_fmt(t['strategy'])}, "
                  f"{_fmt(t['steps'])} steps of a global batch of "
                  f"{_fmt(t['global_batch'])}")
  card_json = {
      'schema_version': SCHEMA_VERSION,
      'model_details': {
          'name': model['name'],
          'overview': overview,
          'documentation': DOCUMENTATION,
          'version': {'name': str(model['version']),
                      'date': model['date'],
                      'diff': ('the version already pushed'
                               if model.get('reused_version') else
                               'a new version')},
          'references': [{'reference': _uri(model['destination'])}],
      },
      'model_parameters': {
          'model_architecture': architecture,
          'data': datasets,
          'input_format': 'raw columns (serving_default), as the data files '
                          'hold them; tf.Examples (predict_examples)',
          'output_format': ('class probabilities and class names'
                            if classes else 'the predicted value'),
      },
      'quantitative_analysis': {'performance_metrics': figures.entries},
      'considerations': {
          'limitations': [{'description': d} for d in limits],
          'tradeoffs': [{'description': cost_text}],
      },
  }
  return Card(title=f"Model card: {model['name']} version {model['version']}",
              json=card_json, sections=sections)


def load_schema() -> Dict[str, Any]:
  with open(SCHEMA_FILE, encoding='utf-8') as f:
    return json.load(f)


def validate(card_json: Mapping[str, Any]) -> None:
  """Validates a JSON card against model_card.schema.json.

  Raises:
    jsonschema.ValidationError: the card does not follow the schema.
  """
  import jsonschema  # pylint: disable=g-import-not-at-top
  jsonschema.Draft7Validator.check_schema(load_schema())
  jsonschema.validate(card_json, load_schema(),
                      cls=jsonschema.Draft7Validator)


def figure(card_json: Mapping[str, Any], subject: str, kind: str
          ) -> Optional[float]:
  """A figure of a JSON card by its subject (``slice``) and type; or None."""
  for entry in card_json['quantitative_analysis']['performance_metrics']:
    if entry['slice'] == subject and entry['type'] == kind:
      return entry['value']
  return None
