"""The Runtime interface: every runtime registered once, each one run for real.

Each runtime's predictor and timer (leantfx/runtimes/) load the float32
export of conftest's trained digits CNN, made by the optimizer's own export
(TFLite conversion; the server runtimes through their Exporter), and answer
what the Keras model answers; ``leantfx serve`` loads the same export
through the registry and answers it too.

Adding a runtime is one module and its line in the registry: a runtime that
is not leantfx's (new_runtime.py, beside this file) is registered by that
line alone, and the optimizer's export, its predictors, the push and
``leantfx serve`` all reach it. The code outside the runtimes' modules (the
layer folders of tests/test_layers.py) neither writes a runtime's name nor
compares anything with a server runtime's name, so nothing there branches
on which runtime it holds; it reaches each one through the registry.
"""
import ast
import os
import time

import numpy as np
import pytest

from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.export import raw_exports
from leantfx.components.optimize.export import raw_runtimes
from leantfx.components.optimize.export import runtime_variants
from leantfx.components.optimize.export import tflite as tflite_export
from leantfx.errors import ConfigError
from leantfx.runtimes import push
from leantfx.runtimes import registry
from leantfx.runtimes import runtime as runtime_lib
from leantfx.runtimes import serving_export
from leantfx.runtimes import timing
from leantfx.serving import loading
from leantfx.serving import servable
from leantfx.serving import status
from tests.optimize import new_runtime

pytestmark = pytest.mark.unit

# Float32 exports of the same graph: the runtimes' kernels differ from
# Keras' in summation order only (probabilities in [0, 1]).
FLOAT32_ATOL = 1e-4
EXAMPLES = 8


def test_every_runtime_is_registered_once_by_its_own_name():
  assert registry.RUNTIMES == ('tflite', 'openvino', 'onnx')
  for name in registry.RUNTIMES:
    found = registry.get(name)
    assert isinstance(found, runtime_lib.Runtime)
    assert found.name == name
    assert found.label == registry.LABELS[name]
    assert found.model_file == found.files[0]
    assert found.required_modules == registry.REQUIRED_MODULES[name]
    assert found.timed_call
  with pytest.raises(ConfigError, match="Unknown runtime 'tensorrt'.*onnx"):
    registry.get('tensorrt')


def test_the_push_and_the_server_read_each_runtime_s_files_from_it():
  assert push.MODEL_FILE == registry.get('tflite').model_file
  for name in ('openvino', 'onnx'):
    assert push.RUNTIME_FILES[name] == registry.get(name).files
  assert push.RUNTIME_FILES['openvino'] == ('model.xml', 'model.bin')
  assert push.RUNTIME_FILES['onnx'] == ('model.onnx',)
  assert servable.TFLITE_FILENAME == 'model.tflite'
  # Every runtime is served, found by its model file: on its serving session
  # (every server runtime), or by a servable of its own (TFLite).
  for found in registry.BY_NAME.values():
    assert (found in loading.SERVABLES) != _has_serving_session(found)
  assert list(loading.SERVABLES) == [registry.get('tflite')]


def _has_serving_session(found):
  return (type(found).serving_session is not
          runtime_lib.Runtime.serving_session)


def test_artifact_paths_round_trip(tmp_path):
  # OpenVINO's model is two files: its folder is what is sized and pushed.
  folder = str(tmp_path / 'openvino_float32')
  openvino = registry.get('openvino')
  xml = openvino.model_path(folder)
  assert xml == os.path.join(folder, 'model.xml')
  assert openvino.artifact_path(xml) == folder
  assert openvino.model_in_artifact(folder) == xml
  onnx = registry.get('onnx')
  path = onnx.model_path(folder)
  assert onnx.artifact_path(path) == path == onnx.model_in_artifact(path)


def _export(name, model, folder):
  if name == 'tflite':
    saved_model = serving_export.save_serving_model(
        model, os.path.join(folder, 'saved_model'))
    path = os.path.join(folder, 'model.tflite')
    tflite_export.export_saved_model_tflite(saved_model, 'float32',
                                            output_path=path)
    return path
  return runtime_variants.export(name, model, 'float32', None,
                                 os.path.join(folder, name), 0,
                                 {'scratch': folder})


