"""The packages form layers: imports point down, never up or sideways.

ground (leantfx/, schemas/) -> models/ -> components/ -> pipeline/ ->
kubeflow/, serving/ -> cli/ (the front end). Every ``import leantfx.X`` and
``from leantfx.X import ...`` counts, inside functions too: a function-level
import hides a cycle from Python's import order, not from the design.

Modules form no cycle either, inside a folder or across folders: the module
import graph over every ``.py`` of the layer folders has no strongly
connected component of more than one module, and no module imports itself.
An import names the most specific module it loads: ``from leantfx.a import b``
is ``a/b.py`` (or ``a/b/__init__.py``) when ``b`` is a module and
``a/__init__.py`` when ``b`` is a name defined there; ``import leantfx.a`` is
``a/__init__.py``. The parent packages Python runs on the way are not counted:
a package's ``__init__`` that re-exports its modules does not tie those modules
to each other.
"""
import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Top-level folder -> layer; a folder may import its own layer's folder
# (itself) and lower layers only.
LAYERS = {
    'leantfx': 0,
    'schemas': 0,
    'models': 1,
    'components': 2,
    'pipeline': 3,
    'kubeflow': 4,
    'serving': 4,
    'cli': 5,
}
# leantfx.<name> for these names is the folder of that name (setup.py
# installs each top-level folder as a leantfx sub-package).
SUBPACKAGES = set(LAYERS) - {'leantfx'}


def _imported_packages(path):
  """(line, top-level folder) of every leantfx import in a file."""
  with open(path, encoding='utf-8') as f:
    tree = ast.parse(f.read(), path)
  found = []
  for node in ast.walk(tree):
    names = []
    if isinstance(node, ast.Import):
      names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      names = [node.module]
      if node.module == 'leantfx':
        names = [f'leantfx.{alias.name}' for alias in node.names]
    for name in names:
      parts = name.split('.')
      if parts[0] != 'leantfx':
        continue
      folder = parts[1] if len(parts) > 1 and parts[1] in SUBPACKAGES else (
          'leantfx')
      found.append((node.lineno, folder))
  return found


def _module_name(path):
  """leantfx.X.Y of a file under a layer folder (path relative to ROOT)."""
  parts = os.path.splitext(path)[0].split(os.sep)
  if parts[-1] == '__init__':
    parts = parts[:-1]
  if parts[0] != 'leantfx':
    parts = ['leantfx'] + parts
  return '.'.join(parts)


def _layer_modules(root=ROOT):
  """leantfx module name -> path (relative to root) of every layer file."""
  modules = {}
  for folder in LAYERS:
    for directory, _, files in os.walk(os.path.join(root, folder)):
      for name in files:
        if name.endswith('.py'):
          path = os.path.relpath(os.path.join(directory, name), root)
          modules[_module_name(path)] = path
  return modules


def _imported_modules(path, modules):
  """(line, module) of every import of a module in ``modules`` in a file.

  ``modules`` holds the known module names; an import resolves to the longest
  known name it loads (see the module docstring).
  """
  with open(path, encoding='utf-8') as f:
    tree = ast.parse(f.read(), path)

  def known(name):
    parts = name.split('.')
    while parts and '.'.join(parts) not in modules:
      parts.pop()
    return '.'.join(parts) or None

  found = []
  for node in ast.walk(tree):
    names = []
    if isinstance(node, ast.Import):
      names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      names = [f'{node.module}.{alias.name}' for alias in node.names]
    for name in names:
      target = known(name)
      if target:
        found.append((node.lineno, target))
  return found


def _module_graph(root=ROOT):
  """{module: {imported module: [(path, line), ...]}} over the layer files."""
  modules = _layer_modules(root)
  graph = {}
  for module, path in modules.items():
    imports = graph.setdefault(module, {})
    for line, target in _imported_modules(os.path.join(root, path), modules):
      imports.setdefault(target, []).append((path, line))
  return graph


def _cycles(graph):
  """The import cycles of a graph {node: iterable of nodes}.

  Tarjan's strongly connected components, iterative (no recursion limit):
  every component of two or more nodes, and every node that imports itself,
  as a sorted list of its nodes; the list of components is sorted too.
  """
  index = {}
  lowlink = {}
  on_stack = set()
  stack = []
  components = []
  for start in sorted(graph):
    if start in index:
      continue
    index[start] = lowlink[start] = len(index)
    stack.append(start)
    on_stack.add(start)
    work = [(start, iter(sorted(graph.get(start, ()))))]
    while work:
      node, successors = work[-1]
      for nxt in successors:
        if nxt not in index:
          index[nxt] = lowlink[nxt] = len(index)
          stack.append(nxt)
          on_stack.add(nxt)
          work.append((nxt, iter(sorted(graph.get(nxt, ())))))
          break
        if nxt in on_stack:
          lowlink[node] = min(lowlink[node], index[nxt])
      else:
        work.pop()
        if work:
          parent = work[-1][0]
          lowlink[parent] = min(lowlink[parent], lowlink[node])
        if lowlink[node] == index[node]:
          component = []
          while True:
            member = stack.pop()
            on_stack.discard(member)
            component.append(member)
            if member == node:
              break
          if len(component) > 1 or node in graph.get(node, ()):
            components.append(sorted(component))
  return sorted(components)


