"""Fault tolerance (kill and resume, corrupt backups), early stopping, backup
dirs and the run record."""
import glob
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tf_keras

from leantfx.models import architectures
from leantfx.models.training import callbacks as callbacks_lib
from tests.training import helpers

pytestmark = pytest.mark.unit

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
# The bound only keeps a hung worker from hanging CI (see test_distribution).
WORKER_TIMEOUT_S = 900
EPOCHS = 5
KILL_AT_EPOCH = 3  # Epochs 0, 1, 2 are backed up; the kill comes in epoch 3.


def _worker(out, backup_dir, hang_at=None):
  args = [sys.executable, '-m', 'tests.training.train_worker', '--out', out,
          '--backup-dir', backup_dir, '--epochs', str(EPOCHS),
          '--steps-per-epoch', '3']
  if hang_at is not None:
    args += ['--hang-at-epoch', str(hang_at)]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
  env.pop('TF_CONFIG', None)
  log = open(os.path.join(out, 'worker.log'), 'a')
  return subprocess.Popen(args, cwd=REPO, env=env, stdout=log,
                          stderr=subprocess.STDOUT)


def _epochs_begun(out):
  with open(os.path.join(out, 'epochs_begun.txt')) as f:
    return [int(line) for line in f.read().split()]


def test_killed_training_resumes_from_the_last_backed_up_epoch(tmp_path):
  out, backup = str(tmp_path), str(tmp_path / 'backup')
  process = _worker(out, backup, hang_at=KILL_AT_EPOCH)
  deadline = time.monotonic() + WORKER_TIMEOUT_S
  while not os.path.exists(os.path.join(out, 'hanging')):
    assert process.poll() is None, open(os.path.join(out, 'worker.log')).read()
    assert time.monotonic() < deadline, 'the worker never reached epoch 3'
    time.sleep(0.5)
  # Mid-run: epoch 3 has begun, epochs 0-2 are backed up.
  process.send_signal(signal.SIGKILL)
  process.wait(timeout=60)
  assert process.returncode == -signal.SIGKILL
  assert glob.glob(os.path.join(backup, 'chief', 'ckpt-*.index'))
  assert _epochs_begun(out) == [0, 1, 2, 3]

  rerun = _worker(out, backup)
  assert rerun.wait(timeout=WORKER_TIMEOUT_S) == 0, open(
      os.path.join(out, 'worker.log')).read()[-3000:]
  with open(os.path.join(out, 'result.json')) as f:
    record = json.load(f)
  # Resumed after epoch 2 (not from zero) and ran epochs 3 and 4 only.
  assert record['resumed_after_epoch'] == KILL_AT_EPOCH - 1
  assert record['epochs_run'] == [3, 4]
  assert _epochs_begun(out) == [0, 1, 2, 3, 3, 4]
  assert record['backup_fallback'] is None
  # 3 steps per epoch: 9 restored optimizer steps + 6 new ones.
  assert record['optimizer_steps'] == EPOCHS * 3
  # A finished run removes its backup.
  assert not os.path.exists(os.path.join(backup, 'chief'))


def _model():
  tf_keras.utils.set_random_seed(5)
  return architectures.build_compiled(helpers.TABULAR, helpers.training(), {})


class _StopAfter(tf_keras.callbacks.Callback):

  def __init__(self, epoch):
    super().__init__()
    self.epoch = epoch

  def on_epoch_end(self, epoch, logs=None):
    if epoch == self.epoch:
      raise KeyboardInterrupt('simulated crash after a backup')


