"""deploy tf-serving: every file parses with TF Serving's protos or as YAML."""
import argparse
import os
import stat

import pytest
import yaml
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from leantfx.serving import batching_parameters
from leantfx.cli import serving as cli
from leantfx.serving import deploy

pytestmark = pytest.mark.unit


def _pushed_base(tmp_path):
  base = tmp_path / 'pushed'
  (base / 'penguins' / '1').mkdir(parents=True)
  (base / 'penguins' / '1' / 'saved_model.pb').write_bytes(b'')
  (base / 'digits_lite' / '3').mkdir(parents=True)
  (base / 'digits_lite' / '3' / 'model.tflite').write_bytes(b'')
  (base / 'digits_lite' / '.tmp-4').mkdir()
  return base


def _run(argv):
  parser = argparse.ArgumentParser(prog='leantfx')
  cli.add_commands(parser.add_subparsers())
  args = parser.parse_args(argv)
  return args.func(args)


def test_deploy_files(tmp_path):
  base = _pushed_base(tmp_path)
  out = tmp_path / 'deploy'
  assert _run(['deploy', 'tf-serving', '--model-base-path', str(base),
               '--out', str(out), '--max-batch-size', '16']) == 0

  config = model_server_config_pb2.ModelServerConfig()
  text_format.Parse((out / 'models.config').read_text(), config)
  entries = {c.name: c for c in config.model_config_list.config}
  assert set(entries) == {'penguins', 'digits_lite'}
  assert entries['penguins'].base_path == '/models/penguins'
  assert entries['penguins'].model_platform == 'tensorflow'
  assert entries['penguins'].model_version_policy.latest.num_versions == 1

  params = batching_parameters.batching_parameters_class()()
  text_format.Parse((out / 'batching_parameters.txt').read_text(), params)
  assert params.max_batch_size.value == 16
  assert params.num_batch_threads.value == 2

  script = (out / 'docker-run.sh').read_text()
  assert os.stat(out / 'docker-run.sh').st_mode & stat.S_IXUSR
  assert 'docker run' in script and 'tensorflow/serving:2.16.1' in script
  assert f'source={base},target=/models,readonly' in script
  assert f'source={out},target=/config,readonly' in script
  assert '-p 8500:8500 -p 8501:8501' in script
  assert '--model_config_file=/config/models.config' in script
  assert '--enable_batching=true' in script
  assert '--batching_parameters_file=/config/batching_parameters.txt' in script
  # digits_lite's newest version is TFLite only.
  assert '--prefer_tflite_model=true' in script

  documents = list(yaml.safe_load_all((out / 'kubernetes.yaml').read_text()))
  kinds = {d['kind']: d for d in documents}
  assert set(kinds) == {'ConfigMap', 'Deployment', 'Service'}
  assert kinds['ConfigMap']['data']['models.config'] == \
      (out / 'models.config').read_text()
  pod = kinds['Deployment']['spec']['template']['spec']
  container = pod['containers'][0]
  assert container['image'] == 'tensorflow/serving:2.16.1'
  assert '--model_config_file=/config/models.config' in container['args']
  assert {p['containerPort'] for p in container['ports']} == {8500, 8501}
  mounts = {m['name']: m['mountPath'] for m in container['volumeMounts']}
  assert mounts == {'models': '/models', 'config': '/config'}
  volumes = {v['name']: v for v in pod['volumes']}
  assert volumes['models']['hostPath']['path'] == str(base)
  probe = container['readinessProbe']['httpGet']
  assert probe['path'] in ('/v1/models/penguins', '/v1/models/digits_lite')
  assert probe['port'] == 8501
  assert kinds['Deployment']['spec']['selector']['matchLabels'] == \
      kinds['Service']['spec']['selector']
  assert {p['port'] for p in kinds['Service']['spec']['ports']} == {8500, 8501}


def test_deploy_with_pvc_and_one_model(tmp_path):
  base = _pushed_base(tmp_path)
  written = deploy.write_tf_serving_deploy(deploy.TfServingDeployConfig(
      model_base_path=str(base), out_dir=str(tmp_path / 'o'),
      model_names=('penguins',), pvc_name='models-pvc', enable_batching=False))
  text = open(written['kubernetes.yaml']).read()
  deployment = [d for d in yaml.safe_load_all(text)
                if d['kind'] == 'Deployment'][0]
  pod = deployment['spec']['template']['spec']
  assert pod['volumes'][0]['persistentVolumeClaim']['claimName'] == \
      'models-pvc'
  args = pod['containers'][0]['args']
  assert not any('batching' in a for a in args)
  assert not any('tflite' in a for a in args)
  assert pod['containers'][0]['readinessProbe']['httpGet']['path'] == \
      '/v1/models/penguins'


def test_deploy_unknown_model_fails(tmp_path, capsys):
  base = _pushed_base(tmp_path)
  assert _run(['deploy', 'tf-serving', '--model-base-path', str(base),
               '--out', str(tmp_path / 'o'), '--model-name', 'nope']) == 2
  assert "No model directory for ['nope']" in capsys.readouterr().err
