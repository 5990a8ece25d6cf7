"""Augment's Beam stages, module-level so each can be tested alone.

  CleanRows     counts missing / out-of-domain values per feature and drops the
                noisy rows when the policy is 'drop';
  Oversample    adds synthetic minority-class rows (random or SMOTE-style);
  AugmentImages adds N augmented copies of every image example;
  CountPerClass counts examples per label value;
  CountFiles    all of these counts for rows no stage changes, file by file
                and batch by batch (counts.py), without a message per row.

Every random draw is seeded from the data and the seed, never from worker
state, so the output multiset is the same for any number of Beam workers,
and from run to run: CleanRows passes each row on in tf.Example's
deterministic serialization. The bytes ExampleGen writes are not canonical
(the same 1450 digits rows came out as different bytes in two runs: a
tf.Example's features are a map), and the seeds hash those bytes and the
oversampler sorts them, so two runs of the same data augmented differently
before (none of 2900 augmented train rows in common).
"""
from typing import Dict, Iterable, List, Mapping, Tuple

import apache_beam as beam
import tensorflow as tf

from leantfx import config as config_lib
from leantfx.components.augment import counts as counts_lib
from leantfx.components.augment import examples as examples_lib
from leantfx.components.augment import images
from leantfx.components.augment import tabular

PROBLEMS_TAG = 'problems'
NOISY_TAG = 'noisy'
DROPPED_TAG = 'dropped'
KEPT_TAG = 'kept'


def checked_columns(spec: config_lib.DatasetSpec) -> Tuple[str, ...]:
  """The columns whose values the noisy-row policy looks at (label included)."""
  return spec.feature_columns + (spec.label,)


class _CleanRowsFn(beam.DoFn):
  """Tags each noisy value; drops a noisy train row under the 'drop' policy."""

  def __init__(self, spec: config_lib.DatasetSpec,
               domains: Mapping[str, examples_lib.Domain], drop: bool):
    super().__init__()
    self._spec = spec
    self._domains = dict(domains)
    self._drop = drop
    self._columns = checked_columns(spec)

  def process(self, serialized: bytes):
    example = tf.train.Example.FromString(serialized)
    problems = examples_lib.row_problems(example, self._columns, self._domains)
    for problem in problems:
      yield beam.pvalue.TaggedOutput(PROBLEMS_TAG, problem)
    if problems:
      yield beam.pvalue.TaggedOutput(NOISY_TAG, 1)
    # A row without a usable label cannot be trained on under any policy.
    label_bad = any(f == self._spec.label for f, _ in problems)
    if problems and (self._drop or label_bad):
      yield beam.pvalue.TaggedOutput(DROPPED_TAG, 1)
      return
    yield example.SerializeToString(deterministic=True)


class CleanRows(beam.PTransform):
  """bytes -> {'kept': bytes, 'problems': (feature, kind), 'noisy': 1, 'dropped': 1}."""

  def __init__(self, spec: config_lib.DatasetSpec,
               domains: Mapping[str, examples_lib.Domain], drop: bool):
    super().__init__()
    self._fn = _CleanRowsFn(spec, domains, drop)

  def expand(self, pcoll):
    outputs = pcoll | beam.ParDo(self._fn).with_outputs(
        PROBLEMS_TAG, NOISY_TAG, DROPPED_TAG, main=KEPT_TAG)
    return {
        KEPT_TAG: outputs[KEPT_TAG],
        PROBLEMS_TAG: outputs[PROBLEMS_TAG],
        NOISY_TAG: outputs[NOISY_TAG],
        DROPPED_TAG: outputs[DROPPED_TAG],
    }


def augmented_copies(serialized: bytes, spec: config_lib.DatasetSpec,
                     cfg: config_lib.AugmentConfig) -> List[bytes]:
  """The example itself followed by cfg.copies augmented copies of it."""
  out = [serialized]
  if cfg.copies <= 0:
    return out
  example = tf.train.Example.FromString(serialized)
  image = examples_lib.pixels(example, spec)
  for copy_index in range(cfg.copies):
    rng = images.example_rng(cfg.seed, serialized, copy_index)
    new = examples_lib.with_pixels(example, images.augment_image(image, rng, cfg),
                                   spec)
    out.append(new.SerializeToString(deterministic=True))
  return out


class AugmentImages(beam.PTransform):
  """bytes -> bytes: each example and cfg.copies augmented copies of it."""

  def __init__(self, spec: config_lib.DatasetSpec,
               cfg: config_lib.AugmentConfig):
    super().__init__()
    self._spec = spec
    self._cfg = cfg

  def expand(self, pcoll):
    spec, cfg = self._spec, self._cfg
    return pcoll | beam.FlatMap(augmented_copies, spec, cfg)


def _keyed_by_label(serialized: bytes, label: str) -> Tuple[str, bytes]:
  return (examples_lib.label_of(tf.train.Example.FromString(serialized),
                                label), serialized)


def _synthetic_for_class(item: Tuple[str, Iterable[bytes]],
                         needed: Mapping[str, int],
                         cfg: config_lib.AugmentConfig,
                         spec: config_lib.DatasetSpec,
                         domains: Mapping[str, examples_lib.Domain]):
  label, rows = item
  synthetic = tabular.oversample_class(label, list(rows), needed.get(label, 0),
                                       cfg, spec, domains)
  if cfg.copies > 0 and (spec.image_key or spec.image_features):
    # Duplicates of an image are themselves augmented, so that they and their
    # augmented copies differ from the original's.
    augmented = []
    for index, serialized in enumerate(synthetic):
      example = tf.train.Example.FromString(serialized)
      rng = images.example_rng(cfg.seed, serialized, -2 - index)
      augmented.append(
          examples_lib.with_pixels(
              example,
              images.augment_image(
                  examples_lib.pixels(example, spec), rng, cfg),
              spec).SerializeToString(deterministic=True))
    synthetic = augmented
  return synthetic


