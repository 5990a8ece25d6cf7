"""The leantfx TFX pipeline: one pure create_pipeline(config).

It imports no runner and reads no environment: the local runner and the
Kubeflow compiler resolve paths and Beam arguments, then call it.

CsvExampleGen (latest span) -> StatisticsGen -> schema (ImportSchemaGen from a
curated schema, or SchemaGen) -> ExampleValidator -> Transform -> Trainer,
and beside them Baselines (majority, linear, strong scikit-learn models on
the same split) -> Resolver (latest blessed model) -> Evaluator (against the
baselines, absolute bounds when given, and change thresholds)
-> InfraValidator (a blessed model served by `leantfx serve`, queried with
eval rows) -> Pusher (versioned SavedModel with its warm-up requests, only
when both blessed it, written atomically and never twice for the same
model), and for a blessed model the ModelOptimizer; for a pushed model the
ModelCardGenerator (its model card, from the run's artifacts).
"""
import hashlib
import inspect
import json
from typing import List, Optional, Tuple

import tensorflow_model_analysis as tfma
from tfx import v1 as tfx

from leantfx import config as config_lib
from leantfx import splits
from leantfx.components.auto_tuner import component as auto_tuner
from leantfx.components.baselines import component as baselines_component
from leantfx.components.infra_validator import component as infra_validator
from leantfx.components.model_card import component as model_card
from leantfx.components.optimize import component as optimize_component
from leantfx.components.relative_gate import component as relative_gate
from leantfx.components.versioned_pusher import component as versioned_pusher
from leantfx.models import auto_tune
from leantfx.models import data_policy as data_policy_module
from leantfx.models import features
from leantfx.models import model as model_module
from leantfx.models import preprocessing as preprocessing_module
from leantfx.models.training import stages as training_stages
from leantfx.pipeline import data_stages
from leantfx.pipeline import regression_metrics
from leantfx.pipeline import retraining
from leantfx.pipeline import slice_metrics

BASELINES_ID = 'Baselines'
PREPROCESSING_FN = 'leantfx.models.preprocessing.preprocessing_fn'
RUN_FN = 'leantfx.models.model.run_fn'
# The Evaluator's module (its model loader: a tree model's TF-DF ops first).
EVALUATION_MODULE = 'leantfx.models.evaluation_model'
ACCURACY_METRIC = 'sparse_categorical_accuracy'
# The regression metrics' TFMA names: TFMA's own MAE/MSE, tf_keras' RMSE
# (TFMA 0.47 has none of its own) and leantfx's R² (pipeline/
# regression_metrics.py).
MAE_METRIC = 'mean_absolute_error'
MSE_METRIC = 'mean_squared_error'
RMSE_METRIC = 'root_mean_squared_error'
R2_METRIC = regression_metrics.R2_NAME
# TFX caches by inputs and parameters, not by the code behind a dotted path:
# a fingerprint of that code in custom_config makes a code change a cache miss.
# The Transform's covers the preprocessing_fn's code only, so a change to the
# model or training code does not re-run it.
_TRANSFORM_CODE_MODULES = (preprocessing_module, data_policy_module, features)
_CODE_MODULES = _TRANSFORM_CODE_MODULES + (
    model_module,) + training_stages.CODE_MODULES


def _code_fingerprint(modules=_CODE_MODULES) -> str:
  digest = hashlib.sha256()
  for module in modules:
    digest.update(inspect.getsource(module).encode('utf-8'))
  return digest.hexdigest()[:16]


def _slicing_specs(evaluation: config_lib.EvaluationConfig
                  ) -> List[tfma.SlicingSpec]:
  """The overall slice, then one spec per --slice-by (a cross: several keys)."""
  return [tfma.SlicingSpec()] + [
      tfma.SlicingSpec(feature_keys=list(keys)) for keys in evaluation.slices]


