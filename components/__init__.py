"""Custom TFX components of leantfx (one package per component)."""
