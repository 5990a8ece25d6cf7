"""Tests of the optimization report: files, links to plots, regeneration."""
import dataclasses
import json
import math
import os
import re

import numpy as np
import pytest

from leantfx.components.optimize.evaluation import quality
from leantfx.components.optimize.evaluation import report
from leantfx.components.optimize.evaluation import selection
from leantfx.components.optimize.evaluation.measure import VariantMetrics
from leantfx.errors import ConfigError

pytestmark = pytest.mark.unit

_HISTORY = {'pruning/loss': [0.4, 0.2, 0.15], 'pruning/accuracy': [0.9, 0.95,
                                                                   0.96]}


def _metrics(name, accuracy, size, p99, sparsity=0.0, details=None):
  technique, mode = name.split('/')
  return VariantMetrics(
      name=name, technique=technique, tflite_mode=mode, runtime='tflite',
      path=f'/x/{name}.tflite', accuracy=accuracy, num_examples=397,
      size_bytes=size, gzipped_bytes=int(size * (1 - sparsity / 2)),
      latency_p50_ms=p99 * 0.8, latency_p99_ms=p99, latency_runs=200,
      num_threads=1, params=34186, sparsity=sparsity, details=details or {})


def _variants():
  baseline = VariantMetrics(
      name='baseline/savedmodel', technique='baseline', tflite_mode=None,
      runtime='tensorflow', path='/x/Format-Keras', accuracy=0.97,
      num_examples=397, size_bytes=600_000, gzipped_bytes=500_000,
      latency_p50_ms=1.5, latency_p99_ms=3.0, latency_runs=200,
      params=34186, sparsity=0.0)
  pruned_details = {
      'layer_sparsity': {'conv3x3': 0.8, 'hidden': 0.8, 'logits': 0.79},
      'history': _HISTORY}
  variants = [
      _metrics('baseline/float32', 0.97, 140_000, 0.3),
      _metrics('baseline/int8', 0.968, 39_800, 0.2),
      _metrics('pruning/int8', 0.95, 39_800, 0.2, 0.8, pruned_details),
  ]
  return baseline, variants


def _write(tmp_path, budget):
  baseline, variants = _variants()
  decisions = selection.gate(baseline, variants, budget)
  chosen = selection.select(decisions, 'smallest')
  paths = report.write_report(
      str(tmp_path), baseline, decisions, chosen, budget=budget,
      policy='smallest', source_model_uri='/p/Trainer/model/3',
      pushed_to='/serving/digits/17' if chosen else None)
  return paths, chosen


def _image_sources(html_text):
  return re.findall(r'<img src="([^"]+)"', html_text)


def test_report_files_exist_and_html_references_existing_pngs(tmp_path):
  paths, chosen = _write(tmp_path, selection.Budget(max_accuracy_drop=0.01))
  assert chosen.variant.name == 'baseline/int8'
  for key in ('variants', 'markdown', 'html'):
    assert os.path.isfile(paths[key]), key
  with open(paths['html'], encoding='utf-8') as f:
    html_text = f.read()
  sources = _image_sources(html_text)
  assert sorted(sources) == sorted([
      'accuracy_vs_size.png', 'accuracy_vs_p99.png', 'sparsity_per_layer.png',
      'training_curves.png'
  ])
  for source in sources:
    # Relative names resolve beside the HTML, and they are real PNGs.
    with open(tmp_path / source, 'rb') as f:
      assert f.read(8) == b'\x89PNG\r\n\x1a\n', source
  assert 'SELECTED' in html_text and 'accuracy drop 0.020 &gt; 0.01' in (
      html_text)


def test_markdown_has_one_row_per_variant_plus_the_baseline(tmp_path):
  paths, _ = _write(tmp_path, selection.Budget(max_accuracy_drop=0.01))
  with open(paths['markdown'], encoding='utf-8') as f:
    lines = f.read().splitlines()
  table = [line for line in lines if line.startswith('| ')]
  assert len(table) == 1 + 4  # header, baseline, three variants
  selected = [line for line in table if 'SELECTED' in line]
  assert len(selected) == 1 and 'baseline/int8' in selected[0]
  rejected = [line for line in table if line.startswith('| pruning/int8 ')]
  assert '| no | accuracy drop 0.020 > 0.01 |' in rejected[0]
  assert '![Accuracy vs size on disk](accuracy_vs_size.png)' in lines


