"""Backends: loading, signatures, int8 (de)quantization and load failures."""
import os
import shutil

import numpy as np
import pytest

from leantfx.runtimes import tflite as tflite_runtime
from leantfx.serving import inference
from leantfx.serving import loading
from leantfx.serving import proto_json
from leantfx.serving import servable as servable_lib
from leantfx.serving import status
from leantfx.serving import tflite_servable

pytestmark = pytest.mark.e2e


def test_saved_model_signatures_and_metadata_order(model_base):
  servable = loading.load_servable(
      'penguins', 1, os.path.join(model_base, 'penguins', '1'))
  signature = servable.signatures['serving_default']
  assert signature.inputs['island'].dtype.short_name == 'string'
  assert signature.outputs['probabilities'].shape == (-1, 3)
  info = proto_json.to_dict(
      servable.signature_defs['serving_default'].inputs['island'])
  assert list(info) == ['dtype', 'tensor_shape', 'name']
  assert info['name'] == 'serving_default_island:0'


def test_tflite_int8_is_exposed_as_float(model_base):
  servable = loading.load_servable(
      'digits_int8', 1, os.path.join(model_base, 'digits_int8', '1'))
  assert servable.platform == 'tflite'
  signature = servable.signatures['serving_default']
  assert signature.inputs['image_xf'].dtype.short_name == 'float'
  assert signature.inputs['image_xf'].shape == (-1, 64)
  _, outputs = inference.predict(
      servable, '', {'image_xf': np.zeros((3, 64), np.float32)})
  probabilities = outputs['probabilities']
  assert probabilities.dtype == np.float32 and probabilities.shape == (3, 10)
  # Dequantized softmax: sums to 1 within 10 output steps of 1/256.
  np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=10 / 256)


def test_tflite_truncated_against_manifest(model_base, tmp_path):
  copy = tmp_path / '1'
  shutil.copytree(os.path.join(model_base, 'digits_int8', '1'), copy)
  model = copy / 'model.tflite'
  model.write_bytes(model.read_bytes()[:100])
  with pytest.raises(servable_lib.LoadError) as raised:
    loading.load_servable('digits_int8', 1, str(copy))
  assert raised.value.code == status.Code.DATA_LOSS
  assert 'manifest.json says' in str(raised.value)


def test_tflite_garbage_without_manifest(tmp_path):
  (tmp_path / 'model.tflite').write_bytes(b'not a flatbuffer')
  with pytest.raises(servable_lib.LoadError) as raised:
    loading.load_servable('x', 1, str(tmp_path))
  assert raised.value.code == status.Code.DATA_LOSS


def test_missing_model_files(tmp_path):
  with pytest.raises(servable_lib.LoadError) as raised:
    loading.load_servable('x', 1, str(tmp_path))
  assert raised.value.code == status.Code.NOT_FOUND
  assert 'SavedModel file does not exist at' in str(raised.value)
  # Every registered runtime's model file is named, from the registry.
  assert ('model.tflite (TFLite), model.xml (OpenVINO), model.onnx (ONNX)'
          in str(raised.value))


def test_the_runtime_is_found_by_its_model_file_or_forced_by_name(tmp_path):
  (tmp_path / 'model.onnx').write_bytes(b'')
  assert loading.runtime_of(str(tmp_path)).name == 'onnx'
  # The registry's order decides a folder with several model files.
  (tmp_path / 'model.xml').write_bytes(b'')
  assert loading.runtime_of(str(tmp_path)).name == 'openvino'
  assert loading.runtime_of(str(tmp_path), 'tensorflow').name == 'openvino'
  # model_platform names a runtime to force it (TF Serving's 'tflite').
  assert loading.runtime_of(str(tmp_path), 'tflite').name == 'tflite'
  assert loading.runtime_of(str(tmp_path), 'onnx').name == 'onnx'
  (tmp_path / 'saved_model.pb').write_bytes(b'')
  os.remove(tmp_path / 'model.onnx')
  os.remove(tmp_path / 'model.xml')
  assert loading.runtime_of(str(tmp_path)) is None
  with pytest.raises(servable_lib.LoadError) as raised:
    loading.runtime_of(str(tmp_path), 'tensorrt')
  assert raised.value.code == status.Code.INVALID_ARGUMENT
  assert ("Unknown model_platform 'tensorrt'; use \"tensorflow\""
          in str(raised.value))
  assert "'tflite', 'openvino', 'onnx'" in str(raised.value)


def test_classify_regress_model(model_base):
  servable = loading.load_servable(
      'half_plus_two', 1, os.path.join(model_base, 'half_plus_two', '1'))
  from tensorflow.core.example import example_pb2
  example = example_pb2.Example()
  example.features.feature['x'].float_list.value.append(4.0)
  _, values = inference.regress(servable, 'regress_x',
                                [example.SerializeToString()])
  assert values == [4.0]
  with pytest.raises(status.ServingError, match='No signature was found with '
                     'the name: nope'):
    inference.classify(servable, 'nope', [example.SerializeToString()])


# The TFLite fast path: a pool of prepared interpreters, resized only when a
# request's batch differs from the last one on that interpreter.


def _digits_lite(model_base, num_interpreters):
  return tflite_servable.TfLiteServable(
      'digits_float_lite', 1, os.path.join(model_base, 'digits_float_lite',
                                           '1'),
      num_interpreters=num_interpreters)


