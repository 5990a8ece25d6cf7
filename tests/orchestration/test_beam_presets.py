"""Beam presets: DirectRunner modes, the portable presets (portable, flink, spark), dataflow."""
import os

import pytest

from leantfx.errors import ConfigError
from leantfx.pipeline import beam_presets
from tests.helpers import run_cli

pytestmark = pytest.mark.unit


@pytest.mark.parametrize('mode, workers', [('in_memory', 1),
                                           ('multi_threading', 4),
                                           ('multi_processing', 2)])
def test_direct_modes(mode, workers):
  assert beam_presets.beam_pipeline_args('direct', mode, workers) == [
      '--runner=DirectRunner', f'--direct_running_mode={mode}',
      f'--direct_num_workers={workers}'
  ]


def test_direct_modes_run_in_beam():
  """Each argument set starts a real Beam pipeline on the DirectRunner."""
  import apache_beam as beam  # pylint: disable=g-import-not-at-top
  from apache_beam.testing import util  # pylint: disable=g-import-not-at-top
  for mode, workers in (('in_memory', 1), ('multi_threading', 2),
                        ('multi_processing', 2)):
    options = beam.options.pipeline_options.PipelineOptions(
        beam_presets.beam_pipeline_args('direct', mode, workers))
    with beam.Pipeline(options=options) as p:
      squares = p | beam.Create(range(5)) | beam.Map(lambda x: x * x)
      util.assert_that(squares, util.equal_to([0, 1, 4, 9, 16]))


def test_passthrough_overrides_a_preset_flag():
  args = beam_presets.beam_pipeline_args(
      'flink', extra=['--environment_cache_millis=10000',
                      '--sdk_worker_parallelism=4'],
      job_endpoint='beam-job-server:8099')
  assert args == ['--runner=PortableRunner',
                  '--job_endpoint=beam-job-server:8099',
                  '--job_server_timeout=86400',
                  '--artifact_endpoint=beam-job-server:8098',
                  '--environment_type=EXTERNAL',
                  '--environment_config=localhost:50000',
                  '--environment_cache_millis=10000',
                  '--sdk_worker_parallelism=4']


@pytest.mark.parametrize('text, args', [
    ('loopback', ['--environment_type=LOOPBACK']),
    ('external:127.0.0.1:50000', ['--environment_type=EXTERNAL',
                                  '--environment_config=127.0.0.1:50000']),
    ('external:pool.svc:7', ['--environment_type=EXTERNAL',
                             '--environment_config=pool.svc:7']),
    ('docker:reg.example.com/leantfx:1.0',
     ['--environment_type=DOCKER',
      '--environment_config=reg.example.com/leantfx:1.0']),
    ('process', ['--environment_type=PROCESS',
                 '--environment_config={"command": "/opt/apache/beam/boot"}']),
    ('process:/usr/local/bin/boot',
     ['--environment_type=PROCESS',
      '--environment_config={"command": "/usr/local/bin/boot"}']),
])
def test_environments_become_portable_options(text, args):
  environment = beam_presets.parse_environment(text)
  assert environment.beam_args() == args
  # str() is what `leantfx watch` passes on to the runs it starts.
  assert beam_presets.parse_environment(str(environment)) == environment


@pytest.mark.parametrize('text', [
    'bogus', 'external', 'external:', 'external:host', 'external:host:0',
    'external:host:70000', 'external:a b:1', 'docker:', 'loopback:x',
    'LOOPBACK', ''])
def test_an_environment_that_does_not_parse_names_the_option(text):
  with pytest.raises(ConfigError, match='--environment'):
    beam_presets.parse_environment(text)


@pytest.mark.parametrize('text', ['', 'localhost', 'host:', ':8099',
                                  'embedded', 'host:99999'])
def test_a_job_endpoint_that_does_not_parse_names_the_option(text):
  with pytest.raises(ConfigError, match='--job-endpoint'):
    beam_presets.parse_job_endpoint(text)


def test_portable_preset():
  assert beam_presets.beam_pipeline_args('portable',
                                         job_endpoint='embed') == [
      '--runner=PortableRunner', '--job_endpoint=embed',
      '--environment_type=LOOPBACK', '--sdk_worker_parallelism=1']
  args = beam_presets.beam_pipeline_args(
      'portable', workers=2, job_endpoint='127.0.0.1:8099',
      environment=beam_presets.parse_environment('external:127.0.0.1:5'))
  assert args == ['--runner=PortableRunner', '--job_endpoint=127.0.0.1:8099',
                  '--job_server_timeout=86400',
                  '--environment_type=EXTERNAL',
                  '--environment_config=127.0.0.1:5',
                  '--sdk_worker_parallelism=2']
  target = beam_presets.portable_target(args)
  assert target.runs_here and target.pool_address == ('127.0.0.1', 5)


def test_the_portable_options_run_a_real_beam_pipeline(tmp_path):
  """The preset's arguments drive Beam's PortableRunner (embedded, LOOPBACK)."""
  import apache_beam as beam  # pylint: disable=g-import-not-at-top
  from apache_beam.testing import util  # pylint: disable=g-import-not-at-top
  options = beam.options.pipeline_options.PipelineOptions(
      beam_presets.beam_pipeline_args('portable', job_endpoint='embed'))
  with beam.Pipeline(options=options) as p:
    squares = p | beam.Create(range(5)) | beam.Map(lambda x: x * x)
    util.assert_that(squares, util.equal_to([0, 1, 4, 9, 16]))


