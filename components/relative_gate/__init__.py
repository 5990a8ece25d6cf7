"""The relative gate: the Evaluator blesses a model against the run's own baselines."""
