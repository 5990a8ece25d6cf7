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
adjacent pair ("the cat" from "the", "cat"). The vocabulary holds the terms
found in at least FREQUENCY_FLOOR train rows (sklearn's min_df), at most
VOCABULARY_CAP of them, the most frequent; other terms are dropped, as
sklearn drops them. Each distinct term of a row weighs
count x (1 + log((1 + rows) / (1 + rows holding the term))), sklearn's
smooth idf, and the row's weights are L2-normalised: sklearn's vector. A
row with more distinct terms than MAX_TERMS keeps its MAX_TERMS heaviest.

Only dense tensor ops and string ops every runtime's string library has
(lower, regex replace, split, join: no sparse reductions, no StringNGrams),
so the graph converts to TFLite with TF Select ops and to ONNX with
onnxruntime-extensions' ops. The Transform writes two vocabularies
per column from the same rows' distinct terms: ``<column>`` (the terms, for
the lookup) and ``<column>__document_frequency`` (the same terms in the same
order with the number of rows holding each; its DOCUMENTS_TERM line, a term
in every row that no text can produce, counts the rows). An export that
cannot run the Transform's file-backed tables rebuilds the same features
with ``serving_text`` from constants read by ``document_frequencies``.

An empty or missing text has no terms: all-zero weights, the model sees a
zero text vector.
"""
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
from tensorflow_transform import tf_utils

from leantfx.models import features

# Terms of one row the model sees, heaviest first (the mean text of issue
# 42's span, 47 characters, has ~8 words and 7 pairs).
MAX_TERMS = 64
# Words of a row kept before pairing: a 10 kB text is cut to its first
# MAX_WORDS words, so its cost stays bounded (the distinct-term count
# compares every term of a row with every other one: (2W - 1)^2).
MAX_WORDS = 64
# The vocabulary: terms found in at least this many train rows...
FREQUENCY_FLOOR = 2
# ...and at most this many of them, the most frequent.
VOCABULARY_CAP = 50_000
# A term every row holds once, counting the rows in the document
# frequencies; '#' never survives normalisation, so no text produces it.
DOCUMENTS_TERM = '#documents'
# Every run of characters that are neither letters nor digits (punctuation,
# quotes, spaces, symbols) becomes one space.
NOT_A_WORD = r'[^\p{L}\p{N}]+'
_TERM_COUNT = 2 * MAX_WORDS - 1


def document_frequency_name(column: str) -> str:
  """The vocabulary file holding the column's document frequencies."""
  return f'{column}__document_frequency'


def normalize(texts: tf.Tensor) -> tf.Tensor:
  """Lowercased texts with punctuation turned into single spaces; [batch].

  Lowercasing as UTF-8 also turns invalid bytes into U+FFFD, so a
  mis-encoded row is a word shorter, never an error. The one space a text
  can keep at either end is removed with a regex (StringStrip has no ONNX
  kernel).
  """
  texts = tf.strings.lower(texts, encoding='utf-8')
  texts = tf.strings.regex_replace(texts, NOT_A_WORD, ' ')
  return tf.strings.regex_replace(texts, '^ | $', '')


def terms(texts: tf.Tensor) -> tf.Tensor:
  """Each row's words (the first MAX_WORDS), then its adjacent word pairs.

  Args:
    texts: string [batch], as written.

  Returns:
    string [batch, 2 * MAX_WORDS - 1], '' in the free slots.
  """
  # On the one space normalize leaves between words: the default split, on
  # white space, also cuts at a 0x85 or 0xa0 byte inside a UTF-8 character
  # ('包' is e5 8c 85).
  words = tf.strings.split(normalize(texts), sep=' ').to_tensor(
      default_value='', shape=[None, MAX_WORDS])
  left, right = words[:, :-1], words[:, 1:]
  pairs = tf.strings.join([left, right], separator=' ')
  both = tf.logical_and(tf.not_equal(left, ''), tf.not_equal(right, ''))
  pairs = tf.where(both, pairs, tf.fill(tf.shape(pairs), ''))
  return tf.concat([words, pairs], axis=1)


