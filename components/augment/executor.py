"""Augment's executor: checks its inputs, then runs the Beam stages.

Train split: CleanRows (noisy-row policy) -> Oversample -> AugmentImages ->
TFRecord files. Every other split (eval) is copied file by file, byte for
byte, and only read to count its classes and noisy values. When no row is
added or changed (no oversampling, no image copies: ``passes_through``) and
the noisy-row policy drops no train row, the train split is copied too, and
every split is only counted, batch by batch (stages.CountFiles). The counts go to
augment_report.json beside the splits and to custom properties of the output
artifact (so the run summary can show them from ML Metadata).
"""
import json
import os
from typing import Any, Dict, List

import apache_beam as beam
from absl import logging
from tfx import types
from tfx.components.util import examples_utils
from tfx.dsl.components.base import base_beam_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.utils import io_utils

from leantfx import config as config_lib
from leantfx.components.augment import examples as examples_lib
from leantfx.components.augment import spec as spec_lib
from leantfx.components.augment import stages
from leantfx.components.augment import tabular

_OUTPUT_PREFIX = 'data_tfrecord'
# ExampleGen's custom properties the output keeps (span and version are
# custom properties in TFX 1.16; the span window resolver reads them).
_COPIED_PROPERTIES = ('span', 'version', 'payload_format', 'file_format')


def parse_config(exec_properties: Dict[str, Any]):
  """(AugmentConfig, DatasetSpec) from the execution properties."""
  cfg = config_lib.AugmentConfig(
      **json.loads(exec_properties[spec_lib.AUGMENT_CONFIG_KEY]))
  spec = config_lib.dataset_from_dict(
      json.loads(exec_properties[spec_lib.DATASET_KEY]))
  return cfg, spec


def check_inputs(cfg: config_lib.AugmentConfig, spec: config_lib.DatasetSpec,
                 splits: List[str], schema_features: List[str]) -> None:
  """Raises ValueError for a configuration this data cannot support."""
  if spec_lib.TRAIN_SPLIT not in splits:
    raise ValueError(f'The examples have splits {splits}; Augment needs a '
                     f'{spec_lib.TRAIN_SPLIT!r} split.')
  if spec.label not in schema_features:
    raise ValueError(f'The label {spec.label!r} is not in the schema '
                     f'(features: {sorted(schema_features)}).')
  is_image = bool(spec.image_key or spec.image_features)
  if cfg.copies > 0 and not is_image:
    raise ValueError(
        f'Augmented copies ({cfg.copies}) need an image dataset; '
        f'{spec.name!r} has no image features. Use oversampling for tabular '
        'data, or set copies to 0.')
  if cfg.oversample != 'none' and spec.is_regression:
    raise ValueError(
        f'Oversampling ({cfg.oversample}) adds rows of the smaller classes, '
        f'and {spec.name!r} is a regression on {spec.label!r}, which has no '
        'classes. Set oversample to none.')
  if cfg.oversample == 'smote' and not spec.numeric_features:
    raise ValueError(
        f'SMOTE interpolates numeric features and {spec.name!r} has none; '
        'use random oversampling.')


def _write_report(entries, path: str, meta: Dict[str, Any]) -> None:
  report = dict(meta)
  report['splits'] = stages.counts_to_report(entries)
  config = meta['augment_config']
  if config['oversample'] != 'none':
    # A class above MAX_CLASS_ROWS rows was oversampled from a sample.
    counts = report['splits'].get(spec_lib.TRAIN_SPLIT, {}).get(
        'class_counts_before', {})
    report['oversample_source_rows'] = {
        'max_per_class': tabular.MAX_CLASS_ROWS,
        'sampled_classes': tabular.sampled_classes(counts,
                                                   config['target_ratio'])}
  io_utils.write_string_file(path, json.dumps(report, indent=2, sort_keys=True))


def passes_through(cfg: config_lib.AugmentConfig) -> bool:
  """Whether no row is added or changed (no oversampling, no image copies).

  Then only the noisy-row policy may remove train rows; when it removes
  none, every split is copied file by file and only read to be counted.
  """
  return cfg.oversample == 'none' and cfg.copies <= 0


def _train_dropped(report_path: str) -> int:
  with fileio.open(report_path, 'r') as f:
    report = json.loads(f.read())
  return report['splits'].get(spec_lib.TRAIN_SPLIT, {}).get('dropped_rows', 0)


def _copy_split(source_dir: str, target_dir: str) -> None:
  fileio.makedirs(target_dir)
  for name in sorted(fileio.listdir(source_dir)):
    fileio.copy(os.path.join(source_dir, name), os.path.join(target_dir, name),
                overwrite=True)