@pytest.mark.parametrize('name', registry.RUNTIMES)
def test_each_runtime_predicts_and_times_its_float32_export(
    name, teacher, digits, tmp_path):
  if registry.missing_modules(name):
    pytest.skip(f'{name} is not installed')
  found = registry.get(name)
  path = _export(name, teacher, str(tmp_path))
  assert os.path.basename(path) == found.model_file
  data = measure.LabeledData.from_dataset(digits.eval_ds())
  batch = {n: v[:EXAMPLES] for n, v in data.features.items()}
  expected = teacher.predict(batch, verbose=0)

  predictor = found.predictor(path, 1)
  got = np.concatenate([
      predictor.predict({n: v[i:i + 1] for n, v in batch.items()})
      for i in range(EXAMPLES)])
  np.testing.assert_allclose(got, expected, atol=FLOAT32_ATOL)

  timer = found.timer(f'c/{name}', path, 1, data.example(0))
  assert isinstance(timer, timing.RuntimeTimer)
  assert timer.variant.label == f'c/{name}' and timer.batch_size == 1
  durations = timer.time_invokes(3, time.perf_counter)
  assert len(durations) == 3 and all(d > 0 for d in durations)

  # leantfx serve finds the runtime by the file the export wrote and
  # answers the batch as the predictor and Keras do.
  folder = os.path.dirname(path)
  assert loading.runtime_of(folder) is found
  served = loading.load_servable('digits', 1, folder)
  try:
    assert served.platform == name
    signature = served.signatures['serving_default']
    (output,) = signature.outputs
    answer = served.run('serving_default',
                        {a: batch[a] for a in signature.inputs}, [output])
  finally:
    served.close()
  np.testing.assert_allclose(answer[output], expected, atol=FLOAT32_ATOL)
  np.testing.assert_allclose(answer[output], got, atol=FLOAT32_ATOL)


def test_each_layer_reaches_every_runtime_through_its_registry():
  # Exports: one Exporter per server runtime, in the runtime's own module;
  # TFLite has none (its variants are built beside training); the
  # raw-column fold has a part for every runtime.
  assert registry.SERVER_RUNTIMES == ('openvino', 'onnx')
  assert registry.get('tflite').exporter is None
  for name in registry.SERVER_RUNTIMES:
    exporter = registry.exporter(name)
    assert exporter is registry.get(name).exporter
    assert type(exporter).__module__ == f'leantfx.runtimes.{name}'
  with pytest.raises(ConfigError, match="No server runtime 'tflite'"):
    registry.exporter('tflite')
  assert set(raw_exports.RAW_EXPORTS) == set(registry.RUNTIMES)
  # Serving: every server runtime on its session, through one servable.
  assert all(_has_serving_session(registry.get(name))
             for name in registry.SERVER_RUNTIMES)


def test_a_new_runtime_is_one_module_and_one_registry_line(
    teacher, digits, tmp_path, monkeypatch):
  runtime = new_runtime.RUNTIME
  # The one line: leantfx/runtimes/registry.py's BY_NAME lists the runtime.
  monkeypatch.setitem(registry.BY_NAME, runtime.name, runtime)

  # The optimizer's export reaches its Exporter by the runtime's name.
  assert registry.exporter(runtime.name) is runtime.exporter
  scratch = str(tmp_path / 'scratch')
  os.makedirs(scratch)
  path = runtime_variants.export(runtime.name, teacher, 'float32', None,
                                 str(tmp_path / 'litert_float32'), 0,
                                 {'scratch': scratch})
  assert os.path.basename(path) == 'model.litert'
  data = measure.LabeledData.from_dataset(digits.eval_ds())
  batch = {n: v[:EXAMPLES] for n, v in data.features.items()}
  expected = teacher.predict(batch, verbose=0)

  # Its predictor, as the raw-column fold and the report reach it by name.
  predictor = raw_runtimes.raw_predictor(runtime.name, path, 1)
  np.testing.assert_allclose(predictor.predict(batch), expected,
                             atol=FLOAT32_ATOL)
  timer = runtime_variants.timer(runtime.name, 'c/litert', path, 1,
                                 data.example(0))
  assert len(timer.time_invokes(2, time.perf_counter)) == 2

  # Pushed to a versioned folder with its manifest, and served from it:
  # leantfx serve finds the runtime by its model file and runs its session.
  pushed = push.push_runtime_model(
      runtime.name, os.path.dirname(path), str(tmp_path / 'push'), 'digits',
      source_model_uri='keras', technique_chain=[], mode='float32',
      metrics={}, clock=lambda: 7)
  assert sorted(os.listdir(pushed.directory)) == [
      'manifest.json', 'model.litert']
  assert loading.runtime_of(pushed.directory) is runtime
  served = loading.load_servable('digits', pushed.version, pushed.directory)
  try:
    assert served.platform == 'litert'
    signature = served.signatures['serving_default']
    (output,) = signature.outputs
    answer = served.run('serving_default',
                        {a: batch[a] for a in signature.inputs}, [output])
  finally:
    served.close()
  np.testing.assert_allclose(answer[output], expected, atol=FLOAT32_ATOL)

  # A file that no longer matches its manifest is refused, as for every
  # runtime the servable wraps.
  with open(os.path.join(pushed.directory, 'model.litert'), 'r+b') as f:
    f.truncate(100)
  with pytest.raises(servable.LoadError, match='does not match') as failed:
    loading.load_servable('digits', pushed.version, pushed.directory)
  assert failed.value.code == status.Code.DATA_LOSS


# ------------------------------------- no code branches on a runtime's name ---

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
# The production code: tests/test_layers.py's layer folders (benchmarks and
# tests name runtimes to measure and check each one).
_FOLDERS = ('leantfx', 'schemas', 'models', 'components', 'pipeline',
            'kubeflow', 'serving', 'cli')
