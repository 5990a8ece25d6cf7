"""Tests of issue 7: Kubeflow compile and submission, Beam presets, the watcher."""
