"""Orchestration: Kubeflow compile and submission, Beam presets, the watcher."""
