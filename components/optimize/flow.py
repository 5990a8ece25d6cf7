"""The optimizer's flow: the named steps ``optimize`` runs, top to bottom.

  rows        steps/samples.py       eval rows scored, the techniques' sample
  baseline    evaluation/measure.py  the trained SavedModel, measured in TF
  build       steps/variants.py      per candidate: its technique chain
                                     (steps/chains.py), its TFLite variants
                                     (steps/tflite_variants.py), its OpenVINO
                                     and ONNX variants in a worker process
                                     (steps/server_variants.py); then every
                                     variant timed together
                                     (steps/interleaved_timing.py)
  gate        evaluation/selection.py  each variant blessed or refused,
                                     overall and on every slice
  pick        steps/pick.py          per runtime, the policy's choice
  fold        steps/raw_fold.py      each pick exported with the raw columns
                                     folded in; a pick whose export fails
                                     gives way to its runtime's next one
  serve       steps/serve_check.py   each pick served by leantfx serve and
                                     queried; one that fails is not pushed
  push        steps/push_picks.py    each pick pushed, with its manifest
  report      steps/reporting.py     the report

The executor (executor.py) checks the inputs and calls ``optimize``.
"""
import dataclasses
import os
import time
from typing import Any, Dict, List, Optional, Sequence

from absl import logging
import tensorflow as tf
import tf_keras

from leantfx import infra_check
from leantfx.components.optimize import config as config_lib
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.evaluation import selection
from leantfx.components.optimize.export import raw_features
from leantfx.components.optimize.steps import pick as pick_lib
from leantfx.components.optimize.steps import push_picks
from leantfx.components.optimize.steps import raw_fold
from leantfx.components.optimize.steps import reporting
from leantfx.components.optimize.steps import samples
from leantfx.components.optimize.steps import scoring
from leantfx.components.optimize.steps import serve_check
from leantfx.components.optimize.steps import slice_rows
from leantfx.components.optimize.steps import server_variants
from leantfx.components.optimize.steps import variants as variants_lib
from leantfx.runtimes import push

VARIANTS_DIR = 'variants'


@dataclasses.dataclass
class Outcome:
  """What one optimizer run produced.

  Attributes:
    baseline: metrics of the trained model served by TensorFlow.
    decisions: one gate decision per variant.
    selected: the chosen decision, or None ("no variant blessed").
    pushed: where the selected variant was pushed (None if nothing was).
    report_paths: the files report.write_report wrote.
    failures: the candidates (or modes) that raised and were skipped.
    runtime_picks: server runtime -> its chosen decision (None: nothing
      blessed in it), for each server runtime built.
    runtime_pushes: server runtime -> where its pick was pushed.
    held_out: variant name -> its quality (accuracy, or RMSE and MAE) on
      the report split (the baseline included), which gate and policy never
      saw.
    fastest: the blessed variant with the lowest p50 over every runtime,
      with its speed-ups (None when nothing was blessed).
    serving_inputs: what the pushed .tflite takes ({'inputs': 'raw', ...}
      with its scores, or {'inputs': 'transformed'}); None: nothing pushed.
    runtime_serving_inputs: the same for each server runtime's push.
    budgets: the Trainer's steps the techniques were tied to, the samples
      scored and calibrated on, and each candidate's time and steps.
  """
  baseline: measure.VariantMetrics
  decisions: List[selection.GateDecision]
  selected: Optional[selection.GateDecision]
  pushed: Optional[push.PushResult]
  report_paths: Dict[str, Any]
  failures: List[Dict[str, str]] = dataclasses.field(default_factory=list)
  runtime_picks: Dict[str, Optional[selection.GateDecision]] = (
      dataclasses.field(default_factory=dict))
  runtime_pushes: Dict[str, push.PushResult] = dataclasses.field(
      default_factory=dict)
  held_out: Dict[str, selection.HeldOut] = dataclasses.field(
      default_factory=dict)
  serving_inputs: Optional[Dict[str, Any]] = None
  runtime_serving_inputs: Dict[str, Dict[str, Any]] = dataclasses.field(
      default_factory=dict)
  fastest: Optional[selection.Fastest] = None
  budgets: Dict[str, Any] = dataclasses.field(default_factory=dict)


class NoVariantBuilt(RuntimeError):
  """Every candidate raised: nothing could be built, let alone gated."""


