"""--slice-by: the options, the configs they build and the Evaluator's gate.

The options go through the real parser and the one config builder
(cli/build.py); bad slices are refused by the console script's main
in-process, with exit 2 before anything runs. The Evaluator's EvalConfig is
checked with TFMA's own threshold reader and validator
(tensorflow_model_analysis 0.47), fed the metrics a slice would have.
"""
import argparse
import csv
import os

import numpy as np
import pytest
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis.evaluators import metrics_validator
from tensorflow_model_analysis.metrics import metric_specs
from tensorflow_model_analysis.metrics import metric_types

from leantfx import config as config_lib
from leantfx import datasets
from leantfx import slicing
from leantfx.cli import build
from leantfx.cli import main
from leantfx.cli import options
from leantfx.errors import ConfigError
from leantfx.pipeline import pipeline
from leantfx.pipeline import slice_metrics

pytestmark = pytest.mark.unit

PENGUINS = datasets.BUNDLED['penguins']


def _build(tmp_path, argv, data_root=None):
  argv = ['run', '--output', str(tmp_path / 'out')] + argv
  if data_root:
    argv += ['--data-root', data_root]
  args = main.build_parser().parse_args(argv)
  return build.build_pipeline_config(args, build.LocalTarget(
      str(tmp_path / 'out'))).config


def test_slice_by_is_repeatable_and_a_comma_makes_a_cross(tmp_path):
  config = _build(tmp_path, ['--dataset', 'penguins', '--slice-by',
                             'island', '--slice-by', 'island,sex',
                             '--min-slice-size', '8'])
  assert config.evaluation.slices == (('island',), ('island', 'sex'))
  assert config.evaluation.min_slice_size == 8
  gate = config.optimization.slices
  assert gate.columns == (('island',), ('island', 'sex'))
  assert gate.min_slice_size == 8
  # Without --slice-by nothing is sliced, in either gate.
  plain = _build(tmp_path, ['--dataset', 'penguins'])
  assert plain.evaluation.slices == ()
  assert plain.optimization.slices.columns == ()


def test_watch_passes_the_slices_on_to_each_run():
  parser = argparse.ArgumentParser()
  options.add_pipeline_options(parser, 'watch')
  args = parser.parse_args(['--slice-by', 'island', '--slice-by',
                            'island,sex', '--min-slice-size', '15'])
  argv = options.pipeline_argv(parser, args)
  assert argv == ['--slice-by=island', '--slice-by=island,sex',
                  '--min-slice-size=15']
  run = argparse.ArgumentParser()
  options.add_pipeline_options(run, 'run')
  again = run.parse_args(argv)
  assert again.slice_by == ['island', 'island,sex']
  assert again.min_slice_size == 15


def _own_csv(tmp_path, header, rows):
  folder = tmp_path / 'data' / 'span-1'
  folder.mkdir(parents=True)
  with open(folder / 'part.csv', 'w', newline='', encoding='utf-8') as f:
    writer = csv.writer(f)
    writer.writerow(header)
    writer.writerows(rows)
  return str(tmp_path / 'data')


def test_a_renamed_column_is_sliced_by_its_name_as_written(tmp_path):
  # 'Island name' is no identifier: ExampleGen writes it under a derived
  # feature key, which the Evaluator's slicing spec must use.
  rng = np.random.default_rng(0)
  rows = [[['Biscoe', 'Dream'][i % 2], f'{rng.normal():.3f}', str(i % 3),
           ['a', 'b'][i % 2 ^ (i % 3 == 0)]] for i in range(60)]
  root = _own_csv(tmp_path, ['Island name', 'x', 'year', 'y'], rows)
  config = _build(tmp_path, ['--label', 'y', '--categorical', 'Island name',
                             '--slice-by', 'Island name', '--slice-by',
                             'Island name,year', '--no-optimize'], root)
  key = config.dataset.original_names['Island name']
  assert key != 'Island name' and key.startswith('island_name_')
  # A numeric column of three values is a fine slice.
  assert config.evaluation.slices == ((key,), (key, 'year'))
  gate = build.slice_gate(config.evaluation, config.dataset)
  assert gate.names == (('Island name',), ('Island name', 'year'))