def test_tflite_pool_serves_concurrent_requests(model_base):
  import concurrent.futures
  import threading
  servable = _digits_lite(model_base, num_interpreters=2)
  assert servable.pool_size == 2
  rng = np.random.default_rng(0)
  # Batches of 1 to 4 rows: the interpreters resize back and forth.
  requests = [rng.uniform(0, 1, size=(1 + i % 4, 64)).astype(np.float32)
              for i in range(24)]
  reference = _digits_lite(model_base, num_interpreters=1)
  expected = [reference.run('serving_default', {'image_xf': x},
                            ['probabilities'])['probabilities']
              for x in requests]
  # Both interpreters must take requests: each run waits at a barrier until
  # a second request runs at the same time (the pool has two).
  barrier = threading.Barrier(2, timeout=10)
  invoke = tflite_runtime.PreparedSignature.invoke
  in_use = set()
  in_use_lock = threading.Lock()

  def invoke_in_pairs(self):
    with in_use_lock:
      in_use.add(id(self))
    barrier.wait()
    invoke(self)

  order = [i for _ in range(5) for i in rng.permutation(len(requests))]
  try:
    tflite_runtime.PreparedSignature.invoke = invoke_in_pairs
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
      results = list(pool.map(
          lambda i: (i, servable.run('serving_default',
                                     {'image_xf': requests[i]},
                                     ['probabilities'])['probabilities']),
          order))
  finally:
    tflite_runtime.PreparedSignature.invoke = invoke
  assert len(in_use) == 2  # the two interpreters ran side by side
  for i, probabilities in results:
    assert probabilities.shape == (requests[i].shape[0], 10)
    np.testing.assert_allclose(probabilities, expected[i], rtol=1e-6,
                               atol=1e-7)


def test_tflite_resizes_only_when_the_batch_changes(model_base, monkeypatch):
  from tensorflow.lite.python import interpreter as interpreter_lib

  def no_signature_runner_calls(self, **kwargs):
    raise AssertionError('the request path called SignatureRunner')

  monkeypatch.setattr(interpreter_lib.SignatureRunner, '__call__',
                      no_signature_runner_calls)
  servable = _digits_lite(model_base, num_interpreters=1)
  allocations = []
  allocate = interpreter_lib.Interpreter.allocate_tensors
  monkeypatch.setattr(interpreter_lib.Interpreter, 'allocate_tensors',
                      lambda self: allocations.append(1) or allocate(self))

  def run(batch):
    x = np.full((batch, 64), 0.5, np.float32)
    return servable.run('serving_default', {'image_xf': x},
                        ['probabilities'])['probabilities']

  # Loaded with batch 1 allocated: a batch-1 request resizes nothing.
  first = run(1)
  assert (servable.resizes(), len(allocations)) == (0, 0)
  for batch, resizes in ((3, 1), (3, 1), (3, 1), (1, 2), (1, 2), (5, 3),
                         (5, 3), (3, 4)):
    out = run(batch)
    assert out.shape == (batch, 10)
    np.testing.assert_allclose(out, np.repeat(first, batch, axis=0),
                               rtol=1e-6)
    assert servable.resizes() == resizes, batch
    assert len(allocations) == resizes


def test_tflite_failed_resize_is_invalid_argument_and_is_retried(
    model_base, monkeypatch):
  from tensorflow.lite.python import interpreter as interpreter_lib
  servable = _digits_lite(model_base, num_interpreters=1)
  batch3 = np.full((3, 64), 0.25, np.float32)
  expected = _digits_lite(model_base, num_interpreters=1).run(
      'serving_default', {'image_xf': batch3}, ['probabilities'])
  allocate = interpreter_lib.Interpreter.allocate_tensors

  def failing_allocate(self):
    raise RuntimeError('allocation failed (injected)')

  monkeypatch.setattr(interpreter_lib.Interpreter, 'allocate_tensors',
                      failing_allocate)
  with pytest.raises(status.ServingError) as raised:
    servable.run('serving_default', {'image_xf': batch3}, ['probabilities'])
  assert raised.value.code == status.Code.INVALID_ARGUMENT
  assert 'injected' in str(raised.value)
  monkeypatch.setattr(interpreter_lib.Interpreter, 'allocate_tensors',
                      allocate)
  # The input was resized before the allocation failed; the bound shape is
  # unknown since, so the same batch is resized and allocated again rather
  # than run on unallocated tensors.
  again = servable.run('serving_default', {'image_xf': batch3},
                       ['probabilities'])
  assert servable.resizes() == 1
  np.testing.assert_allclose(again['probabilities'],
                             expected['probabilities'], rtol=1e-6)


def test_tflite_signature_in_another_subgraph_runs_on_the_fast_path(tmp_path):
  import tensorflow as tf

  class Module(tf.Module):

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, 'x')])
    def double(self, x):
      return {'y': 2.0 * x}

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, 'x')])
    def plus_one(self, x):
      return {'y': x + 1.0}

  module = Module()
  saved = str(tmp_path / 'saved')
  tf.saved_model.save(module, saved, signatures={
      'serving_default': module.double, 'plus_one': module.plus_one})
  converter = tf.lite.TFLiteConverter.from_saved_model(
      saved, signature_keys=['serving_default', 'plus_one'])
  version = tmp_path / '1'
  version.mkdir()
  (version / 'model.tflite').write_bytes(converter.convert())
  servable = tflite_servable.TfLiteServable('two', 1, str(version))
  entry = servable._entries[0]  # pylint: disable=protected-access
  assert sorted(p.subgraph_index for p in entry.values()) == [0, 1]
  for batch in (2, 4, 2):
    x = np.arange(3 * batch, dtype=np.float32).reshape(batch, 3)
    np.testing.assert_allclose(
        servable.run('serving_default', {'x': x}, ['y'])['y'], 2 * x)
    np.testing.assert_allclose(
        servable.run('plus_one', {'x': x}, ['y'])['y'], x + 1)
