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
# by `make test PYTEST_ARGS=--durations=60` (2026-12-07, 2 workers, the
# machine shared; per-file sums of the listed setup and call times, seconds,
# in the comment beside each). They are collected first and `make test`
# passes --no-loadscope-reorder, so xdist hands them out before the many
# short files, which then fill the gaps (longest-first scheduling). xdist's
# default order (most tests first) left one long file running alone at the
# end.
SLOW_FILES_LONGEST_FIRST = (
    'tests/e2e/test_pipeline_e2e.py',  # 958
    # One MobileNetV2 run with the optimizer: 922 s alone at load 2-5
    # (2026-12-07; Trainer 345 s, ModelOptimizer 328 s, Evaluator 78 s).
    'tests/e2e/test_image_model_e2e.py',  # 901
    # Every compiled task, two spans in a row, one process per task: 767 s
    # alone at load 4-7 (2026-12-07).
    'tests/orchestration/test_kfp_two_runs.py',  # 607
    'tests/orchestration/test_watch_e2e.py',  # 543
    'tests/e2e/test_portable_e2e.py',  # 440
    'tests/data/test_data_e2e.py',  # 319
    'tests/e2e/test_users_csv_e2e.py',  # 303
    # text_columns, compile, rare_classes (here), trees and raw_text (below)
    # from the integration runs' --durations (2026-12-07, setup plus the
    # listed calls, at load 4-8): unlisted, they were handed out among the
    # short files, after every listed one, and could run alone at the end.
    'tests/e2e/test_text_columns_e2e.py',  # 250
    'tests/orchestration/test_watch_formats_e2e.py',  # 246
    'tests/orchestration/test_compile.py',  # 230
    'tests/e2e/test_rare_classes_and_auto_tune_e2e.py',  # 170
    'tests/e2e/test_stop_e2e.py',  # 162
    'tests/e2e/test_trees_e2e.py',  # 150
    'tests/optimize/test_raw_text_features.py',  # 145
    'tests/orchestration/test_kfp_optimizer.py',  # 137
    'tests/e2e/test_regression_e2e.py',  # 130
    'tests/orchestration/test_watch_failures_e2e.py',  # 124
    'tests/orchestration/test_kfp_drift.py',  # 116
    'tests/e2e/test_binary_e2e.py',  # 114
    'tests/training/test_training_e2e.py',  # 105
    'tests/orchestration/test_kfp_span_window.py',  # 90
    'tests/optimize/test_raw_runtimes.py',  # 87
    'tests/e2e/test_generated_spans_e2e.py',  # 41
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
