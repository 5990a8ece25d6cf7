"""Augment's executor on real Examples files: eval byte-identical, train
augmented, counts recorded, and the same output with 1 or 2 Beam workers.
"""
import glob
import gzip
import json
import os

import pytest
import tensorflow as tf
from tfx.types import artifact_utils
from tfx.types import standard_artifacts

from leantfx import config as config_lib
from leantfx import datasets
from leantfx import schemas
from leantfx.components.augment import executor as executor_lib
from leantfx.components.augment import spec as spec_lib
from tests.data import helpers

pytestmark = pytest.mark.unit

SPEC = datasets.BUNDLED['penguins']


def _write_split(directory, records):
  os.makedirs(directory, exist_ok=True)
  with tf.io.TFRecordWriter(os.path.join(directory, 'data.gz'),
                            options='GZIP') as writer:
    for record in records:
      writer.write(record)


@pytest.fixture(scope='module')
def examples_dir(tmp_path_factory):
  from leantfx import data_formats  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp('examples')
  rows = helpers.bundled_rows('penguins', str(root))
  header = list(rows[0])
  serialized = data_formats.rows_to_examples(
      [header] + [[r[c] for c in header] for r in rows])
  _write_split(str(root / 'Split-train'), serialized[:280])
  _write_split(str(root / 'Split-eval'), serialized[280:])
  return str(root)


def _run(examples_dir, out_dir, cfg, beam_args=()):
  examples = standard_artifacts.Examples()
  examples.uri = examples_dir
  examples.split_names = artifact_utils.encode_split_names(['train', 'eval'])
  examples.set_int_custom_property('span', 3)
  examples.set_string_custom_property('payload_format', 'FORMAT_TF_EXAMPLE')
  schema = standard_artifacts.Schema()
  schema.uri = os.path.dirname(schemas.bundled_schema('penguins'))
  output = standard_artifacts.Examples()
  output.uri = out_dir
  os.makedirs(out_dir, exist_ok=True)
  executor = executor_lib.Executor(
      executor_lib.Executor.Context(beam_pipeline_args=list(beam_args),
                                    tmp_dir=out_dir + '-tmp'))
  executor.Do(
      {spec_lib.EXAMPLES_KEY: [examples], spec_lib.SCHEMA_KEY: [schema]},
      {spec_lib.AUGMENTED_EXAMPLES_KEY: [output]},
      {spec_lib.AUGMENT_CONFIG_KEY: json.dumps(config_lib.to_json_dict(cfg)),
       spec_lib.DATASET_KEY: json.dumps(config_lib.to_json_dict(SPEC))})
  return output


def _records(pattern):
  return sorted(r.numpy() for r in tf.data.TFRecordDataset(
      sorted(glob.glob(pattern)), compression_type='GZIP'))


def test_smote_output_is_the_same_with_one_or_two_workers(examples_dir,
                                                          tmp_path):
  cfg = config_lib.AugmentConfig(oversample='smote', jitter_stddev=0.1,
                                 seed=5)
  one = _run(examples_dir, str(tmp_path / 'one'), cfg,
             ['--direct_running_mode=in_memory', '--direct_num_workers=1'])
  two = _run(examples_dir, str(tmp_path / 'two'), cfg,
             ['--direct_running_mode=multi_processing',
              '--direct_num_workers=2'])
  train_one = _records(os.path.join(one.uri, 'Split-train', '*'))
  assert train_one == _records(os.path.join(two.uri, 'Split-train', '*'))

  # Eval passes through byte for byte (the files themselves).
  for name in os.listdir(os.path.join(examples_dir, 'Split-eval')):
    with open(os.path.join(examples_dir, 'Split-eval', name), 'rb') as f:
      source = f.read()
    with open(os.path.join(one.uri, 'Split-eval', name), 'rb') as f:
      assert f.read() == source

  before = json.loads(
      one.get_string_custom_property(spec_lib.CLASS_COUNTS_BEFORE_PROPERTY))
  after = json.loads(
      one.get_string_custom_property(spec_lib.CLASS_COUNTS_AFTER_PROPERTY))
  assert sum(before.values()) == 280
  # target_ratio 1.0: every class reaches the largest class's count.
  assert set(after.values()) == {max(before.values())}
  assert len(train_one) == sum(after.values())
  assert one.get_int_custom_property('span') == 3
  noisy = json.loads(one.get_string_custom_property(
      spec_lib.NOISY_ROWS_PROPERTY))
  # The bundled rows miss sex in 11 rows and measurements in 2 (README of
  # palmerpenguins); all are counted, none dropped under 'impute'.
  total_noisy = noisy['train']['noisy_rows'] + noisy['eval']['noisy_rows']
  assert total_noisy == 11
  assert noisy['train']['dropped_rows'] == 0


def test_drop_policy_removes_noisy_train_rows(examples_dir, tmp_path):
  import dataclasses  # pylint: disable=g-import-not-at-top
  global SPEC  # pylint: disable=global-statement
  saved = SPEC
  SPEC = dataclasses.replace(saved, noisy_rows='drop')
  try:
    out = _run(examples_dir, str(tmp_path / 'drop'),
               config_lib.AugmentConfig())
  finally:
    SPEC = saved
  noisy = json.loads(out.get_string_custom_property(
      spec_lib.NOISY_ROWS_PROPERTY))
  dropped = noisy['train']['dropped_rows']
  assert dropped == noisy['train']['noisy_rows'] > 0
  train = _records(os.path.join(out.uri, 'Split-train', '*'))
  assert len(train) == 280 - dropped
  assert noisy['eval']['dropped_rows'] == 0


def _report(output):
  with open(os.path.join(output.uri, spec_lib.REPORT_FILE)) as f:
    return json.load(f)


@pytest.mark.parametrize('noisy_rows', ['impute', 'drop'])
def test_a_pass_through_counts_what_the_row_by_row_path_counts(
    examples_dir, tmp_path, monkeypatch, noisy_rows):
  # No oversampling, no copies: the splits pass on as files (train too,
  # when the policy drops none) and the counts are those of CleanRows and
  # CountPerClass on every row (the penguins miss values in 11 rows).
  import dataclasses  # pylint: disable=g-import-not-at-top
  global SPEC  # pylint: disable=global-statement
  saved = SPEC
  SPEC = dataclasses.replace(saved, noisy_rows=noisy_rows)
  try:
    cfg = config_lib.AugmentConfig()
    assert executor_lib.passes_through(cfg)
    fast = _run(examples_dir, str(tmp_path / 'fast'), cfg)
    monkeypatch.setattr(executor_lib, 'passes_through', lambda cfg: False)
    slow = _run(examples_dir, str(tmp_path / 'slow'), cfg)
  finally:
    SPEC = saved
  assert _report(fast) == _report(slow)
  for key in (spec_lib.CLASS_COUNTS_BEFORE_PROPERTY,
              spec_lib.CLASS_COUNTS_AFTER_PROPERTY,
              spec_lib.NOISY_ROWS_PROPERTY):
    assert (fast.get_string_custom_property(key) ==
            slow.get_string_custom_property(key))
  train = lambda out: _records(os.path.join(out.uri, 'Split-train', '*'))
  assert train(fast) == train(slow)
  if noisy_rows == 'impute':
    # Copied as the files they are.
    assert (os.listdir(os.path.join(fast.uri, 'Split-train')) ==
            os.listdir(os.path.join(examples_dir, 'Split-train')))
  else:
    assert len(train(fast)) < 280
