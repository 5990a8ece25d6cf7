"""Model optimization: the ModelOptimizer TFX component and what it runs.

The component (spec.py, component.py, executor.py) reads its config
(config.py), runs each candidate's techniques, exports and measures the
variants, gates them and pushes the one selected.

- techniques/: pruning, QAT, clustering, distillation, low-rank (one module each).
- export/: TFLite, OpenVINO and ONNX exports, raw-column folds, server-runtime variants.
- evaluation/: quality metric, measurement, gate and selection, report.
- types.py: ``OptimizationResult``, what every technique returns.

The runtimes the variants ship in (and the push) are leantfx/runtimes/,
shared with serving/.
"""