def _distinct(keys: tf.Tensor, present: tf.Tensor
             ) -> Tuple[tf.Tensor, tf.Tensor]:
  """(first occurrence of each distinct key in its row, its count in the
  row), both [batch, T]; absent slots are neither."""
  same = tf.logical_and(tf.equal(keys[:, :, None], keys[:, None, :]),
                        present[:, None, :])
  counts = tf.reduce_sum(tf.cast(same, tf.float32), axis=2)
  # An earlier slot with the same key: not the first occurrence.
  earlier = tf.constant(np.tril(np.ones([_TERM_COUNT] * 2, bool), k=-1))
  seen = tf.reduce_any(tf.logical_and(same, earlier[None]), axis=2)
  return tf.logical_and(present, tf.logical_not(seen)), counts


def _weights(ids: tf.Tensor, first: tf.Tensor, counts: tf.Tensor,
             frequencies: tf.Tensor, documents: tf.Tensor
            ) -> Dict[str, tf.Tensor]:
  """The [batch, MAX_TERMS] ids and L2-normalised TF-IDF weights.

  Args:
    ids: int64 [batch, T] term ids.
    first: bool [batch, T], the first slot of each distinct in-vocabulary
      term.
    counts: float32 [batch, T], each slot's term count in its row.
    frequencies: float32 [batch, T], rows holding each slot's term.
    documents: float32 scalar, the train rows.
  """
  idf = 1.0 + tf.math.log((1.0 + documents) / (1.0 + frequencies))
  weights = tf.where(first, counts * idf, tf.zeros_like(counts))
  top, slots = tf.math.top_k(weights, k=MAX_TERMS, sorted=True)
  ids = tf.gather(ids, slots, batch_dims=1)
  norm = tf.sqrt(tf.reduce_sum(tf.square(top), axis=1, keepdims=True))
  top = tf.math.divide_no_nan(top, norm)
  # A free slot keeps weight 0 and takes id 0, a valid embedding row.
  return {'ids': tf.where(top > 0, ids, tf.zeros_like(ids)), 'weights': top}


def _distinct_terms(all_terms: tf.Tensor) -> tf.Tensor:
  """Every row's distinct terms, all rows' in one [n] vector.

  By sorting each row's term hashes, O(T log T) a row: only the analyzers
  read it and they count a set, so neither the order nor the counts of
  _distinct are needed (the transform and the exports keep _distinct).
  """
  present = tf.not_equal(all_terms, '')
  # An absent slot sorts last as -1 (every hash is >= 0).
  hashes = tf.where(present, tf.strings.to_hash_bucket_fast(all_terms, 2**62),
                    tf.constant(-1, tf.int64))
  order = tf.argsort(hashes, axis=1, direction='DESCENDING', stable=True)
  ordered = tf.gather(hashes, order, batch_dims=1)
  new = tf.concat([tf.ones_like(ordered[:, :1], tf.bool),
                   tf.not_equal(ordered[:, 1:], ordered[:, :-1])], axis=1)
  first = tf.logical_and(new, ordered >= 0)
  return tf.boolean_mask(tf.gather(all_terms, order, batch_dims=1), first)


def _analyze(all_terms: tf.Tensor, column: str) -> Tuple[Any, Any]:
  """Both vocabularies from the rows' distinct terms; their file tensors."""
  distinct = tf.concat([
      _distinct_terms(all_terms),
      tf.fill(tf.shape(all_terms)[:1], DOCUMENTS_TERM)], axis=0)
  options = dict(top_k=VOCABULARY_CAP + 1,
                 frequency_threshold=FREQUENCY_FLOOR)
  vocabulary = tft.vocabulary(distinct, vocab_filename=column, **options)
  frequencies = tft.vocabulary(
      distinct, vocab_filename=document_frequency_name(column),
      store_frequency=True, **options)
  return vocabulary, frequencies


def _line_frequency(ids: tf.Tensor, path: tf.Tensor):
  """apply_vocabulary's lookup_fn: line number -> the line's frequency.

  Built the way apply_vocabulary builds its own tables
  (tf_utils.construct_and_lookup_table), so the table is initialized once
  with the SavedModel's assets, not inside every call: an initializer in the
  call would follow the graph into an export (a .tflite) without its file.
  """

  def construct(asset_path):
    return tf.lookup.StaticHashTable(
        tf.lookup.TextFileInitializer(
            asset_path, tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER,
            tf.int64, 0, delimiter=' '), default_value=0)

  return tf_utils.construct_and_lookup_table(construct, path, ids)


def _outputs(column: str, dense: Dict[str, tf.Tensor]) -> Dict[str, Any]:
  return {features.transformed_name(column): tf.reshape(
              dense['ids'], [-1, MAX_TERMS]),
          features.text_weights_name(column): tf.reshape(
              dense['weights'], [-1, MAX_TERMS])}