@pytest.mark.parametrize('flags, fragments', [
    (['--slice-by', 'beak'],
     ["--slice-by 'beak' is not a column of 'penguins'", "'island'"]),
    (['--slice-by', 'island,beak'], ["--slice-by 'beak'"]),
    (['--slice-by', 'species'], ["--slice-by 'species' is the label"]),
    (['--slice-by', 'bill_length_mm'],
     ["'bill_length_mm' is a numeric column with more than 50 distinct"]),
    (['--slice-by', 'island,'], ['has an empty column name']),
    (['--slice-by', 'island', '--slice-by', 'island'], ['given twice']),
    (['--slice-by', 'island,island'], ['names a column twice']),
    (['--min-slice-accuracy', '0.8'], ['and no --slice-by names any']),
    (['--slice-by', 'island', '--max-slice-rmse-increase', '0.3'],
     ['--max-slice-rmse-increase gate(s) a regression']),
])
@pytest.mark.parametrize('command', ['run', 'compile'])
def test_bad_slices_exit_2_before_anything_runs(tmp_path, cli, flags,
                                                fragments, command):
  out = str(tmp_path / 'out')
  if command == 'run':
    argv = ['run', '--dataset', 'penguins', '--output', out]
  else:
    argv = ['compile', '--target', 'kubeflow', '--dataset', 'penguins',
            '--image', 'example.com/leantfx:1', '--out',
            str(tmp_path / 'p.yaml'), '--pipeline-root', 'gs://b/root',
            '--data-root', 'gs://b/data', '--serving-dir', 'gs://b/serving',
            '--tflite-dir', 'gs://b/tflite']
  result = cli(argv + flags)
  assert result.returncode == 2, (result.returncode, result.stderr)
  assert 'Traceback' not in result.stderr
  for fragment in fragments:
    assert fragment in result.stderr, (fragment, result.stderr)
  assert not os.path.exists(os.path.join(out, 'tfx'))
  assert not os.path.exists(tmp_path / 'p.yaml')


def test_a_tfrecord_span_counts_its_numeric_slice_values_too(tmp_path, cli):
  root = str(tmp_path / 'data')
  datasets.prepare('penguins', root, 1, 'tfrecord')
  out = str(tmp_path / 'out')
  result = cli(['run', '--dataset', 'penguins', '--format', 'tfrecord',
                '--data-root', root, '--output', out, '--slice-by',
                'body_mass_g'])
  assert result.returncode == 2, (result.returncode, result.stderr)
  assert "'body_mass_g' is a numeric column with more than 50" in (
      result.stderr)
  # A categorical feature of the same span is fine.
  config = _build(tmp_path, ['--dataset', 'penguins', '--format', 'tfrecord',
                             '--slice-by', 'island'], root)
  assert config.evaluation.slices == (('island',),)


def test_regression_slices_gate_rmse_and_refuse_accuracy_terms(tmp_path):
  config = _build(tmp_path, ['--dataset', 'diabetes', '--slice-by', 'sex',
                             '--max-slice-rmse-increase', '0.3'])
  assert config.evaluation.slices == (('sex',),)
  assert config.evaluation.max_slice_rmse_increase == 0.3
  with pytest.raises(ConfigError, match='--min-slice-accuracy'):
    _build(tmp_path, ['--dataset', 'diabetes', '--slice-by', 'sex',
                      '--min-slice-accuracy', '0.5'])


def test_parse_flags_keeps_a_column_whose_name_holds_a_comma():
  assert slicing.parse_flags(['a,b'], ['a,b', 'c']) == (('a,b',),)
  assert slicing.parse_flags(['a, c'], ['a', 'c']) == (('a', 'c'),)


# ----------------------------------------------------- the Evaluator's gate


def _thresholds(eval_config):
  return metric_specs.metric_thresholds_from_metrics_specs(
      eval_config.metrics_specs, eval_config=eval_config)


