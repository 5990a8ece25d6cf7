"""Tests of the optimization report: files, links to plots, regeneration."""
import json
import os
import re

import pytest

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
