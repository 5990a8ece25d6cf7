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


# Test files that take minutes (pipeline runs), longest first, as measured
# by `make test PYTEST_ARGS=--durations=0` (2026-12-02, per-file sums in
# seconds: 1114, 426, 394, 387, 232, 217, 211, 206, 169, 162, 162, 121).
# They are collected first and `make test` passes --no-loadscope-reorder, so
# xdist hands them out before the many short files, which then fill the gaps
# (longest-first scheduling). xdist's default order (most tests first) left
# one long file running alone at the end.
SLOW_FILES_LONGEST_FIRST = (
    'tests/e2e/test_pipeline_e2e.py',
    # Every compiled task, two spans in a row: about 8 minutes beside other
    # tests (2026-12-06).
    'tests/orchestration/test_kfp_two_runs.py',
    # One MobileNetV2 run: 402 s on an idle machine (2026-12-04).
    'tests/e2e/test_image_model_e2e.py',
    # A default run with the optimizer, then a server per runtime: 268 s
    # beside another test file (2026-12-06).
    'tests/e2e/test_users_csv_e2e.py',
    'tests/orchestration/test_watch_e2e.py',
    'tests/data/test_data_e2e.py',
    'tests/e2e/test_portable_e2e.py',
    'tests/orchestration/test_kfp_optimizer.py',
    'tests/orchestration/test_watch_formats_e2e.py',
    'tests/orchestration/test_kfp_drift.py',
    'tests/orchestration/test_watch_failures_e2e.py',
    'tests/training/test_training_e2e.py',
    'tests/optimize/test_raw_runtimes.py',
    'tests/orchestration/test_kfp_span_window.py',
    'tests/e2e/test_regression_e2e.py',
    # Two generated spans through `leantfx run --no-optimize` (2026-12-06).
    'tests/e2e/test_generated_spans_e2e.py',
)


def pytest_collection_modifyitems(items):
  """Slow files first (longest first); each file's tests keep their order."""
  rank = {path: i for i, path in enumerate(SLOW_FILES_LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.nodeid.split('::')[0],
                                       len(rank)))


@pytest.fixture
def cli(capfd):
  """run_main bound to this test's capfd: cli(args) -> CompletedProcess."""
  def run(args, **kwargs):
    return helpers.run_main(args, capfd, **kwargs)
  return run
