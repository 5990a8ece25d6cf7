"""Tests for benchmarks/raw_variants.py on a real Transform, without a run.

The digits fixture (tests/optimize/raw_fixture.py: the real preprocessing_fn
through tft_beam, the real model trained a few steps) stands in for a run's
Trainer and Transform; one export (TFLite float32, the cheapest) goes
through the module's export-and-push path and is timed by ``time_offline``
in its own process, loaded by ``leantfx serve``'s loader.
"""
import os

import numpy as np
import pytest

from benchmarks import harness
from benchmarks import raw_variants
from leantfx import feature_names
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.export import raw_features
from leantfx.models import model_layout
from leantfx.runtimes import push
from tests.optimize import raw_fixture

pytestmark = pytest.mark.unit


def _labels(fx, indices):
  return np.array([fx.spec.classes.index(v)
                   for v in np.asarray(fx.columns[fx.spec.label])[indices]])


@pytest.fixture(scope='module')
def pushed(digits_fixture, tmp_path_factory):
  fx = digits_fixture
  work = tmp_path_factory.mktemp('raw_variants')
  # A trained model's folder as the Trainer writes it: its SavedModel's
  # feature-names file is what every raw push carries.
  model_uri = str(work / 'model')
  feature_names.write_for_saved_model(
      os.path.join(model_uri, model_layout.SERVING_MODEL_DIR),
      {c: c for c in fx.raw_eval})
  train = range(raw_fixture.NUM_TRAIN)
  evaluation = range(raw_fixture.NUM_TRAIN,
                     raw_fixture.NUM_TRAIN + raw_fixture.NUM_EVAL)
  raw = raw_features.RawInputs(
      tf_transform_output=fx.tft_output, label=fx.spec.label,
      classes=tuple(fx.spec.classes),
      train=measure.LabeledData(fx.raw_train, _labels(fx, train)),
      eval=measure.LabeledData(fx.raw_eval, _labels(fx, evaluation)))
  found = raw_variants.RunInputs(model_uri=model_uri, raw=raw,
                                 calibration_samples=20)
  bases = raw_variants.export_and_push(fx.model, found, str(work / 'bases'),
                                       'digits', runtimes=('tflite',),
                                       modes=('float32',))
  return fx, raw, bases


def test_the_export_is_pushed_as_a_raw_pick_is(pushed):
  _, _, bases = pushed
  base = bases['tflite']['float32']
  assert os.path.basename(base) == 'digits'
  version = harness.newest_version(base)
  manifest = push.check_version(version)  # Every file matches its sha256.
  assert sorted(manifest['files']) == [feature_names.FILE_NAME, 'model.tflite']
  assert manifest['tflite_mode'] == 'float32'
  assert manifest['metrics']['serving_inputs']['inputs'] == 'raw'


def test_time_offline_scores_and_times_through_the_servable(pushed):
  fx, raw, bases = pushed
  rows = raw_variants.time_offline(bases, raw.eval, runs=20, rounds=2,
                                   warmup=2)
  assert len(rows) == 1
  row = rows[0]
  assert row['variant'] == 'tflite float32'
  assert row['servable'] == 'TfLiteServable'
  assert row['call'] == 'servable.run, batch 1, 1 thread, raw columns'
  assert row['calls'] == 20
  assert 0 < row['p50_ms'] <= row['p99_ms']
  version = harness.newest_version(bases['tflite']['float32'])
  assert row['size_bytes'] == sum(
      os.path.getsize(os.path.join(version, f)) for f in os.listdir(version))
  # The fold computes what the Transform then the Keras model compute: the
  # float32 export's answers agree with the reference but for ties (at most
  # one of the 60 rows).
  reference = float(np.mean(np.argmax(fx.reference, axis=1) == raw.eval.labels))
  assert row['eval_rows'] == raw_fixture.NUM_EVAL
  assert abs(row['accuracy'] - reference) <= 1 / raw_fixture.NUM_EVAL

