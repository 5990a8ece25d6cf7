"""Deployment files for the real TensorFlow Serving on the pushed directory.

``leantfx deploy tf-serving --model-base-path <base> --out <dir>`` writes:

* ``models.config``: a ``ModelServerConfig`` with one entry per model under
  ``<base>`` (mounted at ``/models``), latest-version policy;
* ``batching_parameters.txt``: a ``BatchingParameters`` text proto;
* ``monitoring.config``: Prometheus on ``/monitoring/prometheus/metrics``,
  the same path ``leantfx serve`` uses;
* ``docker-run.sh``: one ``docker run`` of ``tensorflow/serving`` with the
  model directory and this directory mounted read-only and ports 8500/8501;
* ``kubernetes.yaml``: a ConfigMap (the three config files), a Deployment
  mounting the pushed directory (hostPath, or a PersistentVolumeClaim) with a
  readiness probe on ``/v1/models/<first model>``, and a Service.

The image is pinned (``tensorflow/serving:2.16.1``, the TF Serving release that
matches this project's tensorflow-serving-api 2.16.1).
"""
import dataclasses
import os
import shlex
import stat
from typing import Dict, List, Optional, Sequence, Tuple

from leantfx.errors import ConfigError
from leantfx.serving import batching_parameters
from leantfx.serving import model_config
from leantfx.serving import servable as servable_lib

TF_SERVING_IMAGE = 'tensorflow/serving:2.16.1'
CONTAINER_MODELS_DIR = '/models'
CONTAINER_CONFIG_DIR = '/config'
GRPC_PORT = 8500
REST_PORT = 8501
MODELS_CONFIG = 'models.config'
BATCHING_PARAMETERS = 'batching_parameters.txt'
MONITORING_CONFIG = 'monitoring.config'
DOCKER_RUN = 'docker-run.sh'
KUBERNETES_YAML = 'kubernetes.yaml'


@dataclasses.dataclass(frozen=True)
class TfServingDeployConfig:
  """What to deploy and how.

  Attributes:
    model_base_path: the pushed ``<base>`` (``<base>/<model>/<version>/``).
    out_dir: where the files go.
    model_names: models to serve; empty = every model directory under base.
    image: the TF Serving image, pinned.
    enable_batching: pass ``--enable_batching`` and the parameters file.
    batching: the batching parameters written.
    file_system_poll_wait_seconds: TF Serving's version polling interval.
    app_name: Kubernetes name/label of the Deployment and Service.
    replicas: Deployment replicas.
    pvc_name: mount this PersistentVolumeClaim instead of a hostPath.
  """
  model_base_path: str
  out_dir: str
  model_names: Tuple[str, ...] = ()
  image: str = TF_SERVING_IMAGE
  enable_batching: bool = True
  batching: batching_parameters.BatchingConfig = (
      batching_parameters.BatchingConfig())
  file_system_poll_wait_seconds: int = 1
  app_name: str = 'leantfx-serving'
  replicas: int = 1
  pvc_name: Optional[str] = None

  def __post_init__(self):
    if not os.path.isdir(self.model_base_path):
      raise ConfigError(
          f'--model-base-path {self.model_base_path} is not a directory.')
    if self.replicas < 1:
      raise ConfigError(f'replicas must be >= 1, got {self.replicas}.')
    if self.file_system_poll_wait_seconds < 1:
      raise ConfigError('file_system_poll_wait_seconds must be >= 1 for TF '
                        'Serving (an integer number of seconds).')


def _models(config: TfServingDeployConfig) -> List[model_config.ModelConfig]:
  found = model_config.models_from_base_path(config.model_base_path)
  if not config.model_names:
    return found
  by_name = {m.name: m for m in found}
  missing = [n for n in config.model_names if n not in by_name]
  if missing:
    raise ConfigError(
        f'No model directory for {missing} under {config.model_base_path}; '
        f'found {sorted(by_name)}.')
  return [by_name[n] for n in config.model_names]


