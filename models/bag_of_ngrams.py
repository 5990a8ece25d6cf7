"""The text family's fast default: a TF-IDF-weighted bag of n-gram embeddings.

Each text column arrives as its Transform outputs (models/text_features.py):
the ids of its distinct words and word pairs and their L2-normalised TF-IDF
weights, both [batch, MAX_TERMS]. The column's vector is the weighted sum of
the terms' embeddings (an embedding bag):

  v = sum_j weight_j * E[id_j]        = E^T tfidf(row)

so with a linear layer on top it is exactly a linear model of the TF-IDF
vector (TF-IDF + logistic regression, of rank ``dimensions``). The vectors
of every text column are concatenated with the tabular features and go
through the usual head (models/architectures.py).

The embedding carries an L2 penalty (EMBEDDING_L2), the regularisation a
logistic regression has. Only builtin Keras layers (Embedding, Reshape,
Dot) and regularizers, so the Format-Keras
model reloads without custom objects and TFLite runs it as GATHER and
BATCH_MATMUL.
"""
from typing import Dict, List, Mapping, Sequence

import tensorflow as tf
import tf_keras

from leantfx.models import features
from leantfx.models import text_features

# The embedding's width at width_multiplier 1: well above the classes a
# logistic regression needs (k - 1) and small beside a 50k-term vocabulary.
DIMENSIONS = 64
# L2 penalty on the embedding rows, per row in the batch: a logistic
# regression's C made explicit. Without it Adam grows the rows of terms seen
# in a handful of train rows until they memorise them. Chosen with cosine
# decay on a validation slice of the Debian span's train split
# (benchmarks/debian_text_span.py, 20% of train, seed 0; never its eval
# split): 0 -> 0.838, 1e-5 -> 0.847, 1e-4 -> 0.858, 3e-4 -> 0.855 accuracy,
# where TF-IDF + logistic regression (C=10) scored 0.858 on that slice.
EMBEDDING_L2 = 1e-4


def text_inputs(columns: Sequence[str]) -> Dict[str, tf_keras.Input]:
  """The Keras inputs of the text columns: ids and weights per column."""
  inputs = {}
  for column in columns:
    ids = features.transformed_name(column)
    weights = features.text_weights_name(column)
    inputs[ids] = tf_keras.Input(shape=(text_features.MAX_TERMS,), name=ids,
                                 dtype=tf.int64)
    inputs[weights] = tf_keras.Input(shape=(text_features.MAX_TERMS,),
                                     name=weights, dtype=tf.float32)
  return inputs


def text_vectors(inputs: Mapping[str, tf.Tensor], columns: Sequence[str],
                 vocabulary_sizes: Mapping[str, int],
                 dimensions: int) -> List[tf.Tensor]:
  """One [batch, dimensions] TF-IDF-weighted embedding sum per text column.

  Args:
    inputs: the Keras inputs (text_inputs' among them).
    columns: the text feature keys.
    vocabulary_sizes: each column's vocabulary size, OOV id included.
    dimensions: the embedding width.

  Returns:
    The columns' vectors, in column order.
  """
  vectors = []
  for column in columns:
    embedded = tf_keras.layers.Embedding(
        vocabulary_sizes[column], dimensions,
        embeddings_regularizer=tf_keras.regularizers.L2(EMBEDDING_L2),
        name=f'{column}_embedding')(inputs[features.transformed_name(column)])
    weights = tf_keras.layers.Reshape(
        (text_features.MAX_TERMS, 1), name=f'{column}_weights')(
            inputs[features.text_weights_name(column)])
    # [batch, terms, 1] . [batch, terms, dimensions] over the terms.
    bag = tf_keras.layers.Dot(axes=1, name=f'{column}_bag')(
        [weights, embedded])
    vectors.append(tf_keras.layers.Flatten(name=f'{column}_vector')(bag))
  return vectors