def _edges():
  edges = []
  for folder in LAYERS:
    for directory, _, files in os.walk(os.path.join(ROOT, folder)):
      for name in files:
        if name.endswith('.py'):
          path = os.path.join(directory, name)
          for line, target in _imported_packages(path):
            if target != folder:
              edges.append((os.path.relpath(path, ROOT), line, folder,
                            target))
  return edges


@pytest.mark.unit
def test_imports_point_down_the_layers():
  upward = [
      f'{path}:{line}: {source} (layer {LAYERS[source]}) imports {target} '
      f'(layer {LAYERS[target]})'
      for path, line, source, target in _edges()
      if LAYERS[target] >= LAYERS[source]
  ]
  assert not upward, 'imports that point up or sideways:\n' + '\n'.join(
      upward)


# The server shares the runtimes (leantfx/runtimes/) with the ModelOptimizer;
# it must not depend on a component's internals.
SERVING_MAY_NOT_IMPORT = ('components', 'models', 'pipeline')


@pytest.mark.unit
def test_the_server_imports_no_component():
  found = [f'{path}:{line}: serving imports {target}'
           for path, line, source, target in _edges()
           if source == 'serving' and target in SERVING_MAY_NOT_IMPORT]
  assert not found, '\n'.join(found)


@pytest.mark.unit
def test_no_cycle_between_top_level_folders():
  graph = {}
  for _, _, source, target in _edges():
    graph.setdefault(source, set()).add(target)

  def reaches(start, goal, seen=()):
    return any(nxt == goal or (nxt not in seen and
                               reaches(nxt, goal, seen + (nxt,)))
               for nxt in graph.get(start, ()))

  cycles = sorted(f for f in graph if reaches(f, f))
  assert not cycles, f'folders on an import cycle: {cycles}'


@pytest.mark.unit
def test_the_check_sees_function_level_and_from_imports(tmp_path):
  # The detector itself: a function-level import of a higher layer counts.
  sample = tmp_path / 'sample.py'
  sample.write_text('def f():\n  from leantfx.cli import build\n'
                    'from leantfx import config\nimport leantfx.kubeflow.x\n')
  assert sorted(_imported_packages(str(sample))) == [
      (2, 'cli'), (3, 'leantfx'), (4, 'kubeflow')]


@pytest.mark.unit
def test_no_import_cycle_between_modules():
  graph = _module_graph()
  report = []
  for component in _cycles(graph):
    report.append('cycle: ' + ' <-> '.join(component))
    report.extend(sorted(
        f'  {path}:{line}: {module} imports {target}'
        for module in component for target, places in graph[module].items()
        if target in component for path, line in places))
  assert not report, 'modules on an import cycle:\n' + '\n'.join(report)


@pytest.mark.unit
def test_the_cycle_finder_finds_cycles_and_only_cycles():
  # a -> b -> c -> a is one cycle; d imports itself; e -> f -> g is a chain
  # and h is alone.
  with_cycles = {'a': {'b'}, 'b': {'c'}, 'c': {'a', 'e'}, 'd': {'d'},
                 'e': {'f'}, 'f': {'g'}, 'h': set()}
  assert _cycles(with_cycles) == [['a', 'b', 'c'], ['d']]
  # Diamonds and chains share targets without closing a loop.
  without = {'a': {'b', 'c'}, 'b': {'d'}, 'c': {'d'}, 'd': set(),
             'e': {'a', 'd'}}
  assert _cycles(without) == []
  # Two cycles joined by a one-way edge stay two components.
  assert _cycles({'a': {'b'}, 'b': {'a', 'c'}, 'c': {'d'}, 'd': {'c'}}) == [
      ['a', 'b'], ['c', 'd']]


@pytest.mark.unit
def test_the_module_graph_resolves_imports_to_modules(tmp_path):
  # A tiny tree of layer folders: each import resolves to the module it
  # loads, a function-level import included, and a cycle made through a
  # function-level import is reported.
  (tmp_path / 'leantfx').mkdir()
  (tmp_path / 'leantfx' / '__init__.py').write_text('')
  (tmp_path / 'leantfx' / 'config.py').write_text(
      'from leantfx import errors\n')
  (tmp_path / 'leantfx' / 'errors.py').write_text('')
  serving = tmp_path / 'serving'
  serving.mkdir()
  (serving / '__init__.py').write_text('X = 1\n')
  (serving / 'base.py').write_text(
      'from leantfx.serving import X\n'
      'def make():\n  from leantfx.serving import child\n')
  (serving / 'child.py').write_text(
      'import leantfx.serving.base\nfrom leantfx.config import thing\n'
      'import leantfx.serving\n')
  graph = _module_graph(str(tmp_path))
  base = os.path.join('serving', 'base.py')
  child = os.path.join('serving', 'child.py')
  assert graph == {
      'leantfx': {},
      'leantfx.config': {'leantfx.errors': [
          (os.path.join('leantfx', 'config.py'), 1)]},
      'leantfx.errors': {},
      'leantfx.serving': {},
      'leantfx.serving.base': {'leantfx.serving': [(base, 1)],
                               'leantfx.serving.child': [(base, 3)]},
      'leantfx.serving.child': {'leantfx.serving.base': [(child, 1)],
                                'leantfx.config': [(child, 2)],
                                'leantfx.serving': [(child, 3)]},
  }
  assert _cycles(graph) == [['leantfx.serving.base', 'leantfx.serving.child']]
