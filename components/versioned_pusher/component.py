"""VersionedPusher: the standard Pusher interface with an atomic executor."""
from tfx import v1 as tfx
from tfx.dsl.components.base import executor_spec

from leantfx.components.versioned_pusher import executor


class VersionedPusher(tfx.components.Pusher):
  """TFX's Pusher, same spec and outputs, with the executor in executor.py."""

  EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)
