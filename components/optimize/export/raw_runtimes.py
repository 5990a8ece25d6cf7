"""Raw-feature exports for the server runtimes (OpenVINO IR, ONNX): one path.

The same contract as the raw-feature .tflite (raw_features.py,
leantfx/raw_serving.py): one [batch] input per raw column (float32 with NaN
for a missing number, string with '' for a missing category), and
``probabilities``, ``class_ids``, ``classes`` out (``predictions`` for a
regression). The graph is raw_features.save_raw_serving_model's wrapper
SavedModel (the real tf.Transform layer for numeric and pixel columns, a
constant hash table from the Transform's vocabulary file for each
vocabulary column), converted by the runtime's ``Exporter``
(registry.exporter(runtime).export_raw: leantfx/runtimes/openvino.py,
onnx.py).
A runtime that runs no lookup table (``Exporter.lookups_outside``:
OpenVINO) takes each vocabulary column as its int64 ids, and the export
writes the vocabularies beside its model file
(string_lookups.STRING_LOOKUPS_FILE, pushed with it).

An export is run here as a client runs it, through its runtime's predictor
(leantfx/runtimes: ``Runtime.predictor`` with the vocabularies found beside
the file), which feeds strings as that runtime reads them and maps a
vocabulary column to its ids first; ``leantfx serve``'s servables convert
strings with the same functions.

Exported, measured and checked against the transformed-input variant the
same way for every runtime: raw_exports.py.
"""
import os
import tempfile
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from leantfx import raw_serving
from leantfx.components.optimize.evaluation import measure
from leantfx.runtimes import exporter as exporter_lib
from leantfx.components.optimize.export import raw_features
from leantfx.runtimes import serving_export
from leantfx.errors import ConfigError
from leantfx.runtimes import registry as runtimes_lib
from leantfx.runtimes import runtime as runtime_lib
from leantfx.runtimes import string_lookups

RUNTIMES = runtimes_lib.SERVER_RUNTIMES
FLOAT32 = exporter_lib.FLOAT32
INT8 = exporter_lib.INT8
MODES = exporter_lib.MODES
# How many eval rows a predictor's push facts are measured on (OpenVINO's
# dynamic-batch check: the plugin bug it watches for answers every row
# wrongly).
PUSH_FACT_ROWS = 100


def raw_calibration_samples(raw: Mapping[str, np.ndarray],
                            num_samples: int) -> List[Dict[str, np.ndarray]]:
  """Up to ``num_samples`` batch-1 raw requests ({column: value[i:i+1]})."""
  if not raw:
    return []
  rows = min(len(np.asarray(v)) for v in raw.values())
  return [{c: np.asarray(v)[i:i + 1] for c, v in raw.items()}
          for i in range(min(rows, max(0, int(num_samples))))]


def _check_columns(raw: Mapping[str, np.ndarray], tf_transform_output,
                   label: str, identifiers: Sequence[str] = ()) -> None:
  serving_spec = raw_serving.serving_feature_spec(
      tf_transform_output.raw_feature_spec(), label, identifiers)
  missing = sorted(set(serving_spec) - set(raw))
  if missing:
    raise ConfigError(
        f'The raw calibration rows lack the column(s) {missing}; they have '
        f'{sorted(raw)}. Pass the raw train split (raw_features.'
        'read_raw_split), one [n] array per raw column but the label.')


def export_raw(runtime: str, model, tf_transform_output, label: str,
               classes: Sequence[str], mode: str,
               raw_train_features: Optional[Mapping[str, np.ndarray]],
               *, output_dir: str,
               num_calibration_samples: int = (
                   serving_export.DEFAULT_CALIBRATION_SAMPLES),
               identifiers: Sequence[str] = ()) -> str:
  """Writes ``model`` behind the Transform as OpenVINO IR or ONNX.

  ``prepare_raw`` then ``convert_raw`` in this process (the ModelOptimizer
  runs the second half in its worker process).

  Args:
    runtime: 'openvino' or 'onnx'.
    model: the variant's tf_keras model (transformed-feature inputs).
    tf_transform_output: the run's ``tft.TFTransformOutput``.
    label: the raw label column (left out of the request).
    classes: class names in class-id order; empty for a regression.
    mode: 'float32' or 'int8'.
    raw_train_features: raw train columns ({column: [n] array}, NaN / ''
      for gaps) calibrating int8; unused for float32.
    output_dir: where model.xml + model.bin, or model.onnx, are written.
    num_calibration_samples: raw rows int8 calibrates on.
    identifiers: identifier columns, left out of the request.

  Returns:
    The path of model.xml (OpenVINO) or model.onnx (ONNX).

  Raises:
    ConfigError: unknown runtime or mode; int8 without (or with empty) raw
      calibration rows, or rows lacking a column; a graph the runtime's
      converter cannot take (OpenVINO and vocabulary columns).
  """
  with tempfile.TemporaryDirectory(prefix='leantfx-raw-runtime-') as tmp:
    job = prepare_raw(runtime, model, tf_transform_output, label, classes,
                      mode, raw_train_features, scratch=tmp,
                      num_calibration_samples=num_calibration_samples,
                      identifiers=identifiers)
    return convert_raw(output_dir=output_dir, **job)


