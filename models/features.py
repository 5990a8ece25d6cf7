"""Names shared by preprocessing_fn, run_fn and every consumer of transformed data."""

# The transformed label: an int64 class id in [0, num_classes), shape [batch];
# for a regression the float32 target itself.
LABEL_KEY = 'label_xf'
# The transformed image of image datasets: float32 [batch, H*W*C] in [0, 1].
IMAGE_KEY = 'image_xf'


def transformed_name(column: str) -> str:
  """Returns the transformed feature name of a numeric or categorical column."""
  return f'{column}_xf'


def text_weights_name(column: str) -> str:
  """Returns the transformed name of a text column's TF-IDF weights.

  A text column's ids are ``transformed_name(column)``
  (models/text_features.py).
  """
  return f'{column}_weights_xf'
