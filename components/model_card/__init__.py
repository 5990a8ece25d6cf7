"""ModelCardGenerator: a model card for each push, built from ML Metadata."""
