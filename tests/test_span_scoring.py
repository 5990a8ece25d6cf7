"""--bulk-score's step: what it does with no push yet, and when scoring fails.

The scoring itself (``leantfx score`` on a pushed model, rows in == rows
out) is exercised by the penguins e2e run (tests/e2e/test_pipeline_e2e.py)
and by the compiled BulkScore task (tests/orchestration/
test_kfp_two_runs.py).
"""
import os

import pytest

from leantfx import span_scoring

pytestmark = pytest.mark.unit


def test_with_no_version_pushed_nothing_is_scored(tmp_path):
  base = tmp_path / 'serving' / 'penguins'
  base.mkdir(parents=True)
  result = span_scoring.score_span(str(base), str(tmp_path / 'data'), 1,
                                   str(tmp_path / 'out'), 'species')
  assert result == {'scored': False,
                    'reason': f'no model version in {base} yet'}
  assert span_scoring.describe(result) == (
      f'bulk score: nothing scored (no model version in {base} yet)')
  assert not os.path.exists(tmp_path / 'out' / span_scoring.SCORES_DIR)


def test_a_failed_scoring_names_the_span_the_version_and_the_cause(tmp_path):
  base = tmp_path / 'serving'
  (base / '7').mkdir(parents=True)  # A version folder with no model in it.
  span = tmp_path / 'data' / 'span-3'
  span.mkdir(parents=True)
  (span / 'rows.csv').write_text('a,b\n1,2\n', encoding='utf-8')
  with pytest.raises(span_scoring.BulkScoreError) as e:
    span_scoring.score_span(str(base), str(tmp_path / 'data'), 3,
                            str(tmp_path / 'out'), None)
  message = str(e.value)
  assert f'Scoring span 3 of {tmp_path / "data"} with version 7' in message
  assert 'leantfx score exit code 2' in message
  assert 'nothing was written' in message
  assert e.value.exit_code == 3
  out = span_scoring.scored_dir(str(tmp_path / 'out'), 3, 7)
  assert not os.path.exists(out)
  # No partial folder either: `leantfx score` writes beside, then renames.
  assert os.listdir(os.path.dirname(out)) == []