def test_eval_config_slices_and_gates_each_slice_by_tfmas_own_reading():
  # --min-accuracy 0.9 given: the absolute overall bound (the default gate
  # is relative to the run's baselines, components/relative_gate).
  evaluation = config_lib.EvaluationConfig(
      min_accuracy=0.9,
      slices=(('island',), ('island', 'sex')), min_slice_accuracy=0.7,
      max_slice_accuracy_drop=0.15, min_slice_size=12)
  eval_config = pipeline._eval_config(PENGUINS, evaluation)  # pylint: disable=protected-access
  # Round trip through TFMA's proto: what the Evaluator parses.
  parsed = tfma.EvalConfig.FromString(eval_config.SerializeToString())
  assert [list(s.feature_keys) for s in parsed.slicing_specs] == [
      [], ['island'], ['island', 'sex']]
  by_name = {}
  for key, pairs in _thresholds(parsed).items():
    by_name[(key.name, key.is_diff)] = [
        (list(spec.feature_keys) if spec is not None else None, threshold)
        for spec, threshold in pairs]
  # The overall gate holds on the overall slice only (an empty spec), not
  # on every slice as a MetricConfig.threshold would.
  assert by_name[('sparse_categorical_accuracy', False)][0][0] == []
  assert by_name[('sparse_categorical_accuracy', False)][0][1].lower_bound.value == 0.9
  gate = by_name[('slice_gate_accuracy', False)]
  assert [spec for spec, _ in gate] == [['island'], ['island', 'sex']]
  assert all(t.lower_bound.value == 0.7 for _, t in gate)
  change = by_name[('slice_gate_accuracy', True)]
  assert all(t.absolute.value == pytest.approx(-0.15) for _, t in change)
  (config,) = [m for s in parsed.metrics_specs for m in s.metrics
               if m.class_name == 'SliceGateAccuracy']
  assert config.module == slice_metrics.__name__
  assert '"min_slice_size": 12' in config.config


def _validate(eval_config, slice_key, values):
  """TFMA's validator on one slice's metrics: {name: value} for the
  candidate, {name: (value, baseline value)} with a baseline."""
  metrics = {}
  for name, value in values.items():
    if isinstance(value, tuple):
      value, base = value
      candidate = metric_types.MetricKey(name=name,
                                         model_name=tfma.CANDIDATE_KEY)
      metrics[candidate] = value
      metrics[candidate.make_baseline_key(tfma.BASELINE_KEY)] = base
      metrics[candidate.make_diff_key()] = value - base
    else:
      metrics[metric_types.MetricKey(name=name)] = value
  return metrics_validator.validate_metrics((slice_key, metrics),
                                            eval_config).validation_ok


def test_tfma_passes_a_good_slice_and_a_small_one_and_fails_a_poor_one():
  evaluation = config_lib.EvaluationConfig(min_accuracy=0.9,
                                           slices=(('island',),),
                                           min_slice_accuracy=0.7)
  # As TFX's Evaluator prepares it on a first run (no blessed model yet).
  eval_config = tfma.utils.update_eval_config_with_defaults(
      pipeline._eval_config(PENGUINS, evaluation), has_baseline=False,
      rubber_stamp=True)  # pylint: disable=protected-access
  biscoe = (('island', 'Biscoe'),)
  # A slice's own accuracy of 0.75 is no failure of the overall 0.9 bound.
  assert _validate(eval_config, biscoe, {
      'sparse_categorical_accuracy': 0.75, 'slice_gate_accuracy': 0.75,
      'example_count': 40})
  assert not _validate(eval_config, biscoe, {
      'sparse_categorical_accuracy': 0.6, 'slice_gate_accuracy': 0.6,
      'example_count': 40})
  # A slice below the size reads NOT_JUDGED, whatever its accuracy.
  assert _validate(eval_config, biscoe, {
      'sparse_categorical_accuracy': 0.2,
      'slice_gate_accuracy': slice_metrics.NOT_JUDGED, 'example_count': 4})
  # The overall slice keeps the overall bound, and no slice bound.
  assert _validate(eval_config, (), {
      'sparse_categorical_accuracy': 0.95, 'slice_gate_accuracy': 0.6,
      'example_count': 69})
  assert not _validate(eval_config, (), {
      'sparse_categorical_accuracy': 0.85, 'slice_gate_accuracy': 0.85,
      'example_count': 69})


