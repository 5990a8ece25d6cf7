"""InfraValidator's executor and the VersionedPusher behind it, on real files.

The model is a SavedModel whose inputs are renamed columns (the keys
alcohol_x1, ... with feature_names.json mapping the names as written), the
eval rows gzipped tf.Examples as ExampleGen writes them; the executor serves
the model in a real ``leantfx serve`` subprocess.
"""
import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2
from tfx.proto import pusher_pb2
from tfx.types import standard_artifacts
from tfx.utils import proto_utils

from leantfx import columns
from leantfx import feature_names as feature_names_lib
from leantfx import versioned_push
from leantfx.components.infra_validator import executor as infra_executor
from leantfx.components.infra_validator import requests
from leantfx.components.infra_validator import spec
from leantfx.components.versioned_pusher import executor as pusher_executor
from leantfx.errors import InputDataError
from tests.serving import model_builders

pytestmark = pytest.mark.e2e

# The columns as a CSV header wrote them, by their keys (COLUMN_KEYS).
NAMES = {'alcohol_x1': 'alcohol (%)', 'groesse_x2': 'größe',
         'a_b_q_x3': 'a,b', 'age': 'age'}
NUM_EVAL = 12


def _examples(tmp_path):
  examples = standard_artifacts.Examples()
  examples.uri = str(tmp_path / 'examples')
  examples.split_names = json.dumps(['train', 'eval'])
  split = tmp_path / 'examples' / 'Split-eval'
  split.mkdir(parents=True)
  rng = np.random.default_rng(0)
  options = tf.io.TFRecordOptions(compression_type='GZIP')
  with tf.io.TFRecordWriter(str(split / 'data.gz'), options) as writer:
    for i in range(NUM_EVAL):
      feature = {key: tf.train.Feature(float_list=tf.train.FloatList(
          value=[float(rng.normal())])) for key in model_builders.COLUMN_KEYS
                 if not (key == 'age' and i == 3)}  # A missing value.
      feature['label'] = tf.train.Feature(
          int64_list=tf.train.Int64List(value=[i % 3]))
      writer.write(tf.train.Example(features=tf.train.Features(
          feature=feature)).SerializeToString())
  # The CSV ExampleGen records the keys of the columns it renamed.
  examples.set_string_custom_property(
      columns.FEATURE_NAMES_PROPERTY,
      json.dumps({k: v for k, v in NAMES.items() if k != v}))
  return examples


def _model(tmp_path, feature_names=None):
  model = standard_artifacts.Model()
  model.uri = str(tmp_path / 'model')
  serving = os.path.join(model.uri, 'Format-Serving')
  model_builders.columns_saved_model(serving,
                                     model_builders.columns_keras_model())
  feature_names_lib.write_for_saved_model(
      serving, feature_names or {v: k for k, v in NAMES.items()})
  return model


def _model_blessing(tmp_path, blessed=True):
  blessing = standard_artifacts.ModelBlessing()
  blessing.uri = str(tmp_path / 'model_blessing')
  blessing.set_int_custom_property('blessed', int(blessed))
  return blessing


def _serve_children():
  """pids of this process's children running `leantfx serve`."""
  found = []
  for pid in filter(str.isdigit, os.listdir('/proc')):
    try:
      with open(f'/proc/{pid}/stat') as f:
        ppid = int(f.read().rsplit(')', 1)[1].split()[1])
      with open(f'/proc/{pid}/cmdline', 'rb') as f:
        command = f.read().replace(b'\0', b' ')
    except (OSError, IndexError, ValueError):
      continue
    if ppid == os.getpid() and b'leantfx.cli serve' in command:
      found.append(int(pid))
  return found


def _validate(tmp_path, model, model_blessing):
  blessing = standard_artifacts.InfraBlessing()
  blessing.uri = str(tmp_path / 'infra_blessing')
  infra_executor.Executor().Do(
      {'model': [model], 'model_blessing': [model_blessing],
       'examples': [_examples(tmp_path)]},
      {'blessing': [blessing]},
      {'model_name': 'wine', 'serve_args': '[]'})
  assert not _serve_children()
  return blessing


def _push(tmp_path, model, model_blessing, infra_blessing):
  pushed = standard_artifacts.PushedModel()
  pushed.uri = str(tmp_path / 'pushed_model')
  base = str(tmp_path / 'serving' / 'wine')
  destination = pusher_pb2.PushDestination(
      filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=base))
  pusher_executor.Executor().Do(
      {'model': [model], 'model_blessing': [model_blessing],
       'infra_blessing': [infra_blessing]},
      {'pushed_model': [pushed]},
      {'push_destination': proto_utils.proto_to_json(destination)})
  return pushed, base