def _overall(threshold: tfma.MetricThreshold,
             evaluation: config_lib.EvaluationConfig) -> dict:
  """A MetricConfig's thresholds for the whole eval split only.

  TFMA applies a MetricConfig's ``threshold`` to every slice it computes;
  with slices, the overall gate goes to the overall slice (the empty
  SlicingSpec) as a per-slice threshold instead.
  """
  if threshold is None:
    return {}
  if not evaluation.slices:
    return dict(threshold=threshold)
  return dict(per_slice_thresholds=[tfma.PerSliceMetricThreshold(
      slicing_specs=[tfma.SlicingSpec()], threshold=threshold)])


def _slice_gate_metric(regression: bool,
                       evaluation: config_lib.EvaluationConfig
                      ) -> List[tfma.MetricConfig]:
  """The per-slice gate: slice_metrics' accuracy or RMSE on every slice.

  Classification: accuracy >= min_slice_accuracy (when set) and at most
  max_slice_accuracy_drop below the last blessed model's. Regression: RMSE
  at most max_slice_rmse_increase (relative) above the last blessed
  model's. Slices below min_slice_size are not judged
  (pipeline/slice_metrics.py).
  """
  if not evaluation.slices:
    return []
  if regression:
    class_name = slice_metrics.SliceGateRmse.__name__
    threshold = tfma.MetricThreshold(
        change_threshold=tfma.GenericChangeThreshold(
            direction=tfma.MetricDirection.LOWER_IS_BETTER,
            relative={'value': evaluation.max_slice_rmse_increase + 1e-10}))
  else:
    class_name = slice_metrics.SliceGateAccuracy.__name__
    value = None
    if evaluation.min_slice_accuracy is not None:
      value = tfma.GenericValueThreshold(
          lower_bound={'value': evaluation.min_slice_accuracy})
    threshold = tfma.MetricThreshold(
        value_threshold=value,
        # Ignored while no model has been blessed yet.
        change_threshold=tfma.GenericChangeThreshold(
            direction=tfma.MetricDirection.HIGHER_IS_BETTER,
            absolute={'value': -evaluation.max_slice_accuracy_drop - 1e-10}))
  return [tfma.MetricConfig(
      class_name=class_name, module=slice_metrics.__name__,
      config=json.dumps({'min_slice_size': evaluation.min_slice_size}),
      per_slice_thresholds=[tfma.PerSliceMetricThreshold(
          slicing_specs=_slicing_specs(evaluation)[1:],
          threshold=threshold)])]


def _regression_eval_config(
    evaluation: config_lib.EvaluationConfig) -> tfma.EvalConfig:
  """MAE, MSE, RMSE and R² on the eval split (and on every slice).

  Gates: R² >= min_r2 and, when given, RMSE <= max_rmse; against the last
  blessed model, RMSE may rise by at most max_rmse_increase (relative).
  With slices, these gate the whole split and each slice's RMSE may rise
  by at most max_slice_rmse_increase (_slice_gate_metric).
  """
  upper = ({} if evaluation.max_rmse is None else
           dict(upper_bound={'value': evaluation.max_rmse}))
  return tfma.EvalConfig(
      model_specs=[
          tfma.ModelSpec(
              signature_name='predict_examples',
              label_key=features.LABEL_KEY,
              prediction_key='predictions',
              preprocessing_function_names=['transform_features'])
      ],
      slicing_specs=_slicing_specs(evaluation),
      metrics_specs=[
          tfma.MetricsSpec(metrics=[
              tfma.MetricConfig(class_name='ExampleCount'),
              tfma.MetricConfig(class_name='MeanAbsoluteError'),
              tfma.MetricConfig(class_name='MeanSquaredError'),
              tfma.MetricConfig(
                  class_name='RootMeanSquaredError',
                  **_overall(tfma.MetricThreshold(
                      value_threshold=tfma.GenericValueThreshold(**upper)
                      if upper else None,
                      # Ignored while no model has been blessed yet.
                      change_threshold=tfma.GenericChangeThreshold(
                          direction=tfma.MetricDirection.LOWER_IS_BETTER,
                          relative={'value': evaluation.max_rmse_increase +
                                             1e-10})), evaluation)),
              tfma.MetricConfig(
                  class_name=regression_metrics.CoefficientOfDetermination.
                  __name__,
                  module=regression_metrics.__name__,
                  **_overall(tfma.MetricThreshold(
                      value_threshold=tfma.GenericValueThreshold(
                          lower_bound={'value': evaluation.min_r2})),
                             evaluation)),
          ] + _slice_gate_metric(True, evaluation))
      ])


