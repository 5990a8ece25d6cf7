"""TF-DF's ops for a SavedModel that runs trees: found, and registered.

A gradient-boosted trees SavedModel (models/trees.py) runs TensorFlow
Decision Forests' custom ops (``SimpleMLCreateModelResource``,
``SimpleMLLoadModelFromPathWithHandle``, ``SimpleMLInferenceOpWithHandle``,
...). TensorFlow knows a custom op only once its library is loaded in the
process, so every process that loads such a SavedModel (the Evaluator and
its Beam workers, the InfraValidator, the Pusher's serving-cost check,
``leantfx serve``, ``leantfx score``) calls ``ensure_ops`` first:
``uses_ops`` reads the graph for ops of that prefix, and ``load_ops``
imports ``tensorflow_decision_forests``, which loads them. A network's
SavedModel needs none, and nothing is imported for it.

TF Serving serves such a model only with TF-DF's ops in its build (TF-DF's
documentation: natively from TF Serving 2.11, or TF-DF's own pre-compiled
TF Serving; docs/training.md); the ModelOptimizer does not export it to
TFLite, ONNX or OpenVINO, whose converters know no such op.
"""
import os
from typing import FrozenSet

from leantfx.errors import InputDataError

OP_PREFIX = 'SimpleML'
PACKAGE = 'tensorflow-decision-forests'


def op_names(saved_model_dir: str) -> FrozenSet[str]:
  """The TF-DF op names a SavedModel's graphs and functions use.

  Args:
    saved_model_dir: a SavedModel directory (saved_model.pb in it).

  Returns:
    The op types starting with OP_PREFIX (empty: a model without trees, or
    no saved_model.pb to read).
  """
  # Imported here: the ground layer loads TensorFlow only when asked to.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-import-not-at-top
  # gfile: the model may sit on an object store (a Kubeflow pipeline root).
  path = os.path.join(saved_model_dir, 'saved_model.pb')
  if not tf.io.gfile.exists(path):
    return frozenset()
  saved_model = saved_model_pb2.SavedModel()
  with tf.io.gfile.GFile(path, 'rb') as f:
    saved_model.ParseFromString(f.read())
  return proto_op_names(saved_model)


def proto_op_names(saved_model) -> FrozenSet[str]:
  """The TF-DF op names of a parsed SavedModel proto (see op_names)."""
  names = set()
  for meta_graph in saved_model.meta_graphs:
    graph = meta_graph.graph_def
    names.update(node.op for node in graph.node)
    for function in graph.library.function:
      names.update(node.op for node in function.node_def)
  return frozenset(n for n in names if n.startswith(OP_PREFIX))


def uses_ops(saved_model_dir: str) -> bool:
  """True if the SavedModel runs TF-DF's ops (a tree model)."""
  return bool(op_names(saved_model_dir))


def load_ops() -> None:
  """Registers TF-DF's ops in this process (importing the package).

  Raises:
    InputDataError: tensorflow-decision-forests is not installed.
  """
  try:
    import tensorflow_decision_forests  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError as e:
    raise InputDataError(
        f'This model runs TensorFlow Decision Forests\' ops, and {PACKAGE} '
        f'is not installed here ({e}). Install it (pip install -c '
        f'constraints.txt {PACKAGE}==1.9.2) where the model is loaded.'
    ) from e


def ensure_ops(saved_model_dir: str) -> bool:
  """Registers TF-DF's ops if the SavedModel needs them.

  Args:
    saved_model_dir: the SavedModel about to be loaded.

  Returns:
    True if it runs trees (the ops are now registered).

  Raises:
    InputDataError: it needs the ops and the package is missing.
  """
  if not uses_ops(saved_model_dir):
    return False
  load_ops()
  return True
