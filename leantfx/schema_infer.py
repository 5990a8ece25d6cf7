"""``leantfx schema infer``: a starting schema for a user's data, to curate.

It computes TFDV statistics of one span (the newest by default), infers a
schema from them, then adds what a curated schema needs and inference does
not give: drift comparators (L-infinity for categorical features and the
label, Jensen-Shannon divergence for numeric ones, with this project's
default thresholds) and the observed value ranges as domains. The header of
the written file says what to review. Images get a fixed two-feature schema
(image bytes and the class folder name as the label).
"""
import argparse
import datetime
import os
from typing import Optional, Sequence

from leantfx.errors import ConfigError, InputDataError

# Defaults for the comparators; the curated bundled schemas justify theirs
# from measured sampling variation (schemas/penguins/schema.pbtxt).
CATEGORICAL_THRESHOLD = 0.25
NUMERIC_THRESHOLD = 0.2
SCHEMA_FILE = 'schema.pbtxt'


def infer_schema(statistics, label: Optional[str],
                 categorical: Sequence[str] = ()):
  """Infers a schema and adds comparators and observed domains.

  Args:
    statistics: a DatasetFeatureStatisticsList of one span.
    label: the label feature (gets an L-infinity comparator), or None.
    categorical: INT features to treat as categorical.

  Returns:
    A tensorflow_metadata Schema.
  """
  import tensorflow_data_validation as tfdv  # pylint: disable=g-import-not-at-top
  from tensorflow_metadata.proto.v0 import schema_pb2  # pylint: disable=g-import-not-at-top
  schema = tfdv.infer_schema(statistics, infer_feature_shape=False)
  stats = {'.'.join(f.path.step) or f.name: f
           for f in statistics.datasets[0].features}
  for feature in schema.feature:
    stat = stats.get(feature.name)
    is_categorical = (feature.type == schema_pb2.BYTES or
                      feature.name in categorical or
                      (feature.name == label and
                       feature.type == schema_pb2.INT))
    if is_categorical:
      if feature.type == schema_pb2.INT:
        feature.int_domain.is_categorical = True
      feature.drift_comparator.infinity_norm.threshold = CATEGORICAL_THRESHOLD
    else:
      feature.drift_comparator.jensen_shannon_divergence.threshold = (
          NUMERIC_THRESHOLD)
      if stat is not None and stat.HasField('num_stats'):
        low, high = stat.num_stats.min, stat.num_stats.max
        if feature.type == schema_pb2.INT:
          feature.int_domain.min = int(low)
          feature.int_domain.max = int(high)
        else:
          feature.float_domain.min = float(low)
          feature.float_domain.max = float(high)
    # CsvExampleGen writes an empty field as an empty value list: allow it,
    # the ValidationGate checks the missing share against presence.
    if feature.HasField('value_count') and feature.value_count.max == 1:
      feature.value_count.ClearField('min')
  return schema


def image_schema(classes: Sequence[str], label: str = 'label',
                 image: str = 'image'):
  """The schema ImageExampleGen's examples follow."""
  from tensorflow_metadata.proto.v0 import schema_pb2  # pylint: disable=g-import-not-at-top
  schema = schema_pb2.Schema()
  feature = schema.feature.add(name=label, type=schema_pb2.BYTES)
  feature.domain = label
  feature.presence.min_fraction = 1.0
  feature.presence.min_count = 1
  feature.shape.dim.add(size=1)
  feature.drift_comparator.infinity_norm.threshold = CATEGORICAL_THRESHOLD
  feature = schema.feature.add(name=image, type=schema_pb2.BYTES)
  feature.presence.min_fraction = 1.0
  feature.presence.min_count = 1
  feature.shape.dim.add(size=1)
  schema.string_domain.add(name=label, value=list(classes))
  return schema


def _statistics(span_dir: str, data_format: str):
  import tensorflow_data_validation as tfdv  # pylint: disable=g-import-not-at-top
  if data_format == 'csv':
    return tfdv.generate_statistics_from_csv(os.path.join(span_dir, '*.csv'))
  return tfdv.generate_statistics_from_tfrecord(os.path.join(span_dir, '*'))


