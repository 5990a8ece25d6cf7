"""A version's model files checked before the server's native loader opens them.

A native loader can crash on a damaged file rather than raise: TFLite's
interpreter does not verify a flatbuffer's offsets, so a truncated
model.tflite kills the process in ``_pywrap_tensorflow_interpreter_wrapper``
(SIGSEGV), and with it every model the server holds. So before a runtime's
version loads (:func:`check_version`, called by :mod:`loading`):

1. the push's manifest, when the version has one (every file's size and
   sha256, ``leantfx.runtimes.push.check_version``);
2. sizes and magic bytes, in the server (``Runtime.check_files``: reading
   bytes cannot crash it);
3. the runtime's own loader or verifier, in a child process
   (``Runtime.verify``: TFLite's interpreter built and allocated, ONNX's
   checker and an ONNX Runtime session, OpenVINO's reader and compile).
   A child that dies by a signal, exits without a verdict or outlives
   ``VERIFY_TIMEOUT_S`` fails the version, as a refusal does.

Each failure raises :class:`ModelFileError` (a LoadError with DATA_LOSS and
the reason), which the model manager logs and counts, and the version is not
served; the one serving before goes on. This holds for a version copied by
hand without a manifest (a TF Serving layout): steps 2 and 3 still run.

A SavedModel is not checked here: its ``saved_model.pb`` is parsed in Python
before TensorFlow's loader sees it (saved_model_servable.py), and TensorFlow
refuses damaged variables with an error (a checkpoint's tensors carry
checksums). A child would cost the five seconds TensorFlow takes to import
at every load.

Run as ``python -m leantfx.serving.model_file_check <runtime module>
<runtime> <folder>``, this module is the child: it verifies, prints one JSON line
(``{"ok": true}`` or ``{"ok": false, "error": "..."}``) and exits.
"""
import importlib
import json
import os
import signal
import subprocess
import sys

from leantfx.errors import ConfigError
from leantfx.runtimes import registry as runtimes_lib
from leantfx.runtimes import runtime as runtime_lib
from leantfx.serving import servable as servable_lib
from leantfx.serving import status


# A bound for a hung loader, not a measurement: the child fails its version
# after this long. The tests' models verify in about a second; a large IR's
# compile takes longer, and must not be refused for it.
VERIFY_TIMEOUT_S = 300.0
# The module the child runs: this one (it imports leantfx.runtimes, about
# 0.3 s, then the runtime's own modules).
_CHILD_MODULE = 'leantfx.serving.model_file_check'
_MANIFEST_FILE = 'manifest.json'

# Why a version's files were refused (ModelFileError.reason).
REASON_FILES = 'files'        # Missing, empty, or wrong magic bytes.
REASON_MANIFEST = 'manifest'  # A size or sha256 differs from the manifest.
REASON_REFUSED = 'refused'    # The runtime's loader refused the files.
REASON_CRASHED = 'crashed'    # The runtime's loader crashed the child.
REASON_TIMEOUT = 'timeout'    # The child did not answer in time.


class ModelFileError(servable_lib.LoadError):
  """A version's files failed a check before the server's loader saw them.

  Attributes:
    reason: one of the REASON_* names.
  """

  def __init__(self, message: str, reason: str):
    super().__init__(message, status.Code.DATA_LOSS)
    self.reason = reason


def _check_manifest(folder: str) -> None:
  if not os.path.isfile(os.path.join(folder, _MANIFEST_FILE)):
    return  # A hand-copied version: nothing to compare with.
  from leantfx.runtimes import push  # pylint: disable=g-import-not-at-top
  try:
    push.check_version(folder)
  except (ConfigError, ValueError, OSError) as e:
    raise ModelFileError(str(e), REASON_MANIFEST) from e


def _signal_name(number: int) -> str:
  try:
    return signal.Signals(number).name
  except ValueError:
    return f'signal {number}'


def _child_command(runtime: runtime_lib.Runtime, folder: str):
  """The child's command line: this module run by this Python, told the
  runtime's module (which holds it as ``RUNTIME``, as every runtime's module
  does), so a runtime registered in this process only is found too."""
  return [sys.executable, '-m', _CHILD_MODULE, type(runtime).__module__,
          runtime.name, folder]


