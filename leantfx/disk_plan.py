"""How much disk a run's artifacts take, estimated before it runs.

A run writes, below its output folder: ExampleGen's examples (gzipped
TFRecords), Augment's copy of them, Transform's transformed examples, the
statistics and schemas, the trained model, the pushed versions (SavedModel,
TFLite, OpenVINO, ONNX), the ModelOptimizer's report with its variants, ML
Metadata and the log. The data parts grow with the input; the rest does not.

The estimate is ``FIXED_BYTES + DATA_PARTS_PER_EXAMPLE_BYTE x example
bytes`` (plus the optimizer report's per-row part), where example bytes are
what ExampleGen writes for the input (gzipped tf.Examples), from the input's
size by format (``EXAMPLE_BYTES_PER_INPUT_BYTE``).

How the ratios were measured (2026-12-06, this repository, one run each with
``--train-steps 60 --techniques none --min-accuracy 0``; ``du -sb`` of the
output folder, file sizes of the TFRecord shards and of the optimizer
report's variants.json):

=====================  =========  ========  =========  =========  ==========
run                    input (B)  examples  Augment    Transform  output (B)
=====================  =========  ========  =========  =========  ==========
generated 50k CSV [1]  2,121,118  936,830   936,830    1,335,459  6,961,356
bundled penguins         13,478     6,981     6,981        9,368  2,742,658
bundled digits (CNN)    265,294   168,776   348,361      171,394  6,415,499
=====================  =========  ========  =========  =========  ==========

[1] benchmarks/bench_data.py's ``penguin_like_rows(50000, seed=7)``, run with
``--data-root D --label species``; its examples are 9,467,022 bytes
ungzipped (0.099 per byte of an ungzipped TFRecord input).

Per part, the largest ratio measured: examples per CSV byte 0.636 (digits;
penguins 0.518, the 50k span 0.442); Augment's output per example byte 2.06
(digits, whose augmentation adds copies; 1.00 for the other two);
transformed examples per example byte 1.43 (the 50k span; 1.34, 1.02);
variants.json grows with the eval rows, (663,412 - 15,551) / (936,830 -
6,981) = 0.70 per example byte (50k span vs penguins). The fixed part (model,
pushes to four runtimes, statistics, schemas, ML Metadata, the log, the
prepared copy of a bundled dataset) is the largest output less its data
parts: digits' 6,415,499 - (168,776 + 348,361 + 171,394 + 46,159) =
5,680,809 bytes. So the estimate errs high: 1.8x the 50k run, 2.1x
penguins, 1.0x digits. Image models (MobileNetV2) were not measured:
images are not estimated (see ``estimate``).
"""
import dataclasses
import os
import shutil
from typing import Callable, Iterable, List, Optional, Tuple

from leantfx import spans
from leantfx.errors import ConfigError

# Example bytes (gzipped TFRecord, as ExampleGen writes) per input byte, by
# format (measured, above); a gzipped TFRecord (.gz) is taken as copied as
# it is (an assumption: it is already compressed).
EXAMPLE_BYTES_PER_INPUT_BYTE = {
    'csv': 0.64,
    'tfrecord': 0.10,
    'tfrecord.gz': 1.0,
}
# The examples (1) + Augment's output (2.06) + transformed examples (1.43),
# per example byte; the optimizer report's per-row part (0.70) only when the
# ModelOptimizer runs.
DATA_PARTS_PER_EXAMPLE_BYTE = 1.0 + 2.06 + 1.43
OPTIMIZER_PER_EXAMPLE_BYTE = 0.70
# Model, pushes, statistics, schemas, ML Metadata, log (digits' CNN run).
FIXED_BYTES = 5_680_809
# Beam and Transform write temporary files beside their outputs and the
# output folder keeps earlier runs' artifacts: the check wants twice the
# estimate free (a policy choice, not a measurement).
SAFETY_MARGIN = 2.0

FreeBytes = Callable[[str], int]


def free_bytes(path: str) -> int:
  """Free bytes for an unprivileged writer on path's filesystem."""
  return shutil.disk_usage(path).free


@dataclasses.dataclass(frozen=True)
class DiskEstimate:
  """What a run is expected to write.

  Attributes:
    input_bytes: the span(s) the run reads.
    example_bytes: what ExampleGen writes for them.
    artifact_bytes: the whole estimate (data parts + fixed part).
  """
  input_bytes: int
  example_bytes: int
  artifact_bytes: int

  @property
  def required_free_bytes(self) -> int:
    return int(self.artifact_bytes * SAFETY_MARGIN)


