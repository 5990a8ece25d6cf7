"""Model optimization: pruning, QAT, distillation, low-rank, clustering, TFLite export.

One concept per module; the TFX component (spec.py, component.py, executor.py)
runs the techniques the pipeline config asks for and gates the results.
"""