def _child_env():
  """This process's environment, its import path as the child's.

  The child imports the runtime's module from where this process did; run
  from /, it would otherwise lose what this process's working directory or
  its caller put on sys.path.
  """
  paths = [os.path.abspath(p) for p in sys.path if p and os.path.isdir(p)]
  return dict(os.environ, PYTHONPATH=os.pathsep.join(paths))


def _verify_in_child(runtime: runtime_lib.Runtime, folder: str,
                     timeout_s: float) -> None:
  """Runs ``runtime.verify(folder)`` in a child process; raises its verdict."""
  folder = os.path.abspath(folder)
  model = runtime.model_path(folder)
  command = _child_command(runtime, folder)
  try:
    # From /: `python -m` puts the working directory first on sys.path,
    # where a folder named like a package would shadow leantfx's.
    done = subprocess.run(command, stdin=subprocess.DEVNULL, cwd=os.sep,
                          env=_child_env(), capture_output=True,
                          timeout=timeout_s, check=False)
  except subprocess.TimeoutExpired as e:
    raise ModelFileError(
        f'{runtime.label}\'s loader did not finish with {model} within '
        f'{timeout_s:.0f}s (in a child process); this version is not '
        'served.', REASON_TIMEOUT) from e
  if done.returncode < 0:
    raise ModelFileError(
        f'{model} crashed {runtime.label}\'s loader '
        f'({_signal_name(-done.returncode)}, in a child process: the server '
        'is unharmed). The file is damaged or not a model: copy the version '
        'again (into a hidden folder, then rename it into place).',
        REASON_CRASHED)
  verdict = None
  for line in reversed(done.stdout.decode('utf-8', 'replace').splitlines()):
    try:
      verdict = json.loads(line)
      break
    except ValueError:
      continue
  if not isinstance(verdict, dict):
    tail = done.stderr.decode('utf-8', 'replace').strip().splitlines()[-3:]
    raise ModelFileError(
        f'Checking {model} with {runtime.label}\'s loader gave no verdict '
        f'(child exit {done.returncode}): {" | ".join(tail)}',
        REASON_CRASHED)
  if not verdict.get('ok'):
    raise ModelFileError(str(verdict.get('error')), REASON_REFUSED)


def check_version(runtime: runtime_lib.Runtime, folder: str,
                  timeout_s: float = VERIFY_TIMEOUT_S) -> None:
  """Checks a runtime's version folder before the server loads it.

  Args:
    runtime: the runtime whose model file the folder holds.
    folder: the version directory.
    timeout_s: how long the child verifying the files may take.

  Raises:
    ModelFileError: the files are missing, empty, not this runtime's, do not
      match their manifest, or the runtime refused or crashed on them.
  """
  # The manifest first: where there is one, it names the damaged file and
  # how (its size and sha256), the clearest message.
  _check_manifest(folder)
  try:
    runtime.check_files(folder)
  except runtime_lib.SessionLoadError as e:
    raise ModelFileError(str(e), REASON_FILES) from e
  _verify_in_child(runtime, folder, timeout_s)


def _runtime(module_name: str, name: str) -> runtime_lib.Runtime:
  """The runtime named `name`: its module's RUNTIME, else the registry's."""
  found = getattr(importlib.import_module(module_name), 'RUNTIME', None)
  if isinstance(found, runtime_lib.Runtime) and found.name == name:
    return found
  return runtimes_lib.get(name)


def _child_main(argv) -> int:
  """The child: verifies one folder and prints the verdict as JSON."""
  if len(argv) != 3:
    print(f'usage: python -m {_CHILD_MODULE} <runtime module> <runtime> '
          '<version folder>', file=sys.stderr)
    return 2
  module_name, name, folder = argv
  try:
    _runtime(module_name, name).verify(folder)
    verdict = {'ok': True}
  except (runtime_lib.SessionLoadError, ConfigError, OSError) as e:
    verdict = {'ok': False, 'error': str(e)}
  except Exception as e:  # pylint: disable=broad-except
    # Whatever the runtime raises is its refusal of these files.
    verdict = {'ok': False, 'error': f'{folder}: {type(e).__name__}: {e}'}
  sys.stdout.write(json.dumps(verdict) + '\n')
  sys.stdout.flush()
  return 0


if __name__ == '__main__':
  sys.exit(_child_main(sys.argv[1:]))
