"""Predict, Classify and Regress on one servable: the part both APIs share.

These functions take an already-resolved :class:`Servable` and plain arrays;
the service layer (:mod:`prediction_service`) finds the servable, batches and
counts. Checks and messages follow TF Serving's ``predict_util.cc``,
``classifier.cc`` and ``regressor.cc``.
"""
from typing import Dict, List, Mapping, Sequence, Tuple

import numpy as np

from leantfx.serving import servable as servable_lib
from leantfx.serving import signature as signature_lib
from leantfx.serving import status

CLASSIFY_INPUTS = 'inputs'
CLASSIFY_OUTPUT_CLASSES = 'classes'
CLASSIFY_OUTPUT_SCORES = 'scores'
REGRESS_INPUTS = 'inputs'
REGRESS_OUTPUTS = 'outputs'


def predict_signature(servable: servable_lib.Servable,
                      signature_name: str) -> signature_lib.Signature:
  """Returns the signature a predict request names ('' = serving_default).

  Raises:
    ServingError: FAILED_PRECONDITION when it does not exist (TF Serving's
      code for this case).
  """
  name = signature_name or signature_lib.DEFAULT_SIGNATURE
  signature = servable.signatures.get(name)
  if signature is None:
    raise status.failed_precondition(
        f'Serving signature key "{name}" not found.')
  return signature


def predict(servable: servable_lib.Servable, signature_name: str,
            inputs: Mapping[str, np.ndarray],
            output_filter: Sequence[str] = ()
            ) -> Tuple[signature_lib.Signature, Dict[str, np.ndarray]]:
  """Runs a predict request.

  Args:
    servable: the version to run.
    signature_name: '' for ``serving_default``.
    inputs: alias -> array.
    output_filter: output aliases to return; empty for all.

  Returns:
    (the signature used, alias -> output array).

  Raises:
    ServingError: invalid inputs or a failing model.
  """
  signature = predict_signature(servable, signature_name)
  signature_lib.check_predict_inputs(signature, inputs)
  aliases = signature_lib.check_output_filter(signature, output_filter)
  return signature, servable.run(signature.name, inputs, aliases)


def _method_signature(servable: servable_lib.Servable, signature_name: str,
                      method: str, kind: str) -> signature_lib.Signature:
  name = signature_name or signature_lib.DEFAULT_SIGNATURE
  signature = servable.signatures.get(name)
  if signature is None:
    raise status.invalid_argument(
        f'No signature was found with the name: {name}')
  if signature.method_name != method:
    raise status.invalid_argument(
        f'Expected {kind} signature method_name to be {method}. Was: '
        f'{signature.method_name}')
  if len(signature.inputs) != 1:
    raise status.invalid_argument('Expected one input Tensor.')
  if CLASSIFY_INPUTS not in signature.inputs:
    raise status.failed_precondition(
        f'No {kind} inputs found in SignatureDef {name}: expected an input '
        f'named "{CLASSIFY_INPUTS}" (serialized tf.Example).')
  return signature


def serialized_examples(input_proto) -> List[bytes]:
  """The serialized examples of a ``tensorflow.serving.Input`` proto.

  Context features are prepended to each example; parsing concatenated protos
  merges them, with the example's own features winning on a clash.
  """
  kind = input_proto.WhichOneof('kind')
  if kind == 'example_list':
    return [e.SerializeToString() for e in input_proto.example_list.examples]
  if kind == 'example_list_with_context':
    with_context = input_proto.example_list_with_context
    context = with_context.context.SerializeToString()
    return [context + e.SerializeToString() for e in with_context.examples]
  return []


def _serialized_tensor(examples: Sequence[bytes]) -> np.ndarray:
  if not examples:
    raise status.invalid_argument('Input is empty.')
  array = np.empty(len(examples), dtype=object)
  array[:] = list(examples)
  return array