def test_nothing_blessed_is_reported_as_such(tmp_path):
  paths, chosen = _write(
      tmp_path, selection.Budget(max_accuracy_drop=0.0, max_size_bytes=1000))
  assert chosen is None
  with open(paths['markdown'], encoding='utf-8') as f:
    text = f.read()
  assert 'Selected: none (no variant blessed); nothing pushed.' in text
  assert 'SELECTED' not in text
  with open(paths['variants'], encoding='utf-8') as f:
    assert json.load(f)['selected'] is None


def test_regenerate_rebuilds_everything_from_variants_json(tmp_path):
  paths, _ = _write(tmp_path, selection.Budget(max_accuracy_drop=0.01))
  with open(paths['markdown'], encoding='utf-8') as f:
    before = f.read()
  for name in os.listdir(tmp_path):
    if name != report.VARIANTS_FILE:
      os.remove(tmp_path / name)
  again = report.regenerate(str(tmp_path))
  with open(again['markdown'], encoding='utf-8') as f:
    assert f.read() == before
  assert all(os.path.isfile(p) for p in again['plots'])
  assert len(again['plots']) == 4


def test_plots_without_sparsity_or_history_are_left_out(tmp_path):
  baseline, variants = _variants()
  decisions = selection.gate(baseline, variants[:2],
                             selection.Budget(max_accuracy_drop=0.01))
  paths = report.write_report(str(tmp_path), baseline, decisions, None,
                              budget=selection.Budget(0.01), policy='fastest')
  assert sorted(os.path.basename(p) for p in paths['plots']) == [
      'accuracy_vs_p99.png', 'accuracy_vs_size.png']
  with open(paths['html'], encoding='utf-8') as f:
    assert 'sparsity_per_layer.png' not in f.read()


def test_regenerate_without_variants_json_is_a_config_error(tmp_path):
  with pytest.raises(ConfigError, match='has no variants.json'):
    report.regenerate(str(tmp_path))
  (tmp_path / 'variants.json').write_text('{"title": "x"}')
  with pytest.raises(ConfigError, match='not a leantfx optimization report'):
    report.regenerate(str(tmp_path))


def test_a_chains_steps_are_plotted_one_after_the_other():
  history = {'pruning/loss': [0.3, 0.2], 'pruning/accuracy': [0.9, 0.95],
             'pqat/loss': [0.25]}
  starts = {key: first for key, _, first in
            report._epochs_in_sequence(history)}
  assert starts == {'pruning/loss': 1, 'pruning/accuracy': 1, 'pqat/loss': 3}


def test_a_pick_pushed_with_transformed_inputs_is_not_called_skipped(
    tmp_path):
  baseline, variants = _variants()
  budget = selection.Budget(max_accuracy_drop=0.05)
  decisions = selection.gate(baseline, variants, budget)
  failures = [
      {'candidate': 'pruning', 'stage': 'pruning', 'error': 'ValueError: x'},
      {'candidate': 'baseline/int8', 'stage': 'raw-feature export',
       'error': 'ConverterError: y; the pushed model takes the transformed '
                'features instead', 'pushed_inputs': 'transformed'}]
  paths = report.write_report(
      str(tmp_path), baseline, decisions, selection.select(decisions,
                                                           'smallest'),
      budget=budget, policy='smallest', source_model_uri='/m',
      pushed_to='/serving/digits/17', failures=failures)
  with open(paths['markdown'], encoding='utf-8') as f:
    text = f.read()
  assert 'Skipped: candidate pruning failed at pruning: ValueError: x' in text
  assert ('Pushed taking the transformed features: baseline/int8 failed at '
          'raw-feature export: ConverterError: y') in text
  assert 'Skipped: candidate baseline/int8' not in text


def test_a_pick_that_gave_way_is_reported_with_its_replacement(tmp_path):
  baseline, variants = _variants()
  budget = selection.Budget(max_accuracy_drop=0.05)
  decisions = selection.gate(baseline, variants, budget)
  failures = [{'candidate': 'baseline/int8', 'stage': 'raw-feature export',
               'error': 'RawParityError: y',
               'replaced_by': 'baseline/float32'}]
  paths = report.write_report(
      str(tmp_path), baseline, decisions, selection.select(decisions,
                                                           'smallest'),
      budget=budget, policy='smallest', source_model_uri='/m',
      pushed_to='/serving/digits/17', failures=failures)
  with open(paths['markdown'], encoding='utf-8') as f:
    text = f.read()
  assert ('Gave way: baseline/int8 failed at raw-feature export, so '
          'baseline/float32 is pushed in its place: RawParityError: y') in text
  assert 'Skipped: candidate baseline/int8' not in text
  assert 'Pushed taking the transformed features' not in text