def _is_tflite_only(model: model_config.ModelConfig) -> bool:
  versions = model_config.list_versions(model.base_path)
  if not versions:
    return False
  newest = versions[max(versions)]
  return (os.path.isfile(os.path.join(newest, servable_lib.TFLITE_FILENAME))
          and not any(os.path.isfile(os.path.join(newest, f))
                      for f in servable_lib.SAVED_MODEL_FILENAMES))


def models_config_text(names: Sequence[str]) -> str:
  """A text ``ModelServerConfig`` serving `names` from /models/<name>."""
  entries = []
  for name in names:
    entries.append(
        '  config {\n'
        f'    name: "{name}"\n'
        f'    base_path: "{CONTAINER_MODELS_DIR}/{name}"\n'
        '    model_platform: "tensorflow"\n'
        '    model_version_policy { latest { num_versions: 1 } }\n'
        '  }\n')
  return 'model_config_list {\n' + ''.join(entries) + '}\n'


def monitoring_config_text() -> str:
  """A text ``MonitoringConfig`` enabling Prometheus on leantfx's path."""
  return ('prometheus_config {\n  enable: true\n'
          '  path: "/monitoring/prometheus/metrics"\n}\n')


def server_args(config: TfServingDeployConfig,
                prefer_tflite: bool) -> List[str]:
  """``tensorflow_model_server`` flags shared by docker and Kubernetes."""
  args = [
      f'--port={GRPC_PORT}',
      f'--rest_api_port={REST_PORT}',
      f'--model_config_file={CONTAINER_CONFIG_DIR}/{MODELS_CONFIG}',
      f'--file_system_poll_wait_seconds={config.file_system_poll_wait_seconds}',
      f'--monitoring_config_file={CONTAINER_CONFIG_DIR}/{MONITORING_CONFIG}',
  ]
  if config.enable_batching:
    args += ['--enable_batching=true',
             f'--batching_parameters_file={CONTAINER_CONFIG_DIR}/'
             f'{BATCHING_PARAMETERS}']
  if prefer_tflite:
    # TF Serving serves model.tflite only with this (experimental) flag.
    args.append('--prefer_tflite_model=true')
  return args


def docker_run_script(config: TfServingDeployConfig, args: Sequence[str]
                      ) -> str:
  """A shell script with one ``docker run`` of TF Serving."""
  models = os.path.abspath(config.model_base_path)
  config_dir = os.path.abspath(config.out_dir)
  lines = [
      'docker run --rm --name ' + shlex.quote(config.app_name),
      f'-p {GRPC_PORT}:{GRPC_PORT} -p {REST_PORT}:{REST_PORT}',
      '--mount ' + shlex.quote(
          f'type=bind,source={models},target={CONTAINER_MODELS_DIR},readonly'),
      '--mount ' + shlex.quote(
          f'type=bind,source={config_dir},target={CONTAINER_CONFIG_DIR},'
          'readonly'),
      '--entrypoint tensorflow_model_server',
      shlex.quote(config.image),
  ] + [shlex.quote(a) for a in args]
  return ('#!/bin/sh\n'
          '# Serves the pushed models with the real TensorFlow Serving.\n'
          '# Written by `leantfx deploy tf-serving`; REST on :8501, gRPC on '
          ':8500.\n'
          'set -e\nexec ' + ' \\\n  '.join(lines) + '\n')


