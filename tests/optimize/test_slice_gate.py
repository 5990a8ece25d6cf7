"""The ModelOptimizer's per-slice gate on a real penguins model.

The eval rows are the bundled penguins rows written as raw tf.Examples and
read back through the real Transform (steps/slice_rows.py), so each scored
row carries its island. Two variants of the trained model lose about the
same share of the selection split: one loses every Torgersen row (its
class scores rotated there), the other a pseudo-random sixth of every
island. With an overall budget both keep, the gate rejects the first on
the Torgersen slice and passes the second.
"""
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.evaluation import quality as quality_lib
from leantfx.components.optimize.evaluation import report
from leantfx.components.optimize.evaluation import selection
from leantfx.components.optimize.export import tflite as tflite_export
from leantfx.runtimes import serving_export
from leantfx.components.optimize.steps import slice_rows
from leantfx.models import features
from tests.optimize import raw_fixture

pytestmark = pytest.mark.unit

ISLAND = selection.SliceGate(columns=(('island',),))
# Both variants lose about 0.15 of the selection split (Torgersen is 52 of
# penguins' 344 rows); the budget lets that through overall.
BUDGET = selection.Budget(max_accuracy_drop=0.2)


def _write_raw_examples(fixture, path):
  """Every bundled penguins row as a raw tf.Example, as ExampleGen writes."""
  columns = fixture.columns
  rows = len(columns[fixture.spec.label])
  with tf.io.TFRecordWriter(path, options='GZIP') as writer:
    for i in range(rows):
      feature = {}
      for name, spec in fixture.raw_spec.items():
        value = columns[name][i]
        if value == '':
          continue
        if spec.dtype == tf.string:
          feature[name] = tf.train.Feature(
              bytes_list=tf.train.BytesList(value=[value.encode()]))
        else:
          feature[name] = tf.train.Feature(
              float_list=tf.train.FloatList(value=[float(value)]))
      writer.write(tf.train.Example(features=tf.train.Features(
          feature=feature)).SerializeToString())
  return rows


@pytest.fixture(scope='module')
def sliced(penguins_fixture, tmp_path_factory):
  path = str(tmp_path_factory.mktemp('raw_eval') / 'eval.gz')
  rows = _write_raw_examples(penguins_fixture, path)
  inputs = serving_export.serving_input_specs(penguins_fixture.model)
  transformed = penguins_fixture.tft_output.transformed_feature_spec()
  feature_spec = {n: transformed[n] for n in
                  list(inputs) + [features.LABEL_KEY]}
  return rows, slice_rows.read_sliced_eval(
      [path], penguins_fixture.tft_output, feature_spec, features.LABEL_KEY,
      ISLAND, limit=10_000, batch_size=100)


def test_sliced_rows_are_the_transformed_rows_with_their_island(
    penguins_fixture, sliced):
  rows, found = sliced
  assert len(found.data) == rows == 344
  islands = penguins_fixture.columns['island']
  assert found.slices['island'].tolist() == [f'island={v}' for v in islands]
  # The same features the Transform's own layer gives for those rows.
  expected = penguins_fixture.transform(
      raw_fixture._raw_request(  # pylint: disable=protected-access
          penguins_fixture.columns, penguins_fixture.raw_spec,
          penguins_fixture.spec.label, range(rows)))
  for name, value in found.data.features.items():
    np.testing.assert_allclose(
        value.reshape(-1), np.asarray(expected[name]).reshape(-1),
        rtol=1e-6, err_msg=name)
  classes = penguins_fixture.spec.classes
  assert found.data.labels.tolist() == [
      classes.index(v) for v in penguins_fixture.columns['species']]


def _variant(model, hurt):
  """The model with its class scores rotated on the rows ``hurt`` picks."""
  specs = serving_export.serving_input_specs(model)
  inputs = {n: tf_keras.Input(shape=s.shape[1:], dtype=s.dtype, name=n)
            for n, s in specs.items()}
  scores = model(inputs)
  classes = scores.shape[-1]
  mask = tf_keras.layers.Lambda(hurt)(inputs)
  rotated = tf_keras.layers.Lambda(lambda p: tf.gather(
      p, [(i + 1) % classes for i in range(classes)], axis=-1))(scores)
  out = tf_keras.layers.Lambda(lambda a: tf.where(a[0], a[1], a[2]))(
      [mask, rotated, scores])
  return tf_keras.Model(inputs, out)


def _measure(model, name, data, tmp_path):
  path = str(tmp_path / f'{name}.tflite')
  tflite_export.export_tflite(model, 'float32', output_path=path)
  return measure.measure_tflite(path, data, name=name, latency_runs=2,
                                warmup_runs=0, latency_rounds=1)


