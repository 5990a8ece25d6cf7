"""Training callbacks: fault tolerance, early stopping, TensorBoard, the record.

Fault tolerance: ``SafeBackupAndRestore`` is Keras's BackupAndRestore (the
model, optimizer and epoch are backed up at every epoch end; a re-run of the
same training restores them and continues from the next epoch) plus a check
before restoring: a backup that cannot be read completely (a truncated or
garbled file, e.g. from a kill during the write) is moved aside and training
starts from scratch, instead of failing or restoring half the variables.

The backup lives in a working dir beside the Trainer's model-run outputs,
keyed by what defines the training job (its configuration and input
artifacts), so a re-run of the pipeline after a crash, which gets new
output directories, still finds it.
"""
import hashlib
import json
import os
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence

from absl import logging
import tensorflow as tf
import tf_keras

from leantfx import config as config_lib

BACKUP_DIR_NAME = 'backup'
RECORD_FILE = 'training_metadata.json'


def backup_dir_for(model_run_dir: str, job: Mapping[str, Any]) -> str:
  """The backup working dir of a training job.

  Args:
    model_run_dir: this execution's model-run artifact dir
      (<root>/Trainer/model_run/<execution id>).
    job: what identifies the job: configuration and input artifact uris.
      The same job re-run (after a crash) maps to the same dir.

  Returns:
    <root>/Trainer/model_run/backup/<job hash>.
  """
  digest = hashlib.sha256(
      json.dumps(job, sort_keys=True, default=str).encode('utf-8')).hexdigest()
  parent = os.path.dirname(os.path.normpath(model_run_dir))
  return os.path.join(parent, BACKUP_DIR_NAME, digest[:20])


def backup_problem(backup_dir: str) -> Optional[str]:
  """Why the backup in backup_dir cannot be restored, or None if it can.

  Every tensor of the latest checkpoint is read, so a truncated data file is
  found before any variable is assigned. No backup at all is not a problem.
  """
  chief_dir = os.path.join(backup_dir, 'chief')
  if not tf.io.gfile.isdir(chief_dir) or not tf.io.gfile.listdir(chief_dir):
    return None
  try:
    latest = tf.train.latest_checkpoint(chief_dir)
    if latest is None:
      return (f'{chief_dir} holds files but no readable checkpoint index '
              f'({sorted(tf.io.gfile.listdir(chief_dir))})')
    reader = tf.train.load_checkpoint(latest)
    for name in reader.get_variable_to_shape_map():
      reader.get_tensor(name)
  except (tf.errors.OpError, ValueError, IndexError, UnicodeDecodeError) as e:
    # A truncated data file surfaces as IndexError ("Read less bytes than
    # requested") from the checkpoint reader.
    return f'{type(e).__name__}: {str(e).strip().splitlines()[0][:300]}'
  return None


class SafeBackupAndRestore(tf_keras.callbacks.BackupAndRestore):
  """BackupAndRestore that falls back to a fresh start on a corrupt backup.

  Attributes:
    restored_epoch: the last completed epoch the run resumed after (None: it
      started from scratch).
    fallback: why an unreadable backup was set aside (None if none was).
  """

  def __init__(self, backup_dir: str, **kwargs):
    super().__init__(backup_dir, **kwargs)
    self.restored_epoch: Optional[int] = None
    self.fallback: Optional[str] = None

  def on_train_begin(self, logs=None):
    problem = backup_problem(self.backup_dir)
    if problem:
      aside = f'{self.backup_dir.rstrip("/")}.corrupt-{int(time.time())}'
      tf.io.gfile.rename(self.backup_dir, aside, overwrite=True)
      self.fallback = (f'the backup in {self.backup_dir} is unreadable '
                       f'({problem}); moved to {aside}, training from scratch')
      logging.warning('BackupAndRestore: %s.', self.fallback)
    super().on_train_begin(logs)
    saved = int(self._training_state._ckpt_saved_epoch.numpy())  # pylint: disable=protected-access
    if saved >= 0:
      self.restored_epoch = saved
      logging.info('BackupAndRestore: resumed from the backup of epoch %d in '
                   '%s; training continues with epoch %d.', saved,
                   self.backup_dir, saved + 1)


class EpochLog(tf_keras.callbacks.Callback):
  """Records the epochs that actually ran, and the last one's logs."""

  def __init__(self):
    super().__init__()
    self.epochs: List[int] = []
    self.last_logs: Dict[str, float] = {}

  def on_epoch_end(self, epoch, logs=None):
    self.epochs.append(int(epoch))
    self.last_logs = {k: float(v) for k, v in (logs or {}).items()}


def build(training: config_lib.TrainingConfig, log_dir: Optional[str],
          backup_dir: Optional[str]) -> List[tf_keras.callbacks.Callback]:
  """The run's callbacks, in the order they must run.

  Args:
    training: early_stopping_patience.
    log_dir: TensorBoard log dir (None: no TensorBoard).
    backup_dir: BackupAndRestore working dir (None: no backups).

  Returns:
    [TensorBoard], [SafeBackupAndRestore], [EarlyStopping], EpochLog.
  """
  result: List[tf_keras.callbacks.Callback] = []
  if log_dir:
    result.append(tf_keras.callbacks.TensorBoard(log_dir=log_dir,
                                                 update_freq='epoch'))
  if backup_dir:
    result.append(SafeBackupAndRestore(backup_dir))
  if training.early_stopping_patience > 0:
    result.append(
        tf_keras.callbacks.EarlyStopping(
            monitor='val_loss', patience=training.early_stopping_patience,
            restore_best_weights=True, verbose=1))
  result.append(EpochLog())
  return result


def find(callbacks: Sequence[tf_keras.callbacks.Callback], kind: type):
  """The first callback of a kind, or None."""
  return next((c for c in callbacks if isinstance(c, kind)), None)


def summary(callbacks: Sequence[tf_keras.callbacks.Callback],
            epochs_planned: int) -> Dict[str, Any]:
  """What the callbacks saw, for the run record."""
  backup = find(callbacks, SafeBackupAndRestore)
  stopping = find(callbacks, tf_keras.callbacks.EarlyStopping)
  epoch_log = find(callbacks, EpochLog)
  result: Dict[str, Any] = {'epochs_planned': epochs_planned}
  if epoch_log:
    result['epochs_run'] = epoch_log.epochs
    result['final_logs'] = epoch_log.last_logs
  if backup:
    result['backup_dir'] = backup.backup_dir
    result['resumed_after_epoch'] = backup.restored_epoch
    result['backup_fallback'] = backup.fallback
  if stopping:
    result['early_stopping'] = {
        'patience': stopping.patience,
        'stopped_epoch': int(stopping.stopped_epoch) or None,
        'best_val_loss': (float(stopping.best)
                          if stopping.best is not None else None),
    }
  return result


def write_record(model_run_dir: str, record: Mapping[str, Any]) -> str:
  """Writes the run record (precision, strategy, batches, ...) as JSON."""
  path = os.path.join(model_run_dir, RECORD_FILE)
  tf.io.gfile.makedirs(model_run_dir)
  with tf.io.gfile.GFile(path, 'w') as f:
    f.write(json.dumps(record, indent=2, sort_keys=True, default=str))
  return path
