"""leantfx.disk_plan: the artifacts' estimate and the free-space decision.

The sizes are those measured in disk_plan's docstring (2026-12-06); the free
space is passed in (the machine has no small filesystem to fill), the files
are real.
"""
import os

import pytest

from leantfx import disk_plan
from leantfx.errors import ConfigError

pytestmark = pytest.mark.unit

# The generated 50,000-row CSV span of the measurement: its size and the
# output folder its run left (du -sb), options in disk_plan's docstring.
MEASURED_50K_CSV_BYTES = 2_121_118
MEASURED_50K_OUTPUT_BYTES = 6_961_356
# The bundled penguins' and digits' CSV and their runs' output folders.
MEASURED_PENGUINS_CSV_BYTES = 13_478
MEASURED_PENGUINS_OUTPUT_BYTES = 2_742_658
MEASURED_DIGITS_CSV_BYTES = 265_294
MEASURED_DIGITS_OUTPUT_BYTES = 6_415_499


def _span(root, span, files):
  folder = root / f'span-{span}'
  folder.mkdir(parents=True)
  for name, size in files.items():
    (folder / name).write_bytes(b'x' * size)
  return folder


@pytest.mark.parametrize('csv_bytes, measured', [
    (MEASURED_50K_CSV_BYTES, MEASURED_50K_OUTPUT_BYTES),
    (MEASURED_PENGUINS_CSV_BYTES, MEASURED_PENGUINS_OUTPUT_BYTES),
    (MEASURED_DIGITS_CSV_BYTES, MEASURED_DIGITS_OUTPUT_BYTES),
])
def test_the_estimate_covers_every_measured_run(csv_bytes, measured):
  estimated = disk_plan.estimate([('data.csv', csv_bytes)], 'csv',
                                 optimize=True)
  assert estimated.input_bytes == csv_bytes
  # Errs high (each part takes the largest ratio measured): 1.0x digits,
  # 1.8x the 50k span, 2.1x penguins (the docstring's figures).
  assert measured <= estimated.artifact_bytes <= measured * 2.1


def test_the_data_parts_grow_with_the_input_and_the_optimizer_adds_its_own():
  small = disk_plan.estimate([('a.csv', 10**6)], 'csv', optimize=False)
  large = disk_plan.estimate([('a.csv', 10**8)], 'csv', optimize=False)
  with_optimizer = disk_plan.estimate([('a.csv', 10**8)], 'csv',
                                      optimize=True)
  per_input_byte = (large.artifact_bytes - small.artifact_bytes) / 99e6
  assert per_input_byte == pytest.approx(
      disk_plan.EXAMPLE_BYTES_PER_INPUT_BYTE['csv'] *
      disk_plan.DATA_PARTS_PER_EXAMPLE_BYTE, rel=1e-6)
  assert with_optimizer.artifact_bytes > large.artifact_bytes


def test_gzipped_tfrecords_count_as_examples_plain_ones_shrink():
  plain = disk_plan.estimate([('part-0', 10**7)], 'tfrecord', optimize=False)
  gzipped = disk_plan.estimate([('part-0.gz', 10**7)], 'tfrecord',
                               optimize=False)
  assert plain.example_bytes == 10**6
  assert gzipped.example_bytes == 10**7


def test_images_are_not_estimated_and_say_so():
  assert disk_plan.estimate([('0/a.png', 100)], 'images', True) is None
  assert 'not estimated for images' in disk_plan.describe(None)


def test_span_input_reads_the_window_of_spans_up_to_the_pinned_one(
    tmp_path):
  _span(tmp_path, 1, {'a.csv': 10})
  _span(tmp_path, 2, {'a.csv': 20, '_SUCCESS': 0, '.hidden': 5})
  _span(tmp_path, 3, {'a.csv': 40})
  assert sorted(size for _, size in disk_plan.span_input(
      str(tmp_path), 3)) == [40]
  assert sorted(size for _, size in disk_plan.span_input(
      str(tmp_path), 2, window=2)) == [10, 20]  # Markers and hidden files
  # are no data (spans.is_data_entry).


def test_a_run_that_fits_is_allowed_and_reports_the_free_space(tmp_path):
  estimated = disk_plan.estimate([('a.csv', MEASURED_50K_CSV_BYTES)], 'csv',
                                 optimize=True)
  free = estimated.required_free_bytes
  assert disk_plan.check_free_space(estimated, str(tmp_path),
                                    free=lambda path: free) == free
  line = disk_plan.describe(estimated, free, str(tmp_path))
  assert line.startswith('  disk: about 12.7 MB of artifacts for 2.1 MB of '
                         'input; 25.5 MB free in ')


def test_a_run_that_does_not_fit_is_refused_with_what_to_do(tmp_path):
  estimated = disk_plan.estimate([('a.csv', MEASURED_50K_CSV_BYTES)], 'csv',
                                 optimize=True)
  asked = []

  def free(path):
    asked.append(path)
    return estimated.required_free_bytes - 1

  output = tmp_path / 'not' / 'yet'
  with pytest.raises(ConfigError) as raised:
    disk_plan.check_free_space(estimated, str(output), free=free)
  # The nearest existing folder's filesystem is asked; nothing is created.
  assert asked == [str(tmp_path)]
  assert not os.path.exists(tmp_path / 'not')
  message = str(raised.value)
  for part in ('about 12.7 MB', '2.1 MB of input', '2x that, 25.5 MB',
               f'filesystem of {tmp_path}', 'it has 25.5 MB',
               '--skip-disk-check', 'another --output', 'Nothing was run'):
    assert part in message, message
  assert raised.value.exit_code == 2


def test_the_real_filesystem_is_asked_by_default(tmp_path):
  estimated = disk_plan.estimate([('a.csv', 1)], 'csv', optimize=False)
  # The machine's free space, from shutil.disk_usage, is a positive count.
  assert disk_plan.check_free_space(estimated, str(tmp_path)) > 0