def prepare_raw(runtime: str, model, tf_transform_output, label: str,
                classes: Sequence[str], mode: str,
                raw_train_features: Optional[Mapping[str, np.ndarray]],
                *, scratch: str,
                num_calibration_samples: int = (
                    serving_export.DEFAULT_CALIBRATION_SAMPLES),
                identifiers: Sequence[str] = ()
               ) -> Dict[str, Any]:
  """The half of ``export_raw`` that needs the Keras model and the Transform.

  Checks the request, draws the calibration rows and saves the wrapper
  SavedModel (raw_features.save_raw_serving_model; for OpenVINO with the
  vocabulary columns as ids) under ``scratch``, which must outlive the
  conversion.

  Returns:
    ``convert_raw``'s keyword arguments but output_dir; all of it pickles.

  Raises:
    ConfigError: as export_raw, but a conversion failure.
  """
  if runtime not in RUNTIMES:
    raise ConfigError(
        f'No raw-feature export for runtime {runtime!r}; use one of '
        f'{RUNTIMES} (TFLite: raw_features.export_raw_tflite).')
  exporter = runtimes_lib.exporter(runtime)
  if mode not in exporter.modes:
    raise ConfigError(f'Unknown {runtimes_lib.LABELS[runtime]} mode {mode!r}; '
                      f'use one of {exporter.modes}.')
  samples = []
  if mode == INT8:
    if raw_train_features is None:
      raise ConfigError(
          f'{runtimes_lib.LABELS[runtime]} int8 needs raw train rows to '
          'calibrate; none were given.')
    samples = raw_calibration_samples(raw_train_features,
                                      num_calibration_samples)
    serving_export.require_calibration_samples(
        samples, runtimes_lib.LABELS[runtime], mode)
    _check_columns(raw_train_features, tf_transform_output, label,
                   identifiers)
  vocabularies = {}
  if exporter.lookups_outside:
    vocabularies = raw_features.categorical_vocabularies(
        model, tf_transform_output, label, identifiers)
  saved_model = raw_features.save_raw_serving_model(
      model, tf_transform_output, label, classes,
      os.path.join(scratch, f'{runtime}_{mode}_saved_model'),
      lookups_outside=exporter.lookups_outside,
      lookup_only_strings=exporter.lookup_only_strings,
      identifiers=identifiers)
  return dict(runtime=runtime, saved_model=saved_model, mode=mode,
              samples=samples, vocabularies=vocabularies)


def convert_raw(*, runtime: str, saved_model: str, mode: str,
                samples: List[Dict[str, np.ndarray]],
                vocabularies: Mapping[str, List[bytes]],
                output_dir: str) -> str:
  """The half of ``export_raw`` that needs neither Keras nor the Transform.

  Converts ``prepare_raw``'s SavedModel, quantizes an int8 mode on its
  samples and writes the files (and an OpenVINO export's vocabularies) to
  ``output_dir``.

  Returns:
    The path of model.xml (OpenVINO) or model.onnx (ONNX).

  Raises:
    ConfigError: the runtime's converter cannot take the graph.
  """
  return runtimes_lib.exporter(runtime).export_raw(
      saved_model, mode, samples, vocabularies, output_dir)


def raw_predictor(runtime: str, path: str, num_threads: int = 1
                 ) -> runtime_lib.RawPredictor:
  """A raw-feature export in its runtime: raw columns in, the score out.

  The runtime's predictor, given the vocabularies found beside ``path``
  (an export whose runtime takes vocabulary ids carries them).
  """
  lookups = string_lookups.read_string_lookups(os.path.dirname(path))
  return runtimes_lib.get(runtime).predictor(path, num_threads, lookups)


def measure_raw(runtime: str, path: str, data: measure.LabeledData, quality,
                *, num_threads: int, latency_runs: int, warmup_runs: int
               ) -> Dict[str, Any]:
  """Quality on ``data`` and batch-1 latency of a raw-feature export.

  Quality: the whole split in one batch. Latency, as the other variants'
  (measure.py): one eval row bound once, the runtime's own call timed
  (the predictor's ``bind``); the Python call path a client writes (inputs
  converted and passed per call) is timed beside it, and the difference of
  the medians is the per-call overhead.

  Returns:
    quality.scores(...) plus latency_p50_ms, latency_p99_ms,
    call_overhead_ms and ``push_facts``: the predictor's facts for the
    manifest, on the first PUSH_FACT_ROWS eval rows (OpenVINO: what a
    server compiling the IR as pushed would answer differently at batch 1).
  """
  predictor = raw_predictor(runtime, path, num_threads)
  scores = quality.scores(predictor.predict(data.features), data.labels)
  row = data.example(0)

  def timed(call):
    for _ in range(warmup_runs):
      call()
    durations = []
    for _ in range(max(1, latency_runs)):
      start = time.perf_counter()
      call()
      durations.append(time.perf_counter() - start)
    return np.asarray(durations) * 1000.0

  called = timed(lambda: predictor.predict(row))
  bound = timed(predictor.bind(row))
  measured = dict(scores, latency_p50_ms=float(np.percentile(bound, 50)),
                  latency_p99_ms=float(np.percentile(bound, 99)),
                  call_overhead_ms=float(np.percentile(called, 50) -
                                         np.percentile(bound, 50)))
  measured['push_facts'] = predictor.push_facts(
      [data.example(i) for i in range(min(PUSH_FACT_ROWS, len(data)))])
  return measured


def raw_dir(variant_dir: str) -> str:
  """Where a runtime variant's raw-feature export goes: beside its folder."""
  return variant_dir.rstrip('/') + '_raw'
