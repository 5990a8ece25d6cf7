"""ModelOptimizer's executor: validate every input, then run the flow.

``Executor.Do`` only resolves artifacts and properties, checks them
(inputs.py: the model is a loadable Keras SavedModel, the 'train' and 'eval'
splits hold files, the transform graph knows the label and every model input)
and then calls ``flow.optimize``, which builds the variants, measures, gates,
selects, pushes and reports, one step module each (steps/). Then it records
the outcome on the output artifacts. A tree model (TF-DF's ops in
Format-Serving) is not optimized: steps/tree_skip.py writes the reason to
the report and the artifacts, and the executor ends without a failure.

Artifact URIs and the push base may be on an object store (gs://, s3://: the
pipeline root on Kubeflow). The checks read through tfx.dsl.io.fileio, the
examples and transform graph are read by TensorFlow (which reads those
stores), the Keras model is copied to a local scratch folder to be loaded and
measured, and the report is written there and copied to its artifact.
"""
import dataclasses
import json
import os
import tempfile
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

from absl import logging
import tensorflow_transform as tft
from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.utils import io_utils

from leantfx import columns
from leantfx import compute_cost
from leantfx.components.optimize import config as config_lib
from leantfx.runtimes import push
from leantfx.components.optimize.export import raw_features
from leantfx.components.optimize.evaluation import report
from leantfx.components.optimize.evaluation import selection
from leantfx.components.optimize import spec
from leantfx.errors import ConfigError
from leantfx.models import features
from leantfx.models import model_layout
from leantfx.models.model_layout import KERAS_MODEL_DIR
from leantfx.components.optimize.flow import optimize
from leantfx.components.optimize.steps.samples import SCORING_MAX_EXAMPLES
from leantfx.components.optimize.inputs import CACHE_MAX_RECORDS
from leantfx.components.optimize.inputs import keras_model_dir
from leantfx.components.optimize.inputs import load_keras_model
from leantfx.components.optimize.inputs import make_dataset
from leantfx.components.optimize.inputs import model_input_names
from leantfx.components.optimize.inputs import SHUFFLE_BUFFER
from leantfx.components.optimize.inputs import split_files
from leantfx.components.optimize.inputs import transformed_feature_spec
from leantfx.components.optimize.steps import slice_rows
from leantfx.components.optimize.steps import tree_skip

BLESSED_FILE = 'BLESSED'
NOT_BLESSED_FILE = 'NOT_BLESSED'

# JSON list of {'candidate', 'stage', 'error'} on the optimized model.
SKIPPED_CANDIDATES_PROPERTY = 'skipped_candidates'

# JSON {candidate: {'techniques_s', 'tflite_s', 'train_steps'}} on the
# optimized model (the run summary's line).
CANDIDATE_TIMES_PROPERTY = 'candidate_times'

# JSON {variant: [the slices it lost too much on]} on the optimized model,
# set when the gate has slices (the run summary's line).
SLICE_REJECTIONS_PROPERTY = 'slice_rejections'

# JSON of selection.Fastest on the optimized model (the run summary's line).
FASTEST_PROPERTY = 'fastest_variant'

# Why nothing was optimized (a tree model: steps/tree_skip.py), on the
# optimized model and the blessing.
SKIPPED_REASON_PROPERTY = 'skipped_reason'


def _parse_properties(exec_properties: Mapping[str, Any]
                     ) -> Tuple[config_lib.OptimizationConfig, str, str]:
  text = exec_properties.get(spec.OPTIMIZATION_CONFIG_KEY)
  if not text:
    raise ConfigError(f'ModelOptimizer needs the {spec.OPTIMIZATION_CONFIG_KEY!r}'
                      ' execution property (OptimizationConfig JSON).')
  config = config_lib.OptimizationConfig.from_json(text)
  push_base = exec_properties.get(spec.TFLITE_PUSH_BASE_KEY) or ''
  if not push_base:
    raise ConfigError(f'ModelOptimizer needs {spec.TFLITE_PUSH_BASE_KEY!r}: the '
                      'directory TFLite versions are pushed under.')
  model_name = exec_properties.get(spec.MODEL_NAME_KEY) or ''
  if not push._NAME_RE.match(model_name):  # pylint: disable=protected-access
    raise ConfigError(
        f'{spec.MODEL_NAME_KEY} {model_name!r} is not usable as a directory '
        'name: use letters, digits, "_" or "-", starting with a letter.')
  return config, push_base, model_name