def _eval_config(spec: config_lib.DatasetSpec,
                 evaluation: config_lib.EvaluationConfig) -> tfma.EvalConfig:
  """The Evaluator's metrics and gate for the dataset's task.

  Classification: accuracy, an absolute bound when given and a change
  threshold (the relative gate adds the baselines' bound at run time); a
  two-class label also AUC, precision and recall of the second class (class
  id 1, at a 0.5 probability), AUC gated when min_auc is set.
  Regression: see _regression_eval_config.
  """
  if spec.is_regression:
    return _regression_eval_config(evaluation)
  metrics_specs = []
  if len(spec.classes) == 2:
    auc_threshold = None
    if evaluation.min_auc is not None:
      auc_threshold = tfma.MetricThreshold(
          value_threshold=tfma.GenericValueThreshold(
              lower_bound={'value': evaluation.min_auc}))
    metrics_specs.append(tfma.MetricsSpec(
        metrics=[
            tfma.MetricConfig(class_name='AUC',
                              **_overall(auc_threshold, evaluation)),
            tfma.MetricConfig(class_name='Precision'),
            tfma.MetricConfig(class_name='Recall'),
        ],
        binarize=tfma.BinarizationOptions(class_ids={'values': [1]})))
  # --min-accuracy when given; the relative gate moves this bound to the
  # baselines' at run time (components/relative_gate).
  min_accuracy = None
  if evaluation.min_accuracy is not None:
    min_accuracy = tfma.GenericValueThreshold(
        lower_bound={'value': evaluation.min_accuracy})
  return tfma.EvalConfig(
      model_specs=[
          tfma.ModelSpec(
              signature_name='predict_examples',
              label_key=features.LABEL_KEY,
              preprocessing_function_names=['transform_features'])
      ],
      slicing_specs=_slicing_specs(evaluation),
      metrics_specs=[
          tfma.MetricsSpec(metrics=[
              tfma.MetricConfig(class_name='ExampleCount'),
              tfma.MetricConfig(
                  class_name='SparseCategoricalAccuracy',
                  **_overall(tfma.MetricThreshold(
                      value_threshold=min_accuracy,
                      # Ignored while no model has been blessed yet.
                      change_threshold=tfma.GenericChangeThreshold(
                          direction=tfma.MetricDirection.HIGHER_IS_BETTER,
                          absolute={'value': -evaluation.max_accuracy_drop -
                                             1e-10})), evaluation)),
          ] + _slice_gate_metric(False, evaluation))
      ] + metrics_specs)


def _ingest(config: config_lib.PipelineConfig,
            nodes: List[tfx.types.BaseNode]) -> tfx.types.BaseChannel:
  """Adds ExampleGen (the newest span, split 4:1); returns its examples."""
  # CsvExampleGen, ImportExampleGen or ImageExampleGen by the data format.
  example_gen = data_stages.example_gen(
      config,
      input_base=retraining.data_root(config),
      range_config=retraining.span_range(config),
      span_window=retraining.span_window_size(config),
      output_config=splits.output_config())
  nodes.append(example_gen)
  return example_gen.outputs['examples']


def _validate(config: config_lib.PipelineConfig,
              examples: tfx.types.BaseChannel,
              nodes: List[tfx.types.BaseNode]):
  """Adds statistics, schema, validation and the gate.

  Returns:
    (schema channel, examples to train on: Augment's output, which exists
    only once the ValidationGate passed).
  """
  if config.dataset.schema_file:
    schema_gen = tfx.components.ImportSchemaGen(
        schema_file=config.dataset.schema_file)
    # With the curated schema, categorical INT features (e.g. a digit label)
    # get category statistics, which the L-infinity drift check needs.
    statistics_gen = tfx.components.StatisticsGen(
        examples=examples, schema=schema_gen.outputs['schema'])
  else:
    statistics_gen = tfx.components.StatisticsGen(examples=examples)
    schema_gen = tfx.components.SchemaGen(
        statistics=statistics_gen.outputs['statistics'],
        infer_feature_shape=True)
  example_validator = tfx.components.ExampleValidator(
      statistics=statistics_gen.outputs['statistics'],
      schema=schema_gen.outputs['schema'])
  nodes.extend([statistics_gen, schema_gen, example_validator])
  train_examples = data_stages.gate_and_augment(
      config, examples, statistics_gen.outputs['statistics'],
      schema_gen.outputs['schema'], example_validator.outputs['anomalies'],
      nodes)
  return schema_gen.outputs['schema'], train_examples