def kubernetes_documents(config: TfServingDeployConfig,
                         names: Sequence[str], args: Sequence[str],
                         config_files: Dict[str, str]) -> List[dict]:
  """ConfigMap, Deployment and Service for TF Serving."""
  labels = {'app': config.app_name}
  if config.pvc_name:
    models_volume = {'name': 'models', 'persistentVolumeClaim': {
        'claimName': config.pvc_name, 'readOnly': True}}
  else:
    models_volume = {'name': 'models', 'hostPath': {
        'path': os.path.abspath(config.model_base_path), 'type': 'Directory'}}
  config_map = {
      'apiVersion': 'v1', 'kind': 'ConfigMap',
      'metadata': {'name': f'{config.app_name}-config', 'labels': labels},
      'data': dict(config_files),
  }
  container = {
      'name': 'tensorflow-serving',
      'image': config.image,
      'command': ['tensorflow_model_server'],
      'args': list(args),
      'ports': [{'name': 'grpc', 'containerPort': GRPC_PORT},
                {'name': 'http', 'containerPort': REST_PORT}],
      'volumeMounts': [
          {'name': 'models', 'mountPath': CONTAINER_MODELS_DIR,
           'readOnly': True},
          {'name': 'config', 'mountPath': CONTAINER_CONFIG_DIR,
           'readOnly': True},
      ],
      'readinessProbe': {
          'httpGet': {'path': f'/v1/models/{names[0]}', 'port': REST_PORT},
          'initialDelaySeconds': 5, 'periodSeconds': 5,
      },
      'livenessProbe': {
          'tcpSocket': {'port': GRPC_PORT},
          'initialDelaySeconds': 15, 'periodSeconds': 10,
      },
      'resources': {'requests': {'cpu': '500m', 'memory': '512Mi'},
                    'limits': {'memory': '2Gi'}},
  }
  deployment = {
      'apiVersion': 'apps/v1', 'kind': 'Deployment',
      'metadata': {'name': config.app_name, 'labels': labels},
      'spec': {
          'replicas': config.replicas,
          'selector': {'matchLabels': labels},
          'template': {
              'metadata': {'labels': labels},
              'spec': {
                  'containers': [container],
                  'volumes': [
                      models_volume,
                      {'name': 'config', 'configMap': {
                          'name': f'{config.app_name}-config'}},
                  ],
              },
          },
      },
  }
  service = {
      'apiVersion': 'v1', 'kind': 'Service',
      'metadata': {'name': config.app_name, 'labels': labels},
      'spec': {
          'selector': labels,
          'ports': [
              {'name': 'grpc', 'port': GRPC_PORT, 'targetPort': GRPC_PORT},
              {'name': 'http', 'port': REST_PORT, 'targetPort': REST_PORT},
          ],
      },
  }
  return [config_map, deployment, service]


def _yaml_dump(documents: List[dict]) -> str:
  """Dumps with multi-line strings as ``|`` blocks and no anchors/aliases."""
  import yaml  # pylint: disable=g-import-not-at-top

  class Dumper(yaml.SafeDumper):

    def ignore_aliases(self, data):
      return True

  def text(dumper, value):
    style = '|' if '\n' in value else None
    return dumper.represent_scalar('tag:yaml.org,2002:str', value, style=style)

  Dumper.add_representer(str, text)
  return yaml.dump_all(documents, Dumper=Dumper, sort_keys=False)


def write_tf_serving_deploy(config: TfServingDeployConfig) -> Dict[str, str]:
  """Writes the deployment files.

  Args:
    config: what to deploy.

  Returns:
    file name -> path of each file written.

  Raises:
    ConfigError: no models, or a named model is missing.
  """
  models = _models(config)
  names = [m.name for m in models]
  prefer_tflite = any(_is_tflite_only(m) for m in models)
  os.makedirs(config.out_dir, exist_ok=True)
  args = server_args(config, prefer_tflite)
  config_files = {
      MODELS_CONFIG: models_config_text(names),
      BATCHING_PARAMETERS: batching_parameters.to_text(config.batching),
      MONITORING_CONFIG: monitoring_config_text(),
  }
  contents = dict(config_files)
  contents[DOCKER_RUN] = docker_run_script(config, args)
  contents[KUBERNETES_YAML] = _yaml_dump(
      kubernetes_documents(config, names, args, config_files))
  written = {}
  for name, text in contents.items():
    path = os.path.join(config.out_dir, name)
    with open(path, 'w', encoding='utf-8') as f:
      f.write(text)
    written[name] = path
  mode = os.stat(written[DOCKER_RUN]).st_mode
  os.chmod(written[DOCKER_RUN], mode | stat.S_IXUSR | stat.S_IXGRP |
           stat.S_IXOTH)
  return written
