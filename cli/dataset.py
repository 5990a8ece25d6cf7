"""Which data a command trains on: one resolution for every format and command.

``resolve_dataset`` decides the local data root (the bundled data, prepared,
or the user's folder), checks the newest (or pinned) span before anything
heavy runs, and returns the DatasetSpec the pipeline is built for. ``run``
and ``watch`` resolve the data they train on; ``compile`` resolves a local
sample that fixes the columns, classes and schema compiled in.
"""
import argparse
import dataclasses
import os
import re
from typing import Any, Dict, Optional, Tuple

from leantfx import column_roles
from leantfx import columns as columns_lib
from leantfx import config as config_lib
from leantfx.cli import data_checks
from leantfx import data_formats
from leantfx import datasets
from leantfx import input_checks
from leantfx import schemas
from leantfx import split_feasibility
from leantfx import task as task_lib
from leantfx.cli import options
from leantfx.components.image_example_gen import decode
from leantfx.errors import ConfigError

_SHAPE_RE = re.compile(r'^([0-9]+)x([0-9]+)x([13])$')


@dataclasses.dataclass(frozen=True)
class ResolvedData:
  """The data a pipeline is built for.

  Attributes:
    data_root: absolute local data root (span-<N>/ folders).
    spec: the DatasetSpec.
    profile: what the checks saw in the span (rows, span, label values).
    data_format: 'csv', 'tfrecord' or 'images'.
    task: the task decision (classification or regression, and why).
    dropped: the classes --min-rows-per-class drops, as the checks counted
      them (None without the option); spec.classes leaves them out.
  """
  data_root: str
  spec: config_lib.DatasetSpec
  profile: object
  data_format: str
  task: task_lib.TaskDecision
  dropped: Optional[split_feasibility.ClassDrop] = None


def name_from_path(path: str) -> str:
  """A model name from a data root's folder name."""
  base = re.sub(r'[^A-Za-z0-9_-]', '_', os.path.basename(os.path.abspath(path)))
  return base if re.match(r'^[A-Za-z]', base) else f'data_{base}'


def image_shape(text: Optional[str]) -> Tuple[int, int, int]:
  """Parses --image-shape HxWxC (default DEFAULT_IMAGE_SHAPE)."""
  text = text or options.DEFAULT_IMAGE_SHAPE
  match = _SHAPE_RE.match(text)
  if not match:
    raise ConfigError(
        f'--image-shape {text!r} is not HEIGHTxWIDTHxCHANNELS with 1 or 3 '
        'channels, e.g. 32x32x3.')
  return tuple(int(g) for g in match.groups())


def data_format(fmt: Optional[str], data_root: Optional[str]) -> str:
  """--format, or the format the newest span's layout shows.

  Raises:
    ConfigError: when the data root's newest span is ambiguous.
  """
  if fmt:
    return fmt
  if not data_root:
    return 'csv'
  span_dir = data_formats.newest_span_dir(os.path.abspath(data_root))
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


def _image_settings(spec: config_lib.DatasetSpec,
                    bad_images: str) -> decode.ImageSettings:
  height, width, channels = spec.image_shape
  return decode.ImageSettings(height=height, width=width, channels=channels,
                              image_feature=spec.image_key,
                              label_feature=spec.label, bad_images=bad_images)


def _check_regression_target(profile, label: str) -> None:
  """Refuses NaN/infinite targets: rows named for CSV, values for TFRecord."""
  rows = getattr(profile, 'label_not_finite', None)
  if rows is not None:
    task_lib.check_regression_target(label, rows,
                                     profile.label_not_finite_count)
    return
  bad = [v for v in profile.label_values
         if v.strip().lower().lstrip('+-') in ('nan', 'inf', 'infinity')]
  if bad:
    raise ConfigError(
        f'The regression target {label!r} holds NaN or infinite values '
        f'({", ".join(bad)}) in span {profile.span} ({profile.span_dir}). '
        'Fix or drop those examples.')


