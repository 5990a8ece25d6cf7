"""One pipeline everywhere: `leantfx run` and `leantfx compile` build the same one.

For a matrix of option sets, the pipeline `run` would execute locally and
the Kubeflow spec `compile` writes from the same options are compared: the
same component ids, the same execution properties and custom config (the
ModelOptimizer's included), apart from paths (local folders vs cluster URIs)
and what is a KFP runtime parameter. The configs come from the one builder
(cli/build.py) through the real parser; the spec is the real
KubeflowV2DagRunner output, parsed back from the file.
"""
import dataclasses
import glob
import json
import os
import shutil

import pytest
import yaml
from google.protobuf import message as proto_message
from google.protobuf import json_format

from leantfx import datasets
from leantfx.cli import build
from leantfx.cli import main
from leantfx.kubeflow import compiler
from leantfx.kubeflow import resolve_span
from leantfx.pipeline import pipeline as pipeline_lib
from leantfx.pipeline import retraining
from tests.orchestration.conftest import IMAGE

pytestmark = pytest.mark.unit

CLUSTER = {'--pipeline-root': 'gs://b/root', '--data-root': 'gs://b/data',
           '--serving-dir': 'gs://b/serving', '--tflite-dir': 'gs://b/tflite'}


def _own_csv(root):
  """A user's CSV data root (penguins rows under another name)."""
  datasets.prepare('penguins', str(root / 'bundled'))
  (source,) = glob.glob(str(root / 'bundled' / 'span-1' / '*.csv'))
  folder = root / 'birds' / 'span-1'
  folder.mkdir(parents=True)
  shutil.copy(source, folder / 'part-0.csv')
  return str(root / 'birds')


def _own_images(root):
  datasets.prepare('digits', str(root / 'glyphs'), 1, 'images')
  return str(root / 'glyphs')


# name -> (options, or a function of tmp_path returning (options, local data))
MATRIX = {
    'default digits': lambda tmp: ([], None),
    'penguins, tuned and optimized differently': lambda tmp: ([
        '--dataset', 'penguins', '--tune', '2', '--precision',
        'mixed_bfloat16', '--accumulation-steps', '2', '--oversample',
        'smote', '--tflite-policy', 'fastest', '--runtimes',
        'tflite,onnx'], None),
    # --tune auto: the AutoTuner reads the Baselines on both runners.
    'penguins, --tune auto': lambda tmp: (['--dataset', 'penguins', '--tune',
                                           'auto'], None),
    "a user's CSV with --label": lambda tmp: (
        ['--label', 'species', '--no-drift-check'], _own_csv(tmp)),
    'an image-folder dataset': lambda tmp: (
        ['--image-shape', '8x8x1', '--augment-copies', '2'],
        _own_images(tmp)),
    # The Trainer's budget: the passes rule's settings travel in the
    # training custom_config, its cap in train_args (a runtime parameter
    # on Kubeflow, compared by its default below); exact steps the same way.
    'a passes budget with its floor and cap': lambda tmp: ([
        '--dataset', 'penguins', '--train-passes', '2.5',
        '--min-train-steps', '300', '--max-train-steps', '4000'], None),
    'exact train steps': lambda tmp: ([
        '--dataset', 'penguins', '--train-steps', '777'], None),
    # A regression: the task travels in the dataset of custom_config, and in the
    # ModelOptimizer's config with its RMSE budget, on both runners.
    # Slices: the Evaluator's slicing specs and per-slice thresholds, and
    # the ModelOptimizer's per-slice gate, compiled as run builds them.
    'penguins sliced by island and island x sex': lambda tmp: ([
        '--dataset', 'penguins', '--slice-by', 'island', '--slice-by',
        'island,sex', '--min-slice-accuracy', '0.6', '--min-slice-size',
        '12'], None),
    'the diabetes regression': lambda tmp: ([
        '--dataset', 'diabetes', '--regression-loss', 'huber', '--min-r2',
        '0.2', '--max-rmse-increase', '0.1', '--tflite-max-rmse-increase',
        '0.08', '--target-cpu', 'arm', '--latency-threads', '2'], None),
}


def _parse(argv):
  return main.build_parser().parse_args(argv)


def _local(tmp_path, opts, data):
  argv = ['run', '--output', str(tmp_path / 'out')] + opts
  if data:
    argv += ['--data-root', data]
  args = _parse(argv)
  return build.build_pipeline_config(
      args, build.LocalTarget(str(tmp_path / 'out'))).config