def transform_text(texts: tf.Tensor, column: str) -> Dict[str, tf.Tensor]:
  """The column's TF-IDF outputs (see the module docstring), in Transform.

  Args:
    texts: string [batch] (a missing text as '').
    column: the feature key; names the vocabulary files (the Trainer reads
      the vocabulary's size with vocabulary_size_by_name(column)).

  Returns:
    {features.transformed_name(column): int64 ids [batch, MAX_TERMS],
     features.text_weights_name(column): float32 [batch, MAX_TERMS]}.
  """
  all_terms = terms(texts)
  vocabulary, frequency_file = _analyze(all_terms, column)
  ids = tft.apply_vocabulary(all_terms, vocabulary, default_value=-1)
  in_vocabulary = tf.logical_and(tf.not_equal(all_terms, ''), ids >= 0)
  first, counts = _distinct(ids, in_vocabulary)
  safe = tf.maximum(ids, 0)
  frequencies = tft.apply_vocabulary(safe, frequency_file,
                                     lookup_fn=_line_frequency)
  documents = tft.apply_vocabulary(
      tft.apply_vocabulary(tf.constant([DOCUMENTS_TERM]), vocabulary,
                           default_value=0),
      frequency_file, lookup_fn=_line_frequency)
  return _outputs(column, _weights(
      safe, first, counts, tf.cast(frequencies, tf.float32),
      tf.cast(documents[0], tf.float32)))


def serving_text(texts: tf.Tensor, column: str, vocabulary_table,
                 frequencies: Sequence[int], documents: int
                ) -> Dict[str, tf.Tensor]:
  """transform_text's outputs from constants, for an export's own graph.

  Args:
    texts: string [batch].
    column: the feature key (names the outputs).
    vocabulary_table: raw_serving.vocabulary_table of the column's
      vocabulary (its OOV id, len(vocabulary), marks a dropped term).
    frequencies: rows holding each vocabulary term, in vocabulary order.
    documents: the train rows.

  Returns:
    The same two outputs as transform_text.
  """
  all_terms = terms(texts)
  ids = vocabulary_table.lookup(all_terms)
  in_vocabulary = tf.logical_and(tf.not_equal(all_terms, ''),
                                 ids < len(frequencies))
  return tfidf_from_ids(ids, in_vocabulary, column, frequencies, documents)


def tfidf_from_ids(ids: tf.Tensor, in_vocabulary: tf.Tensor, column: str,
                   frequencies: Sequence[int], documents: int
                  ) -> Dict[str, tf.Tensor]:
  """serving_text's outputs from the vocabulary ids of ``terms``' slots.

  Args:
    ids: int64 [batch, 2 * MAX_WORDS - 1], each slot's term id (any value
      where not ``in_vocabulary``).
    in_vocabulary: bool, the slots holding a vocabulary term.
    column: the feature key (names the outputs).
    frequencies: rows holding each vocabulary term, in vocabulary order.
    documents: the train rows.

  Returns:
    The same two outputs as transform_text.
  """
  first, counts = _distinct(ids, in_vocabulary)
  safe = tf.where(in_vocabulary, ids, tf.zeros_like(ids))
  frequency = tf.gather(tf.constant(np.asarray(frequencies, np.float32)),
                        safe)
  return _outputs(column, _weights(safe, first, counts, frequency,
                                   tf.constant(float(documents))))


def document_frequencies(tf_transform_output, column: str
                        ) -> Tuple[List[bytes], List[int], int]:
  """(vocabulary, rows holding each term, train rows) of a text column.

  Raises:
    ValueError: the Transform wrote no such vocabularies, or they disagree
      (not the same terms in the same order).
  """
  vocabulary = tf_transform_output.vocabulary_by_name(column)
  lines = tf_transform_output.vocabulary_by_name(
      document_frequency_name(column))
  pairs = [line.split(b' ', 1) for line in lines]
  if [p[1] if len(p) == 2 else b'' for p in pairs] != list(vocabulary):
    raise ValueError(
        f'Text column {column!r}: the Transform\'s vocabulary and document '
        'frequencies list different terms; re-run the Transform.')
  frequencies = [int(p[0]) for p in pairs]
  documents = frequencies[vocabulary.index(DOCUMENTS_TERM.encode())]
  return list(vocabulary), frequencies, documents


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
