"""Kubernetes YAML for running leantfx's Beam components on Flink or Spark.

``leantfx deploy flink|spark --image IMAGE --out DIR`` writes two files:

``DIR/<engine>.yaml``
  * the engine: Flink's JobManager (Deployment + Service) and TaskManagers,
    or Spark's standalone master (Deployment + Service) and workers;
  * on every TaskManager / Spark worker, a sidecar container running
    ``leantfx beam worker-pool --host 0.0.0.0 --port 50000`` in the leantfx
    image (kubeflow/Dockerfile). The engine starts each SDK worker through
    it (``--environment external:localhost:50000``: a pod's containers share
    its network), so the pipeline's Python code runs with leantfx, TFX and
    Keras 2 installed;
  * Beam's job server for that engine (Deployment + Service
    ``beam-job-server:8099``), which turns a portable pipeline into an
    engine job: the address ``--job-endpoint`` points at;
  * a ReadWriteMany PersistentVolumeClaim (unless ``--pvc`` names one)
    mounted at /mnt/leantfx in the sidecars and the run Job: the pipeline
    root is written by the SDK workers and read by the run's driver, so
    both must see the same files at the same path.

``DIR/run-job.yaml``
  a Kubernetes Job running ``leantfx run --beam-runner <engine>
  --job-endpoint beam-job-server:8099`` in the leantfx image, output on the
  shared volume.

Nothing here talks to a cluster; tests parse the YAML. The images are
pinned to what Beam 2.62 (constraints.txt) ships job servers for.
"""
import dataclasses
import os
import re
from typing import Dict, List, Optional

from leantfx.errors import ConfigError
from leantfx.pipeline import beam_presets

ENGINES = ('flink', 'spark')
# Beam 2.62's Flink job server for Flink 1.18, and the Flink image it
# submits to (the two must agree on the Flink version).
ENGINE_IMAGES = {'flink': 'flink:1.18.1-scala_2.12-java11',
                 'spark': 'apache/spark:3.5.1'}
JOB_SERVER_IMAGES = {'flink': 'apache/beam_flink1.18_job_server:2.62.0',
                     'spark': 'apache/beam_spark3_job_server:2.62.0'}
JOB_SERVER_NAME = 'beam-job-server'
JOB_PORT = 8099
ARTIFACT_PORT = beam_presets.ARTIFACT_PORT
EXPANSION_PORT = 8097
POOL_PORT = beam_presets.WORKER_POOL_PORT
MOUNT_PATH = '/mnt/leantfx'
DEFAULT_PVC = 'leantfx-shared'
FLINK_REST_PORT = 8081
SPARK_MASTER_PORT = 7077
_NAME_RE = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
  """What ``leantfx deploy flink|spark`` writes.

  Attributes:
    engine: 'flink' or 'spark'.
    image: the leantfx image built from kubeflow/Dockerfile.
    namespace: the Kubernetes namespace of every object.
    workers: TaskManagers / Spark workers (each with a pool sidecar).
    sdk_workers: SDK worker processes per pool (and task slots / cores per
      worker, so the engine runs as many tasks as there are SDK workers).
    pvc_name: an existing ReadWriteMany claim; None creates DEFAULT_PVC.
    engine_image: overrides ENGINE_IMAGES[engine].
    job_server_image: overrides JOB_SERVER_IMAGES[engine].
  """
  engine: str
  image: str
  namespace: str = 'leantfx'
  workers: int = 2
  sdk_workers: int = 2
  pvc_name: Optional[str] = None
  engine_image: Optional[str] = None
  job_server_image: Optional[str] = None

  def __post_init__(self):
    if self.engine not in ENGINES:
      raise ConfigError(f'Unknown engine {self.engine!r}; use one of '
                        f'{ENGINES}.')
    if not self.image or any(c.isspace() for c in self.image):
      raise ConfigError(
          f'--image {self.image!r} is not an image reference: pass the '
          'leantfx image you built and pushed, e.g. '
          'REGISTRY/leantfx:1.0 (docker build -f kubeflow/Dockerfile).')
    for option, name in (('--namespace', self.namespace),
                         ('--pvc', self.pvc_name)):
      if name is not None and not _NAME_RE.match(name):
        raise ConfigError(f'{option} {name!r} is not a Kubernetes name '
                          '(lower-case letters, digits and -).')
    if self.workers < 1 or self.sdk_workers < 1:
      raise ConfigError('--workers and --sdk-workers must be >= 1.')

  @property
  def claim(self) -> str:
    return self.pvc_name or DEFAULT_PVC


def job_endpoint() -> str:
  """The --job-endpoint a pipeline in the cluster's namespace points at."""
  return f'{JOB_SERVER_NAME}:{JOB_PORT}'