def _kubeflow(tmp_path, opts, data):
  argv = ['compile', '--target', 'kubeflow', '--image', IMAGE, '--out',
          str(tmp_path / 'p.yaml')] + opts
  for flag, value in CLUSTER.items():
    argv += [flag, value]
  if data:
    argv += ['--sample-data', data]
  args = _parse(argv)
  target = build.KubeflowTarget(
      pipeline_root=CLUSTER['--pipeline-root'],
      data_root=CLUSTER['--data-root'], serving_dir=CLUSTER['--serving-dir'],
      tflite_dir=CLUSTER['--tflite-dir'], scratch=str(tmp_path / 'scratch'))
  config = build.build_pipeline_config(args, target).config
  out = str(tmp_path / 'p.yaml')
  compiler.compile_pipeline(config, IMAGE, out)
  with open(out, encoding='utf-8') as f:
    return config, yaml.safe_load(f)


def _canonical(value, paths):
  """Values as the V2 compiler writes them: JSON, numbers as floats."""
  if isinstance(value, proto_message.Message):
    value = json_format.MessageToDict(value,
                                      preserving_proto_field_name=True)
  if isinstance(value, str):
    for old, new in paths.items():
      value = value.replace(old, new)
    try:
      parsed = json.loads(value)
    except ValueError:
      return value
    return _canonical(parsed, paths) if not isinstance(parsed, str) else (
        parsed)
  if isinstance(value, bool):
    return float(value)
  if isinstance(value, (int, float)):
    return float(value)
  if isinstance(value, dict):
    return {k: _canonical(v, paths) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_canonical(v, paths) for v in value]
  return value


def _paths(tmp_path, local, cluster):
  """Local path -> token and cluster path -> the same token."""
  schemas_dir = os.path.dirname(local.dataset.schema_file or '/none/x')
  mapping = {
      local.serving_model_dir: '<SERVING>',
      cluster.serving_model_dir: '<SERVING>',
      local.tflite_push_base or '<none>': '<TFLITE>',
      cluster.tflite_push_base or '<none>': '<TFLITE>',
      local.pipeline_root: '<ROOT>',
      cluster.pipeline_root: '<ROOT>',
      local.data_root: '<DATA>',
      cluster.data_root: '<DATA>',
      local.model_card_base: '<MODEL_CARDS>',
      cluster.model_card_base: '<MODEL_CARDS>',
  }
  if local.dataset.schema_file:
    mapping[schemas_dir] = '<SCHEMAS>'
    mapping[f'{compiler_image_schemas()}/'
            f'{os.path.basename(schemas_dir)}'] = '<SCHEMAS>'
  return dict(sorted(mapping.items(), key=lambda kv: -len(kv[0])))


def compiler_image_schemas():
  from leantfx.cli import kubeflow as kubeflow_commands  # pylint: disable=g-import-not-at-top
  return f'{kubeflow_commands.IMAGE_SOURCE_DIR}/schemas'


def _compiled_components(spec):
  """Component id -> {parameter: constant}, runtime parameters left out."""
  found = {}
  for name, task in spec['root']['dag']['tasks'].items():
    component_id = compiler._component_id(name)  # pylint: disable=protected-access
    params = {}
    for key, value in task.get('inputs', {}).get('parameters', {}).items():
      if 'runtimeValue' in value:
        params[key] = value['runtimeValue']['constant']
    found.setdefault(component_id, {}).update(params)
  return found


