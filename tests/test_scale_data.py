"""benchmarks/scale_data.py: the scale benchmark's span is the same bytes every time."""
import os

import pytest

from benchmarks import scale_data


def _span_bytes(directory):
  return {os.path.basename(p): open(p, 'rb').read()
          for p in scale_data.span_files(directory)}


@pytest.mark.unit
def test_same_seed_same_bytes_and_another_seed_others(tmp_path):
  scale_data.write_span(str(tmp_path / 'a'), 3000, files=3)
  scale_data.write_span(str(tmp_path / 'b'), 3000, files=3)
  scale_data.write_span(str(tmp_path / 'c'), 3000, files=3, seed=7)
  first = _span_bytes(str(tmp_path / 'a'))
  assert first == _span_bytes(str(tmp_path / 'b'))
  assert first != _span_bytes(str(tmp_path / 'c'))
  assert sorted(first) == ['part-00.csv', 'part-01.csv', 'part-02.csv']
  lines = b''.join(first.values()).decode().splitlines()
  header = ','.join(scale_data.NUMERIC + scale_data.CATEGORICAL +
                    (scale_data.LABEL,))
  assert lines.count(header) == 3 and len(lines) == 3000 + 3
  labels = {line.rsplit(',', 1)[1] for line in lines if line != header}
  assert labels == {f'class_{c}' for c in range(scale_data.CLASSES)}


@pytest.mark.unit
def test_the_optimizers_candidate_times_are_read_from_the_summary():
  from benchmarks import bench_scale  # pylint: disable=g-import-not-at-top
  stdout = (
      'leantfx run finished in 173.6s\n'
      '  optimizer time per candidate: baseline 3.9 s, pruning 12.2 s (364 '
      'steps), pruning+pqat 19.2 s (455 steps), distillation 16.2 s (1,980 '
      'steps)\n  report: /x/report.html\n')
  assert bench_scale.optimizer_candidate_seconds(stdout) == {
      'baseline': 3.9, 'pruning': 12.2, 'pruning+pqat': 19.2,
      'distillation': 16.2}
  assert bench_scale.optimizer_candidate_seconds('no such line\n') == {}
