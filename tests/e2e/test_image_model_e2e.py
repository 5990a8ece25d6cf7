"""End to end: a real image model through `leantfx run`, every runtime's int8.

The product's mobilenet_v2 architecture (MobileNetV2 alpha 0.35 and the MLP
head, 438k parameters) on the bundled digits, resized to 32 px inside the
model, trained from scratch to a real accuracy; then the ModelOptimizer
builds the trained model in every TFLite mode and in the OpenVINO and ONNX
Runtime float32 and int8 modes (--techniques none: fine-tuning such a model
once per technique would take longer than its training), scores each on the
selection half of the eval split through its own runtime, times it with the
inputs bound once, and pushes each runtime's pick with the raw pixel
columns in.

Measured on this machine (2 cores, idle, 2026-12-04): 402 s in all (Trainer
197 s, ModelOptimizer 112 s); eval accuracy 0.9539, with 900 steps.
"""
import json
import os

import pytest

from leantfx import datasets
from leantfx.pipeline import run_summary
from tests.e2e import pushed
from tests.helpers import run_cli

pytestmark = pytest.mark.e2e

# The schedule of benchmarks/bench_optimize.py's figure 6 (Adam 3e-3, 100
# warm-up steps, cosine decay), run twice as long. At figure 6's 900 steps
# four runs of this same command scored 0.9539, 0.954, 0.968 and 0.824 (a
# fresh-clone CI run: the model was not blessed). Those runs had the same
# seed and differed from the first epoch on (loss 2.326 vs 2.339): Augment
# drew other augmented images in every run (fixed since: docs/data.md),
# and the order the Trainer reads the examples in still changes between
# runs; a from-scratch MobileNetV2 at 900 steps on 2.9k images had not
# converged in every such run. At 1800 steps two runs scored 0.9827 and 0.9827 (2026-12-05, 265 s
# each with --no-optimize, side by side on the 2 cores). The Trainer's
# default schedule reached 0.867 (docs/measurements).
IMAGE_RUN = [
    '--dataset', 'digits', '--architecture', 'mobilenet_v2',
    '--width-multiplier', '0.35', '--image-size', '32', '--train-steps',
    '1800', '--learning-rate', '0.003', '--warmup-steps', '100',
    '--lr-decay', 'cosine', '--techniques', 'none'
]
# This test's own bar (the Evaluator's default gate is relative: at most
# 0.01 below the strong baseline of the run); the two runs measured scored 0.95.
MIN_ACCURACY = 0.9
# Known open problem: ONNX Runtime's int8 of this MobileNetV2 agrees with the
# float SavedModel on 0.966 of the 356 raw eval rows (accuracy 0.961 vs
# 0.980), whatever the calibration: MinMax, Percentile or Entropy on 100 or
# 400 of the ExampleGen's train rows gave 0.955-0.961 (2026-12-06, one run's
# model); OpenVINO's int8 agrees on 0.997. Two int8 models calibrated apart
# (its raw fold and its transformed-input twin) then differ by 1-2 points,
# which is the parity fallback _int8_parity_fallback accepts. When the raw
# fold is pushed it must agree on 0.95; the other runtimes keep 0.97.
ONNX_INT8_AGREEMENT = 0.95
MODES = {
    'tflite': {'float32', 'float16', 'dynamic_range', 'int8', 'int16x8'},
    'openvino': {'openvino_float32', 'openvino_int8'},
    'onnx': {'onnx_float32', 'onnx_int8'},
}


@pytest.fixture(scope='module')
def image_run(tmp_path_factory):
  output = str(tmp_path_factory.mktemp('mobilenet'))
  result = run_cli(['run', '--output', output] + IMAGE_RUN, optimize=True)
  assert result.returncode == 0, result.stdout + result.stderr
  summary = run_summary.summarize(
      os.path.join(output, 'metadata.sqlite'), 'leantfx-digits')
  report_uri = summary.executions['ModelOptimizer'].outputs['report'][0].uri
  with open(os.path.join(report_uri, 'variants.json'), encoding='utf-8') as f:
    report = json.load(f)
  return output, result.stdout, summary, report


