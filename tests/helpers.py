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


def run_cli(args: Sequence[str], timeout: float = RUN_TIMEOUT_S,
            cwd: str = None) -> subprocess.CompletedProcess:
  """Runs ``leantfx ARGS`` in a subprocess and returns the completed process."""
  env = dict(os.environ, TF_USE_LEGACY_KERAS='1', TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.run([LEANTFX, *args], capture_output=True, text=True,
                        timeout=timeout, env=env, cwd=cwd, check=False)
