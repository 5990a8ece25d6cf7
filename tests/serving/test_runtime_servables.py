"""leantfx serve on the ModelOptimizer's OpenVINO and ONNX pushes.

A small Keras model is exported the way the optimizer exports it
(leantfx/runtimes/openvino.py, onnx.py), pushed with push.push_runtime_model, and
loaded by the real ModelManager loader: predictions match Keras; a newer
version whose model file was truncated after the push is refused (DATA_LOSS)
and the old version keeps serving.
"""
import json
import os

import numpy as np
import pytest
import tf_keras

from leantfx.runtimes import onnx as onnx_runtime
from leantfx.runtimes import openvino as openvino_runtime
from leantfx.runtimes import push
from leantfx.errors import ConfigError
from leantfx.serving import model_config
from leantfx.serving import model_manager
from leantfx.serving import status

pytestmark = pytest.mark.unit


def _model():
  tf_keras.utils.set_random_seed(0)
  x = tf_keras.Input(shape=(4,), name='x')
  y = tf_keras.layers.Dense(3, activation='softmax', name='probabilities')(x)
  return tf_keras.Model({'x': x}, y)


@pytest.mark.parametrize('runtime, export, truncated', [
    ('openvino', openvino_runtime.export_openvino, 'model.bin'),
    ('onnx', onnx_runtime.export_onnx, 'model.onnx'),
])
def test_serves_a_pushed_version_and_refuses_a_truncated_one(
    tmp_path, runtime, export, truncated):
  model = _model()
  exported = str(tmp_path / 'exported')
  export(model, 'float32', output_dir=exported)
  base = str(tmp_path / runtime)

  def push_version(version):
    return push.push_runtime_model(
        runtime, exported, base, 'm', source_model_uri='keras',
        technique_chain=[], mode='float32', metrics={},
        clock=lambda: version)

  push_version(1)
  config = model_config.ModelConfig('m', os.path.join(base, 'm'))
  manager = model_manager.ModelManager(lambda: [config],
                                       max_num_load_retries=0,
                                       enable_warmup=False)
  manager.poll_once()
  rng = np.random.default_rng(0)
  with manager.acquire('m') as servable:
    assert servable.version == 1 and servable.platform == runtime
    signature = servable.signatures['serving_default']
    assert list(signature.inputs) == ['x']
    (output,) = signature.outputs
    # New values at a batch size seen before, a smaller one, a larger one:
    # the OpenVINO servable writes into the tensors a same-shape request
    # left set, and sets new ones when the shape changes.
    for batch in (2, 2, 1, 3, 2):
      features = rng.random((batch, 4), dtype=np.float32)
      expected = model.predict({'x': features}, verbose=0)
      got = servable.run('serving_default', {'x': features}, [output])[output]
      np.testing.assert_allclose(got, expected, atol=1e-5)

  pushed = push_version(2)
  path = os.path.join(pushed.directory, truncated)
  with open(path, 'r+b') as f:
    f.truncate(os.path.getsize(path) // 2)
  manager.poll_once()
  with manager.acquire('m') as servable:
    assert servable.version == 1
  state = manager.version_states('m')[2]
  assert state.error_code == status.Code.DATA_LOSS
  assert 'does not match its manifest' in state.error_message
  manager.stop()


def test_deploy_writes_a_triton_config_that_parses_and_an_ovms_config(
    tmp_path, capfd):
  from leantfx.cli import main  # pylint: disable=g-import-not-at-top
  from leantfx.serving import runtime_deploy  # pylint: disable=g-import-not-at-top
  exported = str(tmp_path / 'exported')
  onnx_runtime.export_onnx(_model(), 'float32', output_dir=exported)
  repository = str(tmp_path / 'onnx')
  push.push_runtime_model('onnx', exported, repository, 'm',
                          source_model_uri='keras', technique_chain=[],
                          mode='float32', metrics={}, clock=lambda: 3)
  assert main.main(['deploy', 'triton', '--model-repository',
                    repository]) == 0
  with open(os.path.join(repository, 'm', 'config.pbtxt')) as f:
    config = runtime_deploy.parse_triton_config(f.read())
  assert (config.name, config.platform) == ('m', 'onnxruntime_onnx')
  assert [(i.name, list(i.dims)) for i in config.input] == [('x', [-1, 4])]
  assert config.output[0].data_type == 11  # TYPE_FP32
  with pytest.raises(Exception, match='does not parse'):
    runtime_deploy.parse_triton_config('name: "m"\nplatfrom: "onnx"\n')
  # The config.pbtxt is not a version: the next push still lists only 3.
  assert push.list_versions(repository, 'm') == [3]

  # OVMS: one entry per model with a model.xml version (files stand in).
  version = tmp_path / 'openvino' / 'm' / '7'
  version.mkdir(parents=True)
  (version / 'model.xml').write_text('<net/>')
  assert main.main(['deploy', 'ovms', '--model-base-path',
                    str(tmp_path / 'openvino'), '--out',
                    str(tmp_path / 'ovms')]) == 0
  with open(tmp_path / 'ovms' / 'config.json') as f:
    ovms = json.load(f)
  assert ovms == {'model_config_list': [{'config': {
      'name': 'm', 'base_path': '/models/m', 'target_device': 'CPU',
      'plugin_config': {'INFERENCE_NUM_THREADS': 1,
                        'PERFORMANCE_HINT': 'LATENCY',
                        'INFERENCE_PRECISION_HINT': 'f32'}}}]}
  assert 'note: OVMS serves' not in capfd.readouterr().out
  # A version that takes vocabulary ids: the command says what OVMS takes.
  (version / 'string_lookups.json').write_text('{"island": ["Biscoe"]}')
  assert main.main(['deploy', 'ovms', '--model-base-path',
                    str(tmp_path / 'openvino'), '--out',
                    str(tmp_path / 'ovms')]) == 0
  out = capfd.readouterr().out
  assert "note: OVMS serves m with ['island'] as int64 vocabulary ids" in out
  assert '"batch_size": "auto"' not in out
  # A push whose dynamic batch answers batch 1 wrongly (the optimizer's
  # dynamic_batch_one_ok): OVMS reshapes it to each request's batch.
  for ok, expected in ((True, None), (False, 'auto')):
    (version / 'manifest.json').write_text(json.dumps({'metrics': {
        'serving_inputs': {'inputs': 'raw', 'dynamic_batch_one_ok': ok,
                           'dynamic_batch_one_max_abs_diff': 0.0 if ok
                           else 0.04}}}))
    assert main.main(['deploy', 'ovms', '--model-base-path',
                      str(tmp_path / 'openvino'), '--out',
                      str(tmp_path / 'ovms')]) == 0
    with open(tmp_path / 'ovms' / 'config.json') as f:
      written = json.load(f)['model_config_list'][0]['config']
    assert written.get('batch_size') == expected
    note = 'note: m has "batch_size": "auto"' in capfd.readouterr().out
    assert note == (not ok)
  # A manifest that does not read: a clear error, exit 2.
  (version / 'manifest.json').write_text('{not json')
  assert main.main(['deploy', 'ovms', '--model-base-path',
                    str(tmp_path / 'openvino'), '--out',
                    str(tmp_path / 'ovms2')]) == 2
  captured = capfd.readouterr()
  assert 'its manifest does not read' in captured.err + captured.out
  assert not (tmp_path / 'ovms2' / 'config.json').exists()
  (version / 'manifest.json').unlink()
  # An empty base is a clear error, exit 2.
  (tmp_path / 'empty').mkdir()
  assert main.main(['deploy', 'ovms', '--model-base-path',
                    str(tmp_path / 'empty'), '--out',
                    str(tmp_path / 'x')]) == 2
  captured = capfd.readouterr()
  assert 'No model under' in captured.err + captured.out


def test_the_ovms_config_is_checked_against_ovms_schema():
  """OVMS_CONFIG_SCHEMA mirrors model_server's src/schema.cpp: a key OVMS
  does not know, a wrong type or a negative batch is refused."""
  from leantfx.serving import runtime_deploy  # pylint: disable=g-import-not-at-top
  good = {'name': 'm', 'base_path': '/models/m', 'target_device': 'CPU',
          'batch_size': 'auto',
          'plugin_config': {'INFERENCE_PRECISION_HINT': 'f32'}}
  runtime_deploy.check_ovms_config({'model_config_list': [{'config': good}]})
  for bad, where in (({**good, 'batch': 1}, 'model_config_list/0/config'),
                     ({**good, 'batch_size': -1},
                      'model_config_list/0/config/batch_size'),
                     ({**good, 'nireq': 'two'},
                      'model_config_list/0/config/nireq'),
                     ({'base_path': '/models/m'},
                      'model_config_list/0/config')):
    with pytest.raises(ConfigError, match=f'invalid at {where}:'):
      runtime_deploy.check_ovms_config(
          {'model_config_list': [{'config': bad}]})
  with pytest.raises(ConfigError, match='invalid at the top level'):
    runtime_deploy.check_ovms_config({'model_config_list': [],
                                      'pipelines': []})


def test_a_raw_feature_onnx_model_gets_string_tensors_in_its_triton_config(
    tmp_path):
  """Raw-feature pushes take categories as strings (Triton's TYPE_STRING)."""
  import onnx  # pylint: disable=g-import-not-at-top
  from onnx import helper  # pylint: disable=g-import-not-at-top
  from leantfx.serving import runtime_deploy  # pylint: disable=g-import-not-at-top
  graph = helper.make_graph(
      [helper.make_node('Identity', ['island'], ['classes'])], 'raw',
      [helper.make_tensor_value_info('island', onnx.TensorProto.STRING,
                                     [None])],
      [helper.make_tensor_value_info('classes', onnx.TensorProto.STRING,
                                     [None])])
  path = str(tmp_path / 'model.onnx')
  onnx.save(helper.make_model(graph), path)
  config = runtime_deploy.parse_triton_config(
      runtime_deploy.triton_config_text('penguins', path))
  assert [(i.name, i.data_type) for i in config.input] == [('island', 13)]
  assert config.output[0].data_type == 13  # TYPE_STRING