# ------------------------------------------------------------------ plots ---
# The Pareto front's coordinates are costs (lower is better): latency or
# size, and -accuracy. Each expected front below is worked out by hand.


@pytest.mark.parametrize('points, expected', [
    ([], []),
    ([(1.0, -0.9)], [0]),
    # Faster and more accurate: the second point is dominated.
    ([(1.0, -0.9), (2.0, -0.8)], [0]),
    # A trade-off: faster but less accurate, so both are on the front.
    ([(1.0, -0.8), (2.0, -0.9)], [0, 1]),
    # Exact ties dominate neither each other, so both stay.
    ([(1.0, -0.9), (1.0, -0.9), (2.0, -0.8)], [0, 1]),
    # Equal latency: only the more accurate one.
    ([(1.0, -0.8), (1.0, -0.9)], [1]),
    # Equal accuracy: only the faster one.
    ([(2.0, -0.9), (1.0, -0.9)], [1]),
    # A dominated point in the middle of a front of three.
    ([(1.0, -0.7), (2.0, -0.8), (2.5, -0.75), (3.0, -0.9)], [0, 1, 3]),
    # Latency, size and -accuracy: smaller but slower keeps a point on it.
    ([(1.0, 500.0, -0.9), (2.0, 100.0, -0.9), (2.0, 600.0, -0.9)], [0, 1]),
])
def test_pareto_front(points, expected):
  assert report.pareto_front(points) == expected


def test_a_point_without_a_finite_coordinate_is_off_the_front():
  # nan would otherwise compare false both ways and stay on the front; inf
  # would dominate nothing yet sit on it.
  points = [(math.nan, -0.99), (math.inf, -0.99), (2.0, -0.8), (3.0, -0.7)]
  assert report.pareto_front(points) == [2]


def test_pareto_front_needs_points_of_one_length():
  with pytest.raises(ValueError, match='same number of coordinates'):
    report.pareto_front([(1.0, -0.9), (1.0, 2.0, -0.9)])


_TECHNIQUES = ('baseline', 'pruning', 'qat', 'distillation', 'low_rank',
               'clustering')
_MODES = ('float32', 'float16', 'dynamic', 'int8', 'openvino-int8')


def _thirty_variants():
  """30 variants whose front on both plots is known by construction.

  Ten variants lie on a front (latency 0.05 to 3.4 ms, a 68x span; accuracy
  rising with it); one ties a front variant exactly (so it is on the front
  too); the other 19 each copy a front variant made slower, larger and less
  accurate, so that variant dominates them. Size is latency x 1e5 bytes, so
  the size plot has the same front.
  """
  rng = np.random.default_rng(7)
  names = [f'{t}/{m}' for t in _TECHNIQUES for m in _MODES]
  front = [(0.05 * 1.6 ** k, 0.90 + 0.007 * k) for k in range(10)]
  points = front + [front[4]]
  for _ in range(19):
    p99, accuracy = front[rng.integers(0, 10)]
    points.append((p99 * rng.uniform(1.05, 2.0),
                   accuracy - rng.uniform(0.002, 0.03)))
  variants = [_metrics(name, accuracy, int(p99 * 1e5), p99)
              for name, (p99, accuracy) in zip(names, points)]
  return variants, set(names[:11])


def _labels(figure):
  (ax,) = figure.axes
  return ax, list(ax.texts)


