"""Serving: a TF Serving-compatible model server, its clients and deploy files.

Public API (imported lazily, so ``leantfx --help`` stays fast):

* :class:`ModelServer`, :class:`ServerConfig`, :class:`BatchingConfig`,
  :class:`ModelConfig`, :func:`models_from_base_path`,
  :func:`read_model_config_file`: run the server from Python.
* :class:`RestClient`, :class:`GrpcClient`: thin clients (they live in
  leantfx/serving_client.py, below the components that query a server too).
* :func:`write_tf_serving_deploy`, :class:`TfServingDeployConfig`: files for
  the real ``tensorflow/serving``.
* ``leantfx.serving.cli.add_commands`` / ``serve``: the CLI commands.
"""
import importlib

_EXPORTS = {
    'ModelServer': 'server',
    'ServerConfig': 'server_config',
    'BatchingConfig': 'batching_parameters',
    'ModelConfig': 'model_config',
    'VersionPolicy': 'model_config',
    'models_from_base_path': 'model_config',
    'read_model_config_file': 'model_config',
    'RestClient': 'leantfx.serving_client',
    'RestError': 'leantfx.serving_client',
    'GrpcClient': 'leantfx.serving_client',
    'TfServingDeployConfig': 'deploy',
    'write_tf_serving_deploy': 'deploy',
    'ServingError': 'status',
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
  module = _EXPORTS.get(name)
  if module is None:
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
  if '.' not in module:
    module = f'{__name__}.{module}'
  return getattr(importlib.import_module(module), name)
