"""Kubeflow Pipelines: compile and submit the same create_pipeline()."""
