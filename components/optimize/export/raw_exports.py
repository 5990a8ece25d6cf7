"""The raw-column fold, one path for every runtime: export, measure, check.

A pick is exported with the Transform folded in (the wrapper SavedModel of
raw_features.save_raw_serving_model, raw columns in), measured as a client
runs it (the whole raw eval split through its runtime; batch-1 latency with
the preprocessing inside) and refused when it scores worse than the
transformed-input variant it was gated as, on the same rows, by more than
the budget allows (raw_features.RawParityError).

``export_checked`` is the one entry. What differs per runtime is a
``RawExport`` (``RAW_EXPORTS``, by runtime name), in three parts:

  job      in this process, with the Keras model and the Transform: what
           ``run`` needs (for OpenVINO and ONNX the wrapper SavedModel is
           saved here and the job pickles);
  run      convert and measure (for OpenVINO and ONNX it needs neither
           Keras nor the Transform, so the ModelOptimizer runs it in its
           worker process: ``in_worker``);
  facts    the manifest's facts of the measured export, or the refusal.

TFLite folds into the .tflite graph (raw_features.py); each server runtime
(OpenVINO, ONNX) converts the same wrapper SavedModel through its Exporter
(raw_runtimes.py; the Exporter is the runtime's: leantfx/runtimes/).
"""
import abc
import os
import tempfile
from typing import Any, Dict, Mapping, Tuple

from leantfx.runtimes import string_lookups
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.export import raw_features
from leantfx.components.optimize.export import raw_runtimes
from leantfx.components.optimize.export import runtime_variants
from leantfx.runtimes import registry as runtimes_lib
from leantfx.runtimes import tflite as tflite_runtime


class RawExport(abc.ABC):
  """One runtime's part of the raw-column fold (see the module docstring).

  Attributes:
    runtime: the runtime's name.
    in_worker: ``run`` may run in the ModelOptimizer's worker process (its
      job pickles).
  """
  runtime: str
  in_worker: bool

  @abc.abstractmethod
  def reference(self, variant: measure.VariantMetrics,
                data: measure.LabeledData, quality,
                num_threads: int) -> float:
    """The transformed-input variant's quality on ``data``, in its runtime."""

  @abc.abstractmethod
  def job(self, model, variant: measure.VariantMetrics,
          raw: raw_features.RawInputs, quality, *, scratch: str,
          num_threads: int, latency_runs: int, warmup_runs: int,
          calibration_samples: int) -> Dict[str, Any]:
    """What ``run`` needs; ``scratch`` outlives the run."""

  @abc.abstractmethod
  def run(self, job: Mapping[str, Any]) -> Dict[str, Any]:
    """Converts and measures: the export's quality and latency figures."""

  @abc.abstractmethod
  def facts(self, job: Mapping[str, Any], measured: Mapping[str, Any],
            name: str, eval_examples: int, reference: float, quality,
            tolerance: float) -> Tuple[str, Dict[str, Any]]:
    """(the export's file or folder, the manifest's facts).

    Raises:
      raw_features.RawParityError: ``measured`` scores worse than
        ``reference`` by more than ``tolerance``.
    """


def _raw_facts(measured: Mapping[str, Any], eval_examples: int,
               reference: float, quality) -> Dict[str, Any]:
  """The manifest facts every runtime's raw-feature export has."""
  return {
      'inputs': 'raw',
      'eval_examples': eval_examples,
      quality.name: measured[quality.name],
      f'transformed_input_{quality.name}': reference,
      'latency_p50_ms': measured['latency_p50_ms'],
      'latency_p99_ms': measured['latency_p99_ms'],
      'latency_includes_preprocessing': True,
  }