@pytest.mark.parametrize('case', sorted(MATRIX))
def test_run_and_compile_build_the_same_pipeline(tmp_path, case):
  opts, data = MATRIX[case](tmp_path)
  local = _local(tmp_path, opts, data)
  cluster, spec = _kubeflow(tmp_path, opts, data)

  # The configs differ only in runner facts. The rows the pre-flight
  # counted are one: a compiled pipeline reads data the command never saw.
  assert cluster.validation.expected_rows is None
  assert local.validation.expected_rows
  assert dataclasses.replace(local.validation,
                             expected_rows=None) == cluster.validation
  runner_facts = dict(pipeline_root=None, data_root=None,
                      serving_model_dir=None, metadata_path=None,
                      tflite_push_base=None, model_card_base=None,
                      orchestration=None,
                      dataset=dataclasses.replace(local.dataset,
                                                  schema_file=None),
                      validation=None)
  assert (dataclasses.replace(local, **runner_facts) ==
          dataclasses.replace(cluster, **runner_facts))
  assert local.dataset.schema_file == cluster.dataset.schema_file
  assert local.orchestration == dataclasses.replace(
      cluster.orchestration, runtime_parameters=False,
      window_in_example_gen=False, kfp_backend=None)

  nodes = {n.id: n for n in pipeline_lib.create_pipeline(local).components}
  compiled = _compiled_components(spec)
  assert set(_oss_ids(nodes)) == set(compiled), (sorted(nodes),
                                                 sorted(compiled))
  paths = _paths(tmp_path, local, cluster)
  runtime = {'input_base', 'range_config', 'train_args', 'span_window',
             # The pre-flight's row count: local runs only (see above).
             'expected_rows'}
  for node_id, node in nodes.items():
    if type(node).__name__ == 'Resolver':
      continue  # LastBlessedModel on the open-source backend (above).
    for key, value in node.exec_properties.items():
      if key in runtime or value is None:
        continue  # KFP pipeline parameters, set per run.
      if (node_id, key) == ('Pusher', 'custom_config'):
        # A runner fact of the open-source backend: where the Pusher keeps
        # the blessed-model records that stand in for ML Metadata.
        assert _canonical(value, paths) is None
        assert _canonical(compiled[node_id][key], paths) == {
            'blessed_model_records':
                f'<ROOT>/{local.pipeline_name}/Pusher/blessed_models'}
        continue
      # On the open-source backend ExampleGen takes its input config from
      # the ResolveSpan task, which takes the compiled one.
      owner = (resolve_span.TASK_ID
               if key == 'input_config' and key not in compiled[node_id]
               else node_id)
      assert key in compiled[owner], (node_id, key)
      assert (_canonical(value, paths) ==
              _canonical(compiled[owner][key], paths)), (node_id, key)
  # The Trainer's step budget: train_args (exact steps, or the passes
  # rule's cap) is the KFP parameter's default, and the rule's settings
  # are in the Trainer's custom_config on both runners.
  parameters = spec['root']['inputDefinitions']['parameters']
  assert _canonical(parameters['train_args']['defaultValue'], paths) == (
      _canonical(nodes['Trainer'].exec_properties['train_args'], paths)) == {
          'num_steps': float(local.training.train_steps)}
  trainer_config = _canonical(compiled['Trainer']['custom_config'], paths)
  for field in ('train_steps', 'train_passes', 'min_train_steps'):
    assert trainer_config['training'][field] == _canonical(
        getattr(local.training, field), paths), field
  if local.evaluation.slices:
    # Not only equal: the compiled Evaluator and ModelOptimizer do slice.
    eval_config = _canonical(compiled['Evaluator']['eval_config'], paths)
    assert [s.get('feature_keys', []) for s in
            eval_config['slicing_specs']] == [
                []] + [list(k) for k in local.evaluation.slices]
    gated = [m for spec in eval_config['metrics_specs']
             for m in spec['metrics'] if m.get('per_slice_thresholds')]
    assert any(m['class_name'].startswith('SliceGate') for m in gated)
    optimizer = _canonical(compiled['ModelOptimizer']['optimization_config'],
                           paths)
    assert optimizer['slices']['columns'] == [
        list(k) for k in local.evaluation.slices]
  if local.optimization is not None:
    condition = spec['root']['dag']['tasks']['ModelOptimizer'][
        'triggerPolicy']['condition']
    assert "_Evaluator.blessing" in condition and "['blessed'] == 1" in (
        condition), condition
  # The model card runs for a push only, on both runners.
  condition = spec['root']['dag']['tasks']['ModelCardGenerator'][
      'triggerPolicy']['condition']
  assert "_Pusher.pushed_model" in condition and "['pushed'] == 1" in (
      condition), condition


def test_default_digits_compiles_every_component_of_the_local_run(tmp_path):
  local = _local(tmp_path, [], None)
  _, spec = _kubeflow(tmp_path, [], None)
  nodes = {n.id for n in pipeline_lib.create_pipeline(local).components}
  # ExampleGen, statistics, schema, validator, the gate, Augment, Transform,
  # Baselines, Trainer, the baseline resolver, Evaluator, InfraValidator,
  # Pusher, ModelOptimizer, ModelCardGenerator.
  assert len(nodes) == 15 and 'Baselines' in nodes and {'ModelOptimizer', 'InfraValidator',
                               'ModelCardGenerator'} <= nodes, sorted(nodes)
  assert set(_compiled_components(spec)) == set(_oss_ids(nodes))


def _oss_ids(local_ids):
  """The local run's node ids as the open-source backend's spec has them:
  the blessed-model Resolvers are the one LastBlessedModel task, and the
  ResolveSpan task comes before ExampleGen."""
  resolvers = {retraining.BASELINE_RESOLVER_ID,
               retraining.WARM_START_RESOLVER_ID}
  ids = (set(local_ids) - resolvers) | {resolve_span.TASK_ID}
  if resolvers & set(local_ids):
    ids.add(retraining.LAST_BLESSED_MODEL_ID)
  return ids