# Where a runtime's name is written: its own modules, and the registry that
# lists them.
_RUNTIME_MODULES = frozenset(
    [f'leantfx/runtimes/{n}.py' for n in registry.RUNTIMES] +
    ['leantfx/runtimes/registry.py',
     # TFLite's conversion, which the optimizer runs beside training.
     'components/optimize/export/tflite.py'])
# The registry's constants naming the server runtimes (registry.OPENVINO,
# ...). TFLite's (registry.TFLITE) may be used: it is the baseline every run
# builds, which the config requires and push_tflite pushes.
_SERVER_NAME_CONSTANTS = frozenset(n.upper() for n in registry.SERVER_RUNTIMES)
# Writers of one model server's own config, which name the runtime that
# server runs (leantfx deploy ovms: OpenVINO Model Server; deploy triton:
# Triton's ONNX Runtime backend); they compare nothing with it.
_MODEL_SERVER_CONFIGS = frozenset({'serving/runtime_deploy.py'})


def _docstrings(tree):
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                         ast.AsyncFunctionDef)) and node.body:
      first = node.body[0]
      if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        found.add(id(first.value))
  return found


def _server_constant(node) -> bool:
  """A constant named for a server runtime: registry.OPENVINO, and any
  upper-case name with it as a word (PLATFORM_ONNX, OPENVINO_FILENAME)."""
  name = (node.id if isinstance(node, ast.Name) else
          node.attr if isinstance(node, ast.Attribute) else '')
  return name.isupper() and bool(
      _SERVER_NAME_CONSTANTS & set(name.split('_')))


def runtime_name_uses(source: str, may_name_servers: bool = False):
  """(line, what) of each place ``source`` names a runtime by hand.

  A string that is a runtime's name (not a docstring); a comparison with a
  server runtime's registry constant, or a dict keyed by one; and, unless
  ``may_name_servers``, any use of such a constant.
  """
  tree = ast.parse(source)
  docstrings = _docstrings(tree)
  found = []
  for node in ast.walk(tree):
    if (isinstance(node, ast.Constant) and node.value in registry.RUNTIMES
        and id(node) not in docstrings):
      found.append((node.lineno, f'the string {node.value!r}'))
    elif isinstance(node, (ast.Compare, ast.Dict)):
      operands = ([node.left] + node.comparators
                  if isinstance(node, ast.Compare) else
                  [k for k in node.keys if k is not None])
      for operand in operands:
        elements = (operand.elts if isinstance(operand, (
            ast.Tuple, ast.List, ast.Set)) else [operand])
        if any(_server_constant(e) for e in elements):
          kind = 'compared' if isinstance(node, ast.Compare) else 'dict key'
          found.append((node.lineno, f'{kind}: {ast.unparse(operand)}'))
    elif _server_constant(node) and not may_name_servers:
      found.append((node.lineno, ast.unparse(node)))
  return sorted(set(found))


@pytest.mark.parametrize('source', [
    'if runtime == runtimes_lib.OPENVINO:\n  export_ir()',
    'if runtime == "onnx":\n  export_onnx()',
    'if variant.runtime in (registry.OPENVINO, registry.ONNX):\n  pass',
    'FILES = {registry.OPENVINO: ("model.xml",)}',
    "FILES = {'openvino': ('model.xml',)}",
    'lookups_outside = runtime != ONNX',
    'if platform in (servable.PLATFORM_OPENVINO, servable.PLATFORM_ONNX):\n'
    '  pass',
    'for r in ("openvino", "onnx"):\n  pass',
])
def test_the_name_check_finds_a_runtime_chosen_by_name(source):
  assert runtime_name_uses(source, may_name_servers=True)


def test_the_name_check_lets_the_interfaces_through():
  source = '''"""Exports 'onnx' and the rest through the registry."""
exporter = registry.exporter(runtime)
if exporter.lookups_outside:
  vocabularies = read(model)
path = exporter.export_raw(saved_model, mode, samples, vocabularies, out)
if runtime == registry.TFLITE:
  push_tflite(path)
'''
  assert runtime_name_uses(source) == []


def test_no_code_outside_a_runtime_s_modules_branches_on_its_name():
  found = []
  for folder in _FOLDERS:
    for directory, _, files in os.walk(os.path.join(_ROOT, folder)):
      for file_name in sorted(files):
        if not file_name.endswith('.py'):
          continue
        path = os.path.join(directory, file_name)
        relative = os.path.relpath(path, _ROOT).replace(os.sep, '/')
        if relative in _RUNTIME_MODULES:
          continue
        with open(path, encoding='utf-8') as f:
          uses = runtime_name_uses(
              f.read(), may_name_servers=relative in _MODEL_SERVER_CONFIGS)
        found += [f'{relative}:{line}: {what}' for line, what in uses]
  assert not found, (
      'Code outside the runtimes\' own modules names a runtime; reach it '
      'through leantfx/runtimes/registry.py (its Runtime, whose exporter '
      'and serving session serving/loading.py wraps):\n' +
      '\n'.join(found))
