"""InfraValidator: the trained SavedModel served by ``leantfx serve`` before it is pushed."""
