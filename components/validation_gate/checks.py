"""The validation gate's pure functions: anomalies in, report rows and text out.

Kept apart from the executor so each can be tested on real TFDV statistics
without running a pipeline.
"""
import dataclasses
import json
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import anomalies_pb2
from tensorflow_metadata.proto.v0 import schema_pb2
from tensorflow_metadata.proto.v0 import statistics_pb2

# TFDV's kinds for a drift/skew comparator above its threshold.
DRIFT_KINDS = frozenset({
    'COMPARATOR_L_INFTY_HIGH',
    'COMPARATOR_JENSEN_SHANNON_DIVERGENCE_HIGH',
    'COMPARATOR_NORMALIZED_ABSOLUTE_DIFFERENCE_HIGH',
})
EMPTY_SPLIT_KIND = 'EMPTY_SPLIT'
# TFDV's kind for too few examples having a feature, reused for values that
# are present but empty (how CsvExampleGen writes an empty field).
LOW_PRESENCE_KIND = 'FEATURE_TYPE_LOW_FRACTION_PRESENT'
DATASET_FEATURE = '(dataset)'
# At most this many anomalies are named in the one-line failure message; the
# report file lists them all.
_MAX_NAMED = 5


@dataclasses.dataclass(frozen=True)
class AnomalyRow:
  """One line of the report: what is wrong with which feature, where."""
  span: int
  split: str
  feature: str
  kind: str
  short_description: str
  description: str
  allowed: bool


def _type_name(value: int) -> str:
  return anomalies_pb2.AnomalyInfo.Type.Name(value)


def _feature_name(path_key: str, info: anomalies_pb2.AnomalyInfo) -> str:
  if info.path.step:
    return '.'.join(info.path.step)
  return path_key


def anomaly_rows(anomalies: anomalies_pb2.Anomalies, span: int, split: str,
                 allowed: Iterable[str],
                 kinds: Optional[Iterable[str]] = None) -> List[AnomalyRow]:
  """Turns an Anomalies proto into report rows, one per reason.

  Args:
    anomalies: ExampleValidator's (or tfdv.validate_statistics') result.
    span: the span the statistics describe.
    split: the split they describe.
    allowed: kinds that are reported but do not stop the run.
    kinds: keep only these kinds (None keeps all).

  Returns:
    Rows sorted by feature, then kind.
  """
  allowed = set(allowed)
  keep = None if kinds is None else set(kinds)
  rows = []
  infos = list(anomalies.anomaly_info.items())
  if anomalies.HasField('dataset_anomaly_info'):
    infos.append((DATASET_FEATURE, anomalies.dataset_anomaly_info))
  for key, info in infos:
    feature = _feature_name(key, info)
    reasons = list(info.reason)
    if not reasons:  # Old protos carry only the top-level fields.
      reasons = [
          anomalies_pb2.AnomalyInfo.Reason(
              type=anomalies_pb2.AnomalyInfo.UNKNOWN_TYPE,
              short_description=info.short_description,
              description=info.description)
      ]
    for reason in reasons:
      kind = _type_name(reason.type)
      if keep is not None and kind not in keep:
        continue
      rows.append(
          AnomalyRow(span=span, split=split, feature=feature, kind=kind,
                     short_description=reason.short_description,
                     description=reason.description,
                     allowed=kind in allowed))
  return sorted(rows, key=lambda r: (r.feature, r.kind))


def empty_split_rows(num_examples_by_split: Mapping[str, int], span: int,
                     allowed: Iterable[str]) -> List[AnomalyRow]:
  """A row for each split that holds no example at all."""
  allowed = set(allowed)
  return [
      AnomalyRow(span=span, split=split, feature=DATASET_FEATURE,
                 kind=EMPTY_SPLIT_KIND, short_description='No examples',
                 description=(f'The {split} split of span {span} holds no '
                              'example: nothing can be trained or '
                              'evaluated on it.'),
                 allowed=EMPTY_SPLIT_KIND in allowed)
      for split, count in sorted(num_examples_by_split.items()) if count == 0
  ]