class TFLiteRawExport(RawExport):
  """The Transform folded into the .tflite graph, beside the variant's file.

  Runs in this process (its job holds the Keras model), while the worker
  converts the other runtimes' picks.
  """
  runtime = tflite_runtime.RUNTIME.name
  in_worker = False

  def reference(self, variant, data, quality, num_threads):
    return measure.scores_on(variant.path, data, quality,
                             num_threads)[quality.name]

  def job(self, model, variant, raw, quality, *, scratch, num_threads,
          latency_runs, warmup_runs, calibration_samples):
    del scratch  # export_raw_tflite keeps its SavedModel to itself.
    return dict(model=model, variant=variant, raw=raw, quality=quality,
                path=raw_features.raw_path(variant.path),
                num_threads=num_threads, latency_runs=latency_runs,
                warmup_runs=warmup_runs,
                calibration_samples=calibration_samples)

  def run(self, job):
    variant, raw, path = job['variant'], job['raw'], job['path']
    raw_features.export_raw_tflite(
        job['model'], raw.tf_transform_output, raw.label, raw.classes,
        variant.tflite_mode, raw.train.features, output_path=path,
        num_calibration_samples=job['calibration_samples'],
        identifiers=raw.identifiers)
    metrics = measure.measure_tflite(
        path, raw.eval, name=f'{variant.name} (raw features)',
        technique=variant.technique, tflite_mode=variant.tflite_mode,
        num_threads=job['num_threads'], latency_runs=job['latency_runs'],
        warmup_runs=job['warmup_runs'], quality=job['quality'])
    return {job['quality'].name: job['quality'].value(metrics),
            'latency_p50_ms': metrics.latency_p50_ms,
            'latency_p99_ms': metrics.latency_p99_ms,
            'call_overhead_ms': metrics.call_overhead_ms,
            'size_bytes': metrics.size_bytes}

  def facts(self, job, measured, name, eval_examples, reference, quality,
            tolerance):
    value = measured[quality.name]
    gap = quality.drop(reference, value)
    facts = _raw_facts(measured, eval_examples, reference, quality)
    facts['call_overhead_ms'] = measured['call_overhead_ms']
    facts['size_bytes'] = measured['size_bytes']
    if gap > tolerance:
      raise raw_features.RawParityError(
          f'the raw-feature export of {name} scores {quality.name} '
          f'{value:.4f} on the {eval_examples} raw eval rows against '
          f'{reference:.4f} for the transformed-input variant on the same '
          f'rows ({quality.label} {gap:.4f} > {tolerance}): the folded '
          'Transform does not compute what was gated')
    return job['path'], facts


