"""The TensorFlow SavedModel backend.

Signatures come from ``tf.saved_model.load`` (TF2 and TF1 SavedModels alike,
so classify/regress signatures built with ``tf.compat.v1.saved_model`` work);
the ``SignatureDef`` protos for metadata come from ``saved_model.pb`` itself,
exactly what TF Serving reads, ``__saved_model_init_op`` included.
"""
from typing import Dict, Mapping, Sequence

import numpy as np

from leantfx.serving import servable as servable_lib
from leantfx.serving import signature as signature_lib
from leantfx.serving import status

_SERVE_TAG = 'serve'


class SavedModelServable(servable_lib.Servable):
  """A SavedModel version, run through its signature functions."""

  platform = servable_lib.PLATFORM_TENSORFLOW

  def __init__(self, name: str, version: int, path: str):
    """Loads the SavedModel.

    Raises:
      LoadError: the SavedModel is missing, unparsable, has no ``serve``
        MetaGraph or its variables cannot be restored.
    """
    super().__init__(name, version, path)
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from tensorflow.python.saved_model import loader_impl  # pylint: disable=g-import-not-at-top
    self._tf = tf
    try:
      saved_model = loader_impl.parse_saved_model(path)
    except (IOError, OSError) as e:
      raise servable_lib.LoadError(str(e), status.Code.NOT_FOUND) from e
    except Exception as e:  # pylint: disable=broad-except
      # A truncated or corrupt saved_model.pb fails to parse (DecodeError).
      raise servable_lib.LoadError(
          f'Cannot parse the SavedModel at {path}: {type(e).__name__}: {e}',
          status.Code.DATA_LOSS) from e
    meta_graphs = [mg for mg in saved_model.meta_graphs
                   if _SERVE_TAG in mg.meta_info_def.tags]
    if not meta_graphs:
      tags = [list(mg.meta_info_def.tags) for mg in saved_model.meta_graphs]
      raise servable_lib.LoadError(
          'Could not find meta graph def matching supplied tags: { serve }. '
          f'The SavedModel at {path} has tag-sets {tags}; export it with the '
          '"serve" tag.', status.Code.NOT_FOUND)
    self._signature_defs = dict(meta_graphs[0].signature_def)
    try:
      self._loaded = tf.saved_model.load(path, tags=[_SERVE_TAG])
    except Exception as e:  # pylint: disable=broad-except
      code = status.code_from_exception(e) or status.Code.UNKNOWN
      message = getattr(e, 'message', None) or str(e)
      raise servable_lib.LoadError(
          f'Loading the SavedModel at {path} failed: {type(e).__name__}: '
          f'{message}', code) from e
    self._functions = {}
    signatures = {}
    for key, function in self._loaded.signatures.items():
      if key in self._signature_defs:
        self._functions[key] = function
        signatures[key] = signature_lib.signature_from_def(
            key, self._signature_defs[key])
    self._signatures = signatures

  @property
  def signatures(self) -> Mapping[str, signature_lib.Signature]:
    return self._signatures

  @property
  def signature_defs(self) -> Mapping[str, object]:
    return self._signature_defs

  def run(self, signature_name: str, inputs: Mapping[str, np.ndarray],
          output_aliases: Sequence[str]) -> Dict[str, np.ndarray]:
    tf = self._tf
    function = self._functions[signature_name]
    try:
      feeds = {alias: tf.constant(array) for alias, array in inputs.items()}
      results = function(**feeds)
    except tf.errors.OpError as e:
      raise status.ServingError(
          status.code_from_exception(e) or status.Code.UNKNOWN,
          e.message) from None
    except (TypeError, ValueError) as e:
      raise status.invalid_argument(str(e)) from None
    return {alias: results[alias].numpy() for alias in output_aliases}

  def close(self) -> None:
    self._functions = {}
    self._loaded = None

