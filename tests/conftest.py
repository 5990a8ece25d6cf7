"""Test set-up shared by every test module.

tfmot needs Keras 2: leantfx/__init__.py sets TF_USE_LEGACY_KERAS before
TensorFlow is imported, and the .pth file `make` installs into the
environment imports leantfx first in every Python process (this one, and
the subprocesses the tests start). Importing it here as well keeps a test
run correct in an environment set up without that file.
"""
import os

import pytest

import leantfx  # pylint: disable=unused-import
from tests import helpers

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
# TensorFlow tracks CPU allocator statistics (which the activation
# checkpointing test reads as peak memory) only with oneDNN's allocator, and
# turns oneDNN on by default only on CPUs with AVX-512: on an AVX2-only
# machine reset_memory_stats('CPU:0') fails without this.
os.environ.setdefault('TF_ENABLE_ONEDNN_OPTS', '1')


@pytest.fixture
def cli(capfd):
  """run_main bound to this test's capfd: cli(args) -> CompletedProcess."""
  def run(args, **kwargs):
    return helpers.run_main(args, capfd, **kwargs)
  return run
