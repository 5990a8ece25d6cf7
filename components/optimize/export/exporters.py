"""Every server runtime's ``Exporter``, by runtime name.

The optimizer-side twin of leantfx/runtimes/registry.py: exporting into a
new server runtime is its module here (named as the runtime is, defining
its ``EXPORTER``: exporter.py) and a line in ``BY_RUNTIME``.
runtime_variants.py and raw_runtimes.py reach a runtime's converters only
through ``get``.
"""
from typing import Dict, Tuple

from leantfx.runtimes import exporter as exporter_lib
from leantfx.components.optimize.export import onnx as onnx_export
from leantfx.components.optimize.export import openvino as openvino_export
from leantfx.errors import ConfigError

# Every server runtime's exporter, in the runtime registry's order.
BY_RUNTIME: Dict[str, exporter_lib.Exporter] = {
    e.runtime.name: e for e in (openvino_export.EXPORTER,
                                onnx_export.EXPORTER)}
# The runtimes the ModelOptimizer builds float32 and int8 variants of in its
# worker process (TFLite's are built beside training: exporter.py says why).
SERVER_RUNTIMES: Tuple[str, ...] = tuple(BY_RUNTIME)


def get(runtime: str) -> exporter_lib.Exporter:
  """The exporter of a server runtime.

  Raises:
    ConfigError: ``runtime`` is not a server runtime.
  """
  if runtime not in BY_RUNTIME:
    raise ConfigError(f'No server runtime {runtime!r}; use one of '
                      f'{", ".join(SERVER_RUNTIMES)}.')
  return BY_RUNTIME[runtime]
