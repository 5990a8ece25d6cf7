"""Turning an optimized tf_keras model into the files each runtime loads.

- tflite.py: TFLite conversion, post-training quantization included
  (float16, dynamic range, int8, 16x8).
- runtime_variants.py: a candidate's server-runtime variants, exported
  through their Exporters (each server runtime's module in
  leantfx/runtimes/ holds its Exporter: openvino.py, onnx.py), scored on
  the eval set and timed in interleaved rounds.
- raw_features.py: the Transform folded into the TFLite export, so the
  pushed model takes raw columns like the Trainer's SavedModel.
- raw_runtimes.py: the same raw-column contract for the server runtimes
  (their Exporters convert, their predictors measure).
"""