def _decide_task(args: argparse.Namespace, label: str, profile,
                 fmt: str) -> task_lib.TaskDecision:
  """Decides (or checks) --task from the label values the checks saw."""
  if fmt == 'images':
    if args.task == 'regression':
      raise ConfigError(
          '--task regression needs a numeric label column, and image data '
          'is labelled by its class folders. Use --task auto or '
          'classification.')
    return task_lib.TaskDecision(
        'classification',
        f'images labelled by {len(profile.label_values)} class folders',
        args.task)
  decision = task_lib.decide(label, profile.label_values, profile.num_rows,
                             args.task)
  if decision.task == 'regression':
    _check_regression_target(profile, label)
  return decision


def _check_known_labels(profile, spec: config_lib.DatasetSpec, dataset: str,
                        data_root: str) -> None:
  if spec.is_regression:
    _check_regression_target(profile, spec.label)
    return
  unknown = sorted(set(profile.label_values) - set(spec.classes))
  if unknown:
    raise ConfigError(
        f'Span {profile.span} of {data_root} has label values {unknown} in '
        f'{spec.label!r} that the {dataset!r} model does not know (its '
        f'classes are {list(spec.classes)}). Fix the labels, or train on '
        'your own data without --dataset.')


def known_task(args: argparse.Namespace) -> Optional[str]:
  """The task the options fix before any data is read, or None.

  A bundled --dataset is its spec's task; otherwise an explicit --task
  (auto is decided from the label values: None). ``watch`` checks the
  task's options with it before the first span arrives.
  """
  if args.dataset is not None:
    return datasets.BUNDLED[args.dataset].task
  return None if args.task == 'auto' else args.task


def resolve_dataset(args: argparse.Namespace, local_root: Optional[str],
                    scratch: str) -> ResolvedData:
  """Decides the data root and DatasetSpec, and checks the data.

  See _resolve_dataset; then refuses a span the train/eval split cannot
  serve (leantfx/split_feasibility.py), after leaving out the classes
  --min-rows-per-class drops (the CSV ExampleGen drops their rows).
  """
  data = _resolve_dataset(args, local_root, scratch)
  min_rows = getattr(args, 'min_rows_per_class', None)
  if min_rows is not None and data.data_format != 'csv':
    raise ConfigError(
        f'--min-rows-per-class drops rows of rare classes as the CSV '
        f'ExampleGen reads them; this span is {data.data_format} data. Drop '
        'the option, and remove or merge the rare classes in the data.')
  dropped = split_feasibility.check_profile(data.profile, data.spec, min_rows)
  if dropped is None or not dropped.classes:
    return dataclasses.replace(data, dropped=dropped)
  names = {c for c, _ in dropped.classes}
  spec = dataclasses.replace(
      data.spec, classes=tuple(c for c in data.spec.classes
                               if c not in names))
  return dataclasses.replace(data, spec=spec, dropped=dropped)


