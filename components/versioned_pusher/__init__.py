"""VersionedPusher: TFX's Pusher with atomic, idempotent filesystem pushes."""
