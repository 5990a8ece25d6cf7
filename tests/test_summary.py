"""The run summary's optimization lines (cli/summary.py)."""
import json
import types

import pytest
from ml_metadata.proto import metadata_store_pb2

from leantfx.cli import summary
from leantfx.pipeline import run_summary

pytestmark = pytest.mark.unit


def _artifact(uri, **properties):
  artifact = metadata_store_pb2.Artifact(uri=uri)
  for key, value in properties.items():
    if isinstance(value, int):
      artifact.custom_properties[key].int_value = value
    else:
      artifact.custom_properties[key].string_value = value
  return artifact


def _summary(optimized):
  execution = run_summary.NodeExecution(
      node_id='ModelOptimizer', execution_id=1, state='complete',
      outputs={'optimized_model': [optimized],
               'report': [_artifact('/out/report/9')]})
  return types.SimpleNamespace(executions={'ModelOptimizer': execution})


CONFIG = types.SimpleNamespace(optimization=object())


def test_pushed_variant_and_report():
  lines = summary._optimization_lines(_summary(_artifact(
      '/out/m', blessed=1, selected_variant='low_rank/int8',
      pushed_destination='/out/tflite/digits/7')), CONFIG)
  assert lines == ['  tflite: low_rank/int8 pushed to /out/tflite/digits/7',
                   '  report: /out/report/9/report.html']


def test_what_the_pushed_tflite_takes_is_said():
  raw = {'inputs': 'raw', 'accuracy': 0.99424, 'eval_examples': 347,
         'latency_p50_ms': 0.1507, 'latency_includes_preprocessing': True}
  lines = summary._optimization_lines(_summary(_artifact(
      '/out/m', blessed=1, selected_variant='low_rank/int8',
      pushed_destination='/out/tflite/digits/7',
      serving_inputs=json.dumps(raw))), CONFIG)
  assert lines[1] == (
      '  tflite: takes the raw columns, as serving_default does (the '
      'Transform folded in): accuracy 0.9942 on 347 raw eval rows, p50 '
      '0.151 ms at batch 1, preprocessing included')
  regression = dict(raw, rmse=55.6)
  del regression['accuracy']
  assert 'rmse 55.6000 on 347' in summary.serving_inputs_line(regression)
  assert summary.serving_inputs_line(
      dict(raw, call_overhead_ms=1.9), 'openvino').endswith(
          'preprocessing included, +1.900 ms for the Python call')
  assert 'takes the transformed features' in summary.serving_inputs_line(
      {'inputs': 'transformed'})
  # Penguins' OpenVINO push: its vocabulary columns are looked up by serve.
  assert summary.serving_inputs_line(
      dict(raw, vocabulary_ids_in=['island', 'sex']), 'openvino').endswith(
          'preprocessing included; island, sex looked up by leantfx serve '
          '(ids in the model; OVMS clients send the ids)')


def test_skipped_candidates_are_listed():
  failure = {'candidate': 'pruning', 'stage': 'pruning',
             'error': "ConfigError: 'conv3x3' (Conv2D) ..."}
  lines = summary._optimization_lines(_summary(_artifact(
      '/out/m', blessed=0, skipped_candidates=json.dumps([failure]))), CONFIG)
  assert lines[1] == ("  tflite: candidate pruning skipped, it failed at "
                      "pruning: ConfigError: 'conv3x3' (Conv2D) ...")
  assert 'no variant blessed' in lines[0]


def test_a_pick_pushed_without_raw_columns_is_not_called_skipped():
  failure = {'candidate': 'low_rank/openvino_float32',
             'stage': 'raw-feature export', 'pushed_inputs': 'transformed',
             'error': 'ConfigError: no HashTableV2; the pushed model takes '
                      'the transformed features instead'}
  lines = summary._optimization_lines(_summary(_artifact(
      '/out/m', blessed=0, skipped_candidates=json.dumps([failure]))), CONFIG)
  assert lines[1] == (
      '  openvino: low_rank/openvino_float32 could not take the raw columns: '
      'ConfigError: no HashTableV2; the pushed model takes the transformed '
      'features instead')


def test_a_pick_that_gave_way_names_its_replacement():
  failure = {'candidate': 'baseline/onnx_int8',
             'stage': 'raw-feature export',
             'replaced_by': 'baseline/onnx_float32',
             'error': 'RawParityError: accuracy drop 0.0391 > 0.01'}
  lines = summary._optimization_lines(_summary(_artifact(
      '/out/m', blessed=0, skipped_candidates=json.dumps([failure]))), CONFIG)
  assert lines[1] == (
      '  onnx: baseline/onnx_int8 could not take the raw columns, '
      'baseline/onnx_float32 is pushed in its place: RawParityError: '
      'accuracy drop 0.0391 > 0.01')


def test_nothing_when_optimization_is_off():
  assert summary._optimization_lines(
      _summary(_artifact('/out/m')),
      types.SimpleNamespace(optimization=None)) == []