def _tuner(config: config_lib.PipelineConfig,
           transform: tfx.components.Transform,
           schema: tfx.types.BaseChannel, custom_config: dict,
           baselines: tfx.types.BaseChannel,
           nodes: List[tfx.types.BaseNode]) -> Optional[tfx.types.BaseChannel]:
  """The Tuner's best hyperparameters for the Trainer, or None (no tuning).

  --tune N: TFX's Tuner. --tune auto: the AutoTuner, which reads the run's
  baselines and searches only when the untuned network trails the strong one
  (models/auto_tune.py).
  """
  if not config.training.tune_auto:
    return training_stages.add_tuner(config, transform, schema,
                                      custom_config, nodes)
  tuner = auto_tuner.AutoTuner(
      tuner_fn=training_stages.TUNER_FN, baselines=baselines,
      baseline_margin=auto_tune.margin_of(config.evaluation.baseline_margin),
      **training_stages.tuner_arguments(config, transform, schema,
                                        custom_config)).with_id('Tuner')
  nodes.append(tuner)
  return tuner.outputs['best_hyperparameters']


def _train(config: config_lib.PipelineConfig, examples: tfx.types.BaseChannel,
           schema: tfx.types.BaseChannel, baselines: tfx.types.BaseChannel,
           nodes: List[tfx.types.BaseNode]
          ) -> Tuple[tfx.types.BaseChannel, tfx.components.Transform]:
  """Adds Transform, the Tuner when tuning, and the Trainer; returns the
  model channel and Transform."""
  custom_config = {
      'dataset': config_lib.to_json_dict(config.dataset),
      'training': config_lib.to_json_dict(config.training),
      'code_fingerprint': _code_fingerprint(),
  }
  custom_config.update(data_stages.training_custom_config(config))
  # The Transform gets what preprocessing_fn reads (the dataset and the
  # schema's domains): a training option (--train-steps, class weights)
  # changed between runs leaves it a cache hit instead of re-analyzing the
  # data.
  transform_config = {
      'dataset': custom_config['dataset'],
      'domains': custom_config['domains'],
      'code_fingerprint': _code_fingerprint(_TRANSFORM_CODE_MODULES),
  }
  # The newest K spans (orchestration.span_window); the newest one if K == 1.
  examples = retraining.span_window_examples(config, examples, nodes)
  transform = tfx.components.Transform(
      examples=examples,
      schema=schema,
      preprocessing_fn=PREPROCESSING_FN,
      custom_config=transform_config,
      # StatisticsGen has the data's statistics and nothing reads
      # Transform's own pre- and post-transform ones: two TFDV passes less.
      disable_statistics=True)
  # With training.tune, a Tuner whose best hyperparameters feed the Trainer.
  hyperparameters = _tuner(config, transform, schema, custom_config,
                           baselines, nodes)
  trainer = training_stages.Trainer(
      run_fn=RUN_FN,
      hyperparameters=hyperparameters,
      examples=transform.outputs['transformed_examples'],
      transform_graph=transform.outputs['transform_graph'],
      schema=schema,
      train_args=retraining.train_args(config),
      base_model=retraining.warm_start_model(config, nodes),
      eval_args=tfx.proto.EvalArgs(num_steps=config.training.eval_steps),
      custom_config=custom_config)
  nodes.extend([transform, trainer])
  return trainer.outputs['model'], transform