def optimize(model: tf_keras.Model,
             model_dir: str,
             source_model_uri: str,
             train_ds: tf.data.Dataset,
             eval_ds: tf.data.Dataset,
             config: config_lib.OptimizationConfig,
             report_dir: str,
             push_base: str,
             model_name: str,
             optimized_model_dir: Optional[str] = None,
             raw: Optional[raw_features.RawInputs] = None,
             budgets: Optional[Dict[str, Any]] = None,
             serve_args: Sequence[str] = (),
             sliced: Optional[slice_rows.SlicedEval] = None) -> Outcome:
  """Builds, measures, gates and selects variants; pushes and reports.

  Args:
    model: the trained Keras model.
    model_dir: its SavedModel directory (the baseline, measured in TF).
    source_model_uri: the Model artifact's uri (recorded in the manifest).
    train_ds: train batches.
    eval_ds: eval batches; split by selection.split_eval into the selection
      split (gate, policy) and the report split. The techniques (their
      eval_ds: low-rank's rank search) get technique_sample's train rows.
    config: the optimization config.
    report_dir: where the report, variants.json and variant files go.
    push_base: push base directory.
    model_name: the model's directory name under push_base.
    optimized_model_dir: if given, the selected model.tflite and its
      manifest are copied into <dir>/Format-TFLite/.
    raw: if given, each runtime's pick is pushed as its raw-feature export
      (raw_fold.fold_raw_columns: the Transform folded in, measured on the
      raw eval split; the OpenVINO and ONNX ones in the worker, beside the
      TFLite one); if an export fails, the runtime's next blessed variant
      is exported in its place (raw_fold.give_way), and only when none is
      left is the transformed-input model pushed; each failure is listed.
      None: the transformed-input models (each manifest says which inputs
      it takes).
    budgets: what the techniques trained for and the samples used
      (Executor.Do: the Trainer's steps, the train split's caching); the
      eval sample, the calibration and technique samples and each
      candidate's time and steps are added, and the report shows it.
    serve_args: the deployment's ``leantfx serve`` options; the picks are
      served with them before their push (steps/serve_check.py).
    sliced: with config.slices, the eval rows with their slices
      (steps/slice_rows.py), scored instead of eval_ds's; the gate then
      bounds each variant's drop on every slice too.

  Returns:
    The Outcome; nothing is pushed when no variant is blessed.
  """
  budgets = dict(budgets or {})
  rows = samples.rows(train_ds, eval_ds, config, raw, budgets, sliced)
  timings: Dict[str, Dict[str, Any]] = {}
  budgets['candidates'] = timings
  quality = config.quality
  baseline = measure.measure_saved_model(
      model_dir, rows.selection, name=f'{config_lib.BASELINE}/savedmodel',
      latency_runs=config.latency_runs, warmup_runs=config.warmup_runs,
      keras_model=model, quality=quality)
  failures: List[Dict[str, str]] = []
  server_runtimes = server_variants.runtimes_to_build(config, failures)
  # One worker process for the server runtimes' exports, for as long as
  # there are any: the candidates' (build_variants) and the picks'
  # raw-feature ones (raw_fold.fold_raw_columns).
  pool = server_variants.runtime_pool() if server_runtimes else None
  try:
    models: Dict[str, Any] = {}
    variants = variants_lib.build_variants(
        model, train_ds, rows.technique_ds, rows.selection, config,
        os.path.join(report_dir, VARIANTS_DIR), failures,
        server_runtimes=server_runtimes, baseline=baseline, models=models,
        pool=pool, timings=timings)
    if not variants and failures:
      raise NoVariantBuilt(
          'ModelOptimizer: every candidate failed, nothing to gate or push '
          '(the SavedModel push is not affected): ' + '; '.join(
              f"{f['candidate']} at {f['stage']}: {f['error']}"
              for f in failures) +
          '. Fix or remove these candidates, or run with --no-optimize.')
    decisions = selection.gate(baseline, variants, config.budget, quality,
                               labels=rows.selection.labels,
                               slices=rows.selection_slices,
                               slice_gate=config.slices)
    selected, picks = pick_lib.pick_per_runtime(decisions, config,
                                                server_runtimes)
    held_out = selection.held_out(
        baseline, decisions, rows.report,
        lambda v, data: scoring.scores_on(v, data, config), quality)
    exports = raw_fold.fold_raw_columns(
        pick_lib.picked_variants(selected, picks), models, raw,
        rows.all_eval, config, failures, pool)
    selected, picks, exports = raw_fold.give_way(
        decisions, selected, picks, exports, models, raw, rows.all_eval,
        config, failures, pool)
    started = time.monotonic()
    served = serve_check.check_picks(
        pick_lib.picked_variants(selected, picks), exports, raw,
        raw.names if raw is not None else {}, source_model_uri, failures,
        infra_check.Settings(serve_args=tuple(serve_args)))
    budgets['serve_check_s'] = round(time.monotonic() - started, 1)
    logging.info('ModelOptimizer: served the picks in leantfx serve in '
                 '%.1f s.', budgets['serve_check_s'])
    target = push_picks.Push(push_base, model_name, source_model_uri,
                             baseline, held_out, quality)
    pushed, serving_inputs = push_picks.push_tflite_pick(
        selected, exports, target, optimized_model_dir, served)
    runtime_pushes, runtime_inputs = push_picks.push_runtime_picks(
        picks, exports, target, served)
    report_paths = reporting.write_report(
        report_dir, baseline, decisions, selected, picks, pushed,
        runtime_pushes, held_out, failures, config, source_model_uri,
        budgets, served)
    # The component's blessing is a pushed TFLite pick: one that failed in
    # leantfx serve blesses nothing (the report keeps the pick and why).
    if pushed is None:
      selected = None
    return Outcome(baseline=baseline, decisions=decisions, selected=selected,
                   pushed=pushed, report_paths=report_paths, failures=failures,
                   runtime_picks=picks, runtime_pushes=runtime_pushes,
                   held_out=held_out,
                   fastest=selection.fastest(baseline, decisions),
                   budgets=budgets,
                   serving_inputs=serving_inputs,
                   runtime_serving_inputs=runtime_inputs)
  finally:
    server_variants.shut_down(pool)
