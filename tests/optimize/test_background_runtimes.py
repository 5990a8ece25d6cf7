"""The ModelOptimizer's server-runtime exports in a worker process.

build_variants exports each candidate's OpenVINO and ONNX variants in a
spawned, low-priority worker process while the next candidate trains, then
times every variant (TFLite's too) in one interleaved run. Real tfmot,
TFLite, OpenVINO and ONNX Runtime; the digits CNN of conftest.
"""
import os
import subprocess
import sys

import psutil
import pytest

from leantfx.components.optimize import config as config_lib
from leantfx.components.optimize.steps import server_variants
from leantfx.components.optimize.steps import variants as variants_lib
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.export import runtime_variants
from leantfx.runtimes import serving_export
from leantfx.components.optimize.evaluation.selection import Budget

RUNS = 20
WARMUP = 2
CALIBRATION = 20


def _config():
  return config_lib.OptimizationConfig(
      candidates=(
          config_lib.Candidate((), ('float32', 'int8')),
          config_lib.Candidate(
              (config_lib.TechniqueStep('clustering', {'epochs': 1}),),
              ('int8',)),
      ),
      budget=Budget(max_accuracy_drop=0.05), latency_runs=RUNS,
      warmup_runs=WARMUP, calibration_samples=CALIBRATION,
      runtimes=('tflite', 'openvino', 'onnx'))


def _build(teacher, digits, tmp_path, failures):
  eval_data = measure.LabeledData.from_dataset(digits.eval_ds())
  config = _config()
  return variants_lib.build_variants(
      teacher, digits.train_ds(), digits.eval_ds(), eval_data, config,
      str(tmp_path / 'variants'), failures,
      server_runtimes=('openvino', 'onnx'))


def test_every_variant_is_built_and_timed_in_one_interleaved_run(
    teacher, digits, tmp_path):
  failures = []
  variants = _build(teacher, digits, tmp_path, failures)
  assert failures == []
  names = [v.name for v in variants]
  # Config order: each candidate's TFLite variants, then its server ones.
  assert names == [
      'baseline/float32', 'baseline/int8',
      'baseline/openvino_float32', 'baseline/openvino_int8',
      'baseline/onnx_float32', 'baseline/onnx_int8',
      'clustering/int8',
      'clustering/openvino_float32', 'clustering/openvino_int8',
      'clustering/onnx_float32', 'clustering/onnx_int8']
  for v in variants:
    # One run timed all of them, so their figures compare.
    assert v.details['latency']['interleaved_with'] == sorted(names), v.name
    assert v.latency_runs >= RUNS and v.latency_p50_ms > 0, v.name
    assert v.accuracy > 0.85, (v.name, v.accuracy)
    assert os.path.exists(v.path), v.path
  by_name = {v.name: v for v in variants}
  # The worker scored the server variants on the same examples: the float
  # IR and the float ONNX file are the model TFLite float32 converts.
  for name in ('baseline/openvino_float32', 'baseline/onnx_float32'):
    assert by_name[name].accuracy == pytest.approx(
        by_name['baseline/float32'].accuracy, abs=0.01)
  # What the worker computed from the Keras model travels with each one.
  assert by_name['clustering/onnx_int8'].technique == 'clustering'
  assert by_name['clustering/onnx_int8'].params == by_name[
      'clustering/int8'].params


def test_a_pair_failing_in_the_worker_is_listed_and_the_rest_go_on(
    teacher, digits, tmp_path, monkeypatch):
  """An empty int8 calibration set fails the int8 pairs, by name."""
  real_job = server_variants.worker_job

  def without_samples(*args, **kwargs):
    job = real_job(*args, **kwargs)
    job['samples'] = []
    return job

  monkeypatch.setattr(server_variants, 'worker_job', without_samples)
  failures = []
  variants = _build(teacher, digits, tmp_path, failures)
  names = {v.name for v in variants}
  assert 'baseline/openvino_float32' in names
  assert 'baseline/onnx_float32' in names
  assert not any(n.endswith(('openvino_int8', 'onnx_int8')) for n in names)
  failed = {(f['candidate'], f['stage']) for f in failures}
  assert failed == {(c, f'{r} int8') for c in ('baseline', 'clustering')
                    for r in ('openvino', 'onnx')}
  assert all('calibration set is empty' in f['error'] for f in failures)


