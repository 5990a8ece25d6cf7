"""`leantfx deploy flink|spark`: the Kubernetes YAML of a Beam cluster, parsed.

Nothing here reaches a cluster: the files are parsed with yaml and checked
for what a run depends on (the leantfx image in the worker pool sidecar, its
command and port, the job server and the address the pipeline options point
at), and the run Job's own command line is parsed by leantfx's parser into
the beam_pipeline_args a run would use.
"""
import yaml
import pytest

from leantfx.cli import build
from leantfx.cli import main
from leantfx.kubeflow import beam_cluster
from leantfx.pipeline import beam_presets
from tests.orchestration.conftest import IMAGE

pytestmark = pytest.mark.unit


def _deploy(tmp_path, engine, *extra):
  out = tmp_path / engine
  code = main.main(['deploy', engine, '--image', IMAGE, '--out', str(out),
                    '--workers', '3', '--sdk-workers', '2', '--verbose',
                    *extra])
  assert code == 0
  cluster = list(yaml.safe_load_all((out / f'{engine}.yaml').read_text()))
  (job,) = yaml.safe_load_all((out / 'run-job.yaml').read_text())
  return {(d['kind'], d['metadata']['name']): d for d in cluster}, job


def _containers(document):
  return {c['name']: c for c in
          document['spec']['template']['spec']['containers']}


@pytest.mark.parametrize('engine, workers_name, master_flag', [
    ('flink', 'flink-taskmanager', '--flink-master=flink-jobmanager:8081'),
    ('spark', 'spark-worker', '--spark-master-url=spark://spark-master:7077'),
])
def test_the_cluster_runs_leantfx_worker_pools_beside_every_worker(
    tmp_path, engine, workers_name, master_flag):
  objects, job = _deploy(tmp_path, engine)
  workers = objects[('Deployment', workers_name)]
  assert workers['spec']['replicas'] == 3
  sidecar = _containers(workers)['beam-worker-pool']
  assert sidecar['image'] == IMAGE
  assert sidecar['command'][:3] == ['leantfx', 'beam', 'worker-pool']
  flags = sidecar['command'][3:]
  assert flags[flags.index('--host') + 1] == '0.0.0.0'
  assert flags[flags.index('--port') + 1] == '50000'
  assert flags[flags.index('--workers') + 1] == '2'
  assert sidecar['ports'] == [{'name': 'worker-pool', 'containerPort': 50000}]
  assert sidecar['readinessProbe']['tcpSocket']['port'] == 50000
  mounts = {m['mountPath'] for m in sidecar['volumeMounts']}
  assert mounts == {beam_cluster.MOUNT_PATH}
  # The engine's own container sits beside it, in the same pod.
  engine_container = [c for n, c in _containers(workers).items()
                      if n != 'beam-worker-pool']
  assert len(engine_container) == 1
  assert engine_container[0]['image'] == beam_cluster.ENGINE_IMAGES[engine]
  # The job server submits to the engine's master and is reachable by name.
  server = _containers(objects[('Deployment', 'beam-job-server')])[
      'job-server']
  assert server['image'] == beam_cluster.JOB_SERVER_IMAGES[engine]
  assert master_flag in server['args'] and '--job-port=8099' in server['args']
  service = objects[('Service', 'beam-job-server')]
  assert {p['name']: p['port'] for p in service['spec']['ports']}['job'] == (
      8099)
  assert service['spec']['selector'] == objects[
      ('Deployment', 'beam-job-server')]['spec']['selector']['matchLabels']
  # One RWX claim, mounted by the sidecars and by the run Job.
  claim = objects[('PersistentVolumeClaim', beam_cluster.DEFAULT_PVC)]
  assert claim['spec']['accessModes'] == ['ReadWriteMany']
  assert job['spec']['template']['spec']['volumes'][0][
      'persistentVolumeClaim']['claimName'] == beam_cluster.DEFAULT_PVC
  assert all(d['metadata']['namespace'] == 'leantfx'
             for k, d in objects.items() if k[0] != 'Namespace')


@pytest.mark.parametrize('engine', beam_cluster.ENGINES)
def test_the_run_job_points_the_pipeline_at_the_job_server_and_sidecars(
    tmp_path, engine):
  objects, job = _deploy(tmp_path, engine)
  (container,) = job['spec']['template']['spec']['containers']
  assert container['image'] == IMAGE
  command = container['command']
  assert command[:2] == ['leantfx', 'run']
  # leantfx's own parser and builder turn the Job's command line into the
  # beam_pipeline_args every Beam component of that run gets.
  args = main.build_parser().parse_args(command[1:])
  beam_args = build.beam_args(args)
  target = beam_presets.portable_target(beam_args)
  service = objects[('Service', 'beam-job-server')]
  ports = {p['name']: p['port'] for p in service['spec']['ports']}
  name = service['metadata']['name']
  assert target.job_endpoint == f'{name}:{ports["job"]}'
  assert f'--artifact_endpoint={name}:{ports["artifact"]}' in beam_args
  sidecar = _containers(objects[('Deployment', {
      'flink': 'flink-taskmanager', 'spark': 'spark-worker'}[engine])])[
          'beam-worker-pool']
  pool_port = sidecar['ports'][0]['containerPort']
  assert str(target.environment) == f'external:localhost:{pool_port}'
  assert args.output.startswith(beam_cluster.MOUNT_PATH)


def test_an_existing_claim_is_mounted_not_created(tmp_path):
  objects, job = _deploy(tmp_path, 'flink', '--pvc', 'team-nfs')
  assert not [k for k in objects if k[0] == 'PersistentVolumeClaim']
  volumes = objects[('Deployment', 'flink-taskmanager')]['spec']['template'][
      'spec']['volumes']
  assert volumes[0]['persistentVolumeClaim']['claimName'] == 'team-nfs'
  assert job['spec']['template']['spec']['volumes'][0][
      'persistentVolumeClaim']['claimName'] == 'team-nfs'


@pytest.mark.parametrize('extra, message', [
    (['--image', 'not an image'], 'is not an image reference'),
    (['--image', IMAGE, '--namespace', 'Bad_Name'], 'not a Kubernetes name'),
])
def test_bad_deploy_options_are_refused(tmp_path, capsys, extra, message):
  code = main.main(['deploy', 'spark', '--out', str(tmp_path / 'o'),
                    '--verbose', *extra])
  assert code == 2
  assert message in capsys.readouterr().err
  assert not (tmp_path / 'o').exists()
