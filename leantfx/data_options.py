"""The data options of ``leantfx run`` (issue 3) and their resolution.

``add_run_arguments`` adds the format, validation-gate, noisy-row,
augmentation and rebalancing flags to the run parser; ``resolve_dataset``
checks a TFRecord or image data root before anything runs (CSV stays with
input_checks); ``pipeline_fields`` builds the typed configs for
PipelineConfig; ``summary_lines`` tells what the data steps did, read back
from ML Metadata.
"""
import argparse
import dataclasses
import json
import os
import re
from typing import Any, Dict, List, Optional, Tuple

from leantfx import config as config_lib
from leantfx import data_formats
from leantfx.errors import ConfigError

# Image datasets are augmented by default (the digits run uses it): one
# augmented copy per train image. Digits accuracy with and without it is in
# docs/data.md.
DEFAULT_IMAGE_COPIES = 1
DEFAULT_IMAGE_SHAPE = '32x32x3'
_SHAPE_RE = re.compile(r'^([0-9]+)x([0-9]+)x([13])$')


def _fraction(text: str) -> float:
  try:
    value = float(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f'{text!r} is not a number')
  if not 0.0 <= value < 1.0:
    raise argparse.ArgumentTypeError(f'must be in [0, 1), got {value}')
  return value


def _non_negative(text: str) -> float:
  try:
    value = float(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f'{text!r} is not a number')
  if value < 0:
    raise argparse.ArgumentTypeError(f'must be >= 0, got {value}')
  return value


def _count(text: str) -> int:
  try:
    value = int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f'{text!r} is not a whole number')
  if value < 0:
    raise argparse.ArgumentTypeError(f'must be >= 0, got {value}')
  return value


def add_run_arguments(run: argparse.ArgumentParser) -> None:
  """Adds the data flags to the ``run`` parser."""
  data = run.add_argument_group('data format and validation')
  data.add_argument(
      '--format', choices=config_lib.DATA_FORMATS, dest='data_format',
      help='csv (span-N/*.csv), tfrecord (span-N/* files of tf.Examples, .gz '
      'for gzip) or images (span-N/<class>/*.png|jpg); inferred from the '
      'newest span when unambiguous')
  data.add_argument(
      '--image-shape', default=None, metavar='HxWxC',
      help='images of your own data are resized to this (channels 1 or 3; '
      f'default {DEFAULT_IMAGE_SHAPE})')
  data.add_argument(
      '--bad-images', choices=config_lib.BAD_IMAGE_POLICIES, default='fail',
      help='a corrupt image or one of the wrong channel count stops the run '
      '(fail, default) or is left out (skip); counted either way')
  data.add_argument(
      '--allow-anomalies', action='append', default=[], metavar='KIND,...',
      help='anomaly kinds the validation gate reports without stopping the '
      'run (e.g. ENUM_TYPE_UNEXPECTED_STRING_VALUES); recorded in ML '
      'Metadata')
  data.add_argument('--no-drift-check', action='store_true',
                    help='do not compare the span with the previous one')
  data.add_argument(
      '--noisy-rows', choices=config_lib.NOISY_ROW_POLICIES,
      help='rows with missing or out-of-domain values: impute (default) or '
      'drop them from the train split; counted either way')
  aug = run.add_argument_group('augmentation and rebalancing')
  aug.add_argument(
      '--augment', action=argparse.BooleanOptionalAction, default=None,
      help='augmented copies of train images (default: on for image '
      'datasets, e.g. digits)')
  aug.add_argument('--augment-copies', type=_count, default=None, metavar='N',
                   help=f'augmented copies per train image (default '
                   f'{DEFAULT_IMAGE_COPIES})')
  defaults = config_lib.AugmentConfig()
  aug.add_argument('--rotation', type=_non_negative,
                   default=defaults.rotation_degrees, metavar='DEGREES')
  aug.add_argument('--shift', type=_fraction, default=defaults.shift_fraction,
                   metavar='FRACTION')
  aug.add_argument('--zoom', type=_fraction, default=defaults.zoom_fraction,
                   metavar='FRACTION')
  aug.add_argument('--brightness', type=_fraction, default=defaults.brightness,
                   metavar='FRACTION')
  aug.add_argument('--contrast', type=_fraction, default=defaults.contrast,
                   metavar='FRACTION')
  aug.add_argument('--noise', type=_non_negative,
                   default=defaults.noise_stddev, metavar='STDDEV')
  aug.add_argument('--flip-horizontal', action='store_true',
                   help='random left-right flips (off: a flipped 2 is no 2)')
  aug.add_argument('--flip-vertical', action='store_true')
  aug.add_argument('--oversample', choices=config_lib.OVERSAMPLING_METHODS,
                   default='none',
                   help='add minority-class rows to the train split: random '
                   'duplicates or SMOTE-style interpolation')
  aug.add_argument('--oversample-ratio', type=float,
                   default=defaults.target_ratio, metavar='RATIO',
                   help='raise each class to this share of the largest')
  aug.add_argument('--smote-neighbors', type=int,
                   default=defaults.smote_neighbors, metavar='K')
  aug.add_argument('--jitter', type=_non_negative,
                   default=defaults.jitter_stddev, metavar='STDDEV',
                   help='Gaussian jitter on numeric features of oversampled '
                   'rows, in class standard deviations')
  aug.add_argument('--class-weights', choices=config_lib.CLASS_WEIGHT_MODES,
                   default='none',
                   help='auto: weigh the loss by inverse class frequency of '
                   'the train split (an alternative to oversampling)')


