"""Backends: loading, signatures, int8 (de)quantization and load failures."""
import os
import shutil

import numpy as np
import pytest

from leantfx.serving import inference
from leantfx.serving import proto_json
from leantfx.serving import servable as servable_lib
from leantfx.serving import status

pytestmark = pytest.mark.e2e


def test_saved_model_signatures_and_metadata_order(model_base):
  servable = servable_lib.load_servable(
      'penguins', 1, os.path.join(model_base, 'penguins', '1'))
  signature = servable.signatures['serving_default']
  assert signature.inputs['island'].dtype.short_name == 'string'
  assert signature.outputs['probabilities'].shape == (-1, 3)
  info = proto_json.to_dict(
      servable.signature_defs['serving_default'].inputs['island'])
  assert list(info) == ['dtype', 'tensor_shape', 'name']
  assert info['name'] == 'serving_default_island:0'


def test_tflite_int8_is_exposed_as_float(model_base):
  servable = servable_lib.load_servable(
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
    servable_lib.load_servable('digits_int8', 1, str(copy))
  assert raised.value.code == status.Code.DATA_LOSS
  assert 'manifest.json says' in str(raised.value)


def test_tflite_garbage_without_manifest(tmp_path):
  (tmp_path / 'model.tflite').write_bytes(b'not a flatbuffer')
  with pytest.raises(servable_lib.LoadError) as raised:
    servable_lib.load_servable('x', 1, str(tmp_path))
  assert raised.value.code == status.Code.DATA_LOSS


def test_missing_model_files(tmp_path):
  with pytest.raises(servable_lib.LoadError) as raised:
    servable_lib.load_servable('x', 1, str(tmp_path))
  assert raised.value.code == status.Code.NOT_FOUND
  assert 'SavedModel file does not exist at' in str(raised.value)


def test_classify_regress_model(model_base):
  servable = servable_lib.load_servable(
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
