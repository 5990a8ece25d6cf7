"""Helpers shared by the CLI and pipeline tests: run the real console script."""
import os
import subprocess
import sys
from typing import Sequence

LEANTFX = os.path.join(os.path.dirname(sys.executable), 'leantfx')
# A pipeline run on the bundled data takes one to two minutes on an idle
# 2-core machine (and over ten when the machine is shared); the bound only
# keeps a hung run from hanging CI.
RUN_TIMEOUT_S = 1800


def _without_optimizer(args: Sequence[str]) -> list:
  """Adds --no-optimize to `run` (and to the runs `watch` starts)."""
  args = list(args)
  if not args or '--no-optimize' in args:
    return args
  if args[0] == 'run' or (args[0] == 'watch' and 'kubeflow' not in args):
    # A Kubeflow watcher submits a compiled package: pipeline options are
    # compiled in, and it refuses them.
    return args + ['--no-optimize']
  return args


def run_cli(args: Sequence[str], timeout: float = RUN_TIMEOUT_S,
            cwd: str = None, optimize: bool = False, env: dict = None
            ) -> subprocess.CompletedProcess:
  """Runs ``leantfx ARGS`` in a subprocess and returns the completed process.

  Args:
    args: the command line after ``leantfx``.
    timeout: seconds before the run is killed.
    cwd: working directory.
    optimize: keep the ModelOptimizer in pipeline runs. It adds one to two
      minutes per run, so only the tests about optimization turn it on; the
      rest test everything else with --no-optimize.
    env: more environment variables for the command.
  """
  if not optimize:
    args = _without_optimizer(args)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', **(env or {}))
  return subprocess.run([LEANTFX, *args], capture_output=True, text=True,
                        timeout=timeout, env=env, cwd=cwd, check=False)
