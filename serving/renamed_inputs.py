"""A version served with its inputs in the original column names.

A pushed version whose ``feature_names.json`` (:mod:`feature_names`) maps
original column names to model input keys is wrapped in
:class:`RenamedInputsServable`, whatever runs it (SavedModel, TFLite,
OpenVINO, ONNX): every signature whose input aliases are exactly the file's
keys (in practice ``serving_default``) shows the original names instead, in
its :class:`~signature.Signature` (which the REST JSON is parsed against and
predict requests are checked against) and its ``SignatureDef`` (metadata over
REST and gRPC). A request's inputs are renamed back to the keys just before
the wrapped version runs, so the backend and its fast paths (the SavedModel's
packed call, the TFLite and OpenVINO prepared tensors) see the same inputs as
before. A request that sends a key instead of its original name is an
unknown input, refused with TF Serving's INVALID_ARGUMENT, to which
:func:`with_key_hint` adds the original name to send. Signatures over other
inputs (``predict_examples`` on serialized examples) are unchanged.
"""
import dataclasses
import json
from typing import Dict, Iterable, Mapping, Optional, Sequence

import numpy as np

from leantfx.serving import feature_names
from leantfx.serving import servable as servable_lib
from leantfx.serving import signature as signature_lib
from leantfx.serving import status


def _renamed_def(signature_def, original_of: Mapping[str, str]):
  """A copy of a ``SignatureDef`` with its input aliases renamed."""
  renamed = type(signature_def)()
  renamed.CopyFrom(signature_def)
  renamed.ClearField('inputs')
  for key, info in signature_def.inputs.items():
    renamed.inputs[original_of[key]].CopyFrom(info)
  return renamed


class RenamedInputsServable(servable_lib.Servable):
  """Another servable, its column inputs named as the columns were.

  Attributes:
    model: the wrapped servable, which takes the model input keys.
  """

  def __init__(self, model: servable_lib.Servable,
               column_keys: Mapping[str, str]):
    """Wraps a loaded version.

    Args:
      model: the version as its backend loaded it.
      column_keys: original column name -> model input key, as
        :func:`feature_names.read_feature_names` returns it.

    Raises:
      LoadError: INVALID_ARGUMENT when no signature takes exactly the keys
        (the file does not describe this model).
    """
    super().__init__(model.name, model.version, model.path)
    self.platform = model.platform
    self.batching_pays = model.batching_pays
    self.max_rows_per_call = model.max_rows_per_call
    self.model = model
    keys = set(column_keys.values())
    original_of = {key: name for name, key in column_keys.items()}
    self._key_of: Dict[str, Dict[str, str]] = {}
    signatures = dict(model.signatures)
    signature_defs = dict(model.signature_defs)
    for name, signature in model.signatures.items():
      if set(signature.inputs) != keys:
        continue
      signatures[name] = dataclasses.replace(
          signature,
          inputs={original_of[key]: signature.inputs[key]
                  for key in sorted(signature.inputs, key=original_of.get)})
      if name in signature_defs:
        signature_defs[name] = _renamed_def(signature_defs[name], original_of)
      self._key_of[name] = dict(column_keys)
    if not self._key_of:
      takes = {name: sorted(s.inputs)
               for name, s in sorted(model.signatures.items())}
      raise servable_lib.LoadError(
          f'{feature_names.FEATURE_NAMES_FILE} of {model.path} maps columns '
          f'to the model inputs {sorted(keys)}, but no signature takes '
          f'exactly those (the signatures take {takes}). It must list every '
          'raw input column of serving_default; push the version again.',
          status.Code.INVALID_ARGUMENT)
    self._signatures = signatures
    self._signature_defs = signature_defs

  @property
  def signatures(self) -> Mapping[str, signature_lib.Signature]:
    return self._signatures

  @property
  def signature_defs(self) -> Mapping[str, object]:
    return self._signature_defs

  def run(self, signature_name: str, inputs: Mapping[str, np.ndarray],
          output_aliases: Sequence[str]) -> Dict[str, np.ndarray]:
    key_of = self._key_of.get(signature_name)
    if key_of is not None:
      # The inputs were checked against the renamed signature: every alias
      # is an original name.
      inputs = {key_of[alias]: array for alias, array in inputs.items()}
    return self.model.run(signature_name, inputs, output_aliases)

  def close(self) -> None:
    self.model.close()

  def keys_sent_instead(self, signature_name: str,
                        names: Iterable[str]) -> Dict[str, str]:
    """{key: original name} of the model keys a request sent as input names.

    Args:
      signature_name: the signature the request names ('' = default).
      names: the input names the request used.
    """
    key_of = self._key_of.get(signature_name or signature_lib.DEFAULT_SIGNATURE)
    if key_of is None:
      return {}
    original_of = {key: name for name, key in key_of.items() if key != name}
    return {name: original_of[name] for name in sorted(set(names))
            if name in original_of and name not in key_of}


def with_key_hint(error: status.ServingError, servable: servable_lib.Servable,
                  signature_name: str,
                  names: Iterable[str]) -> status.ServingError:
  """`error`, told which original names to send when the request sent keys.

  TF Serving's message for an unknown or missing input names the input; a
  client that sent the model's keys (from TF Serving, or an export's own
  signature) also needs to hear that this server takes the original names.

  Args:
    error: the request's INVALID_ARGUMENT.
    servable: the version it was for.
    signature_name: the signature it named ('' = default).
    names: the input names it used.

  Returns:
    `error` itself when the version is not renamed or no key was sent, else
    the same error with a sentence naming each key's original name.
  """
  if not isinstance(servable, RenamedInputsServable):
    return error
  sent = servable.keys_sent_instead(signature_name, names)
  if not sent:
    return error
  pairs = ', '.join(f'{json.dumps(name, ensure_ascii=False)} for {key}'
                    for key, name in sent.items())
  separator = ' ' if error.message.endswith('.') else '. '
  return status.ServingError(
      error.code, f'{error.message}{separator}This model takes its columns by '
      f'their original names: send {pairs}.')


def in_original_names(model: servable_lib.Servable,
                      column_keys: Optional[Mapping[str, str]]
                      ) -> servable_lib.Servable:
  """The servable to publish for a loaded version.

  Args:
    model: the loaded version.
    column_keys: its feature_names.json mapping, or None when it has none.

  Returns:
    `model` itself without a mapping, else it wrapped in
    :class:`RenamedInputsServable`.

  Raises:
    LoadError: the mapping does not fit the model's signatures.
  """
  if column_keys is None:
    return model
  return RenamedInputsServable(model, column_keys)
