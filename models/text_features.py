"""Free-text columns in the Transform graph: words and word pairs, TF-IDF.

A text column (role 'text', DatasetSpec.text_features) becomes two
fixed-shape outputs, so every runtime can take them:

  <column>_xf          int64 [batch, MAX_TERMS]: vocabulary ids of the
                       row's distinct terms (words and word pairs);
  <column>_weights_xf  float32 [batch, MAX_TERMS]: each term's TF-IDF
                       weight, the row's weights L2-normalised; a free
                       slot holds id 0 with weight 0, so it adds nothing.

The steps, as scikit-learn's TfidfVectorizer(ngram_range=(1, 2)) takes
them: normalise (Unicode lowercase, every run of characters that are not
letters or digits becomes one space, so accented and non-Latin words are
kept whole), split on spaces, keep the first MAX_WORDS words, add each
adjacent pair ("the cat" from "the", "cat"), look the terms up in one
vocabulary per column (terms seen at least FREQUENCY_FLOOR times in the
train split, at most VOCABULARY_CAP of them, by frequency; every other term
shares the one out-of-vocabulary id), and weight each distinct term by
tft.tfidf: (count in the row / row's term count) x (1 + log((1 + rows) /
(1 + rows holding the term))), the smooth idf. L2 normalisation cancels the
row length, so the vector is sklearn's. A row with more distinct terms than
MAX_TERMS keeps its MAX_TERMS heaviest ones.

An empty or missing text has no terms: all-zero weights, the model sees a
zero text vector.
"""
from typing import Any, Dict

import tensorflow as tf
import tensorflow_transform as tft

from leantfx.models import features

# Terms of one row the model sees, heaviest first (the mean text of issue
# 42's span, 47 characters, has ~8 words and 7 pairs).
MAX_TERMS = 64
# Words of a row kept before pairing: a 10 kB text is cut to its first
# MAX_WORDS words, so its analysis and serving cost stay bounded.
MAX_WORDS = 256
# The vocabulary: terms seen at least this often in the train split...
FREQUENCY_FLOOR = 2
# ...and at most this many of them, the most frequent.
VOCABULARY_CAP = 50_000
# Word pairs are joined with a space, which normalisation leaves only
# between words: a pair can never be mistaken for a word.
_PAIR_SEPARATOR = ' '
# Every run of characters that are neither letters nor digits (punctuation,
# quotes, spaces, symbols) becomes one space.
_NOT_A_WORD = r'[^\p{L}\p{N}]+'


def normalize(texts: tf.Tensor) -> tf.Tensor:
  """Lowercased texts with punctuation turned into single spaces; [batch].

  Invalid UTF-8 bytes become U+FFFD first, so a mis-encoded row is a word
  shorter, never an error.
  """
  texts = tf.strings.unicode_transcode(
      texts, 'UTF-8', 'UTF-8', errors='replace', replacement_char=0xFFFD)
  texts = tf.strings.lower(texts, encoding='utf-8')
  return tf.strings.strip(tf.strings.regex_replace(texts, _NOT_A_WORD, ' '))


def terms(texts: tf.Tensor) -> tf.RaggedTensor:
  """Each row's words (the first MAX_WORDS) and adjacent word pairs.

  Args:
    texts: string [batch], as written.

  Returns:
    A string RaggedTensor [batch, None]: the words, then the pairs.
  """
  words = tf.strings.split(normalize(texts))[:, :MAX_WORDS]
  pairs = tf.strings.ngrams(words, 2, separator=_PAIR_SEPARATOR)
  return tf.concat([words, pairs], axis=1)


def _heaviest(index: tf.SparseTensor, weight: tf.SparseTensor
             ) -> Dict[str, tf.Tensor]:
  """tft.tfidf's sparse (id, weight) per row as dense [batch, MAX_TERMS]."""
  ids = tf.sparse.to_dense(index, default_value=0)
  weights = tf.sparse.to_dense(weight, default_value=0.0)
  # At least MAX_TERMS columns, so top_k always has k of them.
  room = tf.maximum(0, MAX_TERMS - tf.shape(weights)[1])
  ids = tf.pad(ids, [[0, 0], [0, room]])
  weights = tf.pad(weights, [[0, 0], [0, room]])
  top, slots = tf.math.top_k(weights, k=MAX_TERMS, sorted=True)
  ids = tf.gather(ids, slots, batch_dims=1)
  norm = tf.sqrt(tf.reduce_sum(tf.square(top), axis=1, keepdims=True))
  top = tf.math.divide_no_nan(top, norm)
  # A free slot keeps weight 0 and takes id 0, a valid embedding row.
  ids = tf.where(top > 0, ids, tf.zeros_like(ids))
  return {'ids': tf.reshape(ids, [-1, MAX_TERMS]),
          'weights': tf.reshape(top, [-1, MAX_TERMS])}


def transform_text(texts: tf.Tensor, column: str) -> Dict[str, tf.Tensor]:
  """The column's TF-IDF outputs (see the module docstring).

  Args:
    texts: string [batch] (a missing text as '').
    column: the feature key; names the vocabulary file (so the Trainer reads
      its size with vocabulary_size_by_name(column)).

  Returns:
    {features.transformed_name(column): int64 ids [batch, MAX_TERMS],
     features.text_weights_name(column): float32 [batch, MAX_TERMS]}.
  """
  ids = tft.compute_and_apply_vocabulary(
      terms(texts).to_sparse(), top_k=VOCABULARY_CAP,
      frequency_threshold=FREQUENCY_FLOOR, num_oov_buckets=1,
      vocab_filename=column)
  index, weight = tft.tfidf(
      ids, tft.get_num_buckets_for_transformed_feature(ids),
      name=f'{column}_tfidf')
  dense = _heaviest(index, weight)
  return {features.transformed_name(column): dense['ids'],
          features.text_weights_name(column): dense['weights']}


def text_outputs(inputs: Dict[str, Any], columns, to_dense) -> Dict[str, Any]:
  """transform_text for every text column of ``inputs``.

  Args:
    inputs: raw features by key.
    columns: the text feature keys.
    to_dense: preprocessing's [batch, 1] densifier (value, default).

  Returns:
    The outputs of every column, merged.
  """
  outputs = {}
  for column in columns:
    texts = tf.reshape(to_dense(inputs[column], ''), [-1])
    outputs.update(transform_text(texts, column))
  return outputs
