"""Distribution: strategies, TF_CONFIG checks, batch scaling, and real runs.

The real runs use tests/training/train_worker.py: a MirroredStrategy over 2
logical CPU devices and a 2-worker MultiWorkerMirroredStrategy cluster on
loopback (models/training/local_cluster.py) run as processes side by side
(bounded by WORKER_TIMEOUT_S) while the single-device reference runs in this
process, all on the same global batch (32), data, seed and 10 optimizer
steps.
"""
import concurrent.futures
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tf_keras

from leantfx.cli import main as cli
from leantfx.errors import ConfigError
from leantfx.models import architectures
from leantfx.models.training import distribution
from leantfx.models.training import local_cluster
from tests.helpers import run_cli
from tests.training import helpers
from tests.training import train_worker

pytestmark = pytest.mark.unit

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
# Three TensorFlow processes on 2 shared cores take about a minute when the
# machine is idle and ~8 under heavy load; the bound only keeps a hung
# cluster from hanging CI.
WORKER_TIMEOUT_S = 900
GLOBAL_BATCH = 32
# float32 all-reduce sums the replicas' gradients in another order than one
# device does; after 10 Adam steps (each moves a weight by ~3e-3) the weights
# agree to ~1e-7 here. 1e-5 is well under 1% of one step.
WEIGHT_ATOL = 1e-5


def _worker_args(out, tag, args):
  return ['--out', out, '--tag', tag, '--global-batch', str(GLOBAL_BATCH),
          '--epochs', '2', '--steps-per-epoch', '5'] + args


def _start(out, tag, args, tf_config=None):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  env.pop('TF_CONFIG', None)
  if tf_config is not None:
    env['TF_CONFIG'] = json.dumps(tf_config)
  log = open(os.path.join(out, f'{tag}.log'), 'w')
  return subprocess.Popen(
      [sys.executable, '-m', 'tests.training.train_worker'] +
      _worker_args(out, tag, args),
      cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  """Runs mirrored and a 2-worker cluster in processes, the reference here."""
  out = str(tmp_path_factory.mktemp('distribution'))
  mirrored = _start(out, 'mirrored', ['--strategy', 'mirrored',
                                      '--logical-cpus', '2'])
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    # The workers run on a private loopback network when the machine allows
    # it (models/training/local_cluster.py), each with its own TF_CONFIG.
    cluster = pool.submit(
        local_cluster.run,
        [sys.executable, '-m', 'tests.training.train_worker'] +
        _worker_args(out, 'worker{index}', ['--strategy', 'multi_worker']),
        workers=2, timeout=WORKER_TIMEOUT_S, log_dir=out, env=env, cwd=REPO)
    try:
      assert train_worker.main(
          _worker_args(out, 'reference', ['--strategy', 'auto'])) == 0
      code = mirrored.wait(timeout=WORKER_TIMEOUT_S)
      assert code == 0, open(os.path.join(out, 'mirrored.log')).read()[-3000:]
      result = cluster.result(timeout=WORKER_TIMEOUT_S + 120)
    finally:
      if mirrored.poll() is None:
        mirrored.kill()
  assert result.ok, (result, [
      open(os.path.join(out, f'worker{i}.log')).read()[-3000:]
      for i in range(2)
  ])
  results = {'private_network': result.private_network}
  for tag in ('mirrored', 'worker0', 'worker1', 'reference'):
    with open(os.path.join(out, f'{tag}.json')) as f:
      record = json.load(f)
    weights = np.load(os.path.join(out, f'{tag}.npz'))
    results[tag] = (record, [weights[k] for k in sorted(
        weights.files, key=lambda k: int(k.split('_')[1]))])
  return results


def _max_difference(a, b):
  return max(float(np.abs(x - y).max()) for x, y in zip(a, b))


def test_mirrored_over_two_cpu_devices_matches_one_device(runs):
  record, weights = runs['mirrored']
  assert record['strategy'] == 'MirroredStrategy x2'
  # The fixed global batch of 32 is split into 2 replicas of 16.
  assert record['batches']['per_replica'] == 16
  assert record['batches']['global_micro_batch'] == GLOBAL_BATCH
  assert record['optimizer_steps'] == 10
  reference = runs['reference'][1]
  assert _max_difference(weights, reference) <= WEIGHT_ATOL


def test_two_workers_agree_exactly_and_match_one_worker(runs):
  chief, chief_weights = runs['worker0']
  other, other_weights = runs['worker1']
  assert chief['strategy'] == 'MultiWorkerMirroredStrategy x2'
  assert chief['is_chief'] and not other['is_chief']
  assert chief['batches']['per_replica'] == 16
  # All-reduce hands both workers the same sums: identical weights.
  for a, b in zip(chief_weights, other_weights):
    np.testing.assert_array_equal(a, b)
  assert _max_difference(chief_weights, runs['reference'][1]) <= WEIGHT_ATOL
  # TensorFlow's gRPC server listens on all interfaces; where the machine
  # allows it the cluster ran in a network namespace with only loopback.
  assert runs['private_network'] == local_cluster.private_network_available()
  # Training moved the weights far more than the tolerance, so agreeing
  # within it is not vacuous: compare with the seed's initial weights.
  tf_keras.utils.set_random_seed(7)
  initial = architectures.build_compiled(
      helpers.TABULAR, helpers.training(global_batch_size=GLOBAL_BATCH),
      {}).get_weights()
  assert runs['reference'][0]['optimizer_steps'] == 10
  assert _max_difference(initial, runs['reference'][1]) > 100 * WEIGHT_ATOL


def test_batch_size_scales_with_replicas():
  training = helpers.training(batch_size=16)
  plan = distribution.plan_batches(training, 4)
  assert (plan.per_replica, plan.global_micro_batch, plan.dataset_batch) == (
      16, 64, 64)
  accumulate = distribution.plan_batches(
      helpers.training(batch_size=16, accumulation_steps=4), 2)
  assert accumulate.dataset_batch == 16 * 2 * 4


def test_global_batch_must_split_over_replicas():
  training = helpers.training(global_batch_size=30)
  assert distribution.plan_batches(training, 2).per_replica == 15
  with pytest.raises(ConfigError, match='does not split evenly over 4'):
    distribution.plan_batches(training, 4)


@pytest.mark.parametrize('text,message', [
    (None, 'not set'),
    ('', 'not set'),
    ('{"cluster": ', 'not valid JSON'),
    ('[1, 2]', 'JSON object'),
    ('{"task": {"type": "worker", "index": 0}}', 'no "cluster"'),
    ('{"cluster": {"worker": ["localhost"]}, "task": {"type": "worker", '
     '"index": 0}}', 'host:port'),
    ('{"cluster": {"worker": ["a:1"], "ps": ["b:2"]}, "task": {"type": '
     '"worker", "index": 0}}', 'parameter servers'),
    ('{"cluster": {"worker": ["a:1", "b:2"]}}', 'no "task"'),
    ('{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", '
     '"index": 2}}', 'out of range'),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", '
     '"index": 0}}', 'not in the cluster'),
])
def test_invalid_tf_config_is_explained(text, message):
  with pytest.raises(ConfigError, match=message) as error:
    distribution.parse_tf_config(text)
  assert 'TF_CONFIG' in str(error.value)