def test_truncated_backup_falls_back_to_a_fresh_start(tmp_path):
  backup = str(tmp_path / 'backup')
  ds = helpers.tabular_dataset(16)
  training = helpers.training()
  crashed = _model()
  # BackupAndRestore runs before _StopAfter, so epoch 1 is backed up.
  with pytest.raises(KeyboardInterrupt):
    crashed.fit(ds, epochs=4, steps_per_epoch=2, verbose=0,
                callbacks=callbacks_lib.build(training, None, backup) +
                [_StopAfter(1)])
  data_files = glob.glob(os.path.join(backup, 'chief', 'ckpt-*.data-*'))
  assert data_files
  size = os.path.getsize(data_files[0])
  with open(data_files[0], 'r+b') as f:
    f.truncate(size // 2)
  assert callbacks_lib.backup_problem(backup)

  fresh = _model()
  initial = [w.copy() for w in fresh.get_weights()]
  callbacks = callbacks_lib.build(training, None, backup)
  fresh.fit(ds, epochs=4, steps_per_epoch=2, verbose=0, callbacks=callbacks)
  summary = callbacks_lib.summary(callbacks, 4)
  assert summary['resumed_after_epoch'] is None
  assert 'unreadable' in summary['backup_fallback']
  assert summary['epochs_run'] == [0, 1, 2, 3]
  assert int(fresh.optimizer.iterations) == 8
  # The bad backup was set aside, not deleted and not half-restored.
  assert glob.glob(backup + '.corrupt-*')
  reference = _model()
  for a, b in zip(initial, reference.get_weights()):
    np.testing.assert_array_equal(a, b)


def test_an_intact_backup_is_restorable(tmp_path):
  backup = str(tmp_path / 'backup')
  crashed = _model()
  with pytest.raises(KeyboardInterrupt):
    crashed.fit(helpers.tabular_dataset(16), epochs=3, steps_per_epoch=2,
                verbose=0, callbacks=callbacks_lib.build(
                    helpers.training(), None, backup) + [_StopAfter(0)])
  assert callbacks_lib.backup_problem(backup) is None
  assert callbacks_lib.backup_problem(str(tmp_path / 'none')) is None


def test_early_stopping_on_validation_loss_keeps_the_best_weights():
  training = helpers.training(early_stopping_patience=2, learning_rate=0.5)
  model = _model()
  x, y = helpers.tabular_arrays(64)
  # Validation labels the model cannot fit (shuffled): val_loss stops
  # improving after the first epochs while a large learning rate keeps
  # training loss moving.
  vy = np.random.default_rng(1).permutation(y)
  callbacks = callbacks_lib.build(training, None, None)
  history = model.fit(x, y, validation_data=(x, vy), epochs=30, batch_size=16,
                      verbose=0, callbacks=callbacks)
  summary = callbacks_lib.summary(callbacks, 30)
  ran = len(history.history['val_loss'])
  assert ran < 30
  assert summary['early_stopping']['stopped_epoch'] == ran - 1
  best = min(history.history['val_loss'])
  assert summary['early_stopping']['best_val_loss'] == pytest.approx(best)
  # restore_best_weights: the model ends at the best epoch's weights.
  loss = model.evaluate(x, vy, verbose=0)[0]
  assert loss == pytest.approx(best, rel=1e-4)


def test_backup_dir_is_stable_per_job_and_beside_the_run(tmp_path):
  run_a = str(tmp_path / 'Trainer' / 'model_run' / '7')
  run_b = str(tmp_path / 'Trainer' / 'model_run' / '9')
  job = {'custom_config': {'training': {'seed': 1}}, 'train_files': ['x']}
  a = callbacks_lib.backup_dir_for(run_a, job)
  # A re-run (new execution dir) of the same job finds the same backup...
  assert a == callbacks_lib.backup_dir_for(run_b, job)
  assert a.startswith(str(tmp_path / 'Trainer' / 'model_run' / 'backup'))
  # ... and another job (other data or config) does not.
  assert a != callbacks_lib.backup_dir_for(
      run_a, dict(job, train_files=['y']))


def test_tensorboard_logs_and_record(tmp_path):
  training = helpers.training()
  model = _model()
  log_dir = str(tmp_path / 'run')
  callbacks = callbacks_lib.build(training, log_dir, None)
  model.fit(helpers.tabular_dataset(16), epochs=1, steps_per_epoch=2,
            verbose=0, callbacks=callbacks)
  assert glob.glob(os.path.join(log_dir, 'train', 'events.out.tfevents.*'))
  path = callbacks_lib.write_record(log_dir, {'precision': {'policy': 'x'}})
  assert json.load(open(path))['precision']['policy'] == 'x'


def test_record_becomes_mlmd_custom_properties():
  from leantfx.models.training import trainer_executor  # pylint: disable=g-import-not-at-top
  record = {
      'precision': {'policy': 'mixed_bfloat16', 'reason': 'probe: ...',
                    'probe': {'examples_per_s': {'float32': 1.0,
                                                 'mixed_bfloat16': 2.0}}},
      'strategy': 'MirroredStrategy x2', 'replicas': 2,
      'batches': {'dataset_batch': 64}, 'resumed_after_epoch': 3,
      'tensorboard_logs': '/runs/7',
  }
  props = trainer_executor.record_properties(record)
  assert props == {
      'precision_policy': 'mixed_bfloat16',
      'precision_reason': 'probe: ...',
      'precision_probe': '{"float32": 1.0, "mixed_bfloat16": 2.0}',
      'strategy': 'MirroredStrategy x2',
      'replicas': 2,
      'global_batch': 64,
      'resumed_after_epoch': 3,
      'tensorboard_logs': '/runs/7',
  }
  assert trainer_executor.record_properties({}) == {}
