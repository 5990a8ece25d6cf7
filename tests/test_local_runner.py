"""The local runner's progress parsing and failure reporting (no TFX run)."""
import logging

import pytest

from leantfx.errors import ConfigError
from leantfx.pipeline import local_runner

pytestmark = pytest.mark.unit


def test_progress_handler_reads_both_runners_log_lines():
  events = []
  handler = local_runner.ProgressHandler(
      lambda node, what, seconds: events.append((node, what)))
  logger = logging.getLogger('test-progress')
  logger.propagate = False
  logger.addHandler(handler)
  logger.setLevel(logging.INFO)
  try:
    # The exact formats of LocalDagRunner and BeamDagRunner in TFX 1.16.
    logger.info('Component %s is running.', 'Trainer')
    logger.info('Component %s is finished.', 'Trainer')
    logger.info('node %s is running.', 'Evaluator')
    logger.info('Component Trainer is running slowly.')  # not a progress line
  finally:
    logger.removeHandler(handler)
  assert events == [('Trainer', 'started'), ('Trainer', 'finished'),
                    ('Evaluator', 'started')]
  assert handler.last_started == 'Evaluator'


def test_unknown_runner_is_refused(tmp_path):
  with pytest.raises(ConfigError, match='Unknown runner'):
    local_runner.run_pipeline(None, 'airflow', str(tmp_path / 'log'))
