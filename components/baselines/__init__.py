"""Baselines: the figures a model must be judged against, fit on the run's own split."""