def _baselines(config: config_lib.PipelineConfig,
               examples: tfx.types.BaseChannel,
               schema: tfx.types.BaseChannel,
               nodes: List[tfx.types.BaseNode]) -> tfx.types.BaseChannel:
  """Adds Baselines on ExampleGen's split, once the ValidationGate passed."""
  component = baselines_component.Baselines(
      examples=examples, schema=schema, dataset=config.dataset).with_id(
          BASELINES_ID)
  # A task dependency, as Augment's: data the gate stopped is not fit on.
  gate = next((n for n in nodes if n.id == data_stages.GATE_ID), None)
  if gate is not None:
    component.add_upstream_node(gate)
  nodes.append(component)
  return component.outputs['baselines']


def _evaluate_and_push(config: config_lib.PipelineConfig,
                       examples: tfx.types.BaseChannel,
                       model: tfx.types.BaseChannel,
                       baselines: tfx.types.BaseChannel,
                       nodes: List[tfx.types.BaseNode]) -> tfx.types.BaseChannel:
  """Adds the baseline resolver, the Evaluator gate, the InfraValidator and
  the Pusher.

  The Evaluator blesses against the run's baselines as well as its absolute
  and change thresholds (components/relative_gate). The InfraValidator
  serves only a model the Evaluator blessed; the Pusher pushes only a model
  both blessed, as the InfraValidator's copy with TF Serving's warm-up
  requests.

  Returns:
    The Evaluator's blessing channel.
  """
  # A Resolver, or the Pusher's records where no resolver runs (retraining).
  baseline = retraining.latest_blessed_model(
      config, nodes, retraining.BASELINE_RESOLVER_ID)
  evaluator = relative_gate.RelativeGateEvaluator(
      examples=examples,
      model=model,
      baselines=baselines,
      baseline_model=baseline,
      example_splits=['eval'],
      eval_config=_eval_config(config.dataset, config.evaluation),
      baseline_margin=config.evaluation.baseline_margin,
      # Its model loader registers TF-DF's ops for a tree model.
      module_path=EVALUATION_MODULE).with_id('Evaluator')
  blessing = evaluator.outputs['blessing']
  # Both run on every run, as TFX's do, and read the Evaluator's blessing:
  # the InfraValidator serves only a blessed model (an unblessed one gets a
  # not-blessed InfraBlessing at once) and the Pusher pushes only what both
  # blessed. Outside a condition, so that a compiled Kubeflow run resolves
  # the Pusher's inputs whatever the Evaluator decided.
  infra = infra_validator.InfraValidator(
      model=model,
      model_blessing=blessing,
      examples=examples,
      model_name=config.dataset.name,
      serve_args=config.serve_args).with_id('InfraValidator')
  pusher = versioned_pusher.VersionedPusher(
      model=model,
      model_blessing=blessing,
      infra_blessing=infra.outputs['blessing'],
      push_destination=tfx.proto.PushDestination(
          filesystem=tfx.proto.PushDestination.Filesystem(
              base_directory=config.serving_model_dir)),
      custom_config=retraining.pusher_custom_config(config)).with_id('Pusher')
  nodes.extend([evaluator, infra, pusher])
  return blessing


def _optimize(config: config_lib.PipelineConfig, model: tfx.types.BaseChannel,
              transform: tfx.components.Transform,
              blessing: tfx.types.BaseChannel,
              calibration_examples: tfx.types.BaseChannel,
              nodes: List[tfx.types.BaseNode]) -> None:
  """Adds the ModelOptimizer, run only for a model the Evaluator blessed.

  An unblessed model is never optimized or pushed as TFLite: the optimizer's
  own budget is relative to the float model, so the float model must pass the
  Evaluator's gate first. It reads the raw Examples the Transform read too,
  so that the TFLite model it pushes takes the raw features, as the
  SavedModel's serving_default does, and the ExampleGen's Examples, whose
  train rows (not Augment's copies) calibrate the raw int8 exports.
  """
  if config.optimization is None:
    return
  with tfx.dsl.Cond(blessing.future()[0].custom_property('blessed') == 1):
    optimizer = optimize_component.ModelOptimizer(
        model=model,
        transformed_examples=transform.outputs['transformed_examples'],
        transform_graph=transform.outputs['transform_graph'],
        tflite_push_base=config.tflite_push_base,
        model_name=config.dataset.name,
        optimization_config=config.optimization,
        examples=transform.inputs['examples'],
        raw_label=config.dataset.label,
        classes=config.dataset.classes,
        calibration_examples=calibration_examples,
        serve_args=config.serve_args,
        identifiers=config.dataset.identifier_columns)
  nodes.append(optimizer)


