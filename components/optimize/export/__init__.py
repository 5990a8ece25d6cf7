"""Turning an optimized tf_keras model into the files each runtime loads.

- tflite.py: TFLite conversion, post-training quantization included
  (float16, dynamic range, int8, 16x8).
- exporters.py: every server runtime's ``Exporter`` (the interface is
  leantfx/runtimes/exporter.py) by runtime name.
- openvino.py: OpenVINO IR, float32 and NNCF int8 (and raw-feature IR):
  its ``Exporter``.
- onnx.py: ONNX through tf2onnx, float32 and ONNX Runtime's static int8
  (and raw-feature ONNX): its ``Exporter``.
- runtime_variants.py: a candidate's server-runtime variants, exported
  through their Exporters, scored on the eval set and timed in interleaved
  rounds.
- raw_features.py: the Transform folded into the TFLite export, so the
  pushed model takes raw columns like the Trainer's SavedModel.
- raw_runtimes.py: the same raw-column contract for the server runtimes
  (their Exporters convert, their predictors measure).
"""