def allowed_kinds(values: List[str]) -> Tuple[str, ...]:
  kinds = []
  for value in values:
    for kind in value.split(','):
      kind = kind.strip().upper()
      if kind and kind not in kinds:
        kinds.append(kind)
  return tuple(kinds)


def data_format(args: argparse.Namespace) -> str:
  """--format, or the format the newest span's layout shows.

  Raises:
    ConfigError: when --data-root's newest span is ambiguous.
  """
  if getattr(args, 'data_format', None):
    return args.data_format
  if not args.data_root:
    return 'csv'
  span_dir = data_formats.newest_span_dir(os.path.abspath(args.data_root))
  if span_dir is None:
    return 'csv'  # The CSV checks explain what is missing.
  found = data_formats.infer_format(span_dir)
  if found is None:
    raise ConfigError(
        f'Cannot tell the data format of {span_dir}: it holds a mix of '
        'entries (or nothing). Pass --format csv (span-N/*.csv), --format '
        'tfrecord (span-N/* TFRecord files of tf.Examples) or --format '
        'images (span-N/<class name>/*.png).')
  return found


def image_shape(args: argparse.Namespace) -> Tuple[int, int, int]:
  text = args.image_shape or DEFAULT_IMAGE_SHAPE
  match = _SHAPE_RE.match(text)
  if not match:
    raise ConfigError(
        f'--image-shape {text!r} is not HEIGHTxWIDTHxCHANNELS with 1 or 3 '
        'channels, e.g. 32x32x3.')
  return tuple(int(g) for g in match.groups())


def _settings(spec: config_lib.DatasetSpec, bad_images: str):
  from leantfx.components.image_example_gen import decode  # pylint: disable=g-import-not-at-top
  height, width, channels = spec.image_shape
  return decode.ImageSettings(height=height, width=width, channels=channels,
                              image_feature=spec.image_key,
                              label_feature=spec.label, bad_images=bad_images)


def resolve_dataset(args: argparse.Namespace, output: str, fmt: str,
                    bundled: Dict[str, config_lib.DatasetSpec], prepare,
                    schema_dir: str, name_from_path):
  """Data root, DatasetSpec and profile for the tfrecord and images formats.

  Args:
    args: parsed ``run`` arguments.
    output: the absolute output folder.
    fmt: 'tfrecord' or 'images'.
    bundled: the bundled DatasetSpecs (CSV form).
    prepare: datasets.prepare.
    schema_dir: the folder of the bundled schemas.
    name_from_path: the CLI's model name from a data root.

  Returns:
    (absolute data root, DatasetSpec, DataProfile).

  Raises:
    LeantfxError: for unusable data or options.
  """
  from leantfx import data_checks  # pylint: disable=g-import-not-at-top
  span = getattr(args, 'span', None)
  if args.dataset is not None:
    spec = data_formats.bundled_spec(args.dataset, fmt, bundled[args.dataset])
    if args.label and args.label != spec.label:
      raise ConfigError(
          f'--label {args.label!r} does not match the bundled dataset '
          f'{args.dataset!r}, whose label is {spec.label!r}. Drop --label.')
    data_root = args.data_root or os.path.join(output, 'data',
                                               f'{args.dataset}-{fmt}')
    if args.data_root is None:
      prepare(args.dataset, data_root, 1, fmt)
    schema = args.schema or os.path.join(
        schema_dir, args.dataset, data_formats.bundled_schema_name(fmt))
    spec = dataclasses.replace(
        spec, schema_file=schema if os.path.isfile(schema) else None)
  else:
    if fmt == 'images':
      height, width, channels = image_shape(args)
      spec_kwargs = dict(label=args.label or 'label', image_key='image',
                         image_shape=(height, width, channels),
                         image_max_value=255.0, model='cnn')
    else:
      if not args.label:
        raise ConfigError(
            f'--data-root {args.data_root} needs --label FEATURE: the '
            'feature of the examples that holds the class to predict.')
      spec_kwargs = dict(label=args.label, model='mlp')
    data_root = args.data_root
    spec = None
  if fmt == 'images':
    probe = spec or config_lib.DatasetSpec(
        name='probe', classes=('a', 'b'), **spec_kwargs)
    profile = data_checks.profile_image_data_root(
        data_root, _settings(probe, args.bad_images), span)
  else:
    known = spec is not None
    profile = data_checks.profile_tfrecord_data_root(
        data_root, spec.label if known else args.label,
        numeric_columns=(spec.numeric_features + spec.image_features
                         if known else ()),
        categorical_columns=spec.categorical_features if known else (),
        span=span)
  if spec is not None:
    unknown = sorted(set(profile.label_values) - set(spec.classes))
    if unknown:
      raise ConfigError(
          f'Span {profile.span} of {data_root} has label values {unknown} '
          f'that the {args.dataset!r} model does not know (its classes are '
          f'{list(spec.classes)}). Fix the labels, or train on your own data '
          'without --dataset.')
  else:
    if fmt == 'images':
      extra = {}
    else:
      categorical = tuple(sorted(set(profile.categorical_columns) |
                                 set(args.categorical)))
      extra = dict(
          numeric_features=tuple(c for c in profile.numeric_columns
                                 if c not in categorical),
          categorical_features=categorical)
    spec = config_lib.DatasetSpec(
        name=args.name or name_from_path(data_root),
        classes=tuple(profile.label_values), schema_file=args.schema,
        **spec_kwargs, **extra)
  return os.path.abspath(data_root), spec, profile


