"""Small models written the ways leantfx and TF users write them, for tests.

Every builder writes a complete version directory and returns its path. The
models are tiny (a few hundred weights) so a whole set builds in seconds.
"""
import os
import shutil
from typing import Optional

import numpy as np
import tensorflow as tf

PENGUIN_CLASSES = (b'Adelie', b'Chinstrap', b'Gentoo')
ISLANDS = (b'Biscoe', b'Dream', b'Torgersen')


class _Tabular(tf.Module):
  """Like the tabular pipeline model: named float/string features -> classes."""

  def __init__(self):
    super().__init__()
    rng = np.random.default_rng(0)
    self.kernel = tf.Variable(rng.normal(size=(5, 3)).astype(np.float32))

  @tf.function(input_signature=[{
      'bill_length_mm': tf.TensorSpec([None], tf.float32, 'bill_length_mm'),
      'flipper_length_mm': tf.TensorSpec([None], tf.float32,
                                         'flipper_length_mm'),
      'island': tf.TensorSpec([None], tf.string, 'island'),
  }])
  def serve(self, features):
    island = tf.one_hot(
        tf.cast(tf.strings.to_hash_bucket_fast(features['island'], 3),
                tf.int32), 3)
    x = tf.concat([
        tf.stack([features['bill_length_mm'] / 50.0,
                  features['flipper_length_mm'] / 200.0], axis=1), island
    ], axis=1)
    probabilities = tf.nn.softmax(x @ self.kernel)
    class_ids = tf.argmax(probabilities, axis=1)
    return {
        'probabilities': probabilities,
        'class_ids': class_ids,
        'classes': tf.gather(tf.constant(PENGUIN_CLASSES), class_ids),
    }


def tabular_model(path: str) -> str:
  """serving_default: {bill_length_mm, flipper_length_mm: float [None],
  island: string [None]} -> {probabilities [None,3], class_ids int64 [None],
  classes string [None]}."""
  module = _Tabular()
  tf.saved_model.save(module, path, signatures={'serving_default':
                                                    module.serve})
  return path


class _Digits(tf.Module):
  """One dense layer on 8x8 digit pixels (image_xf [None, 64])."""

  def __init__(self, seed: int = 0, bias: float = 0.0):
    super().__init__()
    rng = np.random.default_rng(seed)
    self.kernel = tf.Variable(rng.normal(size=(64, 10)).astype(np.float32))
    self.bias = tf.Variable(np.full((10,), bias, np.float32))

  @tf.function(input_signature=[
      tf.TensorSpec([None, 64], tf.float32, 'image_xf')])
  def serve(self, image_xf):
    return {'probabilities': tf.nn.softmax(image_xf @ self.kernel + self.bias)}


def digits_model(path: str, seed: int = 0) -> str:
  """serving_default: image_xf float [None,64] -> probabilities [None,10]."""
  module = _Digits(seed)
  tf.saved_model.save(module, path, signatures={'serving_default':
                                                    module.serve})
  return path


class _Versioned(tf.Module):
  """Answers with its own version number, so a client sees which one ran."""

  def __init__(self, version: int):
    super().__init__()
    self.version = tf.Variable(float(version))
    self.scale = tf.Variable(np.ones((4,), np.float32))

  @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, 'x')])
  def serve(self, x):
    return {
        'version': tf.fill(tf.shape(x)[:1], self.version),
        'y': tf.reduce_sum(x * self.scale, axis=1),
    }


def versioned_model(path: str, version: int) -> str:
  """serving_default: x float [None,4] -> {version: [None], y: [None]}."""
  module = _Versioned(version)
  tf.saved_model.save(module, path, signatures={'serving_default':
                                                    module.serve})
  return path


def classify_regress_model(path: str) -> str:
  """A TF1 SavedModel with classify, regress and predict signatures.

  classify_x: serialized tf.Example with feature x [1] -> classes/scores
  [None, 2]; regress_x: -> outputs [None, 1] = 0.5 * x + 2; serving_default:
  x float [None, 1] -> y = 0.5 * x + 2 (TF Serving's half_plus_two).
  """
  with tf.Graph().as_default():
    serialized = tf.compat.v1.placeholder(tf.string, [None], name='tf_example')
    features = tf.io.parse_example(
        serialized, {'x': tf.io.FixedLenFeature([1], tf.float32)})
    x = features['x']
    scores = tf.concat([tf.sigmoid(x), 1.0 - tf.sigmoid(x)], axis=1)
    classes = tf.tile(tf.constant([['positive', 'negative']]),
                      [tf.shape(x)[0], 1])
    dense_x = tf.compat.v1.placeholder(tf.float32, [None, 1], name='x')
    with tf.compat.v1.Session() as session:
      builder = tf.compat.v1.saved_model.Builder(path)
      builder.add_meta_graph_and_variables(
          session, ['serve'], signature_def_map={
              'classify_x': tf.compat.v1.saved_model.classification_signature_def(
                  serialized, classes, scores),
              'regress_x': tf.compat.v1.saved_model.regression_signature_def(
                  serialized, 0.5 * x + 2.0),
              'serving_default': tf.compat.v1.saved_model.predict_signature_def(
                  {'x': dense_x}, {'y': 0.5 * dense_x + 2.0}),
          })
      builder.save()
  return path


