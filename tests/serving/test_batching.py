"""BatchingParameters files and the batch scheduler, with a fake model."""
import threading
import time

import numpy as np
import pytest
from google.protobuf import text_format

from leantfx.errors import ConfigError
from leantfx.serving import batch_scheduler
from leantfx.serving import batching_parameters
from leantfx.serving import servable as servable_lib
from leantfx.serving import status

pytestmark = pytest.mark.unit


def test_parse_tf_serving_batching_file():
  config = batching_parameters.parse_batching_parameters("""
      max_batch_size { value: 128 }
      batch_timeout_micros { value: 500 }
      max_enqueued_batches { value: 10 }
      num_batch_threads { value: 4 }
      allowed_batch_sizes: 64
      allowed_batch_sizes: 128
      pad_variable_length_inputs: false
  """)
  assert config == batching_parameters.BatchingConfig(
      max_batch_size=128, batch_timeout_micros=500, max_enqueued_batches=10,
      num_batch_threads=4, allowed_batch_sizes=(64, 128))


@pytest.mark.parametrize('line', [
    'thread_pool_name { value: "shared" }',
    'enable_large_batch_splitting: true',
    'max_execution_batch_size { value: 16 }',
    'pad_variable_length_inputs: true',
])
def test_fields_leantfx_does_not_implement_are_refused(line):
  field = line.split()[0].rstrip(':')
  with pytest.raises(ConfigError, match=(
      f'^batching.txt sets {field}, which leantfx serve does not implement')):
    batching_parameters.parse_batching_parameters(
        'max_batch_size { value: 8 }\n' + line, 'batching.txt')


def test_an_unknown_field_is_refused_by_name():
  with pytest.raises(ConfigError, match='some_future_field'):
    batching_parameters.parse_batching_parameters('some_future_field: 3')


def test_to_text_round_trips_through_the_proto():
  config = batching_parameters.BatchingConfig(
      max_batch_size=8, allowed_batch_sizes=(4, 8))
  text = batching_parameters.to_text(config)
  proto = batching_parameters.batching_parameters_class()()
  text_format.Parse(text, proto)
  assert proto.max_batch_size.value == 8
  assert proto.DESCRIPTOR.full_name == 'tensorflow.serving.BatchingParameters'
  assert batching_parameters.parse_batching_parameters(text) == config


@pytest.mark.parametrize('text,message', [
    ('max_batch_size { value: 0 }', 'max_batch_size must be >= 1'),
    ('max_batch_size: 5', 'not a valid BatchingParameters'),
    ('max_batch_size { value: 8 } allowed_batch_sizes: 4',
     'must equal max_batch_size'),
    ('num_batch_threads { value: 0 }', 'num_batch_threads must be >= 1'),
])
def test_bad_batching_files(text, message):
  with pytest.raises(ConfigError, match=message):
    batching_parameters.parse_batching_parameters(text)


class _Doubler(servable_lib.Servable):
  """y = 2x, recording the batch sizes it was called with."""

  def __init__(self, delay_s=0.0, output_rows=None):
    super().__init__('fake', 1, '/nowhere')
    self.calls = []
    self.delay_s = delay_s
    self.output_rows = output_rows
    self.lock = threading.Lock()

  @property
  def signatures(self):
    return {}

  @property
  def signature_defs(self):
    return {}

  def run(self, signature_name, inputs, output_aliases):
    with self.lock:
      self.calls.append(len(inputs['x']))
    time.sleep(self.delay_s)
    y = inputs['x'] * 2
    if self.output_rows is not None:
      y = y[:self.output_rows]
    return {'y': y}


def _concurrently(scheduler, model, requests, deadline=None):
  results, errors = [None] * len(requests), [None] * len(requests)

  def call(i):
    try:
      results[i] = scheduler.run(model, 'sig', {'x': requests[i]}, ['y'],
                                 deadline)
    except status.ServingError as e:
      errors[i] = e

  threads = [threading.Thread(target=call, args=(i,))
             for i in range(len(requests))]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join(10)
  return results, errors


