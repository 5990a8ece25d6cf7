"""No configuration is silently ignored: ``serve`` refuses what it would not do.

A field of a models.config, batching parameters or monitoring config file
that leantfx serve does not implement stops ``serve`` at start (exit 2),
with a message that names the field and the file. What it implements is
accepted.
"""
import argparse

import pytest

from leantfx.cli import serving as cli
from leantfx.errors import ConfigError
from leantfx.serving import monitoring_config

pytestmark = pytest.mark.unit


def _serve(argv):
  parser = argparse.ArgumentParser(prog='leantfx')
  cli.add_commands(parser.add_subparsers())
  args = parser.parse_args(['serve'] + argv)
  return args.func(args)


def _models_config(tmp_path, extra=''):
  (tmp_path / 'm' / '1').mkdir(parents=True)
  path = tmp_path / 'models.config'
  path.write_text('model_config_list { config { name: "m" base_path: '
                  f'"{tmp_path / "m"}" {extra} }} }}\n')
  return str(path)


def test_logging_config_in_a_models_config_is_refused(tmp_path, capsys):
  path = _models_config(
      tmp_path, 'logging_config { log_collector_config { type: "x" } }')
  assert _serve(['--model-config-file', path]) == 2
  err = capsys.readouterr().err
  assert f"{path}: model 'm' sets logging_config" in err, err
  assert 'does not implement' in err


@pytest.mark.parametrize('line, field', [
    ('enable_large_batch_splitting: true', 'enable_large_batch_splitting'),
    ('thread_pool_name { value: "pool" }', 'thread_pool_name'),
])
def test_an_unimplemented_batching_field_is_refused(tmp_path, capsys, line,
                                                    field):
  batching = tmp_path / 'batching.txt'
  batching.write_text(f'max_batch_size {{ value: 8 }}\n{line}\n')
  assert _serve(['--model-config-file', _models_config(tmp_path),
                 '--batching-parameters-file', str(batching)]) == 2
  err = capsys.readouterr().err
  assert f'{batching} sets {field}, which leantfx serve does not ' \
      'implement' in err, err


@pytest.mark.parametrize('text, message', [
    ('prometheus_config { enable: true path: "/metrics" }',
     "sets prometheus_config.path '/metrics'"),
    ('prometheus_config { enable: false }',
     'sets prometheus_config.enable to false'),
    ('prometheus_config { enable: true } sampling: 1',
     'sampling'),
])
def test_a_monitoring_config_asking_for_something_else_is_refused(
    tmp_path, capsys, text, message):
  monitoring = tmp_path / 'monitoring.config'
  monitoring.write_text(text)
  assert _serve(['--model-config-file', _models_config(tmp_path),
                 '--monitoring-config-file', str(monitoring)]) == 2
  err = capsys.readouterr().err
  assert str(monitoring) in err and message in err, err


def test_the_monitoring_config_deploy_writes_is_accepted():
  from leantfx.serving import deploy  # pylint: disable=g-import-not-at-top
  monitoring_config.check_monitoring_config(deploy.monitoring_config_text())
  monitoring_config.check_monitoring_config(
      'prometheus_config { enable: true }')
  with pytest.raises(ConfigError, match='enable to false'):
    monitoring_config.check_monitoring_config('')