def test_the_mobilenet_trains_to_a_real_accuracy_and_is_pushed(image_run):
  _, stdout, summary, report = image_run
  assert summary.accuracy >= MIN_ACCURACY, stdout
  assert summary.blessed and summary.pushed, stdout
  # The model the optimizer read is the MobileNetV2 (its layer names), not
  # the digits' default CNN.
  layers = report['baseline']['details']['layer_sparsity']
  assert any(name.startswith('mobilenetv2_0.35_32') for name in layers), (
      layers)
  assert report['baseline']['params'] > 400_000, report['baseline']


def _int8_parity_fallback(failure):
  """An int8 pick whose raw-pixel fold missed the parity budget.

  Known open problem (ONNX_INT8_AGREEMENT): ONNX Runtime's int8 of this
  model moves 1-2 points with its calibration rows, so its raw fold and its
  transformed-input twin, calibrated apart, can differ by more than the
  0.01 parity budget (0.0225 and 0.0169 in two runs, the second calibrated
  on the ExampleGen's rows); the pick then gives way to the runtime's next
  blessed variant (raw_fold.give_way, ``replaced_by``), or, with none left,
  its transformed-input model is pushed; the failure is listed either way,
  which is what this accepts, for int8 only.
  """
  return (failure['stage'] == 'raw-feature export' and
          failure['candidate'].endswith('int8') and
          failure['error'].startswith('RawParityError') and
          (failure.get('pushed_inputs') == 'transformed' or
           bool(failure.get('replaced_by'))))


def _known(failure):
  return _int8_parity_fallback(failure)


def test_every_runtime_and_mode_is_built_scored_and_timed(image_run):
  _, _, _, report = image_run
  built = {}
  for decision in report['decisions']:
    variant = decision['variant']
    # --techniques none: the trained model alone, in every mode.
    assert variant['technique'] == 'baseline', variant['name']
    built.setdefault(variant['runtime'], set()).add(
        variant['name'].split('/', 1)[1])
    # Scored on the selection half through its own runtime, timed with the
    # inputs bound once (at least 200 timed runs, interleaved rounds).
    assert variant['num_examples'] > 150, variant['name']
    assert variant['latency_runs'] >= 200, variant['name']
    assert 0 < variant['latency_p50_ms'] <= variant['latency_p99_ms'], (
        variant['name'])
    assert len(variant['latency_round_p50_ms']) >= 3, variant['name']
  assert built == MODES, built
  assert [f for f in report['failures']
          if not _known(f)] == [], report['failures']
  # TFLite int8 on this model stays inside the 1-point budget (its drop
  # measured 0.0 here and -0.28 pt in the benchmark).
  tflite_int8 = next(d for d in report['decisions']
                     if d['variant']['name'] == 'baseline/int8')
  assert tflite_int8['blessed'], tflite_int8['reasons']


def test_each_runtime_pushes_its_pick_with_the_raw_pixels_in(image_run):
  output, stdout, summary, report = image_run
  # TFLite: hashed, the SavedModel's raw pixel columns and outputs; on the
  # whole raw eval split its classes are the SavedModel's on all but a few
  # (quantized against float), and its manifest's serving accuracy is its
  # own on those rows.
  manifest, got = pushed.check_pushed_tflite(output, 'digits', summary,
                                             stdout)
  labels = pushed.label_ids(pushed.eval_examples(summary),
                            datasets.BUNDLED['digits'])
  assert manifest['metrics']['serving_inputs']['accuracy'] == pytest.approx(
      float((got == labels).mean()), abs=1e-6)
  assert manifest['metrics']['accuracy'] >= MIN_ACCURACY - 0.02, manifest
  # OpenVINO and ONNX Runtime: each runtime's pick, its files hashed, raw
  # columns in, run through its own runtime.
  fallbacks = {f['candidate'].split('/')[1].split('_')[0]
               for f in report['failures'] if _int8_parity_fallback(f)
               and f.get('pushed_inputs') == 'transformed'}
  manifests = pushed.check_pushed_runtimes(output, 'digits', summary, stdout,
                                           transformed=fallbacks,
                                           min_agreement={
                                               'onnx': ONNX_INT8_AGREEMENT})
  for runtime, pick in report['runtime_picks'].items():
    assert pick['pushed_to'] == os.path.join(
        output, runtime, 'digits', pushed.versions(
            os.path.join(output, runtime, 'digits'))[0]), pick
    # 'baseline/openvino_int8' -> the manifest's runtime and mode.
    assert (manifests[runtime]['runtime'], manifests[runtime]['mode']) == (
        tuple(pick['selected'].split('/')[1].split('_', 1))), pick
