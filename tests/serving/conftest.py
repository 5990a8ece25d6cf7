"""Fixtures: a directory of small pushed models and one server over them.

The models are built once per session (about ten seconds); the shared server
binds ephemeral ports on 127.0.0.1 and does not poll (tests that need polling
start their own).
"""
import os

import pytest

from tests.serving import model_builders

MODELS_CONFIG = """
model_config_list {
  config { name: "penguins" base_path: "%(base)s/penguins" }
  config {
    name: "digits" base_path: "%(base)s/digits"
    model_version_policy { all {} }
    version_labels { key: "stable" value: 1 }
    version_labels { key: "canary" value: 2 }
  }
  config { name: "half_plus_two" base_path: "%(base)s/half_plus_two" }
  config { name: "digits_int8" base_path: "%(base)s/digits_int8" }
  config { name: "digits_float_lite" base_path: "%(base)s/digits_float_lite" }
  config { name: "warm" base_path: "%(base)s/warm" }
  config { name: "bad_warmup" base_path: "%(base)s/bad_warmup" }
}
"""


@pytest.fixture(scope='session')
def model_base(tmp_path_factory):
  """<base>/<model>/<version>/ with every kind of model the tests use."""
  base = str(tmp_path_factory.mktemp('pushed'))
  join = os.path.join
  model_builders.tabular_model(join(base, 'penguins', '1'))
  model_builders.digits_model(join(base, 'digits', '1'), seed=0)
  model_builders.digits_model(join(base, 'digits', '2'), seed=1)
  model_builders.classify_regress_model(join(base, 'half_plus_two', '1'))
  model_builders.tflite_digits(join(base, 'digits', '2'),
                               join(base, 'digits_int8', '1'), int8=True,
                               manifest=True)
  model_builders.tflite_digits(join(base, 'digits', '2'),
                               join(base, 'digits_float_lite', '1'),
                               int8=False)
  model_builders.digits_model(join(base, 'warm', '1'))
  model_builders.write_warmup_file(join(base, 'warm', '1'), 'warm')
  model_builders.digits_model(join(base, 'bad_warmup', '1'))
  model_builders.write_warmup_file(join(base, 'bad_warmup', '1'),
                                   'bad_warmup', input_name='not_an_input')
  with open(join(base, 'models.config'), 'w') as f:
    f.write(MODELS_CONFIG % {'base': base})
  return base


@pytest.fixture(scope='session')
def server(model_base):
  """A started ModelServer over model_base (REST + gRPC, no polling)."""
  from leantfx.serving import model_config
  from leantfx.serving import server as server_lib
  from leantfx.serving import server_config
  config = server_config.ServerConfig(
      rest_port=0, grpc_port=0, file_system_poll_wait_seconds=-1,
      max_num_load_retries=0, request_timeout_s=20.0)
  models = model_config.read_model_config_file(
      os.path.join(model_base, 'models.config'))
  instance = server_lib.ModelServer(models, config).start()
  yield instance
  instance.stop(grace_s=5.0)


@pytest.fixture(scope='session')
def rest(server):
  from leantfx import serving_client as client
  return client.RestClient('127.0.0.1', server.rest_port, timeout_s=20.0)


@pytest.fixture(scope='session')
def grpc_client(server):
  from leantfx import serving_client as client
  with client.GrpcClient('127.0.0.1', server.grpc_port,
                         timeout_s=20.0) as instance:
    yield instance
