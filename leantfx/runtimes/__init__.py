"""The runtimes a model ships in, shared by the ModelOptimizer and the server.

Both components/optimize/ (which exports, measures and pushes each variant)
and serving/ (which loads and runs a pushed variant) use these modules, so
they live in this ground layer, below both.

- registry.py: the runtime names, which are installed, the install hint.
- tflite.py: a TFLite interpreter prepared once (signature bound to its
  tensor indices) for measurement and serving.
"""