def test_auto_picks_multi_worker_from_a_cluster_tf_config():
  two = json.dumps({'cluster': {'worker': ['a:1', 'b:2']},
                    'task': {'type': 'worker', 'index': 0}})
  assert distribution.resolve_name('auto', {'TF_CONFIG': two}) == (
      'multi_worker')
  assert distribution.resolve_name('auto', {}) == 'auto'
  assert distribution.expected_replicas('multi_worker',
                                        {'TF_CONFIG': two}) == 2


def test_cli_multi_worker_without_tf_config(tmp_path):
  env_backup = os.environ.pop('TF_CONFIG', None)
  try:
    out = str(tmp_path / 'out')
    result = run_cli(['run', '--dataset', 'penguins', '--output', out,
                      '--strategy', 'multi_worker'], timeout=300)
  finally:
    if env_backup is not None:
      os.environ['TF_CONFIG'] = env_backup
  assert result.returncode == 2, result.stdout + result.stderr
  assert 'TF_CONFIG' in result.stderr and 'not set' in result.stderr
  assert 'Traceback' not in result.stderr
  assert not os.path.exists(os.path.join(out, 'tfx'))


@pytest.mark.parametrize('args,tf_config,message', [
    (['--strategy', 'multi_worker'], '{"cluster": {"worker": ',
     'not valid JSON'),
    (['--strategy', 'multi_worker', '--global-batch-size', '33'],
     json.dumps({'cluster': {'worker': ['127.0.0.1:1', '127.0.0.1:2']},
                 'task': {'type': 'worker', 'index': 0}}),
     'does not split evenly over 2 replica'),
    (['--accumulation-steps', '0'], None, 'accumulation_steps must be'),
    (['--tune', '0'], None, 'tuner budget is 0 trials'),
])
def test_cli_rejects_bad_training_options(tmp_path, monkeypatch, capfd, args,
                                          tf_config, message):
  if tf_config is None:
    monkeypatch.delenv('TF_CONFIG', raising=False)
  else:
    monkeypatch.setenv('TF_CONFIG', tf_config)
  out = str(tmp_path / 'out')
  code = cli.main(['run', '--dataset', 'penguins', '--output', out] + args)
  # fd level: leantfx's message goes to the terminal's file descriptor.
  err = capfd.readouterr().err
  assert code == 2, err
  assert message in err
  assert not os.path.exists(os.path.join(out, 'tfx'))
