"""The TensorFlow SavedModel backend.

Signatures come from ``tf.saved_model.load`` (TF2 and TF1 SavedModels alike,
so classify/regress signatures built with ``tf.compat.v1.saved_model`` work);
the ``SignatureDef`` protos for metadata come from ``saved_model.pb`` itself,
exactly what TF Serving reads, ``__saved_model_init_op`` included.
"""
import logging
import threading
from typing import Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from leantfx import decision_forests
from leantfx import errors
from leantfx.serving import servable as servable_lib
from leantfx.serving import signature as signature_lib
from leantfx.serving import status

_SERVE_TAG = 'serve'
# Signatures with at least this many inputs take the packed call (run).
_PACK_MIN_INPUTS = 2

_log = logging.getLogger(__name__)
_threads_lock = threading.Lock()
_threads_wanted: Optional[Tuple[int, int]] = None
_threads_applied = False


def _call_concrete(concrete, tensors):
  """Calls a concrete function whose arguments are exactly `tensors`.

  ``ConcreteFunction.__call__`` binds the arguments to its structured
  signature first, about a third of a batch-1 digits call (0.36 vs 0.27 ms
  on one thread); the packed function's arguments are its flat inputs
  already, so it is called flat (TF 2.16's ``_call_flat``, pinned in
  constraints.txt; the public call where a TensorFlow lacks it).
  """
  call_flat = getattr(concrete, '_call_flat', None)
  if call_flat is None:
    return concrete(*tensors)
  return call_flat(tensors, concrete.captured_inputs)


def set_tensorflow_threads(intra_op: int, inter_op: int) -> None:
  """The TensorFlow thread pools SavedModels of this process run on.

  Applied when the first SavedModel loads, if TensorFlow has run no op in
  this process yet (its pools are made once per process); otherwise TensorFlow
  keeps the pools it has, and the log says so.

  Args:
    intra_op: threads one op may use (0: TensorFlow's default).
    inter_op: ops run at once (0: TensorFlow's default).
  """
  global _threads_wanted
  with _threads_lock:
    _threads_wanted = (int(intra_op), int(inter_op))


def _apply_threads(tf) -> None:
  global _threads_applied
  with _threads_lock:
    if _threads_applied or _threads_wanted is None:
      return
    _threads_applied = True
    intra, inter = _threads_wanted
    try:
      tf.config.threading.set_intra_op_parallelism_threads(intra)
      tf.config.threading.set_inter_op_parallelism_threads(inter)
    except RuntimeError:
      _log.info('TensorFlow is already running in this process; its thread '
                'pools stay as they are (wanted intra-op %d, inter-op %d).',
                intra, inter)


class SavedModelServable(servable_lib.Servable):
  """A SavedModel version, run through its signature functions."""

  platform = servable_lib.PLATFORM_TENSORFLOW
  batching_pays = True

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
    _apply_threads(tf)
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
    if decision_forests.proto_op_names(saved_model):
      # Trees (TF-DF's ops): TensorFlow loads them only once registered.
      try:
        decision_forests.load_ops()
      except errors.InputDataError as e:
        raise servable_lib.LoadError(f'{path}: {e}',
                                     status.Code.FAILED_PRECONDITION) from e
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
    self._pack_plans = {}

  @property
  def signatures(self) -> Mapping[str, signature_lib.Signature]:
    return self._signatures

  @property
  def signature_defs(self) -> Mapping[str, object]:
    return self._signature_defs

  def _packed(self, signature_name: str, function,
              inputs: Mapping[str, np.ndarray]):
    """(packed function, its arrays), or None when the inputs do not fit.

    Calling a loaded signature costs about 50 us of Python per argument: 3.3
    ms for a 64-column raw-feature signature that does nothing, 0.4 ms for
    one [batch, 64] input. When every input is a [batch] column of its
    spec's dtype (TF Serving's row format of raw columns), the columns of
    one dtype travel as one [batch, k] tensor into a function, traced once
    per signature (with its per-column dtype checks: ``_pack_plan``), that
    splits them in the graph and calls the signature there. Anything else takes the plain path, which
    gives TF Serving's errors.
    """
    plan = self._pack_plans.get(signature_name)
    if plan is None:
      plan = self._pack_plan(signature_name, function)
      self._pack_plans[signature_name] = plan
    aliases, checks, groups, packed = plan
    if packed is None or len(inputs) != len(aliases) or \
        inputs.keys() != aliases:
      return None
    batch = None
    for alias, wanted in checks:
      array = inputs[alias]
      if array.ndim != 1 or (batch is not None and array.shape[0] != batch):
        return None
      if wanted is None:  # A string column: bytes, str or objects.
        if array.dtype.kind not in 'OSU':
          return None
      elif array.dtype != wanted:
        return None
      batch = array.shape[0]
    # One concatenate and a transpose: np.stack's per-array reshapes cost
    # three times as much for 64 columns of one row.
    return packed, [np.ascontiguousarray(np.concatenate(
        [inputs[a] for a in names]).reshape(len(names), batch).T)
                    for names in groups]

  def _pack_plan(self, signature_name: str, function):
    """(aliases, per-alias dtype checks, groups, packed function) of a
    signature whose inputs are all [batch] columns; (.., None) otherwise."""
    specs = function.structured_input_signature[1]
    aliases = set(specs)
    if len(specs) < _PACK_MIN_INPUTS or any(
        spec.shape.rank != 1 for spec in specs.values()):
      return aliases, (), (), None
    groups = {}
    checks = []
    for alias in sorted(specs):
      spec = specs[alias]
      checks.append((alias, None if spec.dtype == self._tf.string
                     else np.dtype(spec.dtype.as_numpy_dtype)))
      groups.setdefault(spec.dtype, []).append(alias)
    return (aliases, tuple(checks), tuple(tuple(n) for n in groups.values()),
            self._pack(function, groups))

  def _pack(self, function, groups):
    tf = self._tf
    order = [(dtype, tuple(names)) for dtype, names in groups.items()]

    @tf.function(input_signature=[tf.TensorSpec([None, len(names)], dtype)
                                  for dtype, names in order])
    def packed(*matrices):
      columns = {}
      for (_, names), matrix in zip(order, matrices):
        for i, alias in enumerate(names):
          columns[alias] = matrix[:, i]
      return function(**columns)
    # The concrete function, called with tensors: the tf.function's own
    # dispatch (binding, cache lookup, converting arrays) cost about as much
    # as the penguins graph itself (1.67 vs 0.87 ms a call with it).
    return packed.get_concrete_function()

  def run(self, signature_name: str, inputs: Mapping[str, np.ndarray],
          output_aliases: Sequence[str]) -> Dict[str, np.ndarray]:
    tf = self._tf
    function = self._functions[signature_name]
    try:
      packed = self._packed(signature_name, function, inputs)
      if packed is not None:
        results = _call_concrete(packed[0], [tf.constant(m) for m in packed[1]])
      else:
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
    self._pack_plans = {}
    self._loaded = None