def human(size: float) -> str:
  """1536000 -> '1.5 MB' (powers of 1000, as df -H prints)."""
  for unit in ('bytes', 'kB', 'MB', 'GB', 'TB'):
    if size < 1000 or unit == 'TB':
      return f'{size:.0f} {unit}' if unit == 'bytes' else (
          f'{size:.1f} {unit}')
    size /= 1000
  raise AssertionError('unreachable')


def _file_sizes(folder: str) -> Iterable[Tuple[str, int]]:
  for root, dirs, files in os.walk(folder):
    dirs[:] = [d for d in dirs if spans.is_data_entry(d)]
    for name in files:
      if spans.is_data_entry(name):
        path = os.path.join(root, name)
        yield path, os.path.getsize(path)


def span_input(data_root: str, span: int, window: int = 1
               ) -> List[Tuple[str, int]]:
  """(path, bytes) of every data file in the window of spans ending at span.

  Args:
    data_root: the folder of span-<N>/ folders.
    span: the newest span the run reads.
    window: how many spans it reads (--span-window), newest first.
  """
  chosen = [path for number, path in spans.list_span_dirs(data_root)
            if number <= span][-window:]
  return [found for path in chosen for found in _file_sizes(path)]


def estimate(files: List[Tuple[str, int]], data_format: str,
             optimize: bool) -> Optional[DiskEstimate]:
  """The artifacts' size for input files of data_format; None for images.

  Args:
    files: (path, bytes) of the input (span_input).
    data_format: 'csv', 'tfrecord' or 'images'.
    optimize: the ModelOptimizer runs (its report grows with the eval rows).

  Returns:
    The estimate, or None when no ratio was measured for the format
    (images: their fixed part is the image model's, not measured here).
  """
  if data_format not in ('csv', 'tfrecord'):
    return None
  input_total = example_total = 0
  for path, size in files:
    kind = data_format
    if data_format == 'tfrecord' and path.endswith('.gz'):
      kind = 'tfrecord.gz'
    input_total += size
    example_total += size * EXAMPLE_BYTES_PER_INPUT_BYTE[kind]
  per_example = DATA_PARTS_PER_EXAMPLE_BYTE + (
      OPTIMIZER_PER_EXAMPLE_BYTE if optimize else 0.0)
  return DiskEstimate(
      input_bytes=input_total, example_bytes=int(example_total),
      artifact_bytes=int(FIXED_BYTES + per_example * example_total))


def describe(estimated: Optional[DiskEstimate],
             available: Optional[int] = None, where: str = '') -> str:
  """The plan's line: the estimate and, when checked, the free space."""
  if estimated is None:
    return ('  disk: not estimated for images (no ratio measured for image '
            'models); the free space is not checked')
  line = (f'  disk: about {human(estimated.artifact_bytes)} of artifacts for '
          f'{human(estimated.input_bytes)} of input')
  if available is not None:
    line += f'; {human(available)} free in {where}'
  return line


def check_free_space(estimated: DiskEstimate, output: str,
                     free: FreeBytes = free_bytes) -> int:
  """Refuses a run whose artifacts would not fit; returns the free bytes.

  Args:
    estimated: the run's estimate.
    output: the output folder (or the nearest existing folder above it).
    free: free bytes of a path's filesystem (shutil.disk_usage by default;
      a test passes its own figure).

  Raises:
    ConfigError: fewer than SAFETY_MARGIN times the estimate are free.
  """
  existing = os.path.abspath(output)
  while not os.path.exists(existing) and os.path.dirname(existing) != existing:
    existing = os.path.dirname(existing)
  available = free(existing)
  if available < estimated.required_free_bytes:
    raise ConfigError(
        f'Not enough disk space for this run: its artifacts need about '
        f'{human(estimated.artifact_bytes)} (estimated from '
        f'{human(estimated.input_bytes)} of input) and the check wants '
        f'{SAFETY_MARGIN:g}x that, {human(estimated.required_free_bytes)}, '
        f'free on the filesystem of {existing}; it has '
        f'{human(available)}. Free space there, pass another --output, or '
        'pass --skip-disk-check to run anyway. Nothing was run.')
  return available
