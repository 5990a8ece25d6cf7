"""Pre-flight checks of TFRecord and image data roots (CSV: input_checks.py).

Like the CSV checks, they run before the pipeline is built, so a problem a
user can fix is one InputDataError paragraph naming the span, file, feature
and what to do, with exit code 2, instead of a traceback from a Beam job:

* TFRecord: every file of the span must be TFRecord (gzip when named .gz, as
  ImportExampleGen reads it) holding tf.Examples; the label must be present
  in every example; the span must hold at least one example; with a known
  dataset, every feature must appear and have the expected kind.
* Images: the span holds only <class name>/ folders of .png/.jpg/.jpeg files;
  each is decoded and its channel count checked exactly as ImageExampleGen
  does (components/image_example_gen/decode.py). Bad images are counted per
  reason; the 'fail' policy stops here naming them, 'skip' reports them and
  goes on; a span without any good image stops either way.
"""
import dataclasses
import os
from typing import Dict, List, Optional, Sequence, Tuple

from leantfx import input_checks
from leantfx import spans
from leantfx.components.image_example_gen import decode
from leantfx.errors import InputDataError

_MAX_NAMED = 10


@dataclasses.dataclass(frozen=True)
class DataProfile:
  """What the checked span holds (the fields the CLI prints and uses).

  Attributes:
    data_root: absolute data root.
    span: the span checked (the newest, or the pinned one).
    span_dir: its folder.
    num_rows: examples (TFRecord) or good images.
    label_values: distinct label values, sorted.
    numeric_columns: features with int64 or float values (TFRecord).
    categorical_columns: features with bytes values (TFRecord).
    bad_images: reason -> [(file, detail)] of images left out or failing.
  """
  data_root: str
  span: int
  span_dir: str
  num_rows: int
  label_values: Tuple[str, ...]
  numeric_columns: Tuple[str, ...] = ()
  categorical_columns: Tuple[str, ...] = ()
  bad_images: Dict[str, List[Tuple[str, str]]] = dataclasses.field(
      default_factory=dict, hash=False)
  # {label value: rows} where counted (images; leantfx/split_feasibility.py).
  label_counts: Dict[str, int] = dataclasses.field(
      default_factory=dict, hash=False)


def _span(data_root: str, span: Optional[int]) -> Tuple[int, str]:
  if span is None:
    return input_checks.latest_span(data_root)
  return input_checks.latest_span(data_root, span)


def _sorted_labels(values) -> Tuple[str, ...]:
  if all(v.lstrip('-').isdigit() for v in values):
    return tuple(sorted(values, key=int))
  return tuple(sorted(values))


def _data_files(span: int, span_dir: str) -> List[str]:
  names = sorted(os.listdir(span_dir))
  files, folders = [], []
  for name in names:
    if not spans.is_data_entry(name):
      continue
    path = os.path.join(span_dir, name)
    (folders if os.path.isdir(path) else files).append(path)
  if folders:
    raise InputDataError(
        f'Span {span} folder {span_dir!r} holds folders '
        f'({", ".join(repr(os.path.basename(f)) for f in folders[:_MAX_NAMED])}'
        '); ImportExampleGen reads every entry of span-N/ as a TFRecord file. '
        'Move the folders out (or use --format images for class folders).')
  if not files:
    raise InputDataError(
        f'Span {span} folder {span_dir!r} is empty: span {span} is the span '
        'ImportExampleGen would ingest. Put its TFRecord files into it, or '
        'remove the folder so that an earlier span is used.')
  return files


def _value_kind(feature) -> Optional[str]:
  if feature.bytes_list.value:
    return 'bytes'
  if feature.int64_list.value or feature.float_list.value:
    return 'number'
  return None