class Executor(base_beam_executor.BaseBeamExecutor):
  """Augments and rebalances the train split; copies the other splits."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    cfg, spec = parse_config(exec_properties)
    examples = artifact_utils.get_single_instance(
        input_dict[spec_lib.EXAMPLES_KEY])
    schema = io_utils.SchemaReader().read(
        io_utils.get_only_uri_in_dir(
            artifact_utils.get_single_uri(input_dict[spec_lib.SCHEMA_KEY])))
    output = artifact_utils.get_single_instance(
        output_dict[spec_lib.AUGMENTED_EXAMPLES_KEY])
    splits = artifact_utils.decode_split_names(examples.split_names)
    check_inputs(cfg, spec, splits, [f.name for f in schema.feature])
    payload = examples_utils.get_payload_format_string(examples)
    if payload != 'FORMAT_TF_EXAMPLE':
      raise ValueError(f'Augment reads tf.Example records; the examples are '
                       f'{payload}.')

    output.split_names = examples.split_names
    for name in ('span', 'version'):
      if examples.has_property(name):
        setattr(output, name, getattr(examples, name))
    for name in _COPIED_PROPERTIES:
      if examples.has_custom_property(name):
        output.mlmd_artifact.custom_properties[name].CopyFrom(
            examples.mlmd_artifact.custom_properties[name])

    domains = examples_lib.schema_domains(schema)
    report_path = os.path.join(output.uri, spec_lib.REPORT_FILE)
    meta = {
        'noisy_row_policy': spec.noisy_rows,
        'augment_config': config_lib.to_json_dict(cfg),
        'label': spec.label,
    }
    for split in splits:
      if split != spec_lib.TRAIN_SPLIT:
        _copy_split(
            artifact_utils.get_split_uri([examples], split),
            artifact_utils.get_split_uri([output], split))
    if passes_through(cfg):
      self._count(examples, splits, spec, domains, report_path, meta)
      if _train_dropped(report_path) == 0:
        # No row changes: the train split is its files, as the others.
        _copy_split(
            artifact_utils.get_split_uri([examples], spec_lib.TRAIN_SPLIT),
            artifact_utils.get_split_uri([output], spec_lib.TRAIN_SPLIT))
      else:
        self._augment(examples, output, splits, spec, cfg, domains,
                      report_path, meta)
    else:
      self._augment(examples, output, splits, spec, cfg, domains,
                    report_path, meta)

    with fileio.open(report_path, 'r') as f:
      report = json.loads(f.read())
    train = report['splits'].get(spec_lib.TRAIN_SPLIT, {})
    output.set_string_custom_property(
        spec_lib.CLASS_COUNTS_BEFORE_PROPERTY,
        json.dumps(train.get('class_counts_before', {}), sort_keys=True))
    output.set_string_custom_property(
        spec_lib.CLASS_COUNTS_AFTER_PROPERTY,
        json.dumps(train.get('class_counts_after', {}), sort_keys=True))
    noisy = {
        split: {k: section[k] for k in ('noisy_rows', 'dropped_rows',
                                        'problems')}
        for split, section in report['splits'].items()
    }
    output.set_string_custom_property(spec_lib.NOISY_ROWS_PROPERTY,
                                      json.dumps(noisy, sort_keys=True))
    logging.info('Augment: train class counts %s -> %s; noisy rows %s',
                 train.get('class_counts_before'),
                 train.get('class_counts_after'), noisy)

  def _count(self, examples, splits, spec, domains, report_path, meta):
    """Counts every split's rows, changing none (stages.CountFiles)."""
    drop = spec.noisy_rows == 'drop'
    with self._make_beam_pipeline() as pipeline:
      entries = []
      for split in splits:
        folder = artifact_utils.get_split_uri([examples], split)
        files = [os.path.join(folder, name)
                 for name in sorted(fileio.listdir(folder))]
        is_train = split == spec_lib.TRAIN_SPLIT
        entries.append(
            pipeline
            | f'Files[{split}]' >> beam.Create(files)
            | f'Count[{split}]' >> stages.CountFiles(
                split, spec, domains, drop=drop and is_train,
                is_train=is_train))
      _ = (entries
           | 'AllCounts' >> beam.Flatten()
           | 'ToList' >> beam.combiners.ToList()
           | 'WriteReport' >> beam.Map(_write_report, report_path, meta))

  def _augment(self, examples, output, splits, spec, cfg, domains,
               report_path, meta):
    """Cleans, oversamples and augments the train split, row by row."""
    drop = spec.noisy_rows == 'drop'
    with self._make_beam_pipeline() as pipeline:
      entries = []
      for split in splits:
        pattern = os.path.join(
            artifact_utils.get_split_uri([examples], split), '*')
        rows = pipeline | f'Read[{split}]' >> beam.io.ReadFromTFRecord(
            pattern, coder=beam.coders.BytesCoder())
        before = rows | f'CountBefore[{split}]' >> stages.CountPerClass(
            spec.label)
        is_train = split == spec_lib.TRAIN_SPLIT
        cleaned = rows | f'CleanRows[{split}]' >> stages.CleanRows(
            spec, domains, drop=drop and is_train)
        if is_train:
          result = (
              cleaned[stages.KEPT_TAG]
              | 'Oversample' >> stages.Oversample(spec, cfg, domains)
              | 'AugmentImages' >> stages.AugmentImages(spec, cfg))
          _ = result | 'Write' >> beam.io.WriteToTFRecord(
              os.path.join(artifact_utils.get_split_uri([output], split),
                           _OUTPUT_PREFIX),
              file_name_suffix='.gz',
              coder=beam.coders.BytesCoder())
          after = result | f'CountAfter[{split}]' >> stages.CountPerClass(
              spec.label)
        else:
          after = before
        for what, counted in (('class_counts_before', before),
                              ('class_counts_after', after)):
          entries.append(counted | f'Tag[{split}][{what}]' >> beam.Map(
              lambda kv, s=split, w=what: (s, w, kv[0], kv[1])))
        entries.append(
            cleaned[stages.PROBLEMS_TAG]
            | f'CountProblems[{split}]' >> beam.combiners.Count.PerElement()
            | f'TagProblems[{split}]' >> beam.Map(
                lambda kv, s=split: (s, 'problems', kv[0], kv[1])))
        for what, tag in (('noisy_rows', stages.NOISY_TAG),
                          ('dropped_rows', stages.DROPPED_TAG)):
          entries.append(
              cleaned[tag]
              | f'Sum[{split}][{what}]' >> beam.CombineGlobally(sum)
              | f'Tag[{split}][{what}]' >> beam.Map(
                  lambda n, s=split, w=what: (s, w, None, n)))
      _ = (entries
           | 'AllCounts' >> beam.Flatten()
           | 'ToList' >> beam.combiners.ToList()
           | 'WriteReport' >> beam.Map(_write_report, report_path, meta))