def test_the_worker_process_runs_at_the_lowest_priority():
  pool = server_variants.runtime_pool()
  try:
    worker_pid = pool.submit(os.getpid).result(timeout=300)
    niceness = pool.submit(os.nice, 0).result(timeout=60)
  finally:
    pool.shutdown(wait=True)
  assert worker_pid != os.getpid()
  assert niceness >= runtime_variants.WORKER_NICENESS


# A process that starts the optimizer's worker pool, prints the worker's pid
# and waits to be killed.
_POOL_OWNER = (
    'import os, time\n'
    'from leantfx.components.optimize.steps import server_variants\n'
    'pool = server_variants.runtime_pool()\n'
    'print(pool.submit(os.getpid).result(timeout=600), flush=True)\n'
    'time.sleep(600)\n')


def test_a_sigkilled_optimizer_leaves_no_worker_behind():
  """SIGKILL runs no handler of the optimizer's: the worker must end itself.

  (A worker left behind held 733 MB for 21 minutes after its run was gone.)
  """
  owner = subprocess.Popen([sys.executable, '-c', _POOL_OWNER],
                           stdout=subprocess.PIPE, text=True)
  try:
    # Bounded: the worker imports TensorFlow and the runtimes (seconds idle,
    # a minute or more on a loaded 2-core machine).
    line = owner.stdout.readline()
    assert line.strip().isdigit(), line
    worker = psutil.Process(int(line))
    assert worker.ppid() == owner.pid
    owner.kill()
    owner.wait(timeout=60)
    # The kernel signals the worker as its parent dies; 15 s covers a loaded
    # machine's scheduling, not a shutdown the worker performs.
    gone, _ = psutil.wait_procs([worker], timeout=15)
    assert gone, f'optimizer worker {worker.pid} outlived its killed parent'
  finally:
    owner.kill()


def test_each_candidate_is_saved_once_for_all_its_runtimes_and_modes(
    teacher, digits, tmp_path, monkeypatch):
  """Every TFLite mode and the worker's exports convert one SavedModel."""
  saved = []
  real_save = serving_export.save_serving_model

  def counting_save(model, export_dir):
    saved.append(export_dir)
    return real_save(model, export_dir)

  monkeypatch.setattr(serving_export, 'save_serving_model', counting_save)
  failures = []
  variants = _build(teacher, digits, tmp_path, failures)
  assert failures == []
  # Two candidates, 3 TFLite modes and 8 server pairs among them: 2 saves.
  assert len(variants) == 11
  assert len(saved) == 2, saved
  assert [os.path.basename(os.path.dirname(d)) for d in saved] == [
      'baseline', 'clustering']


def test_a_candidate_that_cannot_be_saved_is_listed_and_the_rest_go_on(
    teacher, digits, tmp_path, monkeypatch):
  real_save = serving_export.save_serving_model

  def failing_for_clustering(model, export_dir):
    if os.path.basename(os.path.dirname(export_dir)) == 'clustering':
      raise ValueError('cannot trace this model')
    return real_save(model, export_dir)

  monkeypatch.setattr(serving_export, 'save_serving_model',
                      failing_for_clustering)
  failures = []
  variants = _build(teacher, digits, tmp_path, failures)
  assert [(f['candidate'], f['stage']) for f in failures] == [
      ('clustering', 'serving SavedModel')]
  assert 'cannot trace this model' in failures[0]['error']
  assert sorted({v.name.split('/')[0] for v in variants}) == ['baseline']
