"""Every package says what it holds, and docs/development.md lists it.

A reader finds a concept by a package's name and its one-line docstring;
the layout table in docs/development.md is where they look first, so a new
package that is not in it fails here.
"""
import ast
import os

import pytest

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Not packages of the product: the tests themselves and build output.
_SKIPPED = ('tests', 'build', '.venv', 'leantfx.egg-info', '.git')


def _packages():
  for folder, dirs, files in os.walk(ROOT):
    rel = os.path.relpath(folder, ROOT)
    if rel.split(os.sep)[0] in _SKIPPED:
      dirs[:] = []
      continue
    dirs[:] = [d for d in dirs if not d.startswith(('.', '__'))]
    if '__init__.py' in files and rel != '.':
      yield rel.replace(os.sep, '/')


PACKAGES = sorted(_packages())


def test_the_walk_finds_the_packages():
  assert {'leantfx', 'components/optimize/techniques', 'serving',
          'cli'} <= set(PACKAGES), PACKAGES


@pytest.mark.parametrize('package', PACKAGES)
def test_every_package_has_a_docstring_saying_what_it_holds(package):
  with open(os.path.join(ROOT, package, '__init__.py'), encoding='utf-8') as f:
    doc = ast.get_docstring(ast.parse(f.read()))
  assert doc and len(doc.split()) >= 4, (
      f'{package}/__init__.py needs a docstring saying what the package '
      'holds')


def test_docs_development_lists_every_package():
  with open(os.path.join(ROOT, 'docs', 'development.md'),
            encoding='utf-8') as f:
    text = f.read()
  missing = [p for p in PACKAGES
             if f'`{p}/`' not in text and f'`{p.rsplit("/", 1)[-1]}/`'
             not in text]
  assert not missing, (
      f'docs/development.md does not name {missing}: add each to its '
      'layout table, one line on what it holds')
