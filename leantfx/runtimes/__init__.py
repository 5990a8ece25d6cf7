"""The runtimes a model ships in, shared by the ModelOptimizer and the server.

Both components/optimize/ (which exports, measures and pushes each variant)
and serving/ (which loads and runs a pushed variant) use these modules, so
they live in this ground layer, below both.

- runtime.py: the ``Runtime`` interface every runtime implements (its
  files, predictor and timer).
- registry.py: every runtime by name (``get``), which are installed, the
  install hint.
- tflite.py: a TFLite interpreter prepared once (signature bound to its
  tensor indices) for measurement and serving, its predictor, its timer and
  its ``Runtime``.
- openvino.py: an IR compiled for batch-1 calls and for other batches, its
  predictor, its timer and its ``Runtime``.
- onnx.py: an ONNX Runtime session, its predictor, its timer and its
  ``Runtime``.
- timing.py: what every runtime's timer shares (``RuntimeTimer``,
  ``LatencyVariant``).
- push.py: a selected variant pushed to a versioned folder (.tflite, or the
  files a server runtime reads) with its manifest (sha256, size, metrics),
  and the check of a version's files before it is served.
"""
