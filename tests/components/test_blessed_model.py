"""The last blessed model from the Pusher's records (no ML Metadata resolver).

The Pusher records each model it pushed; LastBlessedModel copies the newest
recorded model into its output Model, or leaves it empty (found 0) before
any; the Evaluator then drops an empty baseline instead of failing on it.
"""
import json
import os

import pytest
from tfx.proto import pusher_pb2
from tfx.types import standard_artifacts
from tfx.utils import proto_utils

from leantfx.components.blessed_model import component
from leantfx.components.blessed_model import executor
from leantfx.components.blessed_model import records
from leantfx.components.blessed_model import spec
from leantfx.components.versioned_pusher import executor as pusher_executor

pytestmark = pytest.mark.unit


def _model(tmp_path, name, content):
  model = standard_artifacts.Model()
  model.uri = str(tmp_path / name)
  serving = tmp_path / name / 'Format-Serving'
  serving.mkdir(parents=True)
  (serving / 'saved_model.pb').write_bytes(content)
  return model


def _push(tmp_path, model, blessed, records_dir):
  blessing = standard_artifacts.ModelBlessing()
  blessing.uri = str(tmp_path / 'blessing')
  blessing.set_int_custom_property('blessed', int(blessed))
  pushed = standard_artifacts.PushedModel()
  pushed.uri = str(tmp_path / f'pushed-{len(os.listdir(tmp_path))}')
  destination = pusher_pb2.PushDestination(
      filesystem=pusher_pb2.PushDestination.Filesystem(
          base_directory=str(tmp_path / 'serving')))
  pusher_executor.Executor().Do(
      {'model': [model], 'model_blessing': [blessing]},
      {'pushed_model': [pushed]},
      {'push_destination': proto_utils.proto_to_json(destination),
       'custom_config': json.dumps(
           {pusher_executor.RECORDS_DIR_CONFIG_KEY: records_dir})})
  return pushed


def _last_blessed(tmp_path, records_dir):
  out = standard_artifacts.Model()
  out.uri = str(tmp_path / f'last-{len(os.listdir(tmp_path))}')
  executor.Executor().Do({}, {spec.MODEL_KEY: [out]},
                         {spec.RECORDS_DIR_KEY: records_dir})
  return out


def test_records_dir_is_under_the_pipeline_root_like_the_drift_baselines():
  assert records.records_dir('gs://b/root/', 'leantfx-penguins') == (
      'gs://b/root/leantfx-penguins/Pusher/blessed_models')


def test_the_newest_record_whose_model_exists_wins(tmp_path):
  directory = str(tmp_path / 'records')
  old, new = _model(tmp_path, 'old', b'1'), _model(tmp_path, 'new', b'2')
  records.write_record(directory, old.uri, '1', now_ns=100)
  records.write_record(directory, new.uri, '2', now_ns=200)
  assert records.latest_record(directory)[records.MODEL_URI] == new.uri
  # A model folder deleted since (retention) is skipped, not returned.
  records.write_record(directory, str(tmp_path / 'gone'), '3', now_ns=300)
  assert records.latest_record(directory)[records.PUSHED_VERSION] == '2'
  assert records.latest_record(str(tmp_path / 'none')) is None
  assert not [n for n in os.listdir(directory) if n.endswith('.tmp')]


def test_pusher_records_only_blessed_models(tmp_path):
  directory = str(tmp_path / 'records')
  _push(tmp_path, _model(tmp_path, 'm0', b'unblessed'), False, directory)
  assert records.latest_record(directory) is None
  model = _model(tmp_path, 'm1', b'graph-1')
  pushed = _push(tmp_path, model, True, directory)
  record = records.latest_record(directory)
  assert record[records.MODEL_URI] == model.uri
  assert record[records.PUSHED_VERSION] == pushed.get_string_custom_property(
      'pushed_version')


def test_last_blessed_model_is_empty_first_then_a_copy_of_the_pushed_one(
    tmp_path):
  directory = str(tmp_path / 'records')
  first = _last_blessed(tmp_path, directory)
  assert not executor.has_model(first)
  model = _model(tmp_path, 'm1', b'graph-1')
  _push(tmp_path, model, True, directory)
  second = _last_blessed(tmp_path, directory)
  assert executor.has_model(second)
  assert second.get_string_custom_property(spec.SOURCE_URI_PROPERTY) == (
      model.uri)
  with open(os.path.join(second.uri, 'Format-Serving', 'saved_model.pb'),
            'rb') as f:
    assert f.read() == b'graph-1'


def test_a_resolver_model_with_files_is_a_model(tmp_path):
  assert executor.has_model(_model(tmp_path, 'm1', b'graph'))
  empty = standard_artifacts.Model()
  empty.uri = str(tmp_path / 'empty')
  assert not executor.has_model(empty)


def test_evaluator_drops_an_empty_baseline(tmp_path, monkeypatch):
  seen = {}

  def fake_do(self, input_dict, output_dict, exec_properties):
    del self, output_dict, exec_properties
    seen.update(input_dict)

  monkeypatch.setattr(component.evaluator_executor.Executor, 'Do', fake_do)
  empty = _last_blessed(tmp_path, str(tmp_path / 'records'))
  run = component.BaselineEvaluatorExecutor().Do
  run({'model': ['m'], 'baseline_model': [empty]}, {}, {})
  assert seen['baseline_model'] == []
  found = _model(tmp_path, 'm1', b'graph')
  run({'model': ['m'], 'baseline_model': [found]}, {}, {})
  assert seen['baseline_model'] == [found]
