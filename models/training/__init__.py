"""Trainer capabilities: precision, distribution, memory, schedules, callbacks.

One concept per module; ``models/model.py``'s ``run_fn`` calls into them:
  precision      float32 / mixed policies, the CPU probe behind 'auto'.
  distribution   tf.distribute strategies, TF_CONFIG checks, batch sizes.
  accumulation   gradient accumulation over micro-batches.
  recompute      activation checkpointing (tf.recompute_grad) of blocks.
  schedules      Adam's linear warm-up then decay.
  callbacks      BackupAndRestore (with a corrupt-backup fallback), early
                 stopping, TensorBoard, the run-metadata record.
  trainer_executor  the Trainer executor that copies the record into ML
                 Metadata custom properties.
"""
