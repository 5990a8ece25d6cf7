"""Model optimization: the ModelOptimizer TFX component and what it runs.

- spec.py, component.py, executor.py: the component. ``Executor.Do``
  checks the inputs (inputs.py) and calls ``flow.optimize``.
- config.py: ``OptimizationConfig``, its candidates and the technique table.
- flow.py: ``optimize``, the optimizer's steps in order.
- steps/: one module per step: samples (the rows scored), variants (each
  candidate's chains, tflite_variants and server_variants, then
  interleaved_timing), pick, raw_fold, push_picks, reporting; scoring
  scores a variant through its runtime.
- techniques/: pruning, QAT, clustering, distillation, low-rank (one module
  each).
- export/: TFLite, OpenVINO and ONNX exports, server-runtime variants, the
  raw-column fold (raw_exports.py: one path, a part per runtime).
- evaluation/: quality metric, measurement, gate and selection, report.
- types.py: ``OptimizationResult``, what every technique returns.

The runtimes the variants ship in (their files, predictors and timers, the
``Runtime`` interface and its registry) and the push are leantfx/runtimes/,
shared with serving/. docs/optimize.md "Where things are" maps the package.
"""
