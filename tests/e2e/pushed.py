"""What a `leantfx run` pushed, read back and run through each runtime.

Shared by the end-to-end tests of the default digits run
(test_pipeline_e2e.py) and of the MobileNetV2 run (test_image_model_e2e.py):
the eval split's tf.Examples as the SavedModel's raw columns, and the
checks that every runtime's push takes those columns and agrees with the
SavedModel.
"""
import glob
import hashlib
import json
import os

import numpy as np
import tensorflow as tf

from leantfx.cli import main as cli_main
from leantfx.components.optimize.evaluation import measure
from leantfx.runtimes import openvino as openvino_runtime
from leantfx.runtimes import push
from leantfx.components.optimize.export import raw_runtimes

SERVER_RUNTIMES = ('openvino', 'onnx')


def versions(serving_dir):
  """The numeric version folders under serving_dir, sorted (as text)."""
  if not os.path.isdir(serving_dir):
    return []
  return sorted(d for d in os.listdir(serving_dir) if d.isdigit())


def eval_examples(summary):
  """The run's eval split as serialized tf.Examples (CsvExampleGen's)."""
  uri = summary.executions['CsvExampleGen'].outputs['examples'][0].uri
  files = glob.glob(os.path.join(uri, 'Split-eval', '*'))
  assert files, uri
  return [
      r.numpy()
      for r in tf.data.TFRecordDataset(files, compression_type='GZIP')
  ]


def label_ids(serialized, spec):
  """The class index of each tf.Example's label in spec.classes."""
  ids = []
  for record in serialized:
    feature = tf.train.Example.FromString(record).features.feature[spec.label]
    value = (feature.bytes_list.value[0].decode()
             if feature.bytes_list.value else str(feature.int64_list.value[0]))
    ids.append(spec.classes.index(value))
  return np.array(ids)


def raw_columns(serialized, input_specs):
  """tf.Examples as the serving_default signature's [batch] raw columns."""
  columns = {name: [] for name in input_specs}
  for record in serialized:
    features = tf.train.Example.FromString(record).features.feature
    for name, spec in input_specs.items():
      feature = features.get(name)
      values = []
      if feature is not None:
        values = (list(feature.bytes_list.value) or
                  list(feature.float_list.value) or
                  list(feature.int64_list.value))
      if spec.dtype == tf.string:
        columns[name].append(values[0] if values else b'')
      else:
        columns[name].append(float(values[0]) if values else float('nan'))
  return {
      name: tf.constant(values, dtype=input_specs[name].dtype)
      for name, values in columns.items()
  }


def saved_model_classes(summary):
  """(raw eval columns as numpy, the pushed SavedModel's class ids)."""
  saved = tf.saved_model.load(summary.pushed_path).signatures[
      'serving_default']
  columns = raw_columns(eval_examples(summary),
                        saved.structured_input_signature[1])
  expected = saved(**columns)['class_ids'].numpy()
  return {k: v.numpy() for k, v in columns.items()}, expected


def check_pushed_runtimes(output, model, summary, stdout,
                          min_agreement=0.97, transformed=()):
  """Each server runtime's pick: one version, raw columns in, its runtime.

  The pushed files are hashed in the manifest, the manifest says the model
  takes the raw columns, and the model run through its own runtime on the
  raw eval rows agrees with the SavedModel's classes on at least
  min_agreement of them (quantized against float): a float, or a dict of
  runtime -> bound (0.97 for a runtime it leaves out).

  Returns:
    {runtime: the pushed version's manifest}.
  """
  raw, expected = saved_model_classes(summary)
  manifests = {}
  for runtime in SERVER_RUNTIMES:
    runtime_dir = os.path.join(output, runtime, model)
    found = versions(runtime_dir)
    assert len(found) == 1, (runtime, found)
    version_dir = os.path.join(runtime_dir, found[0])
    assert f'pushed to {version_dir}' in stdout, runtime
    with open(os.path.join(version_dir, 'manifest.json'),
              encoding='utf-8') as f:
      manifest = json.load(f)
    for name in push.RUNTIME_FILES[runtime]:
      with open(os.path.join(version_dir, name), 'rb') as f:
        assert hashlib.sha256(f.read()).hexdigest() == (
            manifest['files'][name]['sha256']), (runtime, name)
    if runtime in transformed:
      # The documented fallback of a fold that missed parity (the report
      # lists it): the transformed-input model, hashed above.
      assert manifest['metrics']['serving_inputs']['inputs'] == (
          'transformed'), (runtime, manifest['metrics']['serving_inputs'])
      manifests[runtime] = manifest
      continue
    assert manifest['metrics']['serving_inputs']['inputs'] == 'raw', (
        runtime, manifest['metrics']['serving_inputs'])
    model_file = push.RUNTIME_FILES[runtime][0]
    predictor = raw_runtimes.raw_predictor(
        runtime, os.path.join(version_dir, model_file))
    got = np.argmax(predictor.predict(raw), axis=1)
    agreement = float((got == expected).mean())
    bound = (min_agreement.get(runtime, 0.97)
             if isinstance(min_agreement, dict) else min_agreement)
    assert agreement >= bound, (runtime, agreement, bound)
    if runtime == 'openvino':
      check_ovms_batch(output, model, manifest, predictor, raw)
    manifests[runtime] = manifest
  return manifests


