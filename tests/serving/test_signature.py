"""check_predict_inputs: what passes, and which error a bad input gets."""
import numpy as np
import pytest

from leantfx.serving import dtypes
from leantfx.serving import signature as signature_lib
from leantfx.serving import status

pytestmark = pytest.mark.unit


def _signature(**inputs):
  return signature_lib.Signature(
      name='serving_default', method_name=signature_lib.PREDICT_METHOD,
      inputs={a: signature_lib.TensorSpec(d, s, a)
              for a, (d, s) in inputs.items()}, outputs={})


def _message(signature, inputs):
  with pytest.raises(status.ServingError) as raised:
    signature_lib.check_predict_inputs(signature, inputs)
  assert raised.value.code == status.Code.INVALID_ARGUMENT
  return raised.value.message


def test_fitting_inputs_pass_and_every_string_array_kind_is_a_string():
  signature = _signature(a=(dtypes.DT_FLOAT, (-1,)),
                         s=(dtypes.DT_STRING, (-1, 2)))
  for strings in (np.array([[b'x', b'y']], object),
                  np.array([[b'x', b'y']]), np.array([['x', 'y']])):
    signature_lib.check_predict_inputs(
        signature, {'a': np.zeros([1], np.float32), 's': strings})


def test_a_dtype_without_a_numpy_twin_is_still_checked():
  """bfloat16 has no numpy dtype: a float64 feed must not slip through."""
  signature = _signature(a=(dtypes.from_enum(14), (-1,)))
  assert _message(signature, {'a': np.zeros([1], np.float64)}) == (
      'Expects arg[0] to be bfloat16 but double is provided')


def test_the_first_bad_input_in_alias_order_is_named():
  signature = _signature(a=(dtypes.DT_FLOAT, (-1,)),
                         b=(dtypes.DT_FLOAT, (-1,)),
                         c=(dtypes.DT_INT64, (-1, 3)))
  good = {'a': np.zeros([2], np.float32), 'b': np.zeros([2], np.float32),
          'c': np.zeros([2, 3], np.int64)}
  assert _message(signature, dict(good, c=np.zeros([2, 3], np.float32),
                                  b=np.zeros([2], np.int64))) == (
      'Expects arg[1] to be float but int64 is provided')
  assert _message(signature, dict(good, c=np.zeros([2, 4], np.int64))) == (
      'input tensor c has shape [2,4] but the signature serving_default '
      'expects [-1,3] (-1 is any size).')
  message = _message(signature, {'a': good['a'], 'b': good['b']})
  assert message.startswith('input size does not match signature: 2!=3')
  assert message.endswith('Missing but required: {c}.')
  assert _message(signature, {'a': good['a'], 'b': good['b'],
                              'd': good['a']}) == (
      'input tensor alias not found in signature: d. Inputs expected to be '
      'in the set {a,b,c}.')
