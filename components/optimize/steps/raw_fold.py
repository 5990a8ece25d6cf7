"""Fold the raw columns in: each runtime's pick exported behind the Transform.

A client of a pushed model sends raw columns, as to the Trainer's SavedModel;
each pick is exported with the Transform folded in (export/raw_exports.py,
one path for every runtime), scored on the raw eval rows and checked against
its transformed-input variant. When a pick's export fails, its runtime's
next blessed variant (by the selection policy) is exported in its place
(give_way); only a runtime with no blessed variant left that takes the raw
columns is pushed with transformed-feature inputs.
"""
import concurrent.futures
import tempfile
import traceback
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from absl import logging

from leantfx.components.optimize import config as config_lib
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.evaluation import selection
from leantfx.components.optimize.export import raw_features
from leantfx.components.optimize.export import raw_exports
from leantfx.runtimes import registry as runtimes_lib

# The end of a failed export's error while its pick is still pushed.
TRANSFORMED_INSTEAD = ('; the pushed model takes the transformed features '
                       'instead')


def fold_one_pick(variant: measure.VariantMetrics,
                  models: Mapping[str, Any],
                  raw: Optional[raw_features.RawInputs],
                  all_eval: measure.LabeledData,
                  config: config_lib.OptimizationConfig,
                  failures: List[Dict[str, str]]
                 ) -> Tuple[Optional[str], Dict[str, Any]]:
  """The raw-feature export of one pick, in this process (fold_raw_columns)."""
  return fold_raw_columns({variant.runtime: variant}, models, raw, all_eval,
                          config, failures)[variant.runtime]


def fold_raw_columns(picks: Mapping[str, measure.VariantMetrics],
                     models: Mapping[str, Any],
                     raw: Optional[raw_features.RawInputs],
                     all_eval: measure.LabeledData,
                     config: config_lib.OptimizationConfig,
                     failures: List[Dict[str, str]],
                     pool: Optional[concurrent.futures.Executor] = None
                    ) -> Dict[str, Tuple[Optional[str], Dict[str, Any]]]:
  """The raw-feature export of each runtime's pick, and what its push takes.

  The parts of export/raw_exports.py's one path (job, run, facts) for
  each pick. The exports are independent: with a worker ``pool``, the
  server runtimes' runs (conversion and measurement; their wrapper
  SavedModels are saved here first) go to the worker while this process
  exports the TFLite pick, so they overlap instead of running one after the
  other. Each export is scored on the whole raw eval split and checked
  against its transformed-input variant on the same rows.

  Args:
    picks: runtime -> its pick (the gated transformed-input variant).
    models: candidate name -> its Keras model.
    raw: the raw rows and the Transform; None: nothing is exported.
    all_eval: the transformed eval split (all of it).
    config: the optimization config.
    failures: a failed export is appended here; its pick is then pushed
      with transformed-feature inputs.
    pool: the worker process, or None to run everything here.

  Returns:
    runtime -> (the export's file (TFLite) or folder (OpenVINO, ONNX), its
    facts), or (None, {'inputs': 'transformed'}) when raw is None or the
    export failed: the caller pushes the transformed-input variant.
  """
  transformed = {'inputs': 'transformed'}
  if raw is None:
    return {runtime: (None, transformed) for runtime in picks}
  quality = config.quality
  tolerance = getattr(config.budget, quality.budget_field)
  settings = dict(num_threads=config.num_threads,
                  latency_runs=config.latency_runs,
                  warmup_runs=config.warmup_runs,
                  calibration_samples=config.calibration_samples)
  results: Dict[str, Tuple[Optional[str], Dict[str, Any]]] = {}

  def failed(variant, error):
    logging.error('ModelOptimizer: the raw-feature export of %s failed; '
                  'pushing its transformed-input model.\n%s', variant.name,
                  ''.join(traceback.format_exception(
                      type(error), error, error.__traceback__)))
    failures.append({
        'candidate': variant.name, 'stage': 'raw-feature export',
        'error': f'{type(error).__name__}: {error}{TRANSFORMED_INSTEAD}',
        # The pick was still pushed (the summary says so, not "skipped").
        'pushed_inputs': 'transformed'})
    results[variant.runtime] = (None, transformed)

  with tempfile.TemporaryDirectory(prefix='leantfx-raw-exports-') as scratch:

    def prepare(variant):
      """(the runtime's part, the reference, the job); None: it failed."""
      raw_export = raw_exports.RAW_EXPORTS[variant.runtime]
      try:
        reference = raw_export.reference(variant, all_eval, quality,
                                         config.num_threads)
        job = raw_export.job(models[variant.name.split('/')[0]], variant,
                             raw, quality, scratch=scratch, **settings)
      except Exception as e:  # pylint: disable=broad-except
        failed(variant, e)
        return None
      return raw_export, reference, job

    def finish(variant, raw_export, reference, job, run):
      try:
        results[variant.runtime] = raw_export.facts(
            job, run(), variant.name, len(raw.eval), reference, quality,
            tolerance)
      except Exception as e:  # pylint: disable=broad-except
        failed(variant, e)

    # The worker's exports are sent first, so that they run while this
    # process exports the others.
    sent = []
    for variant in picks.values():
      if not raw_exports.RAW_EXPORTS[variant.runtime].in_worker:
        continue
      prepared = prepare(variant)
      if prepared is None:
        continue
      future = None
      if pool is not None:
        try:
          future = pool.submit(prepared[0].run, prepared[2])
        except Exception:  # pylint: disable=broad-except
          # A worker that died earlier: the export runs here.
          logging.warning('ModelOptimizer: the worker process is gone; the '
                          'raw-feature export of %s runs here.', variant.name)
      sent.append((variant, prepared, future))
    for variant in picks.values():
      if raw_exports.RAW_EXPORTS[variant.runtime].in_worker:
        continue
      prepared = prepare(variant)
      if prepared is not None:
        finish(variant, *prepared,
               lambda p=prepared: p[0].run(p[2]))
    for variant, prepared, future in sent:
      finish(variant, *prepared,
             future.result if future is not None else
             lambda p=prepared: p[0].run(p[2]))
  for runtime, variant in picks.items():
    path, facts = results[runtime]
    if path is not None:
      logging.info('ModelOptimizer: %s takes raw features: %s %.4f on %d raw '
                   'eval rows, p50 %.3f ms with the Transform', variant.name,
                   quality.name, facts[quality.name], facts['eval_examples'],
                   facts['latency_p50_ms'])
  return results


