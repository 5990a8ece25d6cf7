"""pipeline.beam_staging: no copy of TFX for workers that share this
environment; TFX's own behaviour for the others."""
import glob
import os
import tempfile

from tfx.dsl.components.base import base_beam_executor
from tfx.utils import dependency_utils

from leantfx.pipeline import beam_presets
from leantfx.pipeline import beam_staging


class _Executor(base_beam_executor.BaseBeamExecutor):

  def Do(self, input_dict, output_dict, exec_properties):  # pylint: disable=invalid-name
    del input_dict, output_dict, exec_properties


def _ephemeral_builds():
  return set(glob.glob(os.path.join(tempfile.gettempdir(), 'tmp*', 'build',
                                    'tfx')))


def test_local_runners_share_this_environment_and_others_do_not():
  share = beam_staging.workers_share_this_environment
  assert share(beam_presets.beam_pipeline_args('direct'))
  assert share(beam_presets.beam_pipeline_args(
      'direct', mode='multi_processing', workers=2))
  for environment in ('loopback', 'external:127.0.0.1:50000',
                      'process'):
    assert share(beam_presets.beam_pipeline_args(
        'portable', job_endpoint='127.0.0.1:8099',
        environment=beam_presets.parse_environment(environment)))
  assert not share(beam_presets.beam_pipeline_args(
      'portable', job_endpoint='embed',
      environment=beam_presets.parse_environment('docker:leantfx:1')))
  assert not share(['--runner=DataflowRunner', '--project=p'])


def test_an_executor_builds_no_copy_of_tfx_after_install(monkeypatch):
  calls = []
  monkeypatch.setattr(beam_staging, '_ORIGINAL',
                      lambda args: calls.append(args) or args + ['--x=1'])
  monkeypatch.setattr(dependency_utils, 'make_beam_dependency_flags',
                      dependency_utils.make_beam_dependency_flags)
  beam_staging.install()
  before = _ephemeral_builds()
  args = beam_presets.beam_pipeline_args('direct')
  executor = _Executor(
      base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=args))
  assert calls == []
  assert '--x=1' not in executor._beam_pipeline_args  # pylint: disable=protected-access
  assert _ephemeral_builds() == before
  # A runner whose workers may lack TFX still gets TFX's own handling.
  dataflow = ['--runner=DataflowRunner', '--project=p']
  _Executor(
      base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=dataflow))
  assert calls == [dataflow]