def _slice_names(eval_config: tfma.EvalConfig) -> List[str]:
  """The configured slices, named as TFMA names their results' slices."""
  names = []
  for spec in eval_config.slicing_specs:
    keys = list(spec.feature_keys) + [
        f'{k}:{v}' for k, v in sorted(spec.feature_values.items())]
    names.append('_X_'.join(keys) if keys else 'Overall')
  return names


def _model_card(config: config_lib.PipelineConfig,
                nodes: List[tfx.types.BaseNode]) -> None:
  """Adds the ModelCardGenerator, run only for a model the Pusher pushed.

  It reads the run's artifacts: the statistics and the validation gate's
  report, the Trainer's model, the Evaluator's output, the InfraValidator's
  blessing, the push, and the ModelOptimizer's report when it runs (a push
  implies the Evaluator blessed, the optimizer's own condition).
  """
  if not config.model_card_base:
    return
  by_id = {node.id: node for node in nodes}
  pushed = by_id['Pusher'].outputs['pushed_model']
  optimizer = by_id.get(optimize_component.ModelOptimizer.__name__)
  gate = by_id.get(data_stages.GATE_ID)
  dataset = config.dataset
  architecture = config.training.architecture
  with tfx.dsl.Cond(pushed.future()[0].custom_property('pushed') == 1):
    generator = model_card.ModelCardGenerator(
        statistics=by_id['StatisticsGen'].outputs['statistics'],
        validation_report=gate.outputs['report'] if gate else None,
        model=by_id['Trainer'].outputs['model'],
        evaluation=by_id['Evaluator'].outputs['evaluation'],
        model_blessing=by_id['Evaluator'].outputs['blessing'],
        infra_blessing=by_id['InfraValidator'].outputs['blessing'],
        pushed_model=pushed,
        optimized_model=(optimizer.outputs['optimized_model']
                         if optimizer else None),
        optimization_report=optimizer.outputs['report'] if optimizer else None,
        model_name=dataset.name,
        card_base=config.model_card_base,
        dataset={'name': dataset.name, 'label': dataset.label,
                 'task': dataset.task, 'classes': list(dataset.classes),
                 'model_kind': (dataset.model if architecture == 'auto' else
                                architecture)},
        card_config=config.model_card,
        slicing=_slice_names(_eval_config(dataset, config.evaluation)))
  nodes.append(generator)


def create_pipeline(config: config_lib.PipelineConfig) -> tfx.dsl.Pipeline:
  """Builds the pipeline.

  Args:
    config: the whole pipeline configuration, paths already resolved.

  Returns:
    A tfx.dsl.Pipeline ready for LocalDagRunner, BeamDagRunner or the
    Kubeflow V2 compiler.
  """
  nodes: List[tfx.types.BaseNode] = []
  examples = _ingest(config, nodes)
  schema, train_examples = _validate(config, examples, nodes)
  # The baselines first: --tune auto's Tuner reads them.
  baselines = _baselines(config, examples, schema, nodes)
  model, transform = _train(config, train_examples, schema, baselines, nodes)
  blessing = _evaluate_and_push(config, examples, model, baselines, nodes)
  _optimize(config, model, transform, blessing, examples, nodes)
  _model_card(config, nodes)
  metadata_config = None
  if config.metadata_path:
    metadata_config = tfx.orchestration.metadata.sqlite_metadata_connection_config(
        config.metadata_path)
  return tfx.dsl.Pipeline(
      pipeline_name=config.pipeline_name,
      pipeline_root=config.pipeline_root,
      components=nodes,
      enable_cache=config.enable_cache,
      metadata_connection_config=metadata_config,
      beam_pipeline_args=list(config.beam_pipeline_args))