def _write_blessing(blessing: types.Artifact,
                    selected: Optional[selection.GateDecision]) -> None:
  fileio.makedirs(blessing.uri)
  marker = BLESSED_FILE if selected else NOT_BLESSED_FILE
  # As TFX's Evaluator writes its BLESSED file (gfile creates nothing for a
  # file opened and closed without a write).
  io_utils.write_string_file(os.path.join(blessing.uri, marker), '')
  blessing.set_int_custom_property(spec.BLESSED_PROPERTY, int(bool(selected)))
  if selected:
    blessing.set_string_custom_property(spec.SELECTED_VARIANT_PROPERTY,
                                        selected.variant.name)
  else:
    blessing.set_string_custom_property('reason', report.NO_VARIANT_BLESSED)


def _serve_args(exec_properties: Mapping[str, Any]) -> Tuple[str, ...]:
  """The deployment's ``leantfx serve`` options, from raw_serving."""
  raw_serving = json.loads(exec_properties.get(spec.RAW_SERVING_KEY) or '{}')
  return tuple(raw_serving.get('serve_args') or ())


def _raw_inputs(input_dict: Mapping[str, List[types.Artifact]],
                exec_properties: Mapping[str, Any], transform_graph_uri: str,
                config: config_lib.OptimizationConfig
               ) -> Optional[raw_features.RawInputs]:
  """The raw rows and Transform for a raw-feature push (None: not asked).

  Raises:
    ConfigError: a malformed raw_serving property, or examples without it.
    InputDataError: the raw examples cannot be read.
  """
  text = exec_properties.get(spec.RAW_SERVING_KEY)
  examples = input_dict.get(spec.EXAMPLES_KEY) or []
  if not text and not examples:
    return None
  try:
    raw_serving = json.loads(text or 'null')
    label, classes = raw_serving['label'], tuple(raw_serving['classes'])
    identifiers = tuple(raw_serving.get('identifiers') or ())
  except (TypeError, KeyError, ValueError) as e:
    raise ConfigError(
        f'ModelOptimizer\'s {spec.RAW_SERVING_KEY!r} must be JSON '
        '{"label": <raw label column>, "classes": [<class names>]} beside '
        f'the {spec.EXAMPLES_KEY!r} input; got {text!r}.') from e
  if not examples:
    raise ConfigError(
        f'ModelOptimizer has {spec.RAW_SERVING_KEY!r} but no '
        f'{spec.EXAMPLES_KEY!r} input: pass the raw Examples the Transform '
        'read.')
  tf_transform_output = tft.TFTransformOutput(transform_graph_uri)
  if label not in tf_transform_output.raw_feature_spec():
    raise ConfigError(
        f'The raw label {label!r} is not a column of the Transform\'s raw '
        f'schema ({sorted(tf_transform_output.raw_feature_spec())}).')

  def files(split, artifacts=examples):
    # Every Examples artifact the Transform read (a window of spans is
    # several).
    return [f for artifact in artifacts
            for f in split_files(artifact, split, 'raw examples')]

  # Calibration rows as they arrived (spec.CALIBRATION_EXAMPLES_KEY), when
  # the pipeline passes them: Augment's copies are not what is served.
  calibration = input_dict.get(spec.CALIBRATION_EXAMPLES_KEY) or examples
  # The CSV ExampleGen records the names as written on its Examples; the
  # Transform may have read Augment's copies, which do not carry them.
  names = {}
  for artifact in list(calibration) + list(examples):
    names.update(columns.recorded_names(artifact))
  return raw_features.RawInputs(
      tf_transform_output=tf_transform_output, label=label, classes=classes,
      names=names, identifiers=identifiers,
      train=raw_features.sample_rows(
          raw_features.read_raw_split(files(spec.TRAIN_SPLIT, calibration),
                                      tf_transform_output, label,
                                      limit=SCORING_MAX_EXAMPLES,
                                      identifiers=identifiers),
          config.calibration_samples),
      eval=raw_features.read_raw_split(
          files(spec.EVAL_SPLIT), tf_transform_output, label,
          limit=SCORING_MAX_EXAMPLES, identifiers=identifiers))


def _sliced_eval(input_dict: Mapping[str, List[types.Artifact]],
                 transform_graph_uri: str, feature_spec: Mapping[str, Any],
                 config: config_lib.OptimizationConfig
                ) -> Optional[slice_rows.SlicedEval]:
  """The eval rows with their slices (None: no slices configured).

  Raises:
    ConfigError: slices configured without the raw Examples input.
    InputDataError: the raw eval rows cannot be read, or lack a slice
      column.
  """
  if not config.slices.columns:
    return None
  examples = input_dict.get(spec.EXAMPLES_KEY) or []
  if not examples:
    raise ConfigError(
        f'ModelOptimizer gates on slices ({config.slices.names}) but has no '
        f'{spec.EXAMPLES_KEY!r} input: pass the raw Examples the Transform '
        'read, which hold the slice columns.')
  files = [f for artifact in examples
           for f in split_files(artifact, spec.EVAL_SPLIT, 'raw examples')]
  return slice_rows.read_sliced_eval(
      files, tft.TFTransformOutput(transform_graph_uri), feature_spec,
      features.LABEL_KEY, config.slices, limit=SCORING_MAX_EXAMPLES)