class ServerRawExport(RawExport):
  """A server runtime (OpenVINO, ONNX): the wrapper SavedModel converted by
  its Exporter, beside the variant's folder (raw_runtimes.raw_dir)."""
  in_worker = True

  def __init__(self, runtime: str):
    self.runtime = runtime

  def reference(self, variant, data, quality, num_threads):
    return runtime_variants.scores_on(variant.runtime, variant.path, data,
                                      quality, num_threads)[quality.name]

  def job(self, model, variant, raw, quality, *, scratch, num_threads,
          latency_runs, warmup_runs, calibration_samples):
    variant_dir = (variant.path if os.path.isdir(variant.path) else
                   os.path.dirname(variant.path))
    job = raw_runtimes.prepare_raw(
        self.runtime, model, raw.tf_transform_output, raw.label, raw.classes,
        variant.tflite_mode, raw.train.features, scratch=scratch,
        num_calibration_samples=calibration_samples,
        identifiers=raw.identifiers)
    return dict(job, output_dir=raw_runtimes.raw_dir(variant_dir),
                eval_data=raw.eval, quality=quality, num_threads=num_threads,
                latency_runs=latency_runs, warmup_runs=warmup_runs)

  def run(self, job):
    job = dict(job)
    eval_data, quality = job.pop('eval_data'), job.pop('quality')
    settings = {k: job.pop(k)
                for k in ('num_threads', 'latency_runs', 'warmup_runs')}
    path = raw_runtimes.convert_raw(**job)
    return raw_runtimes.measure_raw(self.runtime, path, eval_data, quality,
                                    **settings)

  def facts(self, job, measured, name, eval_examples, reference, quality,
            tolerance):
    out_dir = job['output_dir']
    value = measured[quality.name]
    gap = quality.drop(reference, value)
    facts = _raw_facts(measured, eval_examples, reference, quality)
    facts['latency_method'] = ('batch 1, inputs bound once, the runtime\'s '
                               'call timed (its predictor\'s bind)')
    facts['call_overhead_ms'] = measured['call_overhead_ms']
    # The runtime's own facts (OpenVINO: what OVMS, which compiles the IR as
    # pushed, would answer at batch 1; leantfx deploy ovms reads it).
    facts.update(measured.get('push_facts', {}))
    looked_up = sorted(string_lookups.read_string_lookups(out_dir))
    if looked_up:
      # OpenVINO: these columns' strings become ids before the IR (in
      # leantfx serve; in the timed call's Python part, not in the IR's p50).
      facts['vocabulary_ids_in'] = looked_up
    if gap > tolerance:
      raise raw_features.RawParityError(
          f'the raw-feature {runtimes_lib.LABELS[self.runtime]} export of '
          f'{name} scores {quality.name} {value:.4f} on the {eval_examples} '
          f'raw eval rows against {reference:.4f} for the transformed-input '
          f'variant on the same rows ({quality.label} {gap:.4f} > '
          f'{tolerance})')
    return out_dir, facts


# Every runtime's part, by runtime name: TFLite's, and one per server
# runtime (each through its Exporter: registry.exporter).
RAW_EXPORTS: Dict[str, RawExport] = {
    e.runtime: e for e in [TFLiteRawExport()] + [
        ServerRawExport(runtime) for runtime in runtimes_lib.SERVER_RUNTIMES]}


def export_checked(model, variant: measure.VariantMetrics,
                   raw: raw_features.RawInputs,
                   reference_data: measure.LabeledData, quality,
                   tolerance: float, *, num_threads: int, latency_runs: int,
                   warmup_runs: int, calibration_samples: int
                  ) -> Tuple[str, Dict[str, Any]]:
  """Exports ``variant`` with raw-feature inputs, measures and checks it.

  In this process, whatever the runtime (the ModelOptimizer splits the same
  three parts across its worker: steps/raw_fold.py).

  Args:
    model: the variant's Keras model (transformed-feature inputs).
    variant: the gated transformed-input variant (its runtime, file or
      folder, and mode).
    raw: the raw rows and the Transform.
    reference_data: the transformed eval split (all of it), which the
      variant is scored on for the comparison.
    quality: the task's quality_lib.Quality.
    tolerance: how much worse (quality.drop) the export may score.
    num_threads: runtime threads for the measurement.
    latency_runs: timed batch-1 calls.
    warmup_runs: untimed calls first.
    calibration_samples: raw train rows calibrating an int8 mode.

  Returns:
    (the export's file (TFLite) or folder (OpenVINO, ONNX), facts for the
    manifest).

  Raises:
    raw_features.RawParityError: the export scores worse than allowed.
    ConfigError: the runtime cannot convert the raw-feature graph.
    Exception: whatever conversion raises (the caller records it).
  """
  raw_export = RAW_EXPORTS[variant.runtime]
  reference = raw_export.reference(variant, reference_data, quality,
                                   num_threads)
  with tempfile.TemporaryDirectory(prefix='leantfx-raw-export-') as scratch:
    job = raw_export.job(model, variant, raw, quality, scratch=scratch,
                         num_threads=num_threads, latency_runs=latency_runs,
                         warmup_runs=warmup_runs,
                         calibration_samples=calibration_samples)
    measured = raw_export.run(job)
  return raw_export.facts(job, measured, variant.name, len(raw.eval),
                          reference, quality, tolerance)