def pipeline_fields(args: argparse.Namespace,
                    spec: config_lib.DatasetSpec) -> Dict[str, Any]:
  """PipelineConfig keyword arguments for the data options.

  Raises:
    ConfigError: for options this dataset cannot use.
  """
  is_image = bool(spec.image_key or spec.image_features)
  augment = args.augment
  if augment is None:
    augment = is_image
  if augment and not is_image:
    if args.augment:
      raise ConfigError(
          f'--augment makes augmented copies of images, and {spec.name!r} '
          'has no images. For tabular data use --oversample random|smote '
          '(optionally with --jitter) or --class-weights auto.')
    augment = False
  copies = 0
  if augment:
    copies = (DEFAULT_IMAGE_COPIES if args.augment_copies is None else
              args.augment_copies)
  seed = config_lib.TrainingConfig().seed if args.seed is None else args.seed
  augment_config = config_lib.AugmentConfig(
      copies=copies,
      rotation_degrees=args.rotation,
      shift_fraction=args.shift,
      zoom_fraction=args.zoom,
      brightness=args.brightness,
      contrast=args.contrast,
      noise_stddev=args.noise,
      horizontal_flip=args.flip_horizontal,
      vertical_flip=args.flip_vertical,
      oversample=args.oversample,
      target_ratio=args.oversample_ratio,
      smote_neighbors=args.smote_neighbors,
      jitter_stddev=args.jitter,
      seed=seed)
  if augment_config.oversample == 'smote' and not spec.numeric_features:
    raise ConfigError(
        f'--oversample smote interpolates numeric features and '
        f'{spec.name!r} has none; use --oversample random.')
  return {
      'ingestion': config_lib.IngestionConfig(
          data_format=args.resolved_format, bad_images=args.bad_images),
      'validation': config_lib.ValidationConfig(
          allow_anomalies=allowed_kinds(args.allow_anomalies),
          check_drift=not args.no_drift_check),
      'augment': augment_config,
      'class_weights': args.class_weights,
  }


def with_noisy_rows(args: argparse.Namespace,
                    spec: config_lib.DatasetSpec) -> config_lib.DatasetSpec:
  if args.noisy_rows:
    return dataclasses.replace(spec, noisy_rows=args.noisy_rows)
  return spec


def _counts(text: Optional[str]) -> Dict[str, int]:
  try:
    return json.loads(text) if text else {}
  except ValueError:
    return {}


def summary_lines(summary) -> List[str]:
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
    if before or after:
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
          f'{feature}: ' + '/'.join(f'{n} {k.replace("_", " ")}'
                                    for k, n in sorted(kinds.items()) if n)
          for feature, kinds in sorted(problems.items()))
      parts.append(f'{split} {section.get("noisy_rows", 0)} noisy, '
                   f'{section.get("dropped_rows", 0)} dropped'
                   + (f' ({detail})' if detail else ''))
    if parts:
      lines.append('  noisy rows: ' + '; '.join(parts))
  return lines