def _tie_to_trainer(config: config_lib.OptimizationConfig,
                    model_artifact: types.Artifact
                   ) -> Tuple[config_lib.OptimizationConfig, Dict[str, Any]]:
  """The config with every technique's steps within the Trainer's.

  The Trainer records the steps it trained on its Model artifact
  (model_layout.TRAIN_STEPS_PROPERTY); a model without them (trained
  elsewhere) keeps the techniques' own epochs, and the report says so.
  """
  steps = None
  if model_artifact.has_custom_property(model_layout.TRAIN_STEPS_PROPERTY):
    steps = model_artifact.get_int_custom_property(
        model_layout.TRAIN_STEPS_PROPERTY)
  if not steps:
    logging.warning('ModelOptimizer: the model records no Trainer steps; '
                    "the techniques train for their own epochs.")
    return config, {'trainer_steps': None}
  tied = dataclasses.replace(
      config, candidates=config_lib.tie_to_trainer(config.candidates, steps))
  unit = config_lib.technique_step_unit(config.candidates, steps)
  caps = {technique: config_lib.trainer_step_cap(technique, unit)
          for technique in config_lib.TECHNIQUES}
  logging.info('ModelOptimizer: technique steps capped by the Trainer\'s %d '
               '(%dx in all, at least %d each): %s', steps,
               config_lib.OPTIMIZER_STEP_BUDGET,
               config_lib.MIN_TECHNIQUE_STEPS, caps)
  return tied, {'trainer_steps': steps, 'technique_step_caps': caps,
                'step_budget': config_lib.OPTIMIZER_STEP_BUDGET,
                'min_technique_steps': config_lib.MIN_TECHNIQUE_STEPS}


def _skip(why: str, model_artifact: types.Artifact,
          optimized_model: types.Artifact, blessing: types.Artifact,
          report_artifact: types.Artifact, started: float) -> None:
  """Records a skipped optimization: the report, the reason, no blessing."""
  logging.info('ModelOptimizer skipped: %s.', why)
  with tempfile.TemporaryDirectory(prefix='leantfx-optimizer-') as scratch:
    report_dir = report_artifact.uri
    if not push.is_local(report_dir):
      report_dir = os.path.join(scratch, 'report')
    tree_skip.write_report(report_dir, why, model_artifact.uri)
    if report_dir != report_artifact.uri:
      io_utils.copy_dir(report_dir, report_artifact.uri)
  fileio.makedirs(optimized_model.uri)
  _write_blessing(blessing, None)
  blessing.set_string_custom_property(SKIPPED_REASON_PROPERTY, why)
  optimized_model.set_int_custom_property(spec.BLESSED_PROPERTY, 0)
  optimized_model.set_string_custom_property(SKIPPED_REASON_PROPERTY, why)
  compute_cost.record_compute(optimized_model, time.monotonic() - started)


