"""The ModelOptimizer's inputs, checked: model, examples, transform graph.

Each check raises InputDataError saying what is wrong, where and what to do,
before any TensorFlow work that needs the input. ``make_dataset`` reads a
split of transformed examples as (features, label) batches, caching a small
split in memory and streaming a large one.
"""
import json
import os
from typing import Any, Dict, List, Mapping, Sequence

import tensorflow as tf
import tensorflow_transform as tft
import tf_keras
from tfx import types
from tfx.dsl.io import fileio

from leantfx.runtimes import serving_export
from leantfx.errors import InputDataError
from leantfx.models import features
from leantfx.models.training import budget as budget_lib
from leantfx.models.model_layout import KERAS_MODEL_DIR

_SHUFFLE_SEED = 0
# Memory that does not grow with rows. A split of at most CACHE_MAX_RECORDS
# records is cached in memory as serialized records (tens of MB for a
# tabular split of that size; digits' ~2,900 augmented train rows are far
# below); a larger one is streamed from its files every pass, shuffled in a
# SHUFFLE_BUFFER-record buffer.
CACHE_MAX_RECORDS = 50_000
SHUFFLE_BUFFER = 10_000


def keras_model_dir(model_uri: str) -> str:
  """The Format-Keras SavedModel directory of a Model artifact, checked.

  Raises:
    InputDataError: the directory is missing or holds no SavedModel.
  """
  path = os.path.join(model_uri, KERAS_MODEL_DIR)
  if not fileio.isdir(path):
    raise InputDataError(
        f'The model artifact at {model_uri} has no {KERAS_MODEL_DIR}/ '
        'directory; ModelOptimizer needs the bare tf_keras model that '
        "leantfx's run_fn saves there (see models/model_layout.py). Point it "
        "at the Trainer's model output.")
  if not tf.saved_model.contains_saved_model(path):
    raise InputDataError(
        f'{path} is not a SavedModel (no saved_model.pb); found '
        f'{sorted(fileio.listdir(path))[:10]}. The Trainer must save the Keras '
        "model there with model.save(path, save_format='tf').")
  return path


def load_keras_model(path: str) -> tf_keras.Model:
  """Loads the Format-Keras model, turning load failures into a clear error.

  Raises:
    InputDataError: the SavedModel is corrupt or not a tf_keras model.
  """
  try:
    model = tf_keras.models.load_model(path, compile=False)
  except Exception as e:  # pylint: disable=broad-except
    # load_model raises many types (DecodeError, OSError, ValueError,
    # KeyError...) for a damaged directory; each means the same to the user.
    raise InputDataError(
        f'Cannot load the tf_keras model in {path}: {type(e).__name__}: {e}. '
        'The directory is damaged or was not written by tf_keras '
        "model.save(..., save_format='tf'); re-run the Trainer.") from e
  if not isinstance(model, tf_keras.Model) or not model.inputs:
    raise InputDataError(
        f'{path} holds a SavedModel but not a functional tf_keras model '
        f'(loaded a {type(model).__name__}); the optimizer needs the Keras '
        'model with named inputs.')
  return model


def split_files(examples: types.Artifact, split: str,
                what: str = 'transformed examples') -> List[str]:
  """The files of one split of an Examples artifact, checked.

  Raises:
    InputDataError: the split is not listed or its directory has no files.
  """
  names = json.loads(examples.split_names) if examples.split_names else None
  if names is not None and split not in names:
    raise InputDataError(
        f'The {what} at {examples.uri} have splits {names} but '
        f'no {split!r} split; ModelOptimizer trains on "train" and measures '
        'on "eval". Configure ExampleGen to output both.')
  directory = os.path.join(examples.uri, f'Split-{split}')
  files = sorted(f for f in fileio.glob(os.path.join(directory, '*'))
                 if not fileio.isdir(f))
  if not files:
    raise InputDataError(
        f'The {split!r} split of the {what} has no files in '
        f'{directory}; expected gzipped TFRecords of tf.Example.')
  return files


def transformed_feature_spec(transform_graph_uri: str,
                             model_inputs: Sequence[str],
                             label_key: str = features.LABEL_KEY
                            ) -> Dict[str, Any]:
  """The parsing spec of the label and the model's inputs, checked.

  Raises:
    InputDataError: the transform graph is unreadable, or lacks the label or
      a model input.
  """
  try:
    full_spec = tft.TFTransformOutput(
        transform_graph_uri).transformed_feature_spec()
  except Exception as e:  # pylint: disable=broad-except
    raise InputDataError(
        f'Cannot read the transform graph at {transform_graph_uri}: '
        f'{type(e).__name__}: {e}. Point transform_graph at the Transform '
        "component's transform_graph output.") from e
  wanted = [label_key] + list(model_inputs)
  missing = [name for name in wanted if name not in full_spec]
  if missing:
    raise InputDataError(
        f'The transformed features at {transform_graph_uri} lack {missing} '
        f'(they have {sorted(full_spec)}); the model needs its inputs and '
        f'the label {label_key!r}. Train and transform with the same '
        'preprocessing_fn.')
  return {name: full_spec[name] for name in wanted}


def model_input_names(model: tf_keras.Model) -> List[str]:
  return list(serving_export.serving_input_specs(model))


def make_dataset(files: Sequence[str],
                 feature_spec: Mapping[str, Any],
                 label_key: str,
                 batch_size: int,
                 shuffle: bool = False,
                 cache_max_records: int = CACHE_MAX_RECORDS
                ) -> tf.data.Dataset:
  """A finite dataset of (features dict, label) batches from gzipped TFRecords.

  Its records are counted once (so its cardinality is known: the
  techniques' epochs need no counting pass). At most ``cache_max_records``
  records are cached in memory (the techniques pass over the data several
  times); a larger split is streamed from its files on every pass, the
  files in a new order each pass and the records through a SHUFFLE_BUFFER
  buffer when ``shuffle``. Shuffling after the cache gives every epoch a new
  order.

  Raises:
    InputDataError: the files cannot be read or parsed (checked on the first
      batch).
  """
  files = list(files)
  try:
    records = budget_lib.count_records(files)
  except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
    raise InputDataError(
        f'Cannot read transformed examples from {files[:3]}: '
        f'{e.message.splitlines()[0]}. They must be gzipped TFRecords of '
        'tf.Example matching the transform graph.') from e
  if records > cache_max_records:
    names = tf.data.Dataset.from_tensor_slices(files)
    if shuffle:
      names = names.shuffle(len(files), seed=_SHUFFLE_SEED)
    dataset = names.interleave(
        lambda name: tf.data.TFRecordDataset(name, compression_type='GZIP'),
        cycle_length=min(4, len(files)))
  else:
    dataset = tf.data.TFRecordDataset(files, compression_type='GZIP').cache()
  if shuffle:
    dataset = dataset.shuffle(SHUFFLE_BUFFER, seed=_SHUFFLE_SEED)

  def parse(serialized):
    parsed = tf.io.parse_example(serialized, feature_spec)
    label = parsed.pop(label_key)
    return parsed, tf.reshape(label, [-1])

  dataset = dataset.batch(batch_size).map(parse).apply(
      tf.data.experimental.assert_cardinality(-(-records // batch_size)))
  try:
    next(iter(dataset))
  except StopIteration as e:
    raise InputDataError(f'{files[0]} (and siblings) hold no examples.') from e
  except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
    raise InputDataError(
        f'Cannot read transformed examples from {list(files)[:3]}: '
        f'{e.message.splitlines()[0]}. They must be gzipped TFRecords of '
        'tf.Example matching the transform graph.') from e
  return dataset