def missing_value_rows(stats: statistics_pb2.DatasetFeatureStatisticsList,
                       schema: schema_pb2.Schema, span: int, split: str,
                       allowed: Iterable[str]) -> List[AnomalyRow]:
  """Single-valued features with more examples lacking a value than allowed.

  TFDV counts a feature that is present with an empty value list (an empty
  CSV field) as present, so presence.min_fraction alone misses it. For a
  feature with at most one value per example, the examples with a value are
  exactly tot_num_values; the rest lack one.
  """
  allowed = set(allowed)
  if not stats.datasets:
    return []
  dataset = stats.datasets[0]
  total = int(dataset.num_examples)
  if not total:
    return []
  by_name = {'.'.join(f.path.step) or f.name: f for f in dataset.features}
  rows = []
  for feature in schema.feature:
    if not feature.HasField('presence'):
      continue
    single = ((feature.HasField('value_count') and
               feature.value_count.max == 1) or
              (feature.HasField('shape') and len(feature.shape.dim) == 1 and
               feature.shape.dim[0].size == 1))
    stats_feature = by_name.get(feature.name)
    if not single or stats_feature is None:
      continue
    which = stats_feature.WhichOneof('stats')
    if which is None:
      continue
    common = getattr(stats_feature, which).common_stats
    if common.max_num_values > 1:
      continue  # Not single-valued after all: TFDV's own checks report it.
    with_value = int(common.tot_num_values)
    missing = total - with_value
    bound = feature.presence.min_fraction
    if missing <= 0 or with_value >= bound * total:
      continue
    rows.append(
        AnomalyRow(
            span=span, split=split, feature=feature.name,
            kind=LOW_PRESENCE_KIND,
            short_description='Too many missing values',
            description=(
                f'{missing} of {total} examples ({missing / total:.1%}) have '
                f'no value for {feature.name!r}; the schema allows at most '
                f'{1 - bound:.1%} (presence.min_fraction {bound:g}).'),
            allowed=LOW_PRESENCE_KIND in allowed))
  return rows


def _drift_measurements(
    anomalies: anomalies_pb2.Anomalies) -> Dict[str, List[str]]:
  """feature -> 'L-infinity 0.41 > 0.25'-style texts of its drift measures."""
  found: Dict[str, List[str]] = {}
  for info in anomalies.drift_skew_info:
    feature = '.'.join(info.path.step)
    for measurement in info.drift_measurements:
      name = anomalies_pb2.DriftSkewInfo.Measurement.Type.Name(
          measurement.type).replace('_', ' ').lower()
      found.setdefault(feature, []).append(
          f'{name} {measurement.value:.3f} (threshold '
          f'{measurement.threshold:.3f})')
  return found


def drift_rows(current: statistics_pb2.DatasetFeatureStatisticsList,
               previous: statistics_pb2.DatasetFeatureStatisticsList,
               schema: schema_pb2.Schema, span: int, split: str,
               baseline_span: int,
               allowed: Iterable[str]) -> List[AnomalyRow]:
  """Drift between the previous span's statistics and this span's.

  Uses the schema's drift comparators (L-infinity for categorical features,
  Jensen-Shannon divergence for numeric ones) through
  ``tfdv.validate_statistics(..., previous_statistics=...)``.

  Args:
    current: this span's statistics of ``split``.
    previous: the previous validated span's statistics of the same split.
    schema: the schema with drift_comparator thresholds.
    span: this span.
    split: the split compared.
    baseline_span: the previous span's number, for the description.
    allowed: kinds that are reported but do not stop the run.

  Returns:
    One row per feature whose drift is above its threshold.
  """
  anomalies = tfdv.validate_statistics(
      statistics=current, schema=schema, previous_statistics=previous)
  measured = _drift_measurements(anomalies)
  rows = []
  for row in anomaly_rows(anomalies, span, split, allowed, kinds=DRIFT_KINDS):
    detail = '; '.join(measured.get(row.feature, []))
    description = (f'Compared with span {baseline_span}: {row.description}'
                   + (f' ({detail})' if detail else ''))
    rows.append(dataclasses.replace(row, description=description))
  return rows