def profile_tfrecord_data_root(
    data_root: str,
    label: str,
    *,
    numeric_columns: Sequence[str] = (),
    categorical_columns: Sequence[str] = (),
    span: Optional[int] = None) -> DataProfile:
  """Reads every record of the span's TFRecord files and checks them.

  Args:
    data_root: the folder holding span-<N>/ folders of TFRecord files.
    label: the label feature.
    numeric_columns: features that must be present with numbers (a known
      dataset), checked when given.
    categorical_columns: features that must be present with strings.
    span: check this span instead of the newest.

  Returns:
    A DataProfile of the span.

  Raises:
    InputDataError: a file that is not TFRecord or holds no tf.Example, a
      missing label, a missing feature or one of the wrong kind, no examples.
  """
  # TensorFlow is imported on use: the CLI imports this module before it
  # knows the format, and must start without loading TensorFlow.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  span, span_dir = _span(data_root, span)
  files = _data_files(span, span_dir)
  labels = set()
  kinds: Dict[str, set] = {}
  first_seen: Dict[Tuple[str, str], Tuple[str, int]] = {}
  num_rows = 0
  for path in files:
    compression = 'GZIP' if path.endswith('.gz') else ''
    index = 0
    try:
      for index, record in enumerate(
          tf.data.TFRecordDataset(path, compression_type=compression)
          .as_numpy_iterator()):
        try:
          example = tf.train.Example.FromString(record)
        except Exception as e:  # pylint: disable=broad-except
          raise InputDataError(
              f'{path} (span {span}), record {index + 1}: not a serialized '
              f'tf.Example ({type(e).__name__}). ImportExampleGen needs '
              'TFRecord files of tf.train.Example protos; re-export the data '
              'as such, or move the file out of the span folder.') from e
        num_rows += 1
        features = example.features.feature
        if label not in features or _value_kind(features[label]) is None:
          raise InputDataError(
              f'{path} (span {span}), record {index + 1}: the label feature '
              f'{label!r} is missing (the record has '
              f'{sorted(features)[:20]}). Every example needs a label; pass '
              'the right feature with --label.')
        feature = features[label]
        labels.add(feature.bytes_list.value[0].decode('utf-8', 'replace')
                   if feature.bytes_list.value else
                   str(int(feature.int64_list.value[0])
                       if feature.int64_list.value else
                       feature.float_list.value[0]))
        for name, value in features.items():
          kind = _value_kind(value)
          if kind:
            kinds.setdefault(name, set()).add(kind)
            first_seen.setdefault((name, kind), (path, index + 1))
    except tf.errors.OpError as e:
      where = (f'record {index + 2}' if num_rows else 'its first record')
      compressed = ('gzip-compressed (the name ends in .gz)'
                    if compression else 'uncompressed (the name does not end '
                    'in .gz)')
      raise InputDataError(
          f'{path} (span {span}) is not a readable TFRecord file: reading '
          f'{where} failed ({e.message.splitlines()[0][:160]}). It is read '
          f'as {compressed} TFRecord, the way ImportExampleGen reads it. '
          'Replace it with a TFRecord file of tf.Examples (or fix its name\'s '
          '.gz suffix), or move it out of the span folder.') from e
  if not num_rows:
    raise InputDataError(
        f'Span {span} of {data_root!r} holds no example: '
        f'{", ".join(repr(os.path.basename(f)) for f in files)} are empty '
        'TFRecord files. Add the data, or remove the span folder so that an '
        'earlier span is used.')
  for names, kind, what in ((numeric_columns, 'number', 'numbers'),
                            (categorical_columns, 'bytes', 'strings')):
    for name in names:
      found = kinds.get(name)
      if not found:
        raise InputDataError(
            f'Feature {name!r} is in no example of span {span} '
            f'({span_dir}); the dataset needs it. Add it to the examples.')
      wrong = found - {kind}
      if wrong:
        other = wrong.pop()
        path, record = first_seen[(name, other)]
        raise InputDataError(
            f'{path} (span {span}), record {record}: feature {name!r} holds '
            f'{"strings" if other == "bytes" else "numbers"}, but it is a '
            f'feature of {what} in this dataset. Fix the value type of '
            f'{name!r} in the examples.')
  feature_kinds = {n: k for n, k in kinds.items() if n != label}
  return DataProfile(
      data_root=os.path.dirname(span_dir), span=span, span_dir=span_dir,
      num_rows=num_rows, label_values=_sorted_labels(labels),
      numeric_columns=tuple(
          sorted(n for n, k in feature_kinds.items() if k == {'number'})),
      categorical_columns=tuple(
          sorted(n for n, k in feature_kinds.items() if 'bytes' in k)))


def profile_image_data_root(data_root: str,
                            settings: decode.ImageSettings,
                            span: Optional[int] = None) -> DataProfile:
  """Decodes every image of the span as ImageExampleGen will.

  Args:
    data_root: the folder holding span-<N>/<class name>/ folders.
    settings: size, channels and the bad-image policy.
    span: check this span instead of the newest.

  Returns:
    A DataProfile (bad_images lists what 'skip' leaves out).

  Raises:
    InputDataError: loose files or non-image files in the span, no good
      image at all, or bad images under the 'fail' policy.
  """
  span, span_dir = _span(data_root, span)
  entries = sorted(n for n in os.listdir(span_dir) if spans.is_data_entry(n))
  loose = [n for n in entries if not os.path.isdir(os.path.join(span_dir, n))]
  if loose:
    raise InputDataError(
        f'Span {span} folder {span_dir!r} holds files directly '
        f'({", ".join(repr(n) for n in loose[:_MAX_NAMED])}); images go into '
        'one folder per class: span-N/<class name>/*.png. Move them into '
        'their class folder.')
  bad: Dict[str, List[Tuple[str, str]]] = {}
  counts: Dict[str, int] = {}
  not_images = []
  for label in entries:
    folder = os.path.join(span_dir, label)
    for name in sorted(os.listdir(folder)):
      path = os.path.join(folder, name)
      if name.startswith('.'):
        continue
      if os.path.isdir(path) or not decode.is_image_file(name):
        not_images.append(path)
        continue
      with open(path, 'rb') as f:
        png, reason, detail = decode.decode_image(f.read(), settings)
      if png is None:
        bad.setdefault(reason, []).append((path, detail))
      else:
        counts[label] = counts.get(label, 0) + 1
  if not_images:
    raise InputDataError(
        f'Span {span} holds entries that are not .png/.jpg/.jpeg images: '
        f'{", ".join(repr(p) for p in not_images[:_MAX_NAMED])}. '
        'ImageExampleGen reads only image files; move the rest out of the '
        'class folders.')
  bad_count = sum(len(v) for v in bad.values())
  summary = ', '.join(f'{len(v)} {reason.replace("_", " ")}'
                      for reason, v in sorted(bad.items()))
  named = '; '.join(f'{p} ({d})' for v in bad.values() for p, d in v
                    )[:1500]
  if bad and settings.bad_images == 'fail':
    raise InputDataError(
        f'{bad_count} bad image(s) in span {span} of {data_root!r} '
        f'({summary}; {sum(counts.values())} good). Policy "fail" (the '
        f'default) stops the run: {named}. Replace or remove them, or pass '
        '--bad-images skip to train without them (they are counted and '
        'reported).')
  if not counts:
    raise InputDataError(
        f'Span {span} of {data_root!r} has no usable image'
        + (f' ({summary})' if bad else ' (its class folders are empty)') +
        '. Put the images into span-N/<class name>/, or remove the span '
        'folder so that an earlier span is used.')
  return DataProfile(
      data_root=os.path.dirname(span_dir), span=span, span_dir=span_dir,
      num_rows=sum(counts.values()),
      label_values=_sorted_labels(counts),
      bad_images=bad, label_counts=dict(counts))