def run_options(config: ClusterConfig) -> List[str]:
  """``leantfx run`` with the options that point it at this cluster."""
  return ['leantfx', 'run', '--beam-runner', config.engine, '--job-endpoint',
          job_endpoint(), '--environment', beam_presets.CLUSTER_ENVIRONMENT,
          '--beam-workers', str(config.sdk_workers)]


def _meta(config: ClusterConfig, name: str) -> Dict:
  return {'name': name, 'namespace': config.namespace,
          'labels': {'app.kubernetes.io/part-of': 'leantfx-beam',
                     'app.kubernetes.io/name': name}}


def _deployment(config: ClusterConfig, name: str, replicas: int,
                containers: List[Dict], volumes: List[Dict] = ()) -> Dict:
  spec = {'containers': containers}
  if volumes:
    spec['volumes'] = list(volumes)
  return {
      'apiVersion': 'apps/v1', 'kind': 'Deployment',
      'metadata': _meta(config, name),
      'spec': {'replicas': replicas,
               'selector': {'matchLabels': {'app.kubernetes.io/name': name}},
               'template': {'metadata': {'labels': {
                   'app.kubernetes.io/part-of': 'leantfx-beam',
                   'app.kubernetes.io/name': name}},
                            'spec': spec}}}


def _service(config: ClusterConfig, name: str, ports: Dict[str, int]) -> Dict:
  return {
      'apiVersion': 'v1', 'kind': 'Service', 'metadata': _meta(config, name),
      'spec': {'selector': {'app.kubernetes.io/name': name},
               'ports': [{'name': n, 'port': p, 'targetPort': p}
                         for n, p in ports.items()]}}


def _shared_volume(config: ClusterConfig) -> Dict:
  return {'name': 'leantfx-shared',
          'persistentVolumeClaim': {'claimName': config.claim}}


_SHARED_MOUNT = {'name': 'leantfx-shared', 'mountPath': MOUNT_PATH}


def worker_pool_container(config: ClusterConfig) -> Dict:
  """The sidecar: leantfx's SDK worker pool, beside a TaskManager/worker."""
  return {
      'name': 'beam-worker-pool',
      'image': config.image,
      'command': ['leantfx', 'beam', 'worker-pool', '--host', '0.0.0.0',
                  '--port', str(POOL_PORT), '--workers',
                  str(config.sdk_workers), '--verbose'],
      'ports': [{'name': 'worker-pool', 'containerPort': POOL_PORT}],
      'readinessProbe': {'tcpSocket': {'port': POOL_PORT},
                         'periodSeconds': 5},
      'env': [{'name': 'TF_CPP_MIN_LOG_LEVEL', 'value': '2'}],
      'volumeMounts': [dict(_SHARED_MOUNT)],
  }


def _job_server(config: ClusterConfig, master_flag: str) -> List[Dict]:
  image = config.job_server_image or JOB_SERVER_IMAGES[config.engine]
  container = {
      'name': 'job-server', 'image': image,
      'args': [master_flag, '--job-host=0.0.0.0', f'--job-port={JOB_PORT}',
               f'--artifact-port={ARTIFACT_PORT}',
               f'--expansion-port={EXPANSION_PORT}'],
      'ports': [{'name': 'job', 'containerPort': JOB_PORT},
                {'name': 'artifact', 'containerPort': ARTIFACT_PORT}],
      'readinessProbe': {'tcpSocket': {'port': JOB_PORT}, 'periodSeconds': 5},
  }
  return [_deployment(config, JOB_SERVER_NAME, 1, [container]),
          _service(config, JOB_SERVER_NAME,
                   {'job': JOB_PORT, 'artifact': ARTIFACT_PORT})]


def _flink(config: ClusterConfig) -> List[Dict]:
  image = config.engine_image or ENGINE_IMAGES['flink']
  properties = '\n'.join([
      'jobmanager.rpc.address: flink-jobmanager',
      f'taskmanager.numberOfTaskSlots: {config.sdk_workers}',
      f'parallelism.default: {config.workers * config.sdk_workers}',
  ])
  env = [{'name': 'FLINK_PROPERTIES', 'value': properties}]
  jobmanager = {'name': 'jobmanager', 'image': image, 'args': ['jobmanager'],
                'env': env,
                'ports': [{'name': 'rpc', 'containerPort': 6123},
                          {'name': 'blob', 'containerPort': 6124},
                          {'name': 'rest', 'containerPort': FLINK_REST_PORT}]}
  taskmanager = {'name': 'taskmanager', 'image': image,
                 'args': ['taskmanager'], 'env': env}
  return [
      _deployment(config, 'flink-jobmanager', 1, [jobmanager]),
      _service(config, 'flink-jobmanager',
               {'rpc': 6123, 'blob': 6124, 'rest': FLINK_REST_PORT}),
      _deployment(config, 'flink-taskmanager', config.workers,
                  [taskmanager, worker_pool_container(config)],
                  [_shared_volume(config)]),
      *_job_server(config,
                   f'--flink-master=flink-jobmanager:{FLINK_REST_PORT}'),
  ]


