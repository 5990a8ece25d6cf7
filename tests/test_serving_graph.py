"""models.serving_graph: the pushed serving graph's op count and call cost."""
import pytest
import tensorflow as tf

from leantfx.models import serving_graph
from tests.serving import model_builders


def test_counts_ops_and_times_mixed_columns_and_matrices(tmp_path):
  tabular = model_builders.tabular_model(str(tmp_path / 'tabular'))
  digits = model_builders.digits_model(str(tmp_path / 'digits'))
  for path in (tabular, digits):
    cost = serving_graph.measure(path, calls=5)
    signature = tf.saved_model.load(path).signatures['serving_default']
    graph = signature.graph.as_graph_def()
    assert cost.ops >= len(graph.node) > 0
    assert set(cost.call_ms) == {1, 32}
    assert all(ms is not None and ms > 0 for ms in cost.call_ms.values())


def test_a_row_fills_the_columns_and_a_refused_call_is_none(tmp_path):
  path = model_builders.tabular_model(str(tmp_path / 'tabular'))
  row = {'bill_length_mm': 39.1, 'flipper_length_mm': 181.0,
         'island': 'Torgersen'}
  assert all(serving_graph.measure(path, row, calls=3).call_ms.values())
  # A value the graph cannot take (a string for a float column) is not a
  # figure: the op count stays, the call cost is None.
  refused = serving_graph.measure(path, dict(row, bill_length_mm='x'),
                                  calls=3)
  assert refused.ops > 0
  assert refused.call_ms == {1: None, 32: None}


def test_a_model_without_serving_default_is_a_key_error(tmp_path):
  path = str(tmp_path / 'plain')
  tf.saved_model.save(tf.Module(), path)
  with pytest.raises(KeyError):
    serving_graph.measure(path)
