"""The runtimes a variant is exported to, and which are installed.

Each runtime is a ``runtime.Runtime`` defined in its own module (tflite.py,
openvino.py, onnx.py); ``BY_NAME`` lists them, in build order, and ``get``
finds one by name (``exporter``, a server runtime's Exporter). Everything
else here (labels, required modules, the ``--target-cpu`` table) is read
from that list or keyed by its names, and the optimizer (its exports,
predictors and timers) and ``leantfx serve`` (serving/loading.py) reach a
runtime only through it: adding a runtime is its module and its line in
``BY_NAME``.

TFLite comes with TensorFlow. OpenVINO (with NNCF for int8) and ONNX Runtime
(with tf2onnx and onnx for the export) are the x86 server runtimes; they are
the ``runtimes`` extra of setup.py, which ``make venv`` / ``make run``
install, but a slim image may leave them out. ``resolve`` turns the
configured runtime list (None: every installed one) into the runtimes to
build and one clear message per requested runtime that is not installed, so
the optimizer goes on with the others.

Whether a runtime is installed is probed with ``importlib.util.find_spec``
(nothing is imported: importing OpenVINO or NNCF costs seconds) through
``module_installed``, which tests replace to simulate a missing runtime.
"""
import importlib.util
from typing import Dict, List, Optional, Sequence, Tuple

from leantfx.errors import ConfigError
from leantfx.runtimes import exporter as exporter_lib
from leantfx.runtimes import onnx as onnx_runtime
from leantfx.runtimes import openvino as openvino_runtime
from leantfx.runtimes import runtime as runtime_lib
from leantfx.runtimes import tflite as tflite_runtime

# Every runtime, in build order: adding a runtime is its module and a line
# here.
BY_NAME: Dict[str, runtime_lib.Runtime] = {
    r.name: r for r in (tflite_runtime.RUNTIME, openvino_runtime.RUNTIME,
                        onnx_runtime.RUNTIME)}
TFLITE = tflite_runtime.RUNTIME.name
OPENVINO = openvino_runtime.RUNTIME.name
ONNX = onnx_runtime.RUNTIME.name
RUNTIMES = tuple(BY_NAME)
# The runtimes with an Exporter: every one but TFLite, the one every run
# builds (beside training, as the gate's baseline). The ModelOptimizer builds
# their variants in its worker, each through its Exporter (``exporter``),
# and pushes each pick to the runtime's own base.
SERVER_RUNTIMES = tuple(name for name, r in BY_NAME.items()
                        if r.exporter is not None)
# How messages and reports name each runtime.
LABELS: Dict[str, str] = {name: r.label for name, r in BY_NAME.items()}
# On the command line: every runtime installed where the optimizer runs.
ALL = 'all'
# --target-cpu: the runtimes worth building for a deploy CPU. On x86 all
# three. On Arm, TFLite (XNNPACK's Arm kernels) and ONNX Runtime (its
# MLAS Arm kernels); OpenVINO's quantized (u8/i8) precision is listed for
# Intel x86-64 only in its CPU device docs, so its int8 IR would not run as
# int8 there.
TARGET_CPUS: Dict[str, Tuple[str, ...]] = {
    'x86': (TFLITE, OPENVINO, ONNX),
    'arm': (TFLITE, ONNX),
}
# The pip extra (setup.py) that installs the runtimes beside the stack.
EXTRA = 'runtimes'
INSTALL_HINT = f"pip install 'leantfx[{EXTRA}]'"

# runtime -> the Python modules its export and measurement import.
REQUIRED_MODULES: Dict[str, Tuple[str, ...]] = {
    name: r.required_modules for name, r in BY_NAME.items()}


def get(name: str) -> runtime_lib.Runtime:
  """The runtime named ``name``.

  Raises:
    ConfigError: no runtime has that name.
  """
  if name not in BY_NAME:
    raise ConfigError(f'Unknown runtime {name!r}; use one of '
                      f'{", ".join(RUNTIMES)}.')
  return BY_NAME[name]


def exporter(name: str) -> exporter_lib.Exporter:
  """The Exporter of the server runtime named ``name``.

  Raises:
    ConfigError: no server runtime has that name.
  """
  found = BY_NAME.get(name)
  if found is None or found.exporter is None:
    servers = [n for n, r in BY_NAME.items() if r.exporter is not None]
    raise ConfigError(f'No server runtime {name!r}; use one of '
                      f'{", ".join(servers)}.')
  return found.exporter


def module_installed(name: str) -> bool:
  """Whether a top-level module can be imported (it is not imported)."""
  return importlib.util.find_spec(name) is not None


def missing_modules(runtime: str) -> List[str]:
  """The modules of REQUIRED_MODULES[runtime] that are not installed."""
  return [m for m in REQUIRED_MODULES[runtime] if not module_installed(m)]


def installed() -> Tuple[str, ...]:
  """The runtimes whose modules are all installed, in RUNTIMES order."""
  return tuple(r for r in RUNTIMES if not missing_modules(r))


def check_names(runtimes: Sequence[str]) -> Tuple[str, ...]:
  """Validates a runtime list (known names, no repeats, not empty).

  Raises:
    ConfigError: an unknown or repeated name, or an empty list.
  """
  runtimes = tuple(runtimes)
  if not runtimes:
    raise ConfigError(f'The runtime list is empty; name at least one of '
                      f'{", ".join(RUNTIMES)}.')
  unknown = [r for r in runtimes if r not in RUNTIMES]
  if unknown:
    raise ConfigError(f'Unknown runtime(s) {unknown}; use one or more of '
                      f'{", ".join(RUNTIMES)}.')
  if len(set(runtimes)) != len(runtimes):
    raise ConfigError(f'The runtime list {list(runtimes)} names a runtime '
                      'twice.')
  return runtimes


def not_installed_message(runtime: str) -> str:
  """What to tell the user when a requested runtime is missing."""
  return (f'runtime {runtime!r} is not installed (missing Python module(s) '
          f'{", ".join(missing_modules(runtime))}); its variants are not '
          f'built. Install it with {INSTALL_HINT} (make venv does), or leave '
          f'it out of --runtimes.')


def resolve(requested: Optional[Sequence[str]]
           ) -> Tuple[Tuple[str, ...], List[str]]:
  """The runtimes to build, and a message per requested one not installed.

  Args:
    requested: runtime names, or None for every installed runtime.

  Returns:
    (runtimes to build in RUNTIMES order, messages).

  Raises:
    ConfigError: an unknown or repeated name.
  """
  if requested is None:
    return installed(), []
  wanted = check_names(requested)
  available = [r for r in RUNTIMES if r in wanted and not missing_modules(r)]
  messages = [not_installed_message(r) for r in wanted
              if missing_modules(r)]
  return tuple(available), messages