class Executor(base_executor.BaseExecutor):
  """Validates the inputs, then runs ``optimize``."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    """Optimizes the model; see ModelOptimizer for inputs and outputs.

    Raises:
      ConfigError: invalid execution properties.
      InputDataError: the model, examples or transform graph are unusable.
    """
    self._log_startup(input_dict, output_dict, exec_properties)
    started = time.monotonic()
    config, push_base, model_name = _parse_properties(exec_properties)
    model_artifact = artifact_utils.get_single_instance(
        input_dict[spec.MODEL_KEY])
    examples = artifact_utils.get_single_instance(
        input_dict[spec.TRANSFORMED_EXAMPLES_KEY])
    transform_graph = artifact_utils.get_single_instance(
        input_dict[spec.TRANSFORM_GRAPH_KEY])
    optimized_model = artifact_utils.get_single_instance(
        output_dict[spec.OPTIMIZED_MODEL_KEY])
    blessing = artifact_utils.get_single_instance(
        output_dict[spec.BLESSING_KEY])
    report_artifact = artifact_utils.get_single_instance(
        output_dict[spec.REPORT_KEY])

    # A tree model has nothing to optimize: say why, and end (no failure).
    why = tree_skip.reason(os.path.join(model_artifact.uri,
                                        model_layout.SERVING_MODEL_DIR))
    if why:
      _skip(why, model_artifact, optimized_model, blessing, report_artifact,
            started)
      return
    # Every check that needs no TensorFlow work first, then the model.
    model_dir = keras_model_dir(model_artifact.uri)
    train_files = split_files(examples, spec.TRAIN_SPLIT)
    eval_files = split_files(examples, spec.EVAL_SPLIT)
    with tempfile.TemporaryDirectory(prefix='leantfx-optimizer-') as scratch:
      if not push.is_local(model_dir):
        local_model = os.path.join(scratch, KERAS_MODEL_DIR)
        io_utils.copy_dir(model_dir, local_model)
        model_dir = local_model
      model = load_keras_model(model_dir)
      feature_spec = transformed_feature_spec(transform_graph.uri,
                                              model_input_names(model))
      train_ds = make_dataset(train_files, feature_spec, features.LABEL_KEY,
                              config.batch_size, shuffle=True)
      eval_ds = make_dataset(eval_files, feature_spec, features.LABEL_KEY,
                             config.batch_size)
      config, budgets = _tie_to_trainer(config, model_artifact)
      train_batches = int(train_ds.cardinality())
      budgets['train_split'] = {
          'batches': train_batches,
          'cached': train_batches * config.batch_size <= CACHE_MAX_RECORDS,
          'cache_max_records': CACHE_MAX_RECORDS,
          'shuffle_buffer': SHUFFLE_BUFFER}

      report_dir = report_artifact.uri
      if not push.is_local(report_dir):
        report_dir = os.path.join(scratch, 'report')
      fileio.makedirs(optimized_model.uri)
      raw = _raw_inputs(input_dict, exec_properties, transform_graph.uri,
                        config)
      sliced = _sliced_eval(input_dict, transform_graph.uri, feature_spec,
                            config)
      outcome = optimize(model, model_dir, model_artifact.uri, train_ds,
                         eval_ds, config, report_dir, push_base, model_name,
                         optimized_model_dir=optimized_model.uri, raw=raw,
                         budgets=budgets,
                         serve_args=_serve_args(exec_properties),
                         sliced=sliced)
      if report_dir != report_artifact.uri:
        io_utils.copy_dir(report_dir, report_artifact.uri)

    _write_blessing(blessing, outcome.selected)
    # Its techniques train: part of the run's training core-hours.
    compute_cost.record_compute(optimized_model, time.monotonic() - started)
    optimized_model.set_int_custom_property(spec.BLESSED_PROPERTY,
                                            int(bool(outcome.selected)))
    if outcome.failures:
      optimized_model.set_string_custom_property(
          SKIPPED_CANDIDATES_PROPERTY, json.dumps(outcome.failures))
    if outcome.selected:
      optimized_model.set_string_custom_property(
          spec.SELECTED_VARIANT_PROPERTY, outcome.selected.variant.name)
      optimized_model.set_int_custom_property(spec.PUSHED_VERSION_PROPERTY,
                                              outcome.pushed.version)
      optimized_model.set_string_custom_property(
          spec.PUSHED_DESTINATION_PROPERTY, outcome.pushed.directory)
      optimized_model.set_string_custom_property(
          spec.SERVING_INPUTS_PROPERTY, json.dumps(outcome.serving_inputs))
    optimized_model.set_string_custom_property(
        CANDIDATE_TIMES_PROPERTY,
        json.dumps(outcome.budgets.get('candidates') or {}))
    rejections = {d.variant.name: list(d.slice_rejections)
                  for d in outcome.decisions if d.slice_rejections}
    if config.slices.columns:
      optimized_model.set_string_custom_property(
          SLICE_REJECTIONS_PROPERTY, json.dumps(rejections))
    if outcome.fastest is not None:
      optimized_model.set_string_custom_property(
          FASTEST_PROPERTY, json.dumps(outcome.fastest.to_dict()))
    # Each server runtime's pick: '<runtime>_selected_variant' and
    # '<runtime>_pushed_destination' (the run summary prints them).
    for runtime, pushed in outcome.runtime_pushes.items():
      optimized_model.set_string_custom_property(
          f'{runtime}_{spec.SELECTED_VARIANT_PROPERTY}',
          outcome.runtime_picks[runtime].variant.name)
      optimized_model.set_string_custom_property(
          f'{runtime}_{spec.PUSHED_DESTINATION_PROPERTY}', pushed.directory)
      optimized_model.set_string_custom_property(
          f'{runtime}_{spec.SERVING_INPUTS_PROPERTY}',
          json.dumps(outcome.runtime_serving_inputs.get(runtime)))
