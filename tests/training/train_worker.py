"""A training process the distribution and fault-tolerance tests start.

It trains the Trainer's own model (architectures.build_compiled, the body
of models.model.build_model) on the tiny tabular data with the
Trainer's own plan (strategy, batches), callbacks (BackupAndRestore,
TensorBoard) and input sharding, then writes the final weights and what
happened to --out (JSON + .npz). Run as:

  python -m tests.training.train_worker --out DIR [--strategy S] ...

Modes the tests use:
  * --strategy multi_worker with TF_CONFIG set: one worker of a cluster.
  * --logical-cpus 2 --strategy mirrored: MirroredStrategy over 2 CPU devices.
  * --backup-dir D --hang-at-epoch K: backs up each epoch, then blocks at the
    start of epoch K (after writing 'hanging' to --out) so the test can kill
    it mid-run; without --hang-at-epoch it resumes from D's backup.
"""
import argparse
import json
import os
import sys
import time

import leantfx  # noqa: F401  Keras 2 before TensorFlow (leantfx/__init__.py).


def main(argv=None) -> int:
  parser = argparse.ArgumentParser()
  parser.add_argument('--out', required=True)
  parser.add_argument('--strategy', default='auto')
  parser.add_argument('--logical-cpus', type=int, default=0)
  parser.add_argument('--global-batch', type=int, default=32)
  parser.add_argument('--steps-per-epoch', type=int, default=5)
  parser.add_argument('--epochs', type=int, default=2)
  parser.add_argument('--backup-dir')
  parser.add_argument('--hang-at-epoch', type=int)
  parser.add_argument('--seed', type=int, default=7)
  parser.add_argument('--tag', default=os.environ.get('WORKER_TAG', 'result'),
                      help='result file stem')
  args = parser.parse_args(argv)

  # pylint: disable=g-import-not-at-top
  import tensorflow as tf
  if args.logical_cpus:
    # Must happen before TensorFlow initialises its devices.
    cpu = tf.config.list_physical_devices('CPU')[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * args.logical_cpus)
  import numpy as np
  import tf_keras
  from leantfx.models import architectures
  from leantfx.models.training import callbacks as callbacks_lib
  from leantfx.models.training import plan as plan_lib
  from tests.training import helpers
  # pylint: enable=g-import-not-at-top

  training = helpers.training(
      strategy=args.strategy, global_batch_size=args.global_batch,
      epochs=args.epochs, train_steps=args.epochs * args.steps_per_epoch,
      seed=args.seed)
  # The strategy first: multi-worker collectives must be configured before
  # TensorFlow runs anything.
  plan = plan_lib.prepare(training)
  tf_keras.utils.set_random_seed(args.seed)
  with plan.strategy.scope():
    model = architectures.build_compiled(helpers.TABULAR, training, {})
  train_ds = plan.input(helpers.tabular_dataset(plan.batches.dataset_batch))

  class Progress(tf_keras.callbacks.Callback):
    """Writes epoch markers; blocks at --hang-at-epoch (to be killed)."""

    def on_epoch_begin(self, epoch, logs=None):
      with open(os.path.join(args.out, 'epochs_begun.txt'), 'a') as f:
        f.write(f'{epoch}\n')
      if args.hang_at_epoch is not None and epoch == args.hang_at_epoch:
        with open(os.path.join(args.out, 'hanging'), 'w') as f:
          f.write(str(epoch))
        for _ in range(600):  # Bounded: the test kills it within seconds.
          time.sleep(0.5)
        sys.exit(5)

  callbacks = callbacks_lib.build(training, None, args.backup_dir) + [
      Progress()
  ]
  started = time.perf_counter()
  model.fit(train_ds, epochs=training.epochs,
            steps_per_epoch=args.steps_per_epoch, callbacks=callbacks,
            verbose=0)
  seconds = time.perf_counter() - started
  summary = callbacks_lib.summary(callbacks, training.epochs)
  summary.update(plan.record(), seconds=seconds,
                 examples=args.epochs * args.steps_per_epoch *
                 plan.batches.dataset_batch,
                 is_chief=plan.is_chief,
                 optimizer_steps=int(model.optimizer.iterations.numpy()))
  np.savez(os.path.join(args.out, f'{args.tag}.npz'), *model.get_weights())
  with open(os.path.join(args.out, f'{args.tag}.json'), 'w') as f:
    json.dump(summary, f, default=str)
  return 0


if __name__ == '__main__':
  sys.exit(main())