def choose_baseline(candidates: Sequence[Tuple[int, int, str]],
                    span: int) -> Optional[Tuple[int, int, str]]:
  """Picks the drift baseline: the newest report of the highest earlier span.

  Args:
    candidates: (span, artifact id, statistics path) of reports that passed.
    span: the span being validated.

  Returns:
    The chosen candidate, or None when no earlier span passed.
  """
  earlier = [c for c in candidates if c[0] < span]
  if not earlier:
    return None
  return max(earlier, key=lambda c: (c[0], c[1]))


def blocking(rows: Iterable[AnomalyRow]) -> List[AnomalyRow]:
  return [r for r in rows if not r.allowed]


def format_report(rows: Sequence[AnomalyRow], span: int,
                  baseline_span: Optional[int], allowed: Sequence[str],
                  drift_checked: bool,
                  drift_skipped: Optional[str] = None) -> str:
  """The human-readable report.txt (drift_skipped: why drift was not checked
  although it is on)."""
  stopping = blocking(rows)
  if stopping:
    verdict = (f'FAILED: {len(stopping)} anomal{"y" if len(stopping) == 1 else "ies"} '
               'stop the run before Transform')
  else:
    verdict = 'PASSED'
  if not drift_checked:
    drift = 'not checked (turned off)'
  elif drift_skipped:
    drift = f'not checked ({drift_skipped})'
  elif baseline_span is None:
    drift = 'not checked (no earlier span has passed validation yet)'
  else:
    drift = f'compared with span {baseline_span}'
  lines = [
      f'Data validation report for span {span}',
      f'result: {verdict}; {len(rows) - len(stopping)} allowed',
      f'drift: {drift}',
      'allowed kinds (--allow-anomalies): ' +
      (', '.join(allowed) if allowed else 'none'),
      '',
  ]
  if not rows:
    lines.append('No anomalies.')
    return '\n'.join(lines) + '\n'
  header = ('span', 'split', 'feature', 'anomaly kind', 'status',
            'short description')
  table = [header] + [
      (str(r.span), r.split, r.feature, r.kind,
       'allowed' if r.allowed else 'STOPS', r.short_description) for r in rows
  ]
  widths = [max(len(row[i]) for row in table) for i in range(len(header))]
  for row in table:
    lines.append('  '.join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
  lines.append('')
  lines.append('Details:')
  for r in rows:
    lines.append(f'- span {r.span}, {r.split}, {r.feature!r}, {r.kind}: '
                 f'{r.description}')
  return '\n'.join(lines) + '\n'


def report_json(rows: Sequence[AnomalyRow], span: int,
                baseline_span: Optional[int], allowed: Sequence[str]) -> str:
  return json.dumps({
      'span': span,
      'passed': not blocking(rows),
      'drift_baseline_span': baseline_span,
      'allowed_kinds': list(allowed),
      'anomalies': [dataclasses.asdict(r) for r in rows],
  }, indent=2)


def failure_message(rows: Sequence[AnomalyRow], span: int,
                    report_path: str) -> str:
  """One line (the runner shows the last line of an error) naming features."""
  stopping = blocking(rows)
  named = []
  for r in stopping[:_MAX_NAMED]:
    named.append(f'{r.feature!r} {r.kind} in {r.split} ({r.short_description})')
  more = (f' and {len(stopping) - _MAX_NAMED} more'
          if len(stopping) > _MAX_NAMED else '')
  return (f'Data validation stopped the run on span {span} before Transform; '
          f'report: {report_path}. {len(stopping)} anomal'
          f'{"y" if len(stopping) == 1 else "ies"}: {"; ".join(named)}{more}. '
          'Fix the data, curate the schema if the change is expected, or let '
          'a kind through with --allow-anomalies KIND.')
