"""The packages form layers: imports point down, never up or sideways.

ground (leantfx/, schemas/) -> models/ -> components/ -> pipeline/ ->
kubeflow/, serving/ -> cli/ (the front end). Every ``import leantfx.X`` and
``from leantfx.X import ...`` counts, inside functions too: a function-level
import hides a cycle from Python's import order, not from the design.
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
