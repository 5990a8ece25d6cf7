"""``leantfx schema infer``: a starting schema for a user's data, to curate.

It computes TFDV statistics of one span (the newest by default), infers a
schema from them, then adds what a curated schema needs and inference does
not give: drift comparators (L-infinity for categorical features and the
label, Jensen-Shannon divergence for numeric ones, with this project's
default thresholds) and the observed value ranges as domains. The header of
the written file says what to review. Images get a fixed two-feature schema
(image bytes and the class folder name as the label).
"""
import os
import tempfile
from typing import Optional, Sequence

from leantfx import column_roles
from leantfx import csv_format
from leantfx import spans


# Defaults for the comparators; the curated bundled schemas justify theirs
# from measured sampling variation (schemas/penguins/schema.pbtxt).
CATEGORICAL_THRESHOLD = 0.25
NUMERIC_THRESHOLD = 0.2
SCHEMA_FILE = 'schema.pbtxt'


def infer_schema(statistics, label: Optional[str],
                 categorical: Sequence[str] = (), roles=None):
  """Infers a schema and adds comparators and observed domains.

  Args:
    statistics: a DatasetFeatureStatisticsList of one span.
    label: the label feature (gets an L-infinity comparator), or None.
    categorical: INT features to treat as categorical.
    roles: {feature key: (role, date format)} of the CSV pre-flight
      (leantfx/column_roles.py), recorded in the schema
      (column_roles.annotate_schema), or None.

  Returns:
    A tensorflow_metadata Schema.
  """
  import tensorflow_data_validation as tfdv  # pylint: disable=g-import-not-at-top
  from tensorflow_metadata.proto.v0 import schema_pb2  # pylint: disable=g-import-not-at-top
  schema = tfdv.infer_schema(statistics, infer_feature_shape=False)
  stats = {'.'.join(f.path.step) or f.name: f
           for f in statistics.datasets[0].features}
  for feature in schema.feature:
    stat = stats.get(feature.name)
    is_categorical = (feature.type == schema_pb2.BYTES or
                      feature.name in categorical or
                      (feature.name == label and
                       feature.type == schema_pb2.INT))
    if is_categorical:
      if feature.type == schema_pb2.INT:
        feature.int_domain.is_categorical = True
      feature.drift_comparator.infinity_norm.threshold = CATEGORICAL_THRESHOLD
    else:
      feature.drift_comparator.jensen_shannon_divergence.threshold = (
          NUMERIC_THRESHOLD)
      if stat is not None and stat.HasField('num_stats'):
        low, high = stat.num_stats.min, stat.num_stats.max
        if feature.type == schema_pb2.INT:
          feature.int_domain.min = int(low)
          feature.int_domain.max = int(high)
        else:
          feature.float_domain.min = float(low)
          feature.float_domain.max = float(high)
    # The ExampleGen writes an empty field as an empty value list: allow it,
    # the ValidationGate checks the missing share against presence.
    if feature.HasField('value_count') and feature.value_count.max == 1:
      feature.value_count.ClearField('min')
  if roles:
    column_roles.annotate_schema(schema, roles)
  return schema


def image_schema(classes: Sequence[str], label: str = 'label',
                 image: str = 'image'):
  """The schema ImageExampleGen's examples follow."""
  from tensorflow_metadata.proto.v0 import schema_pb2  # pylint: disable=g-import-not-at-top
  schema = schema_pb2.Schema()
  feature = schema.feature.add(name=label, type=schema_pb2.BYTES)
  feature.domain = label
  feature.presence.min_fraction = 1.0
  feature.presence.min_count = 1
  feature.shape.dim.add(size=1)
  feature.drift_comparator.infinity_norm.threshold = CATEGORICAL_THRESHOLD
  feature = schema.feature.add(name=image, type=schema_pb2.BYTES)
  feature.presence.min_fraction = 1.0
  feature.presence.min_count = 1
  feature.shape.dim.add(size=1)
  schema.string_domain.add(name=label, value=list(classes))
  return schema


def span_statistics(span_dir: str, data_format: str,
                    text_columns: Sequence[str] = (),
                    marker_columns: Sequence[str] = (),
                    markers: Sequence[str] = ()):
  """TFDV statistics of a span's examples, as the pipeline's ExampleGen makes them.

  CSV files are encoded the ExampleGen's way first (csv_format.encode_files:
  feature keys, ``text_columns`` as text, ``markers`` missing in
  ``marker_columns``), so the schema inferred from them
  names and types the features as the pipeline's examples have them.
  """
  import tensorflow_data_validation as tfdv  # pylint: disable=g-import-not-at-top
  if data_format != 'csv':
    return tfdv.generate_statistics_from_tfrecord(os.path.join(span_dir, '*'))
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  files, _ = spans.csv_entries(span_dir)
  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, 'examples.tfrecord')
    with tf.io.TFRecordWriter(path) as writer:
      for record in csv_format.encode_files(files, text_columns, None,
                                            marker_columns, markers):
        writer.write(record)
    return tfdv.generate_statistics_from_tfrecord(path)
