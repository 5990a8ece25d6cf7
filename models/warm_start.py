"""Warm start: begin training from the weights of the latest blessed model.

The Trainer gets the blessed model as ``fn_args.base_model`` (its
``Format-Serving`` directory). Beside it, ``Format-Keras`` holds the bare
tf_keras model; when the new model has exactly the same weight shapes (same
features, vocabulary sizes and layer widths) its weights are copied in.
Otherwise, e.g. after a categorical vocabulary grew, training starts cold and
the reason is logged. Either way ``warm_start.json`` beside ``Format-Serving``
in the new model's artifact records what happened, so a run's lineage says
which model it started from.

Files are read and written through tfx.dsl.io.fileio: on Kubeflow the model
artifacts are on the pipeline root's object store (gs://, s3://).
"""
import json
import os
from typing import Any, Dict, Optional

from absl import logging
import tf_keras
from tfx.dsl.io import fileio

from leantfx.models import model_layout

RECORD_FILE = 'warm_start.json'


def _load_base(base_model: str) -> tf_keras.Model:
  keras_dir = os.path.join(
      os.path.dirname(base_model.rstrip('/')), model_layout.KERAS_MODEL_DIR)
  path = keras_dir if fileio.isdir(keras_dir) else base_model
  return tf_keras.models.load_model(path, compile=False)


def load_base_weights(model: tf_keras.Model, base_model: Optional[str],
                      serving_model_dir: str) -> Dict[str, Any]:
  """Copies the base model's weights into ``model`` when the shapes match.

  Args:
    model: the freshly built model (inside the distribution strategy scope).
    base_model: fn_args.base_model (None: no blessed model yet, or warm start
      off).
    serving_model_dir: fn_args.serving_model_dir; the record goes beside it.

  Returns:
    The record written to warm_start.json: base_model, loaded (bool), reason.
  """
  record: Dict[str, Any] = {'base_model': base_model, 'loaded': False}
  if not base_model:
    record['reason'] = 'no base model (warm start off, or nothing blessed yet)'
  else:
    try:
      base = _load_base(base_model)
    except (OSError, IOError, ValueError) as e:
      # A base model we cannot read must not fail the run: train cold, loudly.
      record['reason'] = f'could not load the base model: {e}'
    else:
      new_shapes = [tuple(w.shape) for w in model.weights]
      base_shapes = [tuple(w.shape) for w in base.weights]
      if new_shapes != base_shapes:
        record['reason'] = (
            f'weight shapes differ (new {new_shapes}, base {base_shapes})')
      else:
        model.set_weights(base.get_weights())
        record['loaded'] = True
        record['reason'] = f'{len(new_shapes)} weight tensors copied'
  logging.info('Warm start: %s', record)
  artifact_dir = os.path.dirname(serving_model_dir.rstrip('/'))
  fileio.makedirs(artifact_dir)
  with fileio.open(os.path.join(artifact_dir, RECORD_FILE), 'w') as f:
    f.write(json.dumps(record, indent=2))
  return record


def read_record(model_uri: str) -> Optional[Dict[str, Any]]:
  """Returns warm_start.json of a Model artifact, or None if absent."""
  path = os.path.join(model_uri, RECORD_FILE)
  if not fileio.exists(path):
    return None
  with fileio.open(path, 'r') as f:
    return json.load(f)
