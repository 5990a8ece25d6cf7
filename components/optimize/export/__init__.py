"""Turning an optimized tf_keras model into the files each runtime loads.

- tflite.py: TFLite conversion, post-training quantization included
  (float16, dynamic range, int8, 16x8).
- openvino.py: OpenVINO IR, float32 and NNCF int8.
- onnx.py: ONNX through tf2onnx, float32 and ONNX Runtime's static int8.
- runtime_variants.py: a candidate's OpenVINO and ONNX variants, exported,
  scored on the eval set and timed in interleaved rounds.
- raw_features.py: the Transform folded into the TFLite export, so the
  pushed model takes raw columns like the Trainer's SavedModel.
- raw_runtimes.py: the same raw-column contract for OpenVINO and ONNX.
"""
