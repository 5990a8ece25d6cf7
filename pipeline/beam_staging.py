"""TFX's copy of itself for Beam workers, built only where a worker needs it.

Every Beam-based TFX executor (ExampleGen, StatisticsGen, Transform,
Evaluator, ...) calls ``tfx.utils.dependency_utils.make_beam_dependency_flags``
when it is constructed. Unless the Beam args name packages or a container
image, that copies the installed TFX into a new temporary folder and builds
an sdist of it to stage to the workers: measured here, 4.4 s and 49 MB each
time, never deleted, five times per default run (about 20 s of a 200 s run,
and 245 MB of ``/tmp`` per run, which a ``leantfx watch`` retraining for
weeks turns into a full disk).

The copy serves remote workers that lack TFX (Dataflow's default image, a
generic Beam container). The workers of the runners this process starts do
not: the DirectRunner runs in this process or in subprocesses of this
interpreter, and a PortableRunner's LOOPBACK and PROCESS workers run this
interpreter too, EXTERNAL ones the worker pool ``leantfx beam worker-pool``
starts (or the leantfx image's sidecar): all import TFX from the same
environment. For those, ``install()`` makes the executors keep the args as
they are; any other runner (Dataflow, a DOCKER environment) keeps TFX's
behaviour. On Kubeflow the components run in the leantfx image through TFX's
own entrypoint, outside this process, so this does not apply there.
"""
from typing import List, Sequence

from tfx.utils import dependency_utils

_ORIGINAL = dependency_utils.make_beam_dependency_flags
# PortableRunner environments whose workers run this environment.
_LOCAL_ENVIRONMENTS = ('LOOPBACK', 'EXTERNAL', 'PROCESS')


def _value(args: Sequence[str], flag: str, default: str) -> str:
  value = default
  for arg in args:  # The last occurrence wins, as in Beam's parser.
    if arg.startswith(flag + '='):
      value = arg.split('=', 1)[1]
  return value


def workers_share_this_environment(args: Sequence[str]) -> bool:
  """Whether the Beam workers of args import TFX from this environment."""
  runner = _value(args, '--runner', 'DirectRunner')
  if runner in ('DirectRunner', 'direct', 'SwitchingDirectRunner'):
    return True
  if runner == 'PortableRunner':
    environment = _value(args, '--environment_type', 'DOCKER').upper()
    return environment in _LOCAL_ENVIRONMENTS
  return False


def _dependency_flags(beam_pipeline_args: List[str]) -> List[str]:
  if workers_share_this_environment(beam_pipeline_args):
    return beam_pipeline_args
  return _ORIGINAL(beam_pipeline_args)


def install() -> None:
  """Makes TFX's Beam executors in this process skip the needless copy."""
  dependency_utils.make_beam_dependency_flags = _dependency_flags
