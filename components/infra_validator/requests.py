"""The InfraValidator's requests: raw eval rows, their offline answers, warm-up.

Pure functions, each tested alone (tests/infra/test_infra_validator.py):

* ``read_rows``: the first eval rows as the SavedModel's ``serving_default``
  takes them ({input key: [n] array}), read from the raw tf.Examples by the
  signature's own inputs, so the rows cannot disagree with the model;
* ``offline_outputs``: what the SavedModel answers on them in this process;
* ``as_written``: the rows under the columns' names as written, which
  ``leantfx serve`` takes (the SavedModel takes the keys);
* ``write_warmup_file``: TF Serving's warm-up file, ``PredictionLog``
  records of ``predict_log.request`` with real rows (as TFX's InfraValidator
  writes with ``make_warmup``), one row per request, by the keys: TF Serving
  knows nothing of the names map, and ``leantfx serve`` replays it by the
  keys too.
"""
import os
from typing import Dict, Mapping, Sequence

import numpy as np
import tensorflow as tf

from leantfx import decision_forests
from leantfx.errors import InputDataError

SERVING_SIGNATURE = 'serving_default'
# TF Serving's path, relative to the SavedModel (saved_model_warmup_util.cc).
WARMUP_FILE = os.path.join('assets.extra', 'tf_serving_warmup_requests')
# Warm-up records written: each is replayed at every load, so a few (TF
# Serving allows 1000); enough to run the batch-1 path the server serves.
WARMUP_RECORDS = 8


def serving_signature(saved_model_dir: str):
  """The SavedModel's serving_default (a ConcreteFunction).

  Raises:
    InputDataError: the SavedModel does not load or has no serving_default.
  """
  try:
    # A tree model's ops are registered first (leantfx/decision_forests.py).
    decision_forests.ensure_ops(saved_model_dir)
    loaded = tf.saved_model.load(saved_model_dir)
  except (OSError, ValueError, tf.errors.OpError) as e:
    raise InputDataError(f'The SavedModel at {saved_model_dir} does not load: '
                         f'{type(e).__name__}: {e}') from None
  if SERVING_SIGNATURE not in loaded.signatures:
    raise InputDataError(
        f'The SavedModel at {saved_model_dir} has no {SERVING_SIGNATURE!r} '
        f'signature (it has {sorted(loaded.signatures)}); the Trainer exports '
        'one taking the raw columns.')
  # The loaded object owns the function's variables: keep it alive with it.
  signature = loaded.signatures[SERVING_SIGNATURE]
  signature._leantfx_owner = loaded  # pylint: disable=protected-access
  return signature


def input_specs(signature) -> Dict[str, tf.TensorSpec]:
  """{input key: TensorSpec} of a signature."""
  return dict(signature.structured_input_signature[1])


def _value(feature: tf.train.Feature, spec: tf.TensorSpec, key: str,
           where: str):
  kind = feature.WhichOneof('kind')
  values = list(getattr(feature, kind).value) if kind else []
  inner = spec.shape.as_list()[1:]
  if spec.dtype == tf.string:
    if inner:
      raise InputDataError(f'{where}: input {key!r} is a string tensor of '
                           f'shape {spec.shape}; rows of one string only.')
    if values and kind != 'bytes_list':
      raise InputDataError(f'{where}: column {key!r} holds numbers, the model '
                           'takes strings.')
    return values[0] if values else b''
  if kind == 'bytes_list':
    raise InputDataError(f'{where}: column {key!r} holds strings, the model '
                         'takes numbers.')
  if not inner:
    return values[0] if values else np.nan
  size = int(np.prod(inner))
  if len(values) != size:
    raise InputDataError(f'{where}: column {key!r} has {len(values)} values, '
                         f'the model takes {inner}.')
  return np.reshape(values, inner)


def read_rows(files: Sequence[str], specs: Mapping[str, tf.TensorSpec],
              limit: int) -> Dict[str, np.ndarray]:
  """The first ``limit`` raw tf.Examples as ``serving_default`` inputs.

  Args:
    files: gzipped TFRecords of tf.Example (one split).
    specs: the signature's inputs ({key: TensorSpec}).
    limit: rows to read at most.

  Returns:
    {key: [n, ...] array of the spec's dtype}; a missing number is NaN, a
    missing string ''.

  Raises:
    InputDataError: the files cannot be read, hold no example, or a column's
      kind differs from the input's.
  """
  columns = {key: [] for key in specs}
  try:
    dataset = tf.data.TFRecordDataset(list(files), compression_type='GZIP')
    for index, record in enumerate(dataset.take(limit).as_numpy_iterator()):
      example = tf.train.Example.FromString(record)
      where = f'eval example {index} of {files[0]}'
      for key, spec in specs.items():
        feature = example.features.feature.get(key, tf.train.Feature())
        columns[key].append(_value(feature, spec, key, where))
  except tf.errors.OpError as e:
    raise InputDataError(f'Cannot read the eval examples {list(files)}: '
                         f'{e.message}') from None
  if not any(columns.values()) or not next(iter(columns.values())):
    raise InputDataError(f'The eval examples {list(files)} hold no example.')
  return {key: (np.array(values, dtype=object) if specs[key].dtype == tf.string
                else np.asarray(values, dtype=specs[key].dtype.as_numpy_dtype))
          for key, values in columns.items()}


def offline_outputs(signature, rows: Mapping[str, np.ndarray]
                   ) -> Dict[str, np.ndarray]:
  """The signature's answer on the rows, in this process."""
  answer = signature(**{k: tf.constant(v) for k, v in rows.items()})
  return {k: v.numpy() for k, v in answer.items()}


def as_written(rows: Mapping[str, np.ndarray],
               names: Mapping[str, str]) -> Dict[str, np.ndarray]:
  """The rows under the names the server takes ({key: name as written})."""
  return {names.get(key, key): value for key, value in rows.items()}


def write_warmup_file(saved_model_dir: str, rows: Mapping[str, np.ndarray],
                      model_name: str,
                      count: int = WARMUP_RECORDS) -> str:
  """Writes TF Serving's warm-up file into a SavedModel; returns its path.

  Args:
    saved_model_dir: the SavedModel (a copy: the file is added to it).
    rows: serving_default inputs by key.
    model_name: the model_spec name of each request.
    count: records to write (one row each; fewer when there are fewer rows).
  """
  from tensorflow_serving.apis import predict_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow_serving.apis import prediction_log_pb2  # pylint: disable=g-import-not-at-top
  path = os.path.join(saved_model_dir, WARMUP_FILE)
  tf.io.gfile.makedirs(os.path.dirname(path))
  num_rows = len(next(iter(rows.values())))
  with tf.io.TFRecordWriter(path) as writer:
    for i in range(min(count, num_rows)):
      request = predict_pb2.PredictRequest()
      request.model_spec.name = model_name
      request.model_spec.signature_name = SERVING_SIGNATURE
      for key, value in rows.items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto(value[i:i + 1]))
      log = prediction_log_pb2.PredictionLog(
          predict_log=prediction_log_pb2.PredictLog(request=request))
      # Deterministic: the inputs are a map, whose order Python protobuf
      # does not fix otherwise; the same rows give the same file, so the
      # Pusher sees an unchanged model as unchanged (its digest).
      writer.write(log.SerializeToString(deterministic=True))
  return path
