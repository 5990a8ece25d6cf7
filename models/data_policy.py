"""The data policies Transform and Trainer apply: noisy rows, class weights.

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
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import tensorflow as tf
import tensorflow_transform as tft

# The vocabulary file (count, class id) Transform writes for the Trainer.
LABEL_COUNTS_VOCABULARY = 'leantfx_label_counts'


def _bound_rows(domains: Sequence[Optional[Mapping[str, Any]]]
               ) -> Tuple[Optional[tf.Tensor], Optional[tf.Tensor]]:
  """The columns' lower and upper bounds as [1, columns] float32 rows
  (-inf/+inf where a column has none), or None where no column has one."""
  usable = [d if d and 'values' not in d else {} for d in domains]
  rows = []
  for key, missing in (('min', float('-inf')), ('max', float('inf'))):
    bounds = [d.get(key) for d in usable]
    rows.append(None if all(v is None for v in bounds) else tf.constant(
        [[missing if v is None else float(v) for v in bounds]], tf.float32))
  return rows[0], rows[1]


def numeric_in_domain(block: tf.Tensor,
                      domains: Sequence[Optional[Mapping[str, Any]]]
                     ) -> tf.Tensor:
  """Marks numeric values outside their column's domain as missing (NaN).

  One comparison per bound over the whole [batch, columns] block, with a
  bound per column (-inf/+inf where a column has none), like
  clip_to_domain: the serving graph costs the same for 40 numeric columns
  as for one.

  Args:
    block: float32 [batch, len(domains)], NaN where a value is missing.
    domains: each column's {'min': .., 'max': ..} from the schema, or None.

  Returns:
    block, with out-of-domain values replaced by NaN (block itself when no
    column has a bound).
  """
  lows, highs = _bound_rows(domains)
  if lows is None and highs is None:
    return block
  outside = None
  for bound, beyond in ((lows, tf.less), (highs, tf.greater)):
    if bound is not None:
      test = beyond(block, bound)
      outside = test if outside is None else tf.logical_or(outside, test)
  return tf.where(outside, tf.constant(float('nan'), tf.float32), block)


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
                   domains: Sequence[Optional[Mapping[str, Any]]]
                  ) -> tf.Tensor:
  """Clips each pixel column into its domain (an image keeps every pixel).

  One maximum and one minimum over the whole [batch, columns] tensor, with a
  bound per column (-inf/+inf where a column has none): the serving graph
  costs the same for 64 pixel columns as for one.

  Args:
    pixels: float32 [batch, len(domains)].
    domains: each column's {'min': .., 'max': ..} from the schema, or None.

  Returns:
    pixels, clipped.
  """
  lows, highs = _bound_rows(domains)
  if lows is not None:
    pixels = tf.maximum(pixels, lows)
  if highs is not None:
    pixels = tf.minimum(pixels, highs)
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
