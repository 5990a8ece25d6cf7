"""The SavedModel backend's packed call of raw-column signatures.

A signature of many [batch] columns (TF Serving's row format of raw
features) is called with one [batch, k] tensor per dtype; its outputs must
equal the plain call's, and anything that does not fit (a wrong dtype, a
missing or extra column, a rank-2 input) takes the plain path and its
errors.
"""
import numpy as np
import pytest
import tensorflow as tf

from leantfx.serving import saved_model_servable
from leantfx.serving import status

pytestmark = pytest.mark.unit

NUMBERS = [f'x{i:02d}' for i in range(20)]
WORDS = ['island', 'sex']


class _Wide(tf.Module):

  def __init__(self):
    super().__init__()
    self.kernel = tf.Variable(
        np.random.default_rng(0).normal(size=(22, 3)).astype(np.float32))

  @tf.function(input_signature=[dict(
      {n: tf.TensorSpec([None], tf.float32, n) for n in NUMBERS},
      **{w: tf.TensorSpec([None], tf.string, w) for w in WORDS})])
  def serve(self, columns):
    numbers = tf.stack([columns[n] for n in NUMBERS], axis=1)
    words = tf.stack([tf.cast(tf.strings.length(columns[w]), tf.float32)
                      for w in WORDS], axis=1)
    logits = tf.concat([numbers, words], axis=1) @ self.kernel
    return {'probabilities': tf.nn.softmax(logits),
            'first_word': columns['island']}


@pytest.fixture(scope='module')
def servable(tmp_path_factory):
  path = str(tmp_path_factory.mktemp('wide') / '1')
  module = _Wide()
  tf.saved_model.save(module, path, signatures={'serving_default':
                                                module.serve})
  return saved_model_servable.SavedModelServable('wide', 1, path)


def _inputs(batch):
  rng = np.random.default_rng(batch)
  inputs = {n: rng.normal(size=batch).astype(np.float32) for n in NUMBERS}
  inputs.update({w: np.array([b'Biscoe', b'Dream', b''][:batch] * batch,
                             dtype=object)[:batch] for w in WORDS})
  return inputs


def _plain(servable, inputs):
  function = servable._functions['serving_default']  # pylint: disable=protected-access
  return function(**{k: tf.constant(v) for k, v in inputs.items()})


@pytest.mark.parametrize('batch', [1, 3])
def test_packed_call_gives_the_plain_call_s_outputs(servable, batch):
  inputs = _inputs(batch)
  assert servable._packed('serving_default', servable._functions[  # pylint: disable=protected-access
      'serving_default'], inputs) is not None
  got = servable.run('serving_default', inputs,
                     ['probabilities', 'first_word'])
  want = _plain(servable, inputs)
  np.testing.assert_allclose(got['probabilities'],
                             want['probabilities'].numpy(), rtol=1e-6)
  np.testing.assert_array_equal(got['first_word'],
                                want['first_word'].numpy())


@pytest.mark.parametrize('change', ['float64', 'missing', 'extra', 'rank2',
                                    'ragged_batch'])
def test_inputs_that_do_not_fit_take_the_plain_path(servable, change):
  inputs = _inputs(2)
  if change == 'float64':
    inputs['x00'] = inputs['x00'].astype(np.float64)
  elif change == 'missing':
    del inputs['x00']
  elif change == 'extra':
    inputs['nope'] = np.zeros(2, np.float32)
  elif change == 'rank2':
    inputs['x00'] = inputs['x00'].reshape(2, 1)
  else:
    inputs['x00'] = np.zeros(3, np.float32)
  function = servable._functions['serving_default']  # pylint: disable=protected-access
  assert servable._packed('serving_default', function, inputs) is None  # pylint: disable=protected-access
  # The plain path answers (float64 is cast by the signature) or raises
  # the ServingError it always raised.
  try:
    expected = ('ok', _plain(servable, inputs)['probabilities'].numpy())
  except (TypeError, ValueError, tf.errors.OpError) as e:
    expected = ('error', type(e))
  try:
    got = ('ok', servable.run('serving_default', inputs,
                              ['probabilities'])['probabilities'])
  except status.ServingError:
    got = ('error', None)
  assert got[0] == expected[0], (got, expected)
  if got[0] == 'ok':
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-6)