def test_fastest_blessed_variant_with_its_speedups():
  fastest = {'name': 'low_rank/onnx_int8', 'runtime': 'onnx', 'mode': 'int8',
             'p50_ms': 0.0123, 'vs_float32': 3.14,
             'vs_tflite_float32': 2.17}
  lines = summary._optimization_lines(_summary(_artifact(
      '/out/m', blessed=1, selected_variant='low_rank/int8',
      pushed_destination='/out/tflite/digits/7',
      fastest_variant=json.dumps(fastest))), CONFIG)
  # Like with like: the runtimes' own calls timed the same way, never the
  # SavedModel's Python call.
  assert lines[1] == (
      '  fastest blessed variant: low_rank/onnx_int8 (onnx int8), p50 0.012 '
      "ms at batch 1 (one thread, inputs bound once): 3.1x the trained "
      "model's onnx float32, 2.2x the trained model's TFLite float32")
  assert 'SavedModel' not in lines[1]
  # A TFLite pick: its float32 is the TFLite float32, said once.
  fastest.update(runtime='tflite', name='pruning/int8', vs_float32=2.17)
  lines = summary._optimization_lines(_summary(_artifact(
      '/out/m', blessed=1, selected_variant='low_rank/int8',
      pushed_destination='/out/tflite/digits/7',
      fastest_variant=json.dumps(fastest))), CONFIG)
  assert lines[1].endswith(
      "inputs bound once): 2.2x the trained model's TFLite float32")


def test_serving_graph_line_lists_every_timed_batch_in_order():
  graph = {'ops': 394, 'call_ms_batch32': 1.57, 'call_ms_batch1': 1.82}
  lines = summary.serving_graph_lines(types.SimpleNamespace(
      serving_graph=graph))
  assert lines == ['  serving graph (raw columns in, Transform included): '
                   '394 ops; a call costs 1.82 ms at batch 1, 1.57 ms at '
                   'batch 32 (TensorFlow, in the Pusher)']
  assert summary.serving_graph_lines(types.SimpleNamespace(
      serving_graph={'ops': 5})) == [
          '  serving graph (raw columns in, Transform included): 5 ops']
  assert summary.serving_graph_lines(types.SimpleNamespace(
      serving_graph={})) == []


def _infra_execution(blessed, reason=None, **figures):
  blessing = _artifact('/out/InfraValidator/blessing/7', blessed=blessed)
  if reason:
    blessing.custom_properties['reason'].string_value = reason
  for name, value in figures.items():
    blessing.custom_properties[f'infra_{name}'].double_value = value
  return {'InfraValidator': run_summary.NodeExecution(
      node_id='InfraValidator', execution_id=7, state='complete',
      outputs={'blessing': [blessing]})}


def test_infra_validation_is_read_from_the_infra_blessing():
  blessed = run_summary._infra_validation(_infra_execution(  # pylint: disable=protected-access
      1, seconds=14.25, load_s=9.5, rows_checked=32.0,
      latency_p50_ms_batch1=2.5, latency_p99_ms_batch1=6.0,
      latency_p50_ms_concurrent=9.0, latency_p99_ms_concurrent=21.0,
      concurrent_clients=8.0))
  assert blessed[:2] == (True, None)
  lines = summary.infra_lines(types.SimpleNamespace(
      infra_blessed=True, infra=blessed[2]))
  assert lines == [
      '  infra validation: served by leantfx serve in 14.2 s (9.5 s to '
      'start); 32 eval rows answered as offline over REST and gRPC; batch 1 '
      'p50 2.50 ms, p99 6.00 ms; 8 clients p50 9.00 ms, p99 21.00 ms (REST)']
  failed = run_summary._infra_validation(_infra_execution(  # pylint: disable=protected-access
      0, reason='it did not load: bad graph', seconds=11.0))
  assert failed[:2] == (False, 'it did not load: bad graph')
  assert summary.infra_lines(types.SimpleNamespace(
      infra_blessed=False, infra=failed[2])) == [
          '  infra validation: failed in 11.0 s']
  assert run_summary._infra_validation({}) == (None, None, {})  # pylint: disable=protected-access


def test_slice_lines_give_each_slice_its_count_and_name_failures():
  config = types.SimpleNamespace(
      dataset=types.SimpleNamespace(is_regression=False),
      evaluation=types.SimpleNamespace(slices=(('island',),),
                                       min_slice_size=10))
  found = types.SimpleNamespace(
      slices={'island=Torgersen': {'example_count': 9.0,
                                   'sparse_categorical_accuracy': 0.5},
              'island=Dream': {'example_count': 22.0,
                               'sparse_categorical_accuracy': 0.7}},
      slice_failures=('island=Dream: slice_gate_accuracy 0.7000',))
  assert summary.slice_lines(found, config) == [
      '  slice island=Dream: 22 examples, accuracy 0.7000',
      '  slice island=Torgersen: 9 examples, accuracy 0.5000 (below 10: '
      'not gated)',
      '  not blessed on slice island=Dream: slice_gate_accuracy 0.7000']
  unsliced = types.SimpleNamespace(
      dataset=config.dataset,
      evaluation=types.SimpleNamespace(slices=(), min_slice_size=10))
  assert summary.slice_lines(found, unsliced) == []


def test_a_variant_rejected_on_a_slice_is_named():
  rejected = {'qat/int8': ['slice island=Biscoe: accuracy drop 0.579 > '
                           '0.01 + 0.098 allowance (n=19)']}
  lines = summary._optimization_lines(_summary(_artifact(
      '/out/m', blessed=1, selected_variant='low_rank/int8',
      pushed_destination='/out/tflite/digits/7',
      slice_rejections=json.dumps(rejected))), CONFIG)
  assert ('  rejected on a slice: qat/int8 (slice island=Biscoe: accuracy '
          'drop 0.579 > 0.01 + 0.098 allowance (n=19))') in lines