@pytest.mark.parametrize('field', ['latency_p99_ms', 'size_bytes'])
def test_only_the_front_and_the_picks_are_named_and_names_do_not_overlap(
    field):
  baseline, _ = _variants()
  variants, front = _thirty_variants()
  decisions = selection.gate(baseline, variants,
                             selection.Budget(max_accuracy_drop=0.05))
  # Two picks off the front (a policy over held-out data may pick them).
  picks = {variants[15].name, variants[22].name}
  assert not picks & front
  figure = report._scatter_figure(baseline, decisions, field, 'x', 'unit',
                                  picks=picks)
  figure.canvas.draw()
  ax, texts = _labels(figure)
  assert len(texts) == len(front | picks) == 13
  assert {t.get_text() for t in texts} == front | picks
  boxes = [t.get_window_extent() for t in texts]
  for i, a in enumerate(boxes):
    for j in range(i):
      assert not a.overlaps(boxes[j]), (texts[i].get_text(),
                                        texts[j].get_text())
  frame = ax.get_window_extent()
  for text, box in zip(texts, boxes):
    assert frame.contains(box.x0, box.y0) and frame.contains(
        box.x1, box.y1), f'{text.get_text()} leaves the axes'
  legend = [t.get_text() for t in ax.get_legend().get_texts()]
  assert 'other variants' in legend and 'Pareto front' in legend
  assert ax.get_xscale() == 'log'  # 0.05 to 6.8 ms (or x 1e5 bytes)


@pytest.mark.parametrize('baseline_p99, scale', [
    (0.5, 'linear'),  # 0.2 to 0.5 ms: 2.5x
    (3.0, 'log'),  # 0.2 to 3.0 ms: 15x
])
def test_latency_axis_is_logarithmic_only_past_a_10x_span(baseline_p99,
                                                          scale):
  baseline, variants = _variants()
  baseline = dataclasses.replace(baseline, latency_p99_ms=baseline_p99)
  decisions = selection.gate(baseline, variants, selection.Budget(0.05))
  figure = report._scatter_figure(baseline, decisions, 'latency_p99_ms',
                                  'p99 latency', 'ms')
  (ax,) = figure.axes
  assert ax.get_xscale() == scale
  assert ax.get_xlabel() == ('p99 latency (ms, log scale)' if scale == 'log'
                             else 'p99 latency (ms)')


def test_the_report_names_every_runtimes_pick_on_its_plots(tmp_path,
                                                          monkeypatch):
  baseline, variants = _variants()
  budget = selection.Budget(max_accuracy_drop=0.05)
  decisions = selection.gate(baseline, variants, budget)
  drawn = []
  real = report._scatter_figure

  def recording(*args, **kwargs):
    figure = real(*args, **kwargs)
    drawn.append({t.get_text() for t in figure.axes[0].texts})
    return figure

  monkeypatch.setattr(report, '_scatter_figure', recording)
  report.write_report(
      str(tmp_path), baseline, decisions,
      selection.select(decisions, 'smallest'), budget=budget,
      policy='smallest',
      runtime_picks={'openvino': {'selected': 'pruning/int8',
                                  'pushed_to': '/serving/openvino/1'}})
  # pruning/int8 ties baseline/int8 on size and latency but is less
  # accurate: off both fronts, named only as the OpenVINO pick.
  assert len(drawn) == 2
  assert all('pruning/int8' in names for names in drawn)


def test_a_regression_plot_names_the_lower_rmse_front():
  def variant(name, rmse, size):
    return VariantMetrics(
        name=name, technique='baseline', tflite_mode=name.split('/')[-1],
        runtime='tflite', path=f'/x/{name}', accuracy=None, num_examples=44,
        size_bytes=size, gzipped_bytes=size, latency_p50_ms=0.01,
        latency_p99_ms=0.02, latency_runs=200, rmse=rmse, mae=rmse * 0.8)

  baseline = variant('baseline/savedmodel', 50.0, 9_000)
  variants = [variant('baseline/float16', 50.0, 1_500),
              variant('baseline/int8', 51.0, 1_200),
              variant('baseline/dynamic', 54.0, 1_000),
              # As large as float16 and worse: dominated.
              variant('pruning/float16', 52.0, 1_500)]
  decisions = selection.gate(baseline, variants,
                             selection.Budget(0.01, max_rmse_increase=0.05),
                             quality.RMSE)

  def named(field):
    figure = report._scatter_figure(baseline, decisions, field, 'x', 'u',
                                    quality.RMSE)
    return {t.get_text() for t in figure.axes[0].texts}

  # Smaller trades against lower RMSE: three on the front.
  assert named('size_bytes') == {'baseline/float16', 'baseline/int8',
                                 'baseline/dynamic'}
  # Every latency is 0.02 ms: only the lowest RMSE is on that front.
  assert named('latency_p99_ms') == {'baseline/float16'}
