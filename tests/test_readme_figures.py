"""README's figures are the rows of one regenerated table (docs/figures.json).

`make bench BENCH_ARGS=readme` (benchmarks/bench_readme.py) measures every
figure README.md quotes in one run and rewrites README's generated blocks
from it; these checks keep it that way: the blocks are exactly what the
table renders, no figure is written by hand outside them, each serving row
changes one thing against its parent, and the serving targets hold in the
table.
"""
import json
import os
import re

import pytest

from benchmarks import bench_readme

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _doc():
  with open(bench_readme.FIGURES_JSON, encoding='utf-8') as f:
    return json.load(f)


def _readme():
  with open(bench_readme.README, encoding='utf-8') as f:
    return f.read()


def test_readme_blocks_are_what_the_table_renders():
  doc = _doc()
  blocks = bench_readme.readme_block_texts(_readme())
  assert set(blocks) == {'cost', 'sample'}
  assert blocks == bench_readme.readme_blocks(doc)


def test_the_table_is_a_whole_run_with_its_machine():
  doc = _doc()
  assert tuple(doc['parts']) == bench_readme.PARTS
  machine = doc['machine']
  for key in ('cpu_model', 'cpu_flags', 'cores', 'versions', 'commit'):
    assert machine[key] not in (None, '', 'unknown'), key
  assert doc['load_before'] >= 0 and doc['load_after'] >= 0
  ids = [r['id'] for r in doc['rows']]
  assert len(ids) == len(set(ids))
  assert all(r['command'] for r in doc['rows'])
  with open(bench_readme.FIGURES_MD, encoding='utf-8') as f:
    assert f.read() == bench_readme.figures_markdown(doc)


# A number followed by a unit: what a hand-written figure looks like.
_FIGURE = re.compile(
    r'\d[\d,.]*\s*(?:s|ms|min|minutes|seconds|hours|MB|GB|KB|req/s|%|x)\b')


def test_no_figure_outside_the_generated_blocks():
  text = bench_readme.rewrite_readme(
      _readme(), {name: '' for name in ('cost', 'sample')})
  assert _FIGURE.findall(text) == []


def test_the_figure_check_finds_a_hand_written_figure():
  assert _FIGURE.findall('the run took 173.6 s, 2,400 req/s, 15.8x') == [
      '173.6 s', '2,400 req/s', '15.8x']


def test_each_serving_row_changes_one_thing():
  chain = bench_readme._serving_chain(  # pylint: disable=protected-access
      {'tflite': {}, 'openvino': {}, 'onnx': {}})
  rows = {row[0]: row for row in chain}
  for row_id, _, server, key, workers, batching, parent, _ in chain:
    if parent is None:
      continue
    p_server, p_key, p_workers, p_batching = rows[parent][2:6]
    app = 'flask' if server in ('flask', 'gunicorn') else server
    p_app = 'flask' if p_server in ('flask', 'gunicorn') else p_server
    changed = [name for name, a, b in (
        ('server', app, p_app), ('runtime', key[0], p_key[0]),
        ('precision', key[1], p_key[1]), ('workers', workers, p_workers),
        ('batching', batching, p_batching)) if a != b]
    assert len(changed) == 1, (row_id, parent, changed)


def test_the_serving_targets_hold_in_the_table():
  rows = {r['id']: r for r in _doc()['rows']}
  best = rows['serving.best']
  assert best['value'] >= 1500 and best['p99_ms'] <= 15, best
  assert rows['serving.serve.x_flask']['value'] >= 3, rows['serving.serve']
  assert all(r.get('failed', 0) == 0 for r in rows.values()
             if r['id'].startswith('serving.'))