@pytest.mark.parametrize('runner', ['flink', 'spark'])
def test_flink_and_spark_are_portable_plus_their_job_server(runner):
  args = beam_presets.beam_pipeline_args(
      runner, workers=2, job_endpoint='beam-job-server:8099')
  assert args == ['--runner=PortableRunner',
                  '--job_endpoint=beam-job-server:8099',
                  '--job_server_timeout=86400',
                  '--artifact_endpoint=beam-job-server:8098',
                  '--environment_type=EXTERNAL',
                  '--environment_config=localhost:50000',
                  '--sdk_worker_parallelism=2']
  # The pool is the task manager's sidecar: its localhost is not ours.
  target = beam_presets.portable_target(args)
  assert not target.runs_here and target.pool_address is None
  with pytest.raises(ConfigError, match='--job-endpoint'):
    beam_presets.beam_pipeline_args(runner)
  with pytest.raises(ConfigError, match='embed runs the pipeline in this'):
    beam_presets.beam_pipeline_args(runner, job_endpoint='embed')


def test_dataflow_needs_its_required_arguments():
  required = ['--project=p', '--region=europe-west4',
              '--temp_location=gs://b/tmp']
  args = beam_presets.beam_pipeline_args('dataflow', extra=required)
  assert args[0] == '--runner=DataflowRunner'
  assert all(a in args for a in required)
  with pytest.raises(ConfigError, match='--project'):
    beam_presets.beam_pipeline_args('dataflow', extra=required[1:])


def test_portable_target_reads_passthrough_arguments():
  """The older spelling, all through --beam-arg, is checked the same way."""
  args = beam_presets.beam_pipeline_args('direct', extra=[
      '--runner=PortableRunner', '--job_endpoint=embed',
      '--environment_type=EXTERNAL', '--environment_config=localhost:5'])
  target = beam_presets.portable_target(args)
  assert target.job_endpoint == 'embed'
  assert target.pool_address == ('localhost', 5)
  assert beam_presets.portable_target(
      beam_presets.beam_pipeline_args()) is None


@pytest.mark.parametrize('call, message', [
    (lambda: beam_presets.beam_pipeline_args('direct', 'fast', 1),
     'Unknown DirectRunner mode'),
    (lambda: beam_presets.beam_pipeline_args('direct', 'in_memory', 3),
     'runs on one thread'),
    (lambda: beam_presets.beam_pipeline_args('direct', 'multi_threading', 0),
     'must be >= 1'),
    (lambda: beam_presets.beam_pipeline_args('samza'), 'Unknown Beam runner'),
    (lambda: beam_presets.beam_pipeline_args('direct', extra=['runner=x']),
     'is not a Beam pipeline option'),
    (lambda: beam_presets.beam_pipeline_args(
        'flink', 'multi_threading', 2, job_endpoint='f:1'),
     'sets the DirectRunner'),
    (lambda: beam_presets.beam_pipeline_args('portable'),
     'needs --job-endpoint'),
    (lambda: beam_presets.beam_pipeline_args(
        'portable', workers=2, job_endpoint='embed'),
     'embedded job service runs one SDK worker'),
    (lambda: beam_presets.beam_pipeline_args(
        'portable', job_endpoint='embed',
        environment=beam_presets.parse_environment('process')),
     'does not start PROCESS workers'),
    (lambda: beam_presets.beam_pipeline_args(
        'direct', environment=beam_presets.parse_environment('loopback')),
     '--environment set'),
    (lambda: beam_presets.beam_pipeline_args('dataflow', job_endpoint='embed'),
     '--job-endpoint set'),
    (lambda: beam_presets.beam_pipeline_args('dataflow', workers=2),
     '--beam-workers sets the DirectRunner or a portable'),
])
def test_bad_presets(call, message):
  with pytest.raises(ConfigError, match=message):
    call()


def test_cli_refuses_a_cluster_preset_without_its_address(tmp_path):
  result = run_cli(['run', '--dataset', 'penguins', '--output',
                    str(tmp_path), '--beam-runner', 'spark'])
  assert result.returncode == 2, result.stdout + result.stderr
  assert 'needs --job-endpoint' in result.stderr
  assert 'Spark job server' in result.stderr
  assert 'Traceback' not in result.stderr


def test_keras2_at_start_is_the_pth_or_the_starting_environment(monkeypatch,
                                                                tmp_path):
  import site
  import subprocess
  import sys
  from leantfx.errors import BeamEnvironmentError
  from leantfx.pipeline import beam_preflight
  # This venv has leantfx-keras2.pth: a plain interpreter starts with Keras 2.
  check = ('from leantfx.pipeline import beam_preflight; '
           'print(beam_preflight.keras2_at_start())')
  env = {k: v for k, v in os.environ.items() if k != 'TF_USE_LEGACY_KERAS'}
  assert subprocess.run([sys.executable, '-c', check], env=env, text=True,
                        capture_output=True).stdout.strip() == 'True'
  # Without the .pth in any site directory and without the variable in the
  # starting environment, importing leantfx later does not count.
  monkeypatch.setattr(site, 'getsitepackages', lambda: [str(tmp_path)])
  monkeypatch.setattr(site, 'ENABLE_USER_SITE', False)
  monkeypatch.setattr(beam_preflight, 'open', lambda *a, **k: (_ for _ in ()).throw(OSError()), raising=False)
  assert not beam_preflight.keras2_at_start()
  report = {'leantfx': beam_preflight.leantfx.__version__,
            'python': '/usr/bin/python3', 'keras2': False}
  with pytest.raises(BeamEnvironmentError, match='do not start with Keras 2'):
    beam_preflight.check_reports([report], 'the pool at 127.0.0.1:1')
  beam_preflight.check_reports([dict(report, keras2=True)], 'the pool')