Pick = Optional[selection.GateDecision]


def give_way(decisions: Sequence[selection.GateDecision], selected: Pick,
             picks: Mapping[str, Pick],
             exports: Mapping[str, Tuple[Optional[str], Dict[str, Any]]],
             models: Mapping[str, Any],
             raw: Optional[raw_features.RawInputs],
             all_eval: measure.LabeledData,
             config: config_lib.OptimizationConfig,
             failures: List[Dict[str, str]],
             pool: Optional[concurrent.futures.Executor] = None
            ) -> Tuple[Pick, Dict[str, Pick],
                       Dict[str, Tuple[Optional[str], Dict[str, Any]]]]:
  """A pick whose raw-feature export failed gives way to the next one.

  Per runtime, while its pick's export failed, the selection policy's choice
  among that runtime's other blessed variants is exported (fold_raw_columns)
  and becomes the pick; the failed pick's entry in ``failures`` then says
  which variant replaced it (``replaced_by``) instead of ``pushed_inputs``.
  A runtime with no blessed variant left keeps its last pick, pushed with
  transformed-feature inputs, as before.

  Args:
    decisions: the gate's decisions (every runtime's).
    selected: the TFLite pick; picks: server runtime -> its pick.
    exports: fold_raw_columns's answer for those picks.
    models, raw, all_eval, config, failures, pool: as fold_raw_columns.

  Returns:
    (the TFLite pick, server runtime -> its pick, runtime -> its export).
  """
  current = {runtimes_lib.TFLITE: selected, **picks}
  exports = dict(exports)
  if raw is None:
    return current.pop(runtimes_lib.TFLITE), current, exports
  tried = {runtime: {pick.variant.name} for runtime, pick in current.items()
           if pick is not None}
  while True:
    again = {}
    for runtime, pick in current.items():
      if pick is None or exports[runtime][0] is not None:
        continue
      left = [d for d in decisions if d.variant.runtime == runtime and
              d.variant.name not in tried[runtime]]
      successor = selection.select(left, config.policy, config.quality)
      if successor is None:
        continue
      tried[runtime].add(successor.variant.name)
      for failure in failures:
        if (failure['candidate'] == pick.variant.name and
            failure.get('pushed_inputs') == 'transformed'):
          del failure['pushed_inputs']
          failure['replaced_by'] = successor.variant.name
          failure['error'] = failure['error'].replace(TRANSFORMED_INSTEAD, '')
      logging.warning('ModelOptimizer: %s gives way to %s, whose raw-feature '
                      'export is tried next.', pick.variant.name,
                      successor.variant.name)
      current[runtime] = successor
      again[runtime] = successor.variant
    if not again:
      break
    exports.update(fold_raw_columns(again, models, raw, all_eval, config,
                                    failures, pool))
  return current.pop(runtimes_lib.TFLITE), current, exports