def test_a_model_that_serves_right_is_blessed_and_pushed_with_warmup(
    tmp_path, caplog):
  model, model_blessing = _model(tmp_path), _model_blessing(tmp_path)
  blessing = _validate(tmp_path, model, model_blessing)
  assert blessing.get_int_custom_property('blessed') == 1, (
      blessing.get_string_custom_property('reason'))
  assert blessing.get_int_custom_property('has_model') == 1
  assert os.path.exists(os.path.join(blessing.uri, spec.BLESSED_FILE))
  for figure in ('rest_max_abs_diff', 'grpc_max_abs_diff',
                 'batch1_max_abs_diff'):
    assert blessing.get_float_custom_property(f'infra_{figure}') <= 1e-4
  assert blessing.get_float_custom_property(
      'infra_latency_p50_ms_concurrent') > 0
  stamped = os.path.join(blessing.uri, 'stamped_model')
  warmup = os.path.join(stamped, requests.WARMUP_FILE)
  # TF Serving's format: PredictionLog records with real eval rows, by key.
  records = [prediction_log_pb2.PredictionLog.FromString(r) for r in
             tf.data.TFRecordDataset(warmup).as_numpy_iterator()]
  assert len(records) == requests.WARMUP_RECORDS
  first = records[0].predict_log.request
  assert first.model_spec.name == 'wine'
  assert first.model_spec.signature_name == 'serving_default'
  assert sorted(first.inputs) == sorted(model_builders.COLUMN_KEYS)
  assert tf.make_ndarray(first.inputs['age']).shape == (1,)
  assert np.isnan(tf.make_ndarray(records[3].predict_log.request.inputs[
      'age'])[0])

  pushed, base = _push(tmp_path, model, model_blessing, blessing)
  assert pushed.get_int_custom_property('pushed') == 1
  version_dir = os.path.join(base, str(versioned_push.list_versions(base)[0]))
  assert os.path.isfile(os.path.join(version_dir, requests.WARMUP_FILE))

  # leantfx serve replays it when it loads the pushed version.
  from leantfx.serving import model_config  # pylint: disable=g-import-not-at-top
  from leantfx.serving import server as server_lib  # pylint: disable=g-import-not-at-top
  from leantfx.serving import server_config  # pylint: disable=g-import-not-at-top
  caplog.set_level(logging.INFO)
  server = server_lib.ModelServer(
      model_config.models_from_base_path(str(tmp_path / 'serving')),
      server_config.ServerConfig(rest_port=0, grpc_port=None,
                                 file_system_poll_wait_seconds=-1)).start()
  try:
    assert server.manager.serving_versions()['wine']
  finally:
    server.stop(grace_s=1.0)
  assert (f'replayed {requests.WARMUP_RECORDS} warmup record(s)' in
          caplog.text)


def test_a_model_the_server_cannot_load_is_not_blessed_nor_pushed(tmp_path):
  # Loads in TensorFlow, but its names map takes keys no signature has: the
  # server refuses the version.
  model = _model(tmp_path, feature_names={'x': 'no_such_input'})
  model_blessing = _model_blessing(tmp_path)
  blessing = _validate(tmp_path, model, model_blessing)
  assert blessing.get_int_custom_property('blessed') == 0
  assert blessing.get_int_custom_property('has_model') == 0
  reason = blessing.get_string_custom_property('reason')
  assert 'did not load' in reason and 'feature_names.json' in reason, reason
  assert os.path.exists(os.path.join(blessing.uri, spec.NOT_BLESSED_FILE))
  assert not os.path.exists(os.path.join(blessing.uri, 'stamped_model'))
  pushed, base = _push(tmp_path, model, model_blessing, blessing)
  assert pushed.get_int_custom_property('pushed') == 0
  assert not os.path.exists(base)


def test_a_model_the_evaluator_did_not_bless_is_not_served(tmp_path):
  blessing = _validate(tmp_path, _model(tmp_path),
                       _model_blessing(tmp_path, blessed=False))
  assert blessing.get_int_custom_property('blessed') == 0
  assert 'Evaluator did not bless' in blessing.get_string_custom_property(
      'reason')


def test_no_saved_model_is_an_input_error(tmp_path):
  model = standard_artifacts.Model()
  model.uri = str(tmp_path / 'empty')
  with pytest.raises(InputDataError, match='no SavedModel'):
    _validate(tmp_path, model, _model_blessing(tmp_path))


def test_read_rows_refuses_a_column_of_the_wrong_kind(tmp_path):
  path = str(tmp_path / 'data.gz')
  with tf.io.TFRecordWriter(path, tf.io.TFRecordOptions(
      compression_type='GZIP')) as writer:
    writer.write(tf.train.Example(features=tf.train.Features(feature={
        'age': tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[b'old']))})).SerializeToString())
  with pytest.raises(InputDataError, match="column 'age' holds strings"):
    requests.read_rows([path], {'age': tf.TensorSpec([None], tf.float32)}, 4)


_WRITE_WARMUP = '''
import sys
import numpy as np
from leantfx.components.infra_validator import requests
rows = {name: np.array([1.5, 2.5, np.nan], dtype=np.float32)
        for name in ('a', 'b', 'c', 'd', 'e', 'f')}
rows['g'] = np.array([b'x', b'', b'z'], dtype=object)
requests.write_warmup_file(sys.argv[1], rows, 'm')
'''


@pytest.mark.unit
def test_the_same_rows_give_the_same_warmup_file_in_any_process(tmp_path):
  # The Pusher pushes a model again only when its files changed (their
  # digest): a warm-up file whose map order changed with the process made
  # every rerun push a new version of the same model.
  # pylint: disable=g-import-not-at-top
  import subprocess
  import sys
  # pylint: enable=g-import-not-at-top
  written = []
  for seed in ('1', '2', '3'):
    folder = tmp_path / seed
    subprocess.run([sys.executable, '-c', _WRITE_WARMUP, str(folder)],
                   check=True, env=dict(os.environ, PYTHONHASHSEED=seed),
                   capture_output=True, timeout=120)
    written.append((folder / requests.WARMUP_FILE).read_bytes())
  assert written[0] and written[0] == written[1] == written[2]
