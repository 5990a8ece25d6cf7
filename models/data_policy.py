"""The data policies Transform and Trainer apply (issue 3).

* Noisy rows, impute side: a value outside its schema domain is treated like
  a missing one (numbers take the mean of the in-domain values, categories
  the OOV bucket, pixels are clipped into range). The serving graph does the
  same, so a request is never dropped; the 'drop' policy removes noisy train
  rows earlier, in the Augment component, which also counts them.
* Encoded images (the images format): PNG/JPEG bytes decoded and resized in
  the graph, so serving takes the same bytes.
* Class weights: Transform counts the classes of the train split it
  analyses (after augmentation and oversampling), and the Trainer weighs the
  loss by inverse class frequency when asked ('auto').
"""
from typing import Any, Dict, Mapping, Optional, Sequence

import tensorflow as tf
import tensorflow_transform as tft

# The vocabulary file (count, class id) Transform writes for the Trainer.
LABEL_COUNTS_VOCABULARY = 'leantfx_label_counts'


def _in_range(values: tf.Tensor, domain: Mapping[str, Any]) -> tf.Tensor:
  keep = tf.logical_not(tf.math.is_nan(values))
  if domain.get('min') is not None:
    keep = tf.logical_and(keep, values >= float(domain['min']))
  if domain.get('max') is not None:
    keep = tf.logical_and(keep, values <= float(domain['max']))
  return keep


def numeric_in_domain(x: Any, domain: Optional[Mapping[str, Any]]) -> Any:
  """Removes numeric values outside the domain (they become missing).

  Args:
    x: a feature as parsed by TFT (dense, sparse or ragged), numeric.
    domain: {'min': .., 'max': ..} from the schema, or None (no change).

  Returns:
    x unchanged without a domain, else a float32 SparseTensor [batch, 1]
    holding only the in-domain values.
  """
  if not domain or 'values' in domain:
    return x
  if isinstance(x, tf.RaggedTensor):
    x = x.to_sparse()
  if isinstance(x, tf.SparseTensor):
    values = tf.cast(x.values, tf.float32)
    x = tf.SparseTensor(x.indices, values, x.dense_shape)
    return tf.sparse.retain(x, _in_range(values, domain))
  dense = tf.cast(tf.reshape(x, [-1, 1]), tf.float32)
  indices = tf.where(_in_range(dense, domain))
  return tf.SparseTensor(indices, tf.gather_nd(dense, indices),
                         tf.shape(dense, out_type=tf.int64))


def categorical_in_domain(values: tf.Tensor,
                          domain: Optional[Mapping[str, Any]],
                          missing: str = '') -> tf.Tensor:
  """Replaces string values outside the domain by the missing marker."""
  if not domain or 'values' not in domain:
    return values
  allowed = tf.constant(sorted(domain['values']), dtype=tf.string)
  known = tf.reduce_any(
      tf.equal(tf.expand_dims(values, -1), allowed), axis=-1)
  return tf.where(known, values, tf.fill(tf.shape(values), missing))


def clip_to_domain(pixels: tf.Tensor,
                   domain: Optional[Mapping[str, Any]]) -> tf.Tensor:
  """Clips pixel values into their domain (an image keeps every pixel)."""
  if not domain or 'values' in domain:
    return pixels
  if domain.get('min') is not None:
    pixels = tf.maximum(pixels, float(domain['min']))
  if domain.get('max') is not None:
    pixels = tf.minimum(pixels, float(domain['max']))
  return pixels


def decode_images(x: Any, image_shape: Sequence[int]) -> tf.Tensor:
  """Encoded PNG/JPEG bytes -> float32 [batch, H*W*C] in [0, 1].

  Missing images are black; every image is resized to image_shape.
  """
  height, width, channels = image_shape
  if isinstance(x, tf.SparseTensor):
    x = tft.sparse_tensor_to_dense_with_shape(x, [None, 1], '')
  elif isinstance(x, tf.RaggedTensor):
    x = x.to_tensor(default_value='', shape=[None, 1])
  encoded = tf.reshape(x, [-1])

  def decode_one(data):
    def decoded():
      image = tf.io.decode_image(data, channels=channels,
                                 expand_animations=False)
      return tf.image.resize(tf.cast(image, tf.float32), [height, width])
    return tf.cond(
        tf.equal(tf.strings.length(data), 0),
        lambda: tf.zeros([height, width, channels], tf.float32), decoded)

  images = tf.map_fn(
      decode_one, encoded,
      fn_output_signature=tf.TensorSpec([height, width, channels],
                                        tf.float32))
  return tf.reshape(images, [-1, height * width * channels]) / 255.0


def record_label_counts(label_ids: tf.Tensor) -> None:
  """Makes Transform write how often each class id occurs in the train split."""
  tft.vocabulary(
      tf.strings.as_string(label_ids),
      vocab_filename=LABEL_COUNTS_VOCABULARY,
      store_frequency=True)


def label_counts(tf_transform_output: tft.TFTransformOutput,
                 num_classes: int) -> Dict[int, int]:
  """{class id: count in the analysed train split} (absent classes: 0)."""
  path = tf_transform_output.vocabulary_file_by_name(LABEL_COUNTS_VOCABULARY)
  counts = {i: 0 for i in range(num_classes)}
  with tf.io.gfile.GFile(path, 'r') as f:
    for line in f:
      parts = line.strip().split(' ', 1)
      if len(parts) != 2:
        continue
      count, class_id = int(parts[0]), int(parts[1])
      if 0 <= class_id < num_classes:
        counts[class_id] = count
  return counts


def inverse_frequency_weights(counts: Mapping[int, int]) -> Dict[int, float]:
  """'balanced' weights n / (k * n_c); a class absent from training gets 1.

  A class holding 1/k of the examples gets weight 1; the weighted count of
  every present class is then the same, n / k.
  """
  present = {c: n for c, n in counts.items() if n > 0}
  total = sum(present.values())
  k = len(present)
  return {
      c: (total / (k * present[c]) if c in present else 1.0) for c in counts
  }


def class_weights(custom_config: Mapping[str, Any],
                  tf_transform_output: tft.TFTransformOutput,
                  num_classes: int) -> Optional[Dict[int, float]]:
  """The Trainer's class_weight for ``fit``, or None when not asked for."""
  if custom_config.get('class_weights', 'none') != 'auto':
    return None
  return inverse_frequency_weights(
      label_counts(tf_transform_output, num_classes))