def _resolve_dataset(args: argparse.Namespace, local_root: Optional[str],
                     scratch: str) -> ResolvedData:
  """Decides the data root and DatasetSpec, and checks the data.

  Args:
    args: parsed pipeline options (cli/options.py).
    local_root: the local data root given (run: --data-root; compile:
      --sample-data), or None for the bundled --dataset.
    scratch: where a bundled dataset is prepared when local_root is None
      (OUTPUT for run: OUTPUT/data/NAME).

  Returns:
    The ResolvedData.

  Raises:
    LeantfxError: for unusable data or options (exit 2).
  """
  dataset = args.dataset
  if dataset is None and local_root is None:
    dataset = datasets.DEFAULT_DATASET
  fmt = data_format(args.data_format, local_root)
  span = getattr(args, 'span', None)
  if dataset is not None:
    for option in ('column_role', 'date_format'):
      if getattr(args, option, None):
        raise ConfigError(
            f'--{option.replace("_", "-")} gives roles to the columns of '
            f'your own data; the bundled dataset {dataset!r} has its roles '
            'fixed. Drop the option, or train on your own data with '
            '--data-root without --dataset.')
    spec = datasets.BUNDLED[dataset]
    if fmt != 'csv':
      spec = data_formats.bundled_spec(dataset, fmt, spec)
    if args.label and args.label != spec.label:
      raise ConfigError(
          f'--label {args.label!r} does not match the bundled dataset '
          f'{dataset!r}, whose label column is {spec.label!r}. Drop '
          '--label, or drop --dataset to train on your own columns.')
    data_root = local_root
    if data_root is None:
      folder = dataset if fmt == 'csv' else f'{dataset}-{fmt}'
      data_root = os.path.join(scratch, 'data', folder)
      datasets.prepare(dataset, data_root, 1, fmt)
    spec = dataclasses.replace(
        spec, schema_file=args.schema or schemas.bundled_schema(dataset, fmt))
    if fmt == 'images':
      profile = data_checks.profile_image_data_root(
          data_root, _image_settings(spec, args.bad_images), span)
    elif fmt == 'tfrecord':
      profile = data_checks.profile_tfrecord_data_root(
          data_root, spec.label,
          numeric_columns=spec.numeric_features + spec.image_features,
          categorical_columns=spec.categorical_features, span=span)
    else:
      profile = input_checks.profile_csv_data_root(
          data_root, spec.label,
          numeric_columns=spec.numeric_features + spec.image_features,
          categorical_columns=spec.categorical_features,
          required_columns=spec.feature_columns, span=span,
          normalize_labels=args.normalize_labels)
    if args.task not in ('auto', spec.task):
      raise ConfigError(
          f'--task {args.task} does not match the bundled dataset '
          f'{dataset!r}, a {spec.task} on {spec.label!r}. Drop --task, or '
          'train on your own data without --dataset.')
    _check_known_labels(profile, spec, dataset, data_root)
    decision = task_lib.TaskDecision(
        spec.task, f'the bundled dataset {dataset!r} is a {spec.task} on '
        f'{spec.label!r}', args.task)
    return ResolvedData(os.path.abspath(data_root), spec, profile, fmt,
                        decision)

  name = args.name or name_from_path(local_root)
  if fmt == 'images':
    _refuse_csv_only_options(args)
    height, width, channels = image_shape(args.image_shape)
    image = dict(label=args.label or 'label', image_key='image',
                 image_shape=(height, width, channels), image_max_value=255.0,
                 model='cnn')
    probe = config_lib.DatasetSpec(name='probe', classes=('a', 'b'), **image)
    profile = data_checks.profile_image_data_root(
        local_root, _image_settings(probe, args.bad_images), span)
    decision = _decide_task(args, image['label'], profile, fmt)
    spec = config_lib.DatasetSpec(
        name=name, classes=tuple(profile.label_values),
        schema_file=args.schema, **image)
    return ResolvedData(os.path.abspath(local_root), spec, profile, fmt,
                        decision)
  if not args.label:
    what = 'column' if fmt == 'csv' else 'feature of the examples'
    raise ConfigError(
        f'--data-root {local_root} needs --label COLUMN: the {what} that '
        'holds the class or number to predict.')
  column_names = ()
  label = args.label
  roles = {}
  if fmt == 'csv':
    profile = input_checks.profile_csv_data_root(
        local_root, args.label, categorical_columns=args.categorical,
        span=span, normalize_labels=args.normalize_labels,
        role_overrides=column_roles.parse_role_overrides(
            getattr(args, 'column_role', ())),
        date_formats=column_roles.parse_date_formats(
            getattr(args, 'date_format', ())),
        schema_roles=_schema_roles(args.schema))
    keys = profile.feature_keys
    numeric = tuple(keys[c] for c in profile.numeric_columns)
    categorical = tuple(keys[c] for c in profile.categorical_columns)
    roles = role_fields(profile)
    label = keys[args.label]
    column_names = tuple((key, name) for name, key in keys.items()
                         if key != name)
  else:
    _refuse_csv_only_options(args)
    profile = data_checks.profile_tfrecord_data_root(local_root, args.label,
                                                     span=span)
    _check_tfrecord_names(profile, args.label)
    categorical = tuple(sorted(set(profile.categorical_columns) |
                               set(args.categorical)))
    numeric = tuple(c for c in profile.numeric_columns
                    if c not in categorical)
  decision = _decide_task(args, args.label, profile, fmt)
  regression = decision.task == 'regression'
  spec = config_lib.DatasetSpec(
      name=name, label=label,
      classes=() if regression else tuple(profile.label_values),
      task=decision.task,
      numeric_features=tuple(numeric),
      categorical_features=tuple(categorical), model='mlp',
      schema_file=args.schema, column_names=column_names, **roles)
  return ResolvedData(os.path.abspath(local_root), spec, profile, fmt,
                      decision)