def classify(servable: servable_lib.Servable, signature_name: str,
             examples: Sequence[bytes]
             ) -> Tuple[signature_lib.Signature, List[List[Tuple[bytes, float]]]]:
  """Runs a classify request on serialized ``tf.Example`` protos.

  Returns:
    (the signature used, per example a list of (label, score)); a model
    without ``classes`` gives empty labels, one without ``scores`` zero scores.

  Raises:
    ServingError: wrong signature kind, empty input, malformed outputs.
  """
  signature = _method_signature(servable, signature_name,
                                signature_lib.CLASSIFY_METHOD, 'classification')
  if len(signature.outputs) not in (1, 2):
    raise status.invalid_argument(
        f'Expected one or two output Tensors, found {len(signature.outputs)}')
  wanted = [alias for alias in (CLASSIFY_OUTPUT_CLASSES, CLASSIFY_OUTPUT_SCORES)
            if alias in signature.outputs]
  if not wanted:
    raise status.failed_precondition(
        'Expected classification signature outputs to contain at least one '
        f'of "{CLASSIFY_OUTPUT_CLASSES}" or "{CLASSIFY_OUTPUT_SCORES}". '
        f'Signature {signature.name} has {sorted(signature.outputs)}.')
  batch = _serialized_tensor(examples)
  outputs = servable.run(signature.name, {CLASSIFY_INPUTS: batch}, wanted)
  classes = outputs.get(CLASSIFY_OUTPUT_CLASSES)
  scores = outputs.get(CLASSIFY_OUTPUT_SCORES)
  num_examples = len(examples)
  for name, tensor in ((CLASSIFY_OUTPUT_CLASSES, classes),
                       (CLASSIFY_OUTPUT_SCORES, scores)):
    if tensor is None:
      continue
    if tensor.ndim != 2:
      raise status.invalid_argument(
          'Expected Tensor shape: [batch_size num_classes] but got '
          f'{signature_lib.shape_text(tensor.shape)}')
    if tensor.shape[0] != num_examples:
      raise status.invalid_argument(
          f'Expected {name} output batch size of {num_examples}. Got: '
          f'{tensor.shape[0]}')
  if classes is not None and scores is not None and \
      classes.shape[1] != scores.shape[1]:
    raise status.invalid_argument(
        'Tensors class and score should match in dim_size(1). Got '
        f'{classes.shape[1]} vs. {scores.shape[1]}')
  num_classes = (classes if classes is not None else scores).shape[1]
  results = []
  for i in range(num_examples):
    row = []
    for c in range(num_classes):
      label = bytes(classes[i, c]) if classes is not None else b''
      score = float(scores[i, c]) if scores is not None else 0.0
      row.append((label, score))
    results.append(row)
  return signature, results


def regress(servable: servable_lib.Servable, signature_name: str,
            examples: Sequence[bytes]
            ) -> Tuple[signature_lib.Signature, List[float]]:
  """Runs a regress request on serialized ``tf.Example`` protos.

  Returns:
    (the signature used, one value per example).

  Raises:
    ServingError: wrong signature kind, empty input, malformed outputs.
  """
  signature = _method_signature(servable, signature_name,
                                signature_lib.REGRESS_METHOD, 'regression')
  if REGRESS_OUTPUTS not in signature.outputs:
    raise status.failed_precondition(
        f'No regression outputs found in SignatureDef {signature.name}: '
        f'expected an output named "{REGRESS_OUTPUTS}".')
  batch = _serialized_tensor(examples)
  output = servable.run(signature.name, {REGRESS_INPUTS: batch},
                        [REGRESS_OUTPUTS])[REGRESS_OUTPUTS]
  num_examples = len(examples)
  if not (output.ndim == 1 or (output.ndim == 2 and output.shape[1] == 1)):
    raise status.invalid_argument(
        'Expected output Tensor shape to be either [batch_size] or '
        f'[batch_size, 1] but got {signature_lib.shape_text(output.shape)}')
  if output.shape[0] != num_examples:
    raise status.invalid_argument(
        f'Input batch size did not match output batch size: {num_examples} '
        f'vs. {output.shape[0]}')
  return signature, [float(v) for v in output.reshape(-1)]
