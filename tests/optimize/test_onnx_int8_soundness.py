"""An ONNX int8 file answers a row the same however it is batched and run.

ONNX Runtime 1.23.2's fused int8 MatMul answered a MobileNetV2's rows
differently from batch 32 up (probabilities up to 0.998 apart between
repeats of one batch) on this machine's Xeon; the int8 export now checks
every file it writes (leantfx/runtimes/onnx.batch_dependence) and leaves
MatMuls in float32, or refuses the file, when it is not sound. These tests
run the check on real ONNX files: a sound one, and one whose answer to a row
depends on the other rows of its batch by construction.
"""
import os

import numpy as np
import onnx
from onnx import helper
from onnx import TensorProto
import pytest

from leantfx.errors import ConfigError
from leantfx.runtimes import onnx as onnx_runtime

pytestmark = pytest.mark.unit


def _model(path, batch_dependent):
  """y = softmax(x @ W + b) (x: [batch, 8]); with ``batch_dependent``, x
  minus its mean over the batch first, so a row's answer depends on the
  rows beside it."""
  rng = np.random.default_rng(0)
  weights = helper.make_tensor('w', TensorProto.FLOAT, [8, 4],
                               rng.normal(size=32).astype(np.float32))
  bias = helper.make_tensor('b', TensorProto.FLOAT, [4],
                            rng.normal(size=4).astype(np.float32))
  nodes, body_in = [], 'x'
  if batch_dependent:
    nodes += [helper.make_node('ReduceMean', ['x'], ['mean'], axes=[0],
                               keepdims=1, name='batch_mean'),
              helper.make_node('Sub', ['x', 'mean'], ['centred'],
                               name='centre')]
    body_in = 'centred'
  nodes += [helper.make_node('MatMul', [body_in, 'w'], ['xw'], name='dense'),
            helper.make_node('Add', ['xw', 'b'], ['logits'], name='bias'),
            helper.make_node('Softmax', ['logits'], ['probabilities'],
                             name='softmax', axis=-1)]
  graph = helper.make_graph(
      nodes, 'g',
      [helper.make_tensor_value_info('x', TensorProto.FLOAT, ['batch', 8])],
      [helper.make_tensor_value_info('probabilities', TensorProto.FLOAT,
                                     ['batch', 4])],
      initializer=[weights, bias])
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 13)])
  model.ir_version = 8
  onnx.save(model, path)
  return path


def _samples(n=40):
  rng = np.random.default_rng(1)
  return [{'x': rng.normal(size=(1, 8)).astype(np.float32)}
          for _ in range(n)]


def test_a_sound_file_answers_the_same_however_it_is_run(tmp_path):
  path = _model(str(tmp_path / 'sound.onnx'), batch_dependent=False)
  assert onnx_runtime.batch_dependence(path, _samples()) <= 1e-6


def test_a_batch_dependent_file_is_measured_as_such(tmp_path):
  path = _model(str(tmp_path / 'dependent.onnx'), batch_dependent=True)
  # Alone, a row is centred to zero; in a batch, it is not.
  assert onnx_runtime.batch_dependence(path, _samples()) > (
      onnx_runtime.BATCH_INVARIANCE_TOLERANCE)


def test_a_sound_int8_file_keeps_every_matmul_int8(tmp_path):
  float_path = _model(str(tmp_path / 'float.onnx'), batch_dependent=False)
  out = onnx_runtime.quantize_int8(float_path, str(tmp_path / 'int8.onnx'),
                                  _samples())
  model = onnx.load(out)
  assert onnx_runtime.INT8_FLOAT_OPS_PROP not in {
      p.key for p in model.metadata_props}
  # The MatMul's input and weight are quantized (QDQ pairs around it).
  dequantized = {o for n in model.graph.node
                 if n.op_type == 'DequantizeLinear' for o in n.output}
  matmul = next(n for n in model.graph.node if n.op_type == 'MatMul')
  assert set(matmul.input) <= dequantized


def test_an_int8_file_still_batch_dependent_is_refused(tmp_path):
  float_path = _model(str(tmp_path / 'float.onnx'), batch_dependent=True)
  out = str(tmp_path / 'int8.onnx')
  with pytest.raises(ConfigError) as e:
    onnx_runtime.quantize_int8(float_path, out, _samples())
  assert 'differently with the batch size or thread count' in str(e.value)
  assert 'not built' in str(e.value)
  assert not os.path.exists(out)