def test_concurrent_requests_are_merged_and_split_back():
  scheduler = batch_scheduler.BatchScheduler(batching_parameters.BatchingConfig(
      max_batch_size=8, batch_timeout_micros=200_000, num_batch_threads=1))
  model = _Doubler()
  requests = [np.full((2, 3), i, np.float32) for i in range(4)]
  results, errors = _concurrently(scheduler, model, requests)
  scheduler.stop()
  assert errors == [None] * 4
  for i, result in enumerate(results):
    np.testing.assert_array_equal(result['y'], requests[i] * 2)
  assert model.calls == [8]  # Four requests of 2 rows: one call.
  assert scheduler.batches_run == 1 and scheduler.rows_run == 8


def test_padding_to_allowed_sizes_and_oversized_requests():
  scheduler = batch_scheduler.BatchScheduler(batching_parameters.BatchingConfig(
      max_batch_size=4, allowed_batch_sizes=(2, 4), num_batch_threads=1))
  model = _Doubler()
  out = scheduler.run(model, 'sig', {'x': np.ones((3, 1), np.float32)}, ['y'])
  assert out['y'].shape == (3, 1)
  big = scheduler.run(model, 'sig', {'x': np.ones((9, 1), np.float32)}, ['y'])
  assert big['y'].shape == (9, 1)
  scheduler.stop()
  assert model.calls == [4, 9]  # Padded 3 -> 4; 9 > max ran on its own.


def test_batching_errors():
  scheduler = batch_scheduler.BatchScheduler(batching_parameters.BatchingConfig(
      max_batch_size=8, batch_timeout_micros=2_000_000, num_batch_threads=1))
  model = _Doubler()
  with pytest.raises(status.ServingError, match='at least one dimension'):
    scheduler.run(model, 'sig', {'x': np.float32(1.0)}, ['y'])
  with pytest.raises(status.ServingError) as raised:
    scheduler.run(model, 'sig', {'x': np.ones((1, 1), np.float32)}, ['y'],
                  deadline=time.monotonic() + 0.05)
  assert raised.value.code == status.Code.DEADLINE_EXCEEDED
  bad = _Doubler(output_rows=1)
  stopper = batch_scheduler.BatchScheduler(batching_parameters.BatchingConfig(
      max_batch_size=2, num_batch_threads=1))
  with pytest.raises(status.ServingError, match="0th dimension"):
    stopper.run(bad, 'sig', {'x': np.ones((2, 1), np.float32)}, ['y'])
  scheduler.stop()
  stopper.stop()


def test_full_queue_is_unavailable():
  scheduler = batch_scheduler.BatchScheduler(batching_parameters.BatchingConfig(
      max_batch_size=1, max_enqueued_batches=1, num_batch_threads=1))
  model = _Doubler(delay_s=0.3)
  requests = [np.ones((1, 1), np.float32)] * 4
  _, errors = _concurrently(scheduler, model, requests)
  scheduler.stop()
  codes = [e.code for e in errors if e is not None]
  assert codes and set(codes) == {status.Code.UNAVAILABLE}


@pytest.mark.e2e
def test_auto_batching_batches_savedmodels_and_runs_runtimes_at_once(
    model_base):
  # serve's default: a SavedModel's predict calls go through the scheduler,
  # a TFLite model's run at once (Servable.batching_pays).
  import json  # pylint: disable=g-import-not-at-top
  from leantfx import serving_client as client
  from leantfx.serving import model_config
  from leantfx.serving import server as server_lib
  from leantfx.serving import server_config
  models = [model_config.ModelConfig(name, f'{model_base}/{name}')
            for name in ('digits', 'digits_float_lite')]
  server = server_lib.ModelServer(models, server_config.ServerConfig(
      rest_port=0, grpc_port=None, file_system_poll_wait_seconds=-1,
      auto_batching=True)).start()
  try:
    rest = client.RestClient('127.0.0.1', server.rest_port, timeout_s=20)
    body = json.dumps({'instances': [[0.5] * 64]}).encode()
    seen = []
    for name in ('digits_float_lite', 'digits', 'digits_float_lite'):
      code, raw = rest.request('POST', f'/v1/models/{name}:predict', body)
      assert code == 200, raw
      assert len(json.loads(raw)['predictions'][0]) == 10
      seen.append(server.batcher.batches_run)
    assert seen == [0, 1, 1]
  finally:
    server.stop(grace_s=5)


def test_batching_everything_and_some_models_are_exclusive():
  from leantfx.serving import server_config  # pylint: disable=g-import-not-at-top
  with pytest.raises(ConfigError, match='set one of them'):
    server_config.ServerConfig(enable_batching=True, auto_batching=True)
