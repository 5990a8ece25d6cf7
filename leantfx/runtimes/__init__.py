"""The runtimes a model ships in, shared by the ModelOptimizer and the server.

Both components/optimize/ (which exports, measures and pushes each variant)
and serving/ (which loads and runs a pushed variant) use these modules, so
they live in this ground layer, below both.

- runtime.py: the ``Runtime`` interface every runtime implements (its
  files, predictor, timer, exporter and serving session).
- registry.py: every runtime by name (``get``, a server runtime's
  ``exporter``), which are installed, the install hint. Adding a runtime is
  its module and a line here.
- tflite.py: a TFLite interpreter prepared once (signature bound to its
  tensor indices) for measurement and serving, its predictor, its timer and
  its ``Runtime`` (its conversion is the optimizer's:
  components/optimize/export/tflite.py).
- openvino.py: an IR compiled for batch-1 calls and for other batches, its
  predictor, its timer, its export (float32, NNCF int8, raw-feature IR) and
  its serving session (a pool of bound infer requests), and its
  ``Runtime``.
- onnx.py: an ONNX Runtime session, its predictor, its timer, its export
  (tf2onnx float32, static QDQ int8, raw-feature ONNX) and its serving
  session, and its ``Runtime``.
- exporter.py: the ``Exporter`` interface a server runtime's export
  implements.
- serving_export.py: the serving SavedModel every export reads, and the
  int8 calibration rows.
- string_lookups.py: the vocabularies beside a model whose runtime runs no
  lookup table.
- timing.py: what every runtime's timer shares (``RuntimeTimer``,
  ``LatencyVariant``).
- push.py: a selected variant pushed to a versioned folder (.tflite, or the
  files a server runtime reads) with its manifest (sha256, size, metrics),
  and the check of a version's files before it is served.
"""
