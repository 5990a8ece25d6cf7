"""Figure: the text Transform alone, analyze and transform, on generated rows.

One free-text column (benchmarks/column_spans.py's descriptions) through
models/text_features.transform_text in tft_beam's AnalyzeAndTransformDataset,
on the DirectRunner as `leantfx run` configures it below 500,000 rows
(pipeline/beam_presets.py, in_memory), from instance dicts: the Transform
component's text cost without ExampleGen, statistics or TFXIO. Each size is
timed from the Beam pipeline's start to its end, and the TF graph's parts
are timed alone on BATCH rows (tf.function, best of 3), so the time can be
split between the graph and Beam. The run's CPU seconds are reported beside
its wall time.

  python -m benchmarks.bench_text_transform [--rows 50000 ...]
"""
import argparse
import os
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Tuple

from benchmarks import column_spans
from benchmarks import harness

COLUMN = column_spans.TEXT
# Rows per graph call when the parts are timed alone: tft_beam's batches
# hold up to 1,000 instances (its default desired_batch_size upper bound).
BATCH = 1000


def _preprocessing_fn(inputs: Dict[str, Any]) -> Dict[str, Any]:
  from leantfx.models import text_features  # pylint: disable=g-import-not-at-top
  return text_features.transform_text(inputs[COLUMN], COLUMN)


def time_transform(rows: int) -> Tuple[float, float]:
  """(wall, CPU) seconds of AnalyzeAndTransformDataset over ``rows``
  descriptions; the CPU seconds (this process's, every thread) say more on
  a shared machine, where the wall time waits for other jobs."""
  import apache_beam as beam  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_transform.beam as tft_beam  # pylint: disable=g-import-not-at-top
  from tensorflow_transform.tf_metadata import dataset_metadata  # pylint: disable=g-import-not-at-top
  from tensorflow_transform.tf_metadata import schema_utils  # pylint: disable=g-import-not-at-top
  from leantfx.pipeline import beam_presets  # pylint: disable=g-import-not-at-top
  # Generated before the clock starts: only the Transform is timed.
  data = [{COLUMN: r[COLUMN]} for r in column_spans.rows(rows)]
  metadata = dataset_metadata.DatasetMetadata(
      schema_utils.schema_from_feature_spec(
          {COLUMN: tf.io.FixedLenFeature([], tf.string)}))
  options = beam.options.pipeline_options.PipelineOptions(
      beam_presets.beam_pipeline_args())
  started, cpu = time.monotonic(), time.process_time()
  with tempfile.TemporaryDirectory() as temp, beam.Pipeline(
      options=options) as pipeline, tft_beam.Context(temp_dir=temp):
    transformed, _ = (
        (pipeline | beam.Create(data), metadata)
        | tft_beam.AnalyzeAndTransformDataset(_preprocessing_fn))
    _ = transformed[0] | beam.combiners.Count.Globally()
  return time.monotonic() - started, time.process_time() - cpu


def _best_of(fn: Callable, *args, runs: int = 3) -> float:
  fn(*args)
  times = []
  for _ in range(runs):
    started = time.perf_counter()
    fn(*args)
    times.append(time.perf_counter() - started)
  return min(times)


def graph_parts() -> List[Dict[str, Any]]:
  """Milliseconds per BATCH rows of each part of the text graph."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from leantfx.models import text_features  # pylint: disable=g-import-not-at-top
  texts = tf.constant([r[COLUMN] for r in column_spans.rows(BATCH)])
  terms = tf.function(text_features.terms)
  all_terms = terms(texts)
  hashes = tf.strings.to_hash_bucket_fast(all_terms, 2**62)
  present = tf.not_equal(all_terms, '')
  # pylint: disable=protected-access
  parts = [('terms (normalise, split, pairs)', terms, texts),
           ('analyzers: distinct terms (sort)',
            tf.function(text_features._distinct_terms), all_terms),
           ('transform: first slot and count (pairwise)',
            tf.function(text_features._distinct), hashes, present)]
  return [{'part': name, 'ms_per_batch': round(
      1000 * _best_of(fn, *args), 1), 'batch': BATCH}
          for name, fn, *args in parts]


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--rows', type=int, nargs='+', default=[50_000])
  args = parser.parse_args(argv)
  rows = graph_parts()
  for count in args.rows:
    seconds, cpu = time_transform(count)
    rows.append({'part': f'AnalyzeAndTransformDataset, {count:,} rows',
                 'seconds': round(seconds, 1), 'cpu_s': round(cpu, 1),
                 'rows_per_s': round(count / seconds)})
  load = os.getloadavg()[0]
  harness.report('text_transform', 'The text Transform alone (issue 42)',
                 rows, [f'load average at the end: {load:.2f} '
                        f'({os.cpu_count()} CPUs)'])
  return 0


if __name__ == '__main__':
  sys.exit(main())