class Oversample(beam.PTransform):
  """bytes -> bytes: the rows plus synthetic rows of the smaller classes."""

  def __init__(self, spec: config_lib.DatasetSpec,
               cfg: config_lib.AugmentConfig,
               domains: Mapping[str, examples_lib.Domain]):
    super().__init__()
    self._spec = spec
    self._cfg = cfg
    self._domains = dict(domains)

  def expand(self, pcoll):
    if self._cfg.oversample == 'none':
      return pcoll
    spec, cfg, domains = self._spec, self._cfg, self._domains
    keyed = pcoll | 'KeyByLabel' >> beam.Map(_keyed_by_label, spec.label)
    needed = (
        keyed
        | 'CountClasses' >> beam.combiners.Count.PerKey()
        | 'ToDict' >> beam.combiners.ToDict()
        | 'Targets' >> beam.Map(tabular.targets, cfg.target_ratio))
    needed_side = beam.pvalue.AsSingleton(needed)
    synthetic = (
        keyed
        | 'OnlyMinority' >> beam.Filter(
            lambda kv, need: need.get(kv[0], 0) > 0, need=needed_side)
        # At most MAX_CLASS_ROWS rows of a class in memory: (label, rows).
        | 'SampleClass' >> beam.combiners.Top.PerKey(
            tabular.MAX_CLASS_ROWS, key=tabular.row_digest, reverse=True)
        | 'Synthesize' >> beam.FlatMap(
            _synthetic_for_class, needed=needed_side, cfg=cfg, spec=spec,
            domains=domains))
    return (pcoll, synthetic) | 'WithSynthetic' >> beam.Flatten()


class CountPerClass(beam.PTransform):
  """bytes -> (label value, count)."""

  def __init__(self, label: str):
    super().__init__()
    self._label = label

  def expand(self, pcoll):
    label = self._label
    return (pcoll
            | 'Label' >> beam.Map(lambda s: _keyed_by_label(s, label)[0])
            | 'Count' >> beam.combiners.Count.PerElement())


# Records decoded at once by CountFiles (~20 MB of 23-column rows).
COUNT_BATCH_ROWS = 50_000


class _CountFileFn(beam.DoFn):
  """A TFRecord file -> (split, what, key, count) entries (counts.py)."""

  def __init__(self, split: str, spec: config_lib.DatasetSpec,
               domains: Mapping[str, examples_lib.Domain], drop: bool,
               is_train: bool):
    super().__init__()
    self._split = split
    self._label = spec.label
    self._columns = checked_columns(spec)
    self._domains = dict(domains)
    self._drop = drop
    self._is_train = is_train

  def process(self, path: str):
    compression = 'GZIP' if path.endswith('.gz') else ''
    for records in tf.data.TFRecordDataset(
        path, compression_type=compression).batch(COUNT_BATCH_ROWS):
      entries, _ = counts_lib.batch_counts(
          records.numpy().tolist(), self._label, self._columns,
          self._domains, drop=self._drop)
      for what, key, count in entries:
        if what == 'class_counts_after' and not self._is_train:
          continue  # Only train rows are dropped from what is written.
        yield (self._split, what, key, count)
        if what == 'class_counts_before' and not self._is_train:
          yield (self._split, 'class_counts_after', key, count)


class CountFiles(beam.PTransform):
  """TFRecord file paths -> the (split, what, key, count) entries of a split.

  The counts CleanRows and CountPerClass give, for rows that pass on
  unchanged: the class counts after are those of the rows kept (train) or
  of every row (other splits, which are copied whole).
  """

  def __init__(self, split: str, spec: config_lib.DatasetSpec,
               domains: Mapping[str, examples_lib.Domain], drop: bool,
               is_train: bool):
    super().__init__()
    self._fn = _CountFileFn(split, spec, domains, drop, is_train)

  def expand(self, pcoll):
    return (pcoll
            # One file per worker bundle: files are read side by side.
            | 'Spread' >> beam.Reshuffle()
            | 'Count' >> beam.ParDo(self._fn))


def counts_to_report(entries: List[Tuple[str, str, object, int]]
                    ) -> Dict[str, Dict[str, object]]:
  """Folds ('split', 'what', key, n) entries into the per-split report dict."""
  report: Dict[str, Dict[str, object]] = {}
  for split, what, key, count in entries:
    section = report.setdefault(split, {
        'class_counts_before': {}, 'class_counts_after': {}, 'problems': {},
        'noisy_rows': 0, 'dropped_rows': 0,
    })
    if what in ('class_counts_before', 'class_counts_after'):
      section[what][key] = section[what].get(key, 0) + count
    elif what == 'problems':
      feature, kind = key
      per_feature = section['problems'].setdefault(
          feature, {'missing': 0, 'out_of_domain': 0})
      per_feature[kind] += count
    else:
      section[what] += count
  for section in report.values():
    for what in ('class_counts_before', 'class_counts_after'):
      section[what] = dict(sorted(section[what].items()))
    section['problems'] = dict(sorted(section['problems'].items()))
  return report
