"""create_pipeline builds the expected graph from a config (no run)."""
import dataclasses

import pytest

from leantfx import schemas
from leantfx import config as config_lib
from leantfx import datasets
from leantfx.errors import ConfigError
from leantfx.pipeline import pipeline

pytestmark = pytest.mark.unit


def _config(tmp_path, **dataset_changes):
  spec = dataclasses.replace(datasets.BUNDLED['penguins'], **dataset_changes)
  return config_lib.PipelineConfig(
      pipeline_name='leantfx-test',
      pipeline_root=str(tmp_path / 'root'),
      data_root=str(tmp_path / 'data'),
      serving_model_dir=str(tmp_path / 'serving'),
      model_card_base=str(tmp_path / 'model_cards'),
      dataset=spec,
      metadata_path=str(tmp_path / 'm.sqlite'),
      beam_pipeline_args=('--direct_num_workers=2',))


def test_graph_with_curated_schema(tmp_path):
  built = pipeline.create_pipeline(
      _config(tmp_path, schema_file=schemas.bundled_schema('penguins')))
  ids = {c.id for c in built.components}
  assert ids == {
      'CsvExampleGen', 'StatisticsGen', 'ImportSchemaGen', 'ExampleValidator',
      'ValidationGate', 'Augment',
      'Transform', 'Trainer', 'Baselines', 'latest_blessed_model_resolver',
      'Evaluator', 'InfraValidator', 'Pusher', 'ModelCardGenerator'
  }
  assert built.beam_pipeline_args == ['--direct_num_workers=2']
  assert built.enable_cache


def test_graph_infers_schema_without_curated_one(tmp_path):
  built = pipeline.create_pipeline(_config(tmp_path, schema_file=None))
  assert 'SchemaGen' in {c.id for c in built.components}


def test_pusher_is_gated_on_the_evaluator_blessing(tmp_path):
  built = pipeline.create_pipeline(_config(tmp_path))
  pusher = next(c for c in built.components if c.id == 'Pusher')
  evaluator = next(c for c in built.components if c.id == 'Evaluator')
  assert pusher.inputs['model_blessing'].producer_component_id == evaluator.id


def test_the_model_card_is_built_for_a_push_from_the_run_s_artifacts(
    tmp_path):
  built = pipeline.create_pipeline(_config(tmp_path))
  card = next(c for c in built.components if c.id == 'ModelCardGenerator')
  producers = {key: channel.producer_component_id
               for key, channel in card.inputs.items()}
  assert producers == {
      'statistics': 'StatisticsGen', 'validation_report': 'ValidationGate',
      'model': 'Trainer', 'evaluation': 'Evaluator',
      'model_blessing': 'Evaluator', 'infra_blessing': 'InfraValidator',
      'pushed_model': 'Pusher'}
  assert card.exec_properties['card_base'] == str(tmp_path / 'model_cards')
  assert card.exec_properties['slicing'] == '["Overall"]'
  # Without a card folder there is no ModelCardGenerator.
  built = pipeline.create_pipeline(dataclasses.replace(
      _config(tmp_path), model_card_base=None))
  assert 'ModelCardGenerator' not in {c.id for c in built.components}


def test_pusher_pushes_what_the_infra_validator_blessed(tmp_path):
  built = pipeline.create_pipeline(_config(tmp_path))
  by_id = {c.id: c for c in built.components}
  infra, pusher = by_id['InfraValidator'], by_id['Pusher']
  assert (pusher.inputs['infra_blessing'].producer_component_id ==
          'InfraValidator')
  # The Evaluator's verdict and the raw rows ExampleGen wrote.
  assert infra.inputs['model_blessing'].producer_component_id == 'Evaluator'
  assert infra.inputs['examples'].producer_component_id == 'CsvExampleGen'
  assert infra.inputs['model'].producer_component_id == 'Trainer'
  assert infra.exec_properties['model_name'] == 'penguins'


def _window_in_example_gen(config, window):
  return dataclasses.replace(
      config, orchestration=dataclasses.replace(
          config.orchestration, span_window=window,
          window_in_example_gen=True))


def test_window_in_example_gen_replaces_the_span_window_resolver(tmp_path):
  config = _config(tmp_path)
  local = pipeline.create_pipeline(dataclasses.replace(
      config, orchestration=dataclasses.replace(config.orchestration,
                                                span_window=3)))
  assert 'span_window_resolver' in {c.id for c in local.components}
  built = pipeline.create_pipeline(_window_in_example_gen(config, 3))
  ids = {c.id for c in built.components}
  assert 'span_window_resolver' not in ids
  example_gen = next(c for c in built.components if c.id == 'CsvExampleGen')
  assert example_gen.exec_properties['span_window'] == 3
  transform = next(c for c in built.components if c.id == 'Transform')
  # Transform trains on the window through the gate and Augment, as locally.
  assert transform.inputs['examples'].producer_component_id == 'Augment'


def test_window_in_example_gen_needs_csv(tmp_path):
  config = _window_in_example_gen(_config(tmp_path), 2)
  config = dataclasses.replace(config, ingestion=dataclasses.replace(
      config.ingestion, data_format='tfrecord'))
  with pytest.raises(ConfigError, match='reads CSV spans only'):
    pipeline.create_pipeline(config)


def _exec_custom_config(built, component_id):
  import json  # pylint: disable=g-import-not-at-top
  component = next(c for c in built.components if c.id == component_id)
  return json.loads(component.exec_properties['custom_config'])


def test_training_options_leave_the_transform_a_cache_hit(tmp_path):
  """TFX caches on exec properties: Transform's must not hold training's.

  --train-steps (or class weights) changed between two runs used to re-run
  Transform (55 s of the e2e's second penguins run); only what
  preprocessing_fn reads may be there.
  """
  config = _config(tmp_path, schema_file=schemas.bundled_schema('penguins'))
  other = dataclasses.replace(
      config, class_weights='none',
      training=dataclasses.replace(config.training, train_steps=2, epochs=1))
  first, second = (pipeline.create_pipeline(c) for c in (config, other))
  assert (_exec_custom_config(first, 'Transform') ==
          _exec_custom_config(second, 'Transform'))
  assert set(_exec_custom_config(first, 'Transform')) == {
      'dataset', 'domains', 'code_fingerprint'}
  assert (_exec_custom_config(first, 'Trainer') !=
          _exec_custom_config(second, 'Trainer'))


def test_the_optimizer_calibrates_raw_int8_on_the_example_gen_rows(tmp_path):
  """Raw int8 calibration reads the rows as they arrived, not Augment's."""
  from leantfx.components.optimize import config as optimize_config  # pylint: disable=g-import-not-at-top
  config = dataclasses.replace(
      _config(tmp_path, schema_file=schemas.bundled_schema('penguins')),
      optimization=optimize_config.OptimizationConfig(),
      tflite_push_base=str(tmp_path / 'tflite'))
  built = pipeline.create_pipeline(config)
  optimizer = next(c for c in built.components if c.id == 'ModelOptimizer')
  assert (optimizer.inputs['calibration_examples'].producer_component_id ==
          'CsvExampleGen')
  # The examples it scores on stay the ones the Transform read.
  assert optimizer.inputs['examples'].producer_component_id == 'Augment'
  # The model card lists its picks and counts its compute.
  card = next(c for c in built.components if c.id == 'ModelCardGenerator')
  assert card.inputs['optimization_report'].producer_component_id == (
      'ModelOptimizer')
  assert card.inputs['optimized_model'].producer_component_id == (
      'ModelOptimizer')
