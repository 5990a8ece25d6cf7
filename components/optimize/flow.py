"""The optimizer's flow: build, measure, gate, pick, fold raw columns, push, report.

``optimize`` runs every step (components/optimize/steps/) on inputs the
executor has checked.
"""
import dataclasses
import os
from typing import Any, Dict, List, Optional

from absl import logging
import tensorflow as tf
import tf_keras
from tfx.dsl.io import fileio

from leantfx.components.optimize import config as config_lib
from leantfx.components.optimize.evaluation import measure
from leantfx.runtimes import push
from leantfx.components.optimize.export import raw_features
from leantfx.components.optimize.evaluation import quality as quality_lib
from leantfx.components.optimize.evaluation import report
from leantfx.components.optimize.export import runtime_variants
from leantfx.runtimes import registry as runtimes_lib
from leantfx.components.optimize.evaluation import selection
from leantfx.components.optimize import spec
from leantfx.components.optimize.steps.samples import _batched
from leantfx.components.optimize.steps.samples import first_rows
from leantfx.components.optimize.steps.samples import SCORING_MAX_EXAMPLES
from leantfx.components.optimize.steps.samples import TECHNIQUE_EXAMPLES
from leantfx.components.optimize.steps.samples import technique_sample
from leantfx.components.optimize.steps.scoring import _scores_on
from leantfx.components.optimize.steps.variants import _runtime_pool
from leantfx.components.optimize.steps.variants import _shut_down
from leantfx.components.optimize.steps.variants import build_variants
from leantfx.components.optimize.steps.raw_fold import _raw_exports
from leantfx.components.optimize.steps.push_picks import _feature_names_file
from leantfx.components.optimize.steps.push_picks import _manifest_metrics
from leantfx.components.optimize.steps.push_picks import runtime_push_base

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
             budgets: Optional[Dict[str, Any]] = None) -> Outcome:
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
      (_raw_exports: the Transform folded in, measured on the raw eval
      split; the OpenVINO and ONNX ones in the worker, beside the TFLite
      one); if an export fails, that pick's transformed-input model is
      pushed and the failure is listed. None: the transformed-input models
      (each manifest says which inputs it takes).
    budgets: what the techniques trained for and the samples used
      (Executor.Do: the Trainer's steps, the train split's caching); the
      eval sample, the calibration and technique samples and each
      candidate's time and steps are added, and the report shows it.

  Returns:
    The Outcome; nothing is pushed when no variant is blessed.
  """
  # The gate and the policy see the selection split only; every variant is
  # re-measured on the report split for the report.
  eval_batches = -(-SCORING_MAX_EXAMPLES // config.batch_size)
  collected = measure.LabeledData.from_dataset(eval_ds.take(eval_batches))
  all_eval = first_rows(collected, SCORING_MAX_EXAMPLES)
  budgets = dict(budgets or {})
  budgets['samples'] = {
      'eval_rows_scored': len(all_eval),
      'eval_sampled': (len(collected) > len(all_eval) or
                       int(eval_ds.cardinality()) > eval_batches),
      'scoring_max_examples': SCORING_MAX_EXAMPLES,
      'calibration_samples': config.calibration_samples,
      'technique_examples': TECHNIQUE_EXAMPLES,
      'raw_eval_rows': len(raw.eval) if raw is not None else None,
  }
  timings: Dict[str, Dict[str, Any]] = {}
  budgets['candidates'] = timings
  selection_data, report_data = selection.split_eval(
      all_eval, config.selection_fraction)
  # A search scored on the selection split keeps what happens to pass on
  # those examples, and the gate would then certify it on the same ones: a
  # low-rank search with a 0.005 budget on 174 examples keeps the lowest
  # ranks that lose no example there. The techniques see train rows.
  technique_ds = _batched(technique_sample(train_ds, config.batch_size),
                          config.batch_size)
  quality = config.quality
  baseline = measure.measure_saved_model(
      model_dir, selection_data, name=f'{config_lib.BASELINE}/savedmodel',
      latency_runs=config.latency_runs, warmup_runs=config.warmup_runs,
      keras_model=model, quality=quality)
  failures: List[Dict[str, str]] = []
  built_runtimes, missing = runtimes_lib.resolve(config.runtimes)
  for message in missing:
    logging.warning('ModelOptimizer: %s', message)
    failures.append({'candidate': '(all)', 'stage': 'runtime',
                     'error': message})
  server_runtimes = [r for r in built_runtimes
                     if r in runtime_variants.SERVER_RUNTIMES]
  # One worker process for the server runtimes' exports, for as long as
  # there are any: the candidates' (build_variants) and the picks' raw-feature
  # ones (_raw_exports).
  pool = _runtime_pool() if server_runtimes else None
  try:
    models: Dict[str, Any] = {}
    variants = build_variants(model, train_ds, technique_ds, selection_data,
                              config,
                              os.path.join(report_dir, VARIANTS_DIR), failures,
                              server_runtimes=server_runtimes,
                              baseline=baseline, models=models, pool=pool,
                              timings=timings)
    if not variants and failures:
      raise NoVariantBuilt(
          'ModelOptimizer: every candidate failed, nothing to gate or push '
          '(the SavedModel push is not affected): ' + '; '.join(
              f"{f['candidate']} at {f['stage']}: {f['error']}"
              for f in failures) +
          '. Fix or remove these candidates, or run with --no-optimize.')
    decisions = selection.gate(baseline, variants, config.budget, quality,
                               labels=selection_data.labels)
    # Per runtime, the policy's pick among that runtime's blessed variants;
    # the TFLite pick is the component's blessing and its Format-TFLite
    # output.
    picks = {runtime: selection.select(
        [d for d in decisions if d.variant.runtime == runtime], config.policy,
        quality)
             for runtime in [runtimes_lib.TFLITE] + server_runtimes}
    selected = picks.pop(runtimes_lib.TFLITE)
    held_out = selection.held_out(
        baseline, decisions, report_data,
        lambda v, data: _scores_on(v, data, config), quality)
    pushed = None
    serving_inputs = None
    names_file = _feature_names_file(source_model_uri)
    exports = _raw_exports(
        {runtime: pick.variant for runtime, pick in
         [(runtimes_lib.TFLITE, selected)] + list(picks.items())
         if pick is not None},
        models, raw, all_eval, config, failures, pool)
    if selected is None:
      logging.warning('ModelOptimizer: %s; nothing pushed.',
                      report.NO_VARIANT_BLESSED)
    else:
      v = selected.variant
      chain = [] if v.technique == config_lib.BASELINE else v.technique.split(
          '+')
      metrics = _manifest_metrics(selected, baseline, held_out, quality)
      path, serving_inputs = exports[runtimes_lib.TFLITE]
      metrics['serving_inputs'] = serving_inputs
      pushed = push.push_tflite(
          path or v.path, push_base, model_name,
          source_model_uri=source_model_uri, technique_chain=chain,
          tflite_mode=v.tflite_mode, metrics=metrics,
          feature_names_file=names_file if path else None)
      logging.info('ModelOptimizer: pushed %s as version %d to %s', v.name,
                   pushed.version, pushed.directory)
      if optimized_model_dir:
        out = os.path.join(optimized_model_dir, spec.TFLITE_MODEL_DIR)
        fileio.makedirs(out)
        fileio.copy(pushed.model_path, os.path.join(out, push.MODEL_FILE),
                    overwrite=True)
        fileio.copy(os.path.join(pushed.directory, push.MANIFEST_FILE),
                    os.path.join(out, push.MANIFEST_FILE), overwrite=True)
    runtime_pushes = {}
    runtime_inputs = {}
    for runtime, pick in picks.items():
      if pick is None:
        logging.warning('ModelOptimizer: %s: %s; nothing pushed.', runtime,
                        report.NO_VARIANT_BLESSED)
        continue
      v = pick.variant
      source_dir = (v.path if os.path.isdir(v.path) else
                    os.path.dirname(v.path))
      raw_dir, inputs = exports[runtime]
      metrics = _manifest_metrics(pick, baseline, held_out, quality)
      metrics['serving_inputs'] = runtime_inputs[runtime] = inputs
      runtime_pushes[runtime] = push.push_runtime_model(
          runtime, raw_dir or source_dir,
          runtime_push_base(push_base, runtime), model_name,
          source_model_uri=source_model_uri,
          technique_chain=([] if v.technique == config_lib.BASELINE else
                           v.technique.split('+')),
          mode=v.tflite_mode, metrics=metrics,
          feature_names_file=names_file if raw_dir else None)
      logging.info('ModelOptimizer: pushed %s as version %d to %s', v.name,
                   runtime_pushes[runtime].version,
                   runtime_pushes[runtime].directory)
    report_paths = report.write_report(
        report_dir, baseline, decisions, selected, budget=config.budget,
        policy=config.policy, source_model_uri=source_model_uri,
        pushed_to=pushed.directory if pushed else None, failures=failures,
        runtime_picks={
            runtime: {'selected': pick.variant.name if pick else None,
                      'pushed_to': (runtime_pushes[runtime].directory
                                    if runtime in runtime_pushes else None)}
            for runtime, pick in picks.items()},
        held_out=held_out, quality=quality,
        left_out=(config_lib.REGRESSION_LEFT_OUT
                  if quality.task == quality_lib.REGRESSION else None),
        budgets=budgets)
    return Outcome(baseline=baseline, decisions=decisions, selected=selected,
                   pushed=pushed, report_paths=report_paths, failures=failures,
                   runtime_picks=picks, runtime_pushes=runtime_pushes,
                   held_out=held_out,
                   fastest=selection.fastest(baseline, decisions),
                   budgets=budgets,
                   serving_inputs=serving_inputs,
                   runtime_serving_inputs=runtime_inputs)
  finally:
    _shut_down(pool)