def _spark(config: ClusterConfig) -> List[Dict]:
  image = config.engine_image or ENGINE_IMAGES['spark']
  master_url = f'spark://spark-master:{SPARK_MASTER_PORT}'
  master = {'name': 'master', 'image': image,
            'command': ['/opt/spark/bin/spark-class',
                        'org.apache.spark.deploy.master.Master', '--host',
                        '0.0.0.0', '--port', str(SPARK_MASTER_PORT),
                        '--webui-port', '8080'],
            'ports': [{'name': 'master', 'containerPort': SPARK_MASTER_PORT},
                      {'name': 'ui', 'containerPort': 8080}]}
  worker = {'name': 'worker', 'image': image,
            'command': ['/opt/spark/bin/spark-class',
                        'org.apache.spark.deploy.worker.Worker', master_url,
                        '--cores', str(config.sdk_workers)]}
  return [
      _deployment(config, 'spark-master', 1, [master]),
      _service(config, 'spark-master',
               {'master': SPARK_MASTER_PORT, 'ui': 8080}),
      _deployment(config, 'spark-worker', config.workers,
                  [worker, worker_pool_container(config)],
                  [_shared_volume(config)]),
      *_job_server(config, f'--spark-master-url={master_url}'),
  ]


def cluster_documents(config: ClusterConfig) -> List[Dict]:
  """The objects of DIR/<engine>.yaml."""
  documents = [{'apiVersion': 'v1', 'kind': 'Namespace',
                'metadata': {'name': config.namespace}}]
  if config.pvc_name is None:
    documents.append({
        'apiVersion': 'v1', 'kind': 'PersistentVolumeClaim',
        'metadata': _meta(config, DEFAULT_PVC),
        # Several pods on several nodes write the pipeline root: an RWX
        # class (NFS, Filestore, EFS, CephFS) is needed.
        'spec': {'accessModes': ['ReadWriteMany'],
                 'resources': {'requests': {'storage': '20Gi'}}}})
  documents += _flink(config) if config.engine == 'flink' else _spark(config)
  return documents


def run_job_document(config: ClusterConfig) -> Dict:
  """DIR/run-job.yaml: one `leantfx run` on the cluster."""
  command = run_options(config) + [
      '--dataset', 'penguins', '--output', f'{MOUNT_PATH}/output']
  return {
      'apiVersion': 'batch/v1', 'kind': 'Job',
      'metadata': _meta(config, 'leantfx-run'),
      'spec': {'backoffLimit': 0, 'template': {'spec': {
          'restartPolicy': 'Never',
          'containers': [{'name': 'leantfx', 'image': config.image,
                          'command': command,
                          'env': [{'name': 'TF_CPP_MIN_LOG_LEVEL',
                                   'value': '2'}],
                          'volumeMounts': [dict(_SHARED_MOUNT)]}],
          'volumes': [_shared_volume(config)]}}}}


def _dump(documents: List[Dict]) -> str:
  import yaml  # pylint: disable=g-import-not-at-top  # Lazy: only here.

  class Dumper(yaml.SafeDumper):
    """Multi-line strings (FLINK_PROPERTIES) as literal blocks."""

  def text(dumper, value):
    style = '|' if '\n' in value else None
    return dumper.represent_scalar('tag:yaml.org,2002:str', value, style=style)

  Dumper.add_representer(str, text)
  return yaml.dump_all(documents, Dumper=Dumper, sort_keys=False, width=80)


def write_cluster(config: ClusterConfig, out_dir: str) -> List[str]:
  """Writes DIR/<engine>.yaml and DIR/run-job.yaml.

  Returns:
    The two paths, cluster first.

  Raises:
    ConfigError: when out_dir cannot be written.
  """
  try:
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for name, documents in ((f'{config.engine}.yaml',
                             cluster_documents(config)),
                            ('run-job.yaml', [run_job_document(config)])):
      path = os.path.join(out_dir, name)
      with open(path, 'w', encoding='utf-8') as f:
        f.write(_dump(documents))
      paths.append(path)
  except OSError as e:
    raise ConfigError(f'Cannot write the deploy files to {out_dir}: {e}. '
                      'Pass a writable --out folder.') from e
  return paths