def test_a_variant_that_hurts_one_island_is_rejected_on_that_slice(
    penguins_fixture, sliced, tmp_path):
  _, found = sliced
  selection_data, _ = selection.split_eval(found.data)
  selection_slices, _ = selection.split_slices(found.slices)
  torgersen = selection_slices['island'] == 'island=Torgersen'
  # Torgersen's vocabulary id, read off the rows (not assumed).
  (torgersen_id,) = set(
      selection_data.features['island_xf'][torgersen].reshape(-1).tolist())

  def on_torgersen(x):
    ids = tf.reshape(tf.cast(x['island_xf'], tf.int64), [-1, 1])
    return tf.equal(ids, int(torgersen_id))

  def spread(x):
    # A pseudo-random sixth of the rows of every island: the fractional
    # digits of a z-scored measurement.
    z = tf.reshape(x['bill_length_mm_xf'], [-1, 1]) * 1000.0
    return tf.math.floormod(z, 1.0) < 1.0 / 6

  model = penguins_fixture.model
  baseline = _measure(model, 'baseline', selection_data, tmp_path)
  hurt = _measure(_variant(model, on_torgersen), 'hurt_torgersen',
                  selection_data, tmp_path)
  even = _measure(_variant(model, spread), 'hurt_everywhere',
                  selection_data, tmp_path)
  # The premise: both within the overall budget, losing a similar share.
  hurt_drop = baseline.accuracy - hurt.accuracy
  even_drop = baseline.accuracy - even.accuracy
  assert 0.08 < hurt_drop <= BUDGET.max_accuracy_drop, hurt_drop
  assert 0.08 < even_drop <= BUDGET.max_accuracy_drop, even_drop
  assert abs(hurt_drop - even_drop) < 0.06, (hurt_drop, even_drop)

  plain = selection.gate(baseline, [hurt, even], BUDGET,
                         labels=selection_data.labels)
  assert [d.blessed for d in plain] == [True, True]
  decisions = selection.gate(baseline, [hurt, even], BUDGET,
                             labels=selection_data.labels,
                             slices=selection_slices, slice_gate=ISLAND)
  rejected, passed = decisions
  assert not rejected.blessed
  assert len(rejected.slice_rejections) == 1
  assert rejected.slice_rejections[0].startswith(
      'slice island=Torgersen: accuracy drop ')
  assert rejected.worst_slice['slice'] == 'island=Torgersen'
  assert rejected.worst_slice['count'] == int(np.sum(torgersen))
  assert rejected.worst_slice['accuracy_drop'] > (
      rejected.worst_slice['bound'])
  assert passed.blessed, passed.reasons
  assert passed.slice_rejections == ()
  assert passed.worst_slice['accuracy_drop'] <= passed.worst_slice['bound']
  assert selection.select(decisions).variant.name == 'hurt_everywhere'
  # The report's table cell and the record's round trip.
  cell = report.worst_slice_cell(rejected.worst_slice, quality_lib.ACCURACY)
  assert cell.startswith(f'island=Torgersen (n={int(np.sum(torgersen))}): '
                         'accuracy ')
  assert selection.GateDecision.from_dict(rejected.to_dict()) == rejected


def test_small_slices_are_not_gated_and_the_allowance_shrinks_with_size():
  # A slice below the size floor is left out of the gate entirely.
  gate = selection.SliceGate(columns=(('island',),), min_slice_size=30)
  labels = np.zeros(40, np.int64)
  keys = np.array(['island=A'] * 29 + ['island=B'] * 11, dtype=object)
  base = dict(technique='t', tflite_mode=None, runtime='tflite', path='-',
              num_examples=40, size_bytes=1, gzipped_bytes=1,
              latency_p50_ms=1.0, latency_p99_ms=1.0, latency_runs=1)
  baseline = measure.VariantMetrics(name='b', accuracy=1.0,
                                    class_ids=[0] * 40, **base)
  variant = measure.VariantMetrics(name='v', accuracy=29 / 40,
                                   class_ids=[0] * 29 + [1] * 11, **base)
  (decision,) = selection.gate(baseline, [variant],
                               selection.Budget(max_accuracy_drop=0.3),
                               labels=labels, slices={'island': keys},
                               slice_gate=gate)
  assert decision.worst_slice is None and decision.blessed
  # Binomial standard error of (right + 1) / (n + 2): 2 * sqrt(p (1-p) / n).
  for n in (10, 40, 160):
    p = (n + 1) / (n + 2)
    assert selection.slice_allowance(
        quality_lib.ACCURACY, np.zeros(n), np.zeros(n), 2.0) == (
            pytest.approx(2 * np.sqrt(p * (1 - p) / n)))
  # RMSE: sd(e^2) / (2 mean(e^2) sqrt(n)), relative.
  errors = np.array([1.0, -2.0, 3.0, -1.0])
  expected = 2 * np.std(errors ** 2) / (2 * np.mean(errors ** 2) * 2)
  assert selection.slice_allowance(quality_lib.RMSE, errors, np.zeros(4),
                                   2.0) == pytest.approx(expected)


def test_slice_gate_round_trips_and_refuses_bad_values():
  gate = selection.SliceGate(columns=(('island',), ('island', 'sex')),
                             names=(('Island',), ('Island', 'Sex')),
                             min_slice_size=5)
  assert selection.SliceGate.from_dict(gate.to_dict()) == gate
  with pytest.raises(Exception, match='one name per column'):
    selection.SliceGate(columns=(('island',),), names=(('a', 'b'),))
  with pytest.raises(Exception, match='min_slice_size'):
    selection.SliceGate(columns=(('island',),), min_slice_size=0)