def test_tfma_change_threshold_per_slice_against_the_last_blessed_model():
  evaluation = config_lib.EvaluationConfig(slices=(('island',),),
                                           max_slice_accuracy_drop=0.1)
  # As TFX's Evaluator prepares it beside the last blessed model.
  eval_config = tfma.utils.update_eval_config_with_defaults(
      pipeline._eval_config(PENGUINS, evaluation), has_baseline=True)  # pylint: disable=protected-access
  dream = (('island', 'Dream'),)
  # TFMA computes every metric on every slice; the overall change
  # threshold (0.01) does not hold on a slice.
  assert _validate(eval_config, dream, {
      'sparse_categorical_accuracy': (0.85, 0.92),
      'slice_gate_accuracy': (0.85, 0.92)})
  assert not _validate(eval_config, dream, {
      'sparse_categorical_accuracy': (0.80, 0.92),
      'slice_gate_accuracy': (0.80, 0.92)})
  # Regression: the slice's RMSE may rise by max_slice_rmse_increase.
  regression = tfma.utils.update_eval_config_with_defaults(
      pipeline._eval_config(  # pylint: disable=protected-access
          datasets.BUNDLED['diabetes'], config_lib.EvaluationConfig(
              slices=(('sex',),), max_slice_rmse_increase=0.2)),
      has_baseline=True)
  sex = (('sex', 1.0),)

  def sex_slice(rmse, gate):
    return {'root_mean_squared_error': rmse, 'r2_score': (0.1, 0.2),
            'slice_gate_rmse': gate}

  assert _validate(regression, sex, sex_slice((59.0, 50.0), (59.0, 50.0)))
  assert not _validate(regression, sex, sex_slice((61.0, 50.0),
                                                  (61.0, 50.0)))
  assert _validate(regression, sex, sex_slice(
      (90.0, 50.0), (slice_metrics.NOT_JUDGED, slice_metrics.NOT_JUDGED)))


def _slice_metric(metric, labels, predictions, splits=1):
  computation = metric.computations(
      eval_config=tfma.EvalConfig(model_specs=[tfma.ModelSpec()]))[0]
  combiner = computation.combiner
  accumulators = []
  for part in np.array_split(np.arange(len(labels)), splits):
    acc = combiner.create_accumulator()
    for i in part:
      acc = combiner.add_input(acc, metric_types.StandardMetricInputs(
          labels=np.array([labels[i]]),
          predictions=np.asarray(predictions[i]),
          example_weights=np.array([1.0])))
    accumulators.append(acc)
  (value,) = combiner.extract_output(
      combiner.merge_accumulators(accumulators)).values()
  return value


def test_slice_gate_metrics_are_plain_figures_from_the_minimum_size_on():
  labels = [0, 1, 2, 1, 0, 2, 2, 1, 0, 0]
  scores = [np.eye(3)[c] for c in [0, 1, 2, 1, 0, 2, 0, 0, 0, 0]]
  accuracy = slice_metrics.SliceGateAccuracy(min_slice_size=10)
  assert _slice_metric(accuracy, labels, scores) == pytest.approx(0.8)
  assert _slice_metric(accuracy, labels, scores, splits=3) == (
      pytest.approx(0.8))
  small = slice_metrics.SliceGateAccuracy(min_slice_size=11)
  assert _slice_metric(small, labels, scores) == slice_metrics.NOT_JUDGED
  targets = np.arange(10.0)
  predictions = [np.array([t + e]) for t, e in zip(targets, [3, -4] * 5)]
  rmse = slice_metrics.SliceGateRmse(min_slice_size=10)
  assert _slice_metric(rmse, targets, predictions, splits=2) == (
      pytest.approx(np.sqrt(12.5)))


def test_watch_refuses_a_bad_slice_before_it_polls(tmp_path, cli):
  (tmp_path / 'data').mkdir()
  result = cli(['watch', '--data-root', str(tmp_path / 'data'), '--output',
                str(tmp_path / 'out'), '--slice-by', 'island,',
                '--min-slice-accuracy', '0.8'])
  assert result.returncode == 2, (result.returncode, result.stderr)
  assert "--slice-by 'island,' has an empty column name" in result.stderr
  assert 'Traceback' not in result.stderr