def cmd_infer(args: argparse.Namespace) -> int:
  """Handler of ``leantfx schema infer``."""
  from google.protobuf import text_format  # pylint: disable=g-import-not-at-top
  from leantfx import data_formats  # pylint: disable=g-import-not-at-top
  from leantfx import input_checks  # pylint: disable=g-import-not-at-top
  out_path = os.path.join(args.out, SCHEMA_FILE)
  if os.path.exists(out_path) and not args.force:
    raise ConfigError(
        f'{out_path} exists; a curated schema is not overwritten. Pass '
        '--force to replace it, or another --out folder.')
  span, span_dir = (input_checks.latest_span(args.data_root)
                    if args.span is None else
                    input_checks.latest_span(args.data_root, args.span))
  data_format = args.data_format or data_formats.infer_format(span_dir)
  if data_format is None:
    raise ConfigError(f'Cannot tell the data format of {span_dir}; pass '
                      '--format csv|tfrecord|images.')
  if data_format == 'images':
    classes = sorted(
        n for n in os.listdir(span_dir)
        if os.path.isdir(os.path.join(span_dir, n)) and any(
            data_formats.IMAGE_EXTENSIONS.__contains__(
                os.path.splitext(f)[1].lower())
            for f in os.listdir(os.path.join(span_dir, n))))
    if not classes:
      raise InputDataError(f'Span {span} ({span_dir}) has no class folder '
                           'with images (span-N/<class name>/*.png).')
    schema = image_schema(classes, label=args.label or 'label')
  else:
    if data_format == 'csv' and args.label:
      # The CSV checks: readable files, consistent headers, the label.
      input_checks.profile_csv_data_root(args.data_root, args.label,
                                         span=span)
    statistics = _statistics(span_dir, data_format)
    if not statistics.datasets or not statistics.datasets[0].num_examples:
      raise InputDataError(f'Span {span} ({span_dir}) holds no example to '
                           'infer a schema from.')
    schema = infer_schema(statistics, args.label, args.categorical)
  header = (
      f'# Inferred by `leantfx schema infer` from span {span} of '
      f'{os.path.abspath(args.data_root)} ({data_format}) on '
      f'{datetime.date.today().isoformat()}.\n'
      '# A starting point: review before using it with --schema.\n'
      '# - domains are the OBSERVED ranges and values: widen them to what is\n'
      '#   plausible, or every new extreme value stops the run;\n'
      '# - presence.min_fraction is the observed share of examples with the\n'
      '#   feature: lower it to the share of missing values you tolerate;\n'
      f'# - drift thresholds are defaults (L-infinity {CATEGORICAL_THRESHOLD} '
      f'for categorical, Jensen-Shannon {NUMERIC_THRESHOLD} for numeric):\n'
      '#   measure two samples of the same data and set them above that.\n')
  os.makedirs(args.out, exist_ok=True)
  with open(out_path, 'w', encoding='utf-8') as f:
    f.write(header + text_format.MessageToString(schema))
  print(f'wrote {out_path} ({len(schema.feature)} features, span {span}); '
        'curate it, then pass it with --schema')
  return 0


def add_commands(subparsers) -> None:
  """Adds ``leantfx schema infer``."""
  schema = subparsers.add_parser(
      'schema', help='schemas for your data').add_subparsers(
          dest='schema_command', metavar='ACTION', required=True)
  infer = schema.add_parser(
      'infer', help='write a starting schema.pbtxt from TFDV statistics',
      description='Computes TFDV statistics of the newest span (or --span) '
      'and writes OUT/schema.pbtxt with drift comparators and the observed '
      'domains, for you to curate and pass with `leantfx run --schema`.')
  infer.add_argument('--data-root', required=True)
  infer.add_argument('--out', required=True, help='folder, e.g. '
                     'schemas/<name>/')
  infer.add_argument('--label', help='the label column (gets a drift '
                     'comparator; INT labels become categorical)')
  infer.add_argument('--categorical', action='append', default=[],
                     metavar='COLUMN', help='an INT column that is '
                     'categorical (repeatable)')
  infer.add_argument('--format', dest='data_format',
                     choices=('csv', 'tfrecord', 'images'))
  infer.add_argument('--span', type=int)
  infer.add_argument('--force', action='store_true',
                     help='overwrite an existing schema.pbtxt')
  infer.set_defaults(func=cmd_infer)
