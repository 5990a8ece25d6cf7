"""What a servable's signatures accept and return, and request checks against them.

A :class:`Signature` is the backend-neutral view of a ``SignatureDef``: input
and output aliases with dtypes and shapes (-1 for an unknown dimension, None for
an unknown rank) and the method name (``tensorflow/serving/predict``,
``.../classify``, ``.../regress``). Predict requests are checked here before a
model runs, with TF Serving's messages (``predict_util.cc``), so a wrong input
name, dtype or shape is an INVALID_ARGUMENT for every backend alike.
"""
import dataclasses
from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from leantfx.serving import dtypes
from leantfx.serving import status

PREDICT_METHOD = 'tensorflow/serving/predict'
CLASSIFY_METHOD = 'tensorflow/serving/classify'
REGRESS_METHOD = 'tensorflow/serving/regress'
DEFAULT_SIGNATURE = 'serving_default'
INIT_OP_SIGNATURE = '__saved_model_init_op'


@dataclasses.dataclass(frozen=True)
class TensorSpec:
  """One input or output of a signature.

  Attributes:
    dtype: its data type.
    shape: dimensions (-1 unknown), or None when even the rank is unknown.
    tensor_name: the graph tensor name (``serving_default_x:0``).
  """
  dtype: dtypes.DType
  shape: Optional[Tuple[int, ...]]
  tensor_name: str = ''


@dataclasses.dataclass(frozen=True)
class Signature:
  """A runnable signature.

  Attributes:
    name: signature key, e.g. ``serving_default``.
    method_name: the SignatureDef method name.
    inputs: input alias -> spec.
    outputs: output alias -> spec.
  """
  name: str
  method_name: str
  inputs: Mapping[str, TensorSpec]
  outputs: Mapping[str, TensorSpec]

  @property
  def input_dtypes(self) -> Dict[str, dtypes.DType]:
    return {name: spec.dtype for name, spec in self.inputs.items()}


def spec_from_tensor_info(tensor_info) -> TensorSpec:
  """Returns the TensorSpec of a ``tensorflow.TensorInfo`` proto."""
  shape_proto = tensor_info.tensor_shape
  if shape_proto.unknown_rank:
    shape = None
  else:
    shape = tuple(int(dim.size) for dim in shape_proto.dim)
  return TensorSpec(dtypes.from_enum(tensor_info.dtype), shape,
                    tensor_info.name)


def signature_from_def(name: str, signature_def) -> Signature:
  """Returns the Signature of a ``tensorflow.SignatureDef`` proto."""
  return Signature(
      name=name,
      method_name=signature_def.method_name,
      inputs={k: spec_from_tensor_info(v)
              for k, v in sorted(signature_def.inputs.items())},
      outputs={k: spec_from_tensor_info(v)
               for k, v in sorted(signature_def.outputs.items())})


def shape_text(shape: Optional[Sequence[int]]) -> str:
  if shape is None:
    return '[?]'
  return '[' + ','.join(str(d) for d in shape) + ']'


def shape_is_compatible(actual: Sequence[int],
                        declared: Optional[Sequence[int]]) -> bool:
  """True if a concrete shape fits a declared one (-1 matches any size)."""
  if declared is None:
    return True
  if len(actual) != len(declared):
    return False
  for a, d in zip(actual, declared):
    if d >= 0 and d != a:
      return False
  return True


def check_predict_inputs(signature: Signature,
                         inputs: Mapping[str, np.ndarray]) -> None:
  """Validates predict inputs against a signature.

  Args:
    signature: the signature the request names.
    inputs: input alias -> array.

  Raises:
    ServingError: INVALID_ARGUMENT naming what is missing, extra, of the wrong
      dtype or of an incompatible shape.
  """
  if signature.method_name not in (PREDICT_METHOD, CLASSIFY_METHOD,
                                   REGRESS_METHOD):
    raise status.internal(
        'Expected prediction signature method_name to be one of '
        f'{{{PREDICT_METHOD}, {CLASSIFY_METHOD}, {REGRESS_METHOD}}}. Was: '
        f'{signature.method_name}')
  if len(inputs) != len(signature.inputs):
    sent, wanted = set(inputs), set(signature.inputs)
    raise status.invalid_argument(
        f'input size does not match signature: {len(sent)}!={len(wanted)} '
        f'len({{{",".join(sorted(sent))}}}) != '
        f'len({{{",".join(sorted(wanted))}}}). Sent extra: '
        f'{{{",".join(sorted(sent - wanted))}}}. Missing but required: '
        f'{{{",".join(sorted(wanted - sent))}}}.')
  for index, alias in enumerate(sorted(inputs)):
    spec = signature.inputs.get(alias)
    if spec is None:
      raise status.invalid_argument(
          f'input tensor alias not found in signature: {alias}. Inputs '
          f'expected to be in the set '
          f'{{{",".join(sorted(signature.inputs))}}}.')
    array = inputs[alias]
    expected = spec.dtype.numpy
    # Unequal numpy dtypes may still be one DType (strings: object, bytes or
    # str); a DType without a numpy one (bfloat16) is always looked up.
    if expected is None or array.dtype != expected:
      got = dtypes.from_numpy(array.dtype)
      if got.enum != spec.dtype.enum:
        # The text of TensorFlow's executor when a feed has the wrong dtype.
        raise status.invalid_argument(
            f'Expects arg[{index}] to be {spec.dtype.short_name} but '
            f'{got.short_name} is provided')
    if not shape_is_compatible(array.shape, spec.shape):
      raise status.invalid_argument(
          f'input tensor {alias} has shape {shape_text(array.shape)} but the '
          f'signature {signature.name} expects {shape_text(spec.shape)} '
          '(-1 is any size).')


def check_output_filter(signature: Signature,
                        output_filter: Sequence[str]) -> Tuple[str, ...]:
  """Returns the output aliases to fetch (all when the filter is empty).

  Raises:
    ServingError: INVALID_ARGUMENT for an unknown or duplicate alias.
  """
  if not output_filter:
    return tuple(sorted(signature.outputs))
  seen = []
  for alias in output_filter:
    if alias not in signature.outputs:
      raise status.invalid_argument(
          f'output tensor alias not found in signature: {alias} Outputs '
          f'expected to be in the set {{{",".join(sorted(signature.outputs))}}}.'
      )
    if alias in seen:
      raise status.invalid_argument(f'duplicate output tensor alias: {alias}')
    seen.append(alias)
  return tuple(seen)