def tflite_digits(saved_model_dir: str, path: str, int8: bool,
                  manifest: bool = False) -> str:
  """Converts a digits SavedModel to <path>/model.tflite (float or full int8).

  With `manifest`, writes the pusher's manifest.json (size and sha256).
  """
  converter = tf.lite.TFLiteConverter.from_saved_model(saved_model_dir)
  if int8:
    rng = np.random.default_rng(1)

    def representative():
      for _ in range(16):
        yield [rng.uniform(0, 1, size=(1, 64)).astype(np.float32)]

    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.int8
    converter.inference_output_type = tf.int8
  content = converter.convert()
  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, 'model.tflite'), 'wb') as f:
    f.write(content)
  if manifest:
    import hashlib  # pylint: disable=g-import-not-at-top
    import json  # pylint: disable=g-import-not-at-top
    with open(os.path.join(path, 'manifest.json'), 'w') as f:
      json.dump({'size_bytes': len(content),
                 'sha256': hashlib.sha256(content).hexdigest()}, f)
  return path


def write_warmup_file(version_dir: str, model_name: str,
                      rows: Optional[np.ndarray] = None,
                      input_name: str = 'image_xf') -> str:
  """Writes assets.extra/tf_serving_warmup_requests with one PredictRequest."""
  from tensorflow_serving.apis import predict_pb2  # pylint: disable=g-import-not-at-top
  from tensorflow_serving.apis import prediction_log_pb2  # pylint: disable=g-import-not-at-top
  rows = np.zeros((2, 64), np.float32) if rows is None else rows
  request = predict_pb2.PredictRequest()
  request.model_spec.name = model_name
  request.inputs[input_name].CopyFrom(tf.make_tensor_proto(rows))
  log = prediction_log_pb2.PredictionLog(
      predict_log=prediction_log_pb2.PredictLog(request=request))
  directory = os.path.join(version_dir, 'assets.extra')
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, 'tf_serving_warmup_requests')
  with tf.io.TFRecordWriter(path) as writer:
    writer.write(log.SerializeToString())
  return path


def truncate_variables(version_dir: str) -> None:
  """Cuts the variables data file in half, as an interrupted copy would."""
  variables = os.path.join(version_dir, 'variables')
  for name in os.listdir(variables):
    if name.startswith('variables.data'):
      path = os.path.join(variables, name)
      size = os.path.getsize(path)
      with open(path, 'r+b') as f:
        f.truncate(size // 2)


def push_atomically(build, model_dir: str, version: int, *args) -> str:
  """Builds a version in a hidden temp dir, then renames it into place."""
  tmp = os.path.join(model_dir, f'.tmp-{version}')
  shutil.rmtree(tmp, ignore_errors=True)
  build(tmp, *args)
  target = os.path.join(model_dir, str(version))
  os.rename(tmp, target)
  return target


# Model input keys of four raw columns, as the pipeline names the columns it
# renames (the last, 'age', is a plain identifier and keeps its name).
COLUMN_KEYS = ('alcohol_x1', 'groesse_x2', 'a_b_q_x3', 'age')


def columns_keras_model():
  """A tf_keras model: four float [None] columns, named by COLUMN_KEYS ->
  probabilities [None, 3]; each column has its own weights, so swapping two
  columns changes the answer."""
  import tf_keras  # pylint: disable=g-import-not-at-top
  inputs = {key: tf_keras.Input(shape=(), name=key) for key in COLUMN_KEYS}
  stacked = tf_keras.layers.Lambda(
      lambda columns: tf.stack([columns[k] for k in COLUMN_KEYS], axis=1))(
          inputs)
  dense = tf_keras.layers.Dense(3, activation='softmax', name='probabilities')
  outputs = dense(stacked)
  # Rows that differ by more than a constant: softmax ignores a constant.
  dense.set_weights([
      np.array([[1.0, -0.5, 0.2], [-0.7, 0.9, 0.1], [0.3, 0.4, -1.1],
                [0.6, -0.8, 0.5]], np.float32),
      np.array([0.1, -0.2, 0.3], np.float32)])
  return tf_keras.Model(inputs, outputs)


class _Columns(tf.Module):
  """serving_default on the raw columns, predict_examples on tf.Examples."""

  def __init__(self, keras_model):
    super().__init__()
    self.model = keras_model

  @tf.function(input_signature=[{
      key: tf.TensorSpec([None], tf.float32, key) for key in COLUMN_KEYS}])
  def serve(self, columns):
    return {'probabilities': self.model(columns)}

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, 'examples')])
  def predict_examples(self, examples):
    columns = tf.io.parse_example(
        examples, {key: tf.io.FixedLenFeature([], tf.float32)
                   for key in COLUMN_KEYS})
    return {'probabilities': self.model(columns)}


def columns_saved_model(path: str, keras_model) -> str:
  """serving_default: COLUMN_KEYS float [None] -> probabilities [None, 3];
  predict_examples: examples string [None] (features COLUMN_KEYS) -> the
  same."""
  module = _Columns(keras_model)
  tf.saved_model.save(module, path, signatures={
      'serving_default': module.serve,
      'predict_examples': module.predict_examples})
  return path


def columns_tflite(saved_model_dir: str, path: str) -> str:
  """<path>/model.tflite of the SavedModel's serving_default (float)."""
  converter = tf.lite.TFLiteConverter.from_saved_model(
      saved_model_dir, signature_keys=['serving_default'])
  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, 'model.tflite'), 'wb') as f:
    f.write(converter.convert())
  return path
