"""Warming a version up before it takes traffic.

TF Serving replays ``assets.extra/tf_serving_warmup_requests`` (a TFRecord of
``PredictionLog`` protos, at most 1000) on a freshly loaded version, and a
failing record fails the load (``saved_model_warmup_util.cc``); leantfx does the
same. Without that file, each predict signature whose inputs are numeric and
whose shapes are known apart from the batch dimension runs once on a batch of
zeros, so the first real request does not pay for graph optimization; a failure
there is only logged, since zeros are not a valid input for every model.
"""
import logging
import os
from typing import Dict, Optional

import numpy as np

from leantfx.serving import dtypes
from leantfx.serving import inference
from leantfx.serving import servable as servable_lib
from leantfx.serving import status

WARMUP_RELATIVE_PATH = os.path.join('assets.extra',
                                    'tf_serving_warmup_requests')
MAX_WARMUP_RECORDS = 1000

_log = logging.getLogger(__name__)


def warmup_file(version_dir: str) -> Optional[str]:
  """Returns the warmup file of a version directory, or None."""
  path = os.path.join(version_dir, WARMUP_RELATIVE_PATH)
  return path if os.path.isfile(path) else None


def _replay(servable: servable_lib.Servable, record: bytes, index: int,
            path: str) -> None:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tensorflow_serving.apis import prediction_log_pb2  # pylint: disable=g-import-not-at-top
  log = prediction_log_pb2.PredictionLog()
  log.ParseFromString(record)
  kind = log.WhichOneof('log_type')
  if kind == 'predict_log':
    request = log.predict_log.request
    inputs = {alias: tf.make_ndarray(proto)
              for alias, proto in request.inputs.items()}
    inference.predict(servable, request.model_spec.signature_name, inputs,
                      list(request.output_filter))
  elif kind in ('classify_log', 'regress_log'):
    request = getattr(log, kind).request
    examples = inference.serialized_examples(request.input)
    run = inference.classify if kind == 'classify_log' else inference.regress
    run(servable, request.model_spec.signature_name, examples)
  else:
    raise status.unimplemented(
        f'Unsupported log_type for warmup: {kind} (record {index} of {path}); '
        'leantfx replays predict_log, classify_log and regress_log.')


def run_warmup_file(servable: servable_lib.Servable, path: str,
                    num_iterations: int = 1) -> int:
  """Replays a warmup file on `servable`.

  Args:
    servable: the freshly loaded version.
    path: the TFRecord file of PredictionLog protos.
    num_iterations: times each record is replayed.

  Returns:
    The number of records replayed.

  Raises:
    ServingError: a record is malformed, unsupported or fails; or the file
      has more than 1000 records.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  count = 0
  try:
    records = list(tf.data.TFRecordDataset(path).take(MAX_WARMUP_RECORDS + 1)
                   .as_numpy_iterator())
  except tf.errors.OpError as e:
    raise status.invalid_argument(
        f'Cannot read warmup file {path}: {e.message}') from None
  if len(records) > MAX_WARMUP_RECORDS:
    raise status.invalid_argument(
        f'Number of warmup records exceeds the maximum '
        f'({MAX_WARMUP_RECORDS}) at {path}')
  for index, record in enumerate(records):
    for _ in range(num_iterations):
      try:
        _replay(servable, record, index, path)
      except status.ServingError as e:
        raise status.ServingError(
            e.code, f'Warmup record {index} of {path} failed: {e.message}'
        ) from None
      except Exception as e:  # pylint: disable=broad-except
        raise status.invalid_argument(
            f'Warmup record {index} of {path} is not a valid PredictionLog: '
            f'{type(e).__name__}: {e}') from None
    count += 1
  return count


def _zeros_for(signature) -> Optional[Dict[str, np.ndarray]]:
  feeds = {}
  for alias, spec in signature.inputs.items():
    if spec.shape is None or spec.dtype.numpy is None:
      return None
    if any(d < 0 for d in spec.shape[1:]):
      return None
    shape = tuple(1 if d < 0 else d for d in spec.shape)
    if spec.dtype.enum == dtypes.DT_STRING.enum:
      array = np.empty(shape, dtype=object)
      array.fill(b'')
    else:
      array = np.zeros(shape, dtype=spec.dtype.numpy)
    feeds[alias] = array
  return feeds


def warm_up(servable: servable_lib.Servable, num_iterations: int = 1) -> str:
  """Warms a version up: its warmup file, else one call of zeros per signature.

  Args:
    servable: the freshly loaded version.
    num_iterations: replays per warmup record.

  Returns:
    A one-line summary for the log.

  Raises:
    ServingError: the version's warmup file fails (the version must not
      serve).
  """
  path = warmup_file(servable.path)
  if path is not None:
    count = run_warmup_file(servable, path, num_iterations)
    return f'replayed {count} warmup record(s) from {WARMUP_RELATIVE_PATH}'
  warmed = []
  for name, signature in servable.signatures.items():
    if signature.method_name != inference.signature_lib.PREDICT_METHOD:
      continue
    feeds = _zeros_for(signature)
    if feeds is None:
      continue
    try:
      inference.predict(servable, name, feeds)
      warmed.append(name)
    except status.ServingError as e:
      _log.warning('Warm-up call of %s signature %s on zeros failed (the '
                   'version still serves): %s', servable, name, e.message)
  return f'warmed signatures {warmed} on zeros' if warmed else 'no warm-up'