def check_ovms_batch(output, model, manifest, predictor, raw,
                     rows=raw_runtimes.PUSH_FACT_ROWS):
  """The OpenVINO push's dynamic-batch fact holds, and deploy follows it.

  The manifest's dynamic_batch_one_ok is re-measured here (the push's IR
  compiled as pushed, as OVMS compiles it, against the static batch-1
  copy leantfx runs, on as many raw eval rows as the push measured), and
  `leantfx deploy ovms` gives the model "batch_size": "auto" exactly when
  it is false.
  """
  inputs = manifest['metrics']['serving_inputs']
  data = measure.LabeledData(raw, np.zeros(len(next(iter(raw.values()))),
                                           np.int64))
  gap = predictor.dynamic_batch_one_gap(
      [data.example(i) for i in range(min(rows, len(data)))])
  ok = gap <= openvino_runtime.DYNAMIC_BATCH_ONE_ATOL
  assert inputs['dynamic_batch_one_ok'] is ok, (inputs, gap)
  out = os.path.join(output, 'ovms-config')
  assert cli_main.main(['deploy', 'ovms', '--model-base-path',
                        os.path.join(output, 'openvino'), '--out', out]) == 0
  with open(os.path.join(out, 'config.json'), encoding='utf-8') as f:
    (entry,) = [e['config'] for e in json.load(f)['model_config_list']
                if e['config']['name'] == model]
  assert entry.get('batch_size') == (None if ok else 'auto'), (entry, gap)


def check_pushed_tflite(output, model, summary, stdout, min_agreement=0.97):
  """The TFLite push: hashed, raw columns in, the SavedModel's outputs.

  Returns:
    (the pushed version's manifest, its class ids on the raw eval rows).
  """
  tflite_dir = os.path.join(output, 'tflite', model)
  found = versions(tflite_dir)
  assert len(found) == 1, found
  version_dir = os.path.join(tflite_dir, found[0])
  assert f'pushed to {version_dir}' in stdout
  with open(os.path.join(version_dir, 'manifest.json'), encoding='utf-8') as f:
    manifest = json.load(f)
  with open(os.path.join(version_dir, 'model.tflite'), 'rb') as f:
    assert hashlib.sha256(f.read()).hexdigest() == manifest['sha256']
  # It takes the raw columns, as the SavedModel's serving_default does (the
  # Transform is folded in), and answers the same outputs.
  interpreter = tf.lite.Interpreter(
      model_path=os.path.join(version_dir, 'model.tflite'))
  runner = interpreter.get_signature_runner()
  raw, expected = saved_model_classes(summary)
  assert set(runner.get_input_details()) == set(raw)
  assert set(runner.get_output_details()) == {
      'probabilities', 'class_ids', 'classes'}
  got = runner(**raw)['class_ids']
  agreement = float((got == expected).mean())
  assert agreement >= min_agreement, agreement
  served = manifest['metrics']['serving_inputs']
  assert served['inputs'] == 'raw', served
  assert 'tflite: takes the raw columns, as serving_default does' in stdout
  assert served['latency_includes_preprocessing'] is True
  return manifest, got
