"""Beam presets: DirectRunner modes and the documented cluster argument sets."""
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
      'flink', extra=['--flink_master=flink:8081', '--parallelism=16'])
  assert args == ['--runner=FlinkRunner', '--environment_type=DOCKER',
                  '--save_main_session', '--flink_master=flink:8081',
                  '--parallelism=16']


@pytest.mark.parametrize('runner, required', [
    ('flink', ['--flink_master=f:8081']),
    ('spark', ['--spark_master_url=spark://m:7077']),
    ('dataflow', ['--project=p', '--region=europe-west4',
                  '--temp_location=gs://b/tmp']),
])
def test_cluster_presets_need_their_required_arguments(runner, required):
  preset = beam_presets.CLUSTER_PRESETS[runner]
  args = beam_presets.beam_pipeline_args(runner, extra=required)
  assert args[0] == f'--runner={preset.runner}'
  assert all(a in args for a in required)
  with pytest.raises(ConfigError, match=required[0].split('=')[0]):
    beam_presets.beam_pipeline_args(runner, extra=required[1:])


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
        'flink', 'multi_threading', 2, ['--flink_master=f:1']),
     'set the DirectRunner'),
])
def test_bad_presets(call, message):
  with pytest.raises(ConfigError, match=message):
    call()


def test_cli_refuses_a_cluster_preset_without_its_address(tmp_path):
  result = run_cli(['run', '--dataset', 'penguins', '--output',
                    str(tmp_path), '--beam-runner', 'spark'])
  assert result.returncode == 2, result.stdout + result.stderr
  assert '--spark_master_url' in result.stderr
  assert 'Traceback' not in result.stderr