def role_fields(profile) -> Dict[str, Any]:
  """The DatasetSpec fields of a CSV profile's column roles, under the keys.

  Raises:
    ConfigError: a span whose every column is an identifier.
  """
  keys = profile.feature_keys
  of = lambda role: tuple(keys[c] for c in profile.columns_of(role))
  fields = dict(
      text_features=of(column_roles.TEXT),
      date_features=of(column_roles.DATE),
      date_formats=tuple((keys[c], f)
                         for c, f in profile.date_formats.items()),
      identifier_columns=of(column_roles.IDENTIFIER),
      missing_markers=profile.missing_markers,
      column_roles=tuple((keys[r.column], r.role, r.reason)
                         for r in profile.roles))
  if not any(r.is_feature for r in profile.roles):
    raise ConfigError(
        f'Every feature column of span {profile.span} ({profile.span_dir}) '
        'is an identifier (near-unique per row), so nothing is left to '
        'learn from: ' + '; '.join(column_roles.describe(profile.roles)) +
        '. Give a column a role with --column-role COLUMN=ROLE.')
  return fields


def _schema_roles(path: Optional[str]) -> Dict[str, Tuple[str, Any]]:
  """The column roles a curated --schema records ({} without one).

  Raises:
    ConfigError: the file cannot be read or parsed as a schema.
  """
  if not path:
    return {}
  from google.protobuf import text_format  # pylint: disable=g-import-not-at-top
  from tensorflow_metadata.proto.v0 import schema_pb2  # pylint: disable=g-import-not-at-top
  try:
    with open(path, encoding='utf-8') as f:
      schema = text_format.Parse(f.read(), schema_pb2.Schema())
  except (OSError, UnicodeDecodeError, text_format.ParseError) as e:
    raise ConfigError(
        f'--schema {path}: cannot read it as a schema.pbtxt ({e}). Pass the '
        'file `leantfx schema infer` wrote, or fix it.') from e
  return column_roles.schema_roles(schema)


def _refuse_csv_only_options(args: argparse.Namespace) -> None:
  """--column-role and --date-format read CSV columns; refused elsewhere."""
  for option in ('column_role', 'date_format'):
    if getattr(args, option, None):
      raise ConfigError(
          f'--{option.replace("_", "-")} gives roles to the columns of CSV '
          'data; these examples are TFRecord or images. Drop the option.')


def _check_tfrecord_names(profile, label: str) -> None:
  """Refuses tf.Example feature names the pipeline cannot train under.

  A CSV column of any name gets a feature key as the ExampleGen writes it
  (leantfx/columns.py); a TFRecord's features are read as they are, so a
  name that is no plain identifier (or is reserved) cannot be served.
  """
  names = (label,) + tuple(profile.numeric_columns) + tuple(
      profile.categorical_columns)
  keys = columns_lib.feature_keys(list(names))
  bad = [n for n in names if keys[n] != n]
  if bad:
    raise ConfigError(
        f'Span {profile.span} ({profile.span_dir}) has tf.Example features '
        f'named {", ".join(repr(n) for n in bad[:10])}. TFRecord features are '
        'trained and served under their own names, which must be plain '
        'identifiers (a letter, then letters, digits or "_"), not "label", '
        '"image" or ending in "_xf", and distinct in case. Rename them in '
        'the examples, or deliver the data as CSV (any column name works '
        'there).')


def expected_rows(data: ResolvedData) -> Tuple[Tuple[str, int], ...]:
  """(span-N/file, rows) the checks counted, for the pipeline's own count.

  CSV profiles count per file; TFRecord and image profiles count the span
  as a whole (their ExampleGens count nothing to compare per file).
  """
  by_file = getattr(data.profile, 'rows_by_file', None)
  if by_file:
    return tuple(sorted(by_file.items()))
  return ((os.path.basename(data.profile.span_dir), data.profile.num_rows),)
