"""models/text_features.py and models/date_features.py through the real
tf.Transform on Beam, against references written from their definitions.

Text: each row's (term id -> weight) must be the L2-normalised TF-IDF of its
words and word pairs (counted here in plain Python from the module's stated
rules: Unicode lowercase, non-letters and non-digits as spaces, terms seen
at least FREQUENCY_FLOOR times), for empty, 10 kB and non-ASCII texts too.
Dates: every field against Python's datetime (strptime with the same
format), impossible dates and other formats as missing, and the counts of
what could not be parsed.
"""
import collections
import dataclasses
import datetime
import functools
import math
import os

import numpy as np
import pytest
import tensorflow as tf

from leantfx import config as config_lib
from leantfx import raw_serving
from leantfx.errors import ConfigError
from leantfx.models import date_features
from leantfx.models import features
from leantfx.models import preprocessing
from leantfx.models import text_features

pytestmark = pytest.mark.unit

tft = pytest.importorskip('tensorflow_transform')
tft_beam = pytest.importorskip('tensorflow_transform.beam')

_LABEL = 'y'


def _run(spec, raw_spec, rows, temp_dir):
  """AnalyzeAndTransformDataset with the project's preprocessing_fn."""
  from tensorflow_transform.tf_metadata import dataset_metadata  # pylint: disable=g-import-not-at-top
  from tensorflow_transform.tf_metadata import schema_utils  # pylint: disable=g-import-not-at-top
  metadata = dataset_metadata.DatasetMetadata(
      schema_utils.schema_from_feature_spec(raw_spec))
  fn = functools.partial(
      preprocessing.preprocessing_fn,
      custom_config={'dataset': dataclasses.asdict(spec), 'domains': {}})
  with tft_beam.Context(temp_dir=str(temp_dir), force_tf_compat_v1=False):
    (out, _), transform_fn = ((rows, metadata)
                              | tft_beam.AnalyzeAndTransformDataset(fn))
    out_dir = str(temp_dir / 'transform_fn')
    _ = transform_fn | tft_beam.WriteTransformFn(out_dir)
  return out, tft.TFTransformOutput(out_dir)


def _reference_terms(text):
  """The module's stated tokenization, in plain Python."""
  chars = [ch if (ch.isalpha() or ch.isnumeric()) else ' '
           for ch in text.lower()]
  words = ''.join(chars).split()[:text_features.MAX_WORDS]
  return words + [f'{a} {b}' for a, b in zip(words, words[1:])]


def _reference_tfidf(texts):
  """[{term: weight}] per text: sklearn's smooth idf, min_df the floor,
  out-of-vocabulary terms dropped, the heaviest MAX_TERMS, L2-normalised."""
  docs = [_reference_terms(t) for t in texts]
  df = collections.Counter(term for doc in docs for term in set(doc))
  out = []
  for doc in docs:
    counts = collections.Counter(
        t for t in doc if df[t] >= text_features.FREQUENCY_FLOOR)
    weights = {t: n * (1 + math.log((1 + len(docs)) / (1 + df[t])))
               for t, n in counts.items()}
    top = dict(sorted(weights.items(), key=lambda kv: -kv[1])
               [:text_features.MAX_TERMS])
    norm = math.sqrt(sum(w * w for w in top.values())) or 1.0
    out.append({t: w / norm for t, w in top.items()})
  return out


_TEXTS = [
    'The parcel, "blue box", never arrived',
    'Parcel never arrived; the blue box is lost!',
    '',
    'Größe falsch: Größe 42 bestellt, café au lait',
    'größe FALSCH and the café',
    '退款 请求 退款',
    '退款 请求',
    'refund ' * 1500,  # 10.5 kB: cut to MAX_WORDS words
    'refund please, the parcel',
    '...!!! ,,,',
    # 100 distinct words, twice: more distinct terms than MAX_TERMS.
    ' '.join(f'w{i}' for i in range(100)),
    ' '.join(f'w{i}' for i in range(100)),
]


def test_text_becomes_the_tfidf_of_its_words_and_pairs(tmp_path):
  spec = config_lib.DatasetSpec(name='text', label=_LABEL,
                                classes=('a', 'b'), text_features=('t',))
  rows = [{'t': [t.encode('utf-8')], _LABEL: ['a' if i % 2 else 'b']}
          for i, t in enumerate(_TEXTS)]
  raw_spec = {'t': tf.io.VarLenFeature(tf.string),
              _LABEL: tf.io.VarLenFeature(tf.string)}
  out, tft_output = _run(spec, raw_spec, rows, tmp_path)
  vocabulary = [t.decode('utf-8')
                for t in tft_output.vocabulary_by_name('t')]
  expected = _reference_tfidf(_TEXTS)
  assert len(out) == len(_TEXTS)
  for text, row, want in zip(_TEXTS, out, expected):
    ids = np.asarray(row[features.transformed_name('t')])
    weights = np.asarray(row[features.text_weights_name('t')])
    assert ids.shape == weights.shape == (text_features.MAX_TERMS,)
    got = {vocabulary[i]: w for i, w in zip(ids, weights) if w > 0}
    assert got.keys() == want.keys(), text[:40]
    for term, weight in want.items():
      assert got[term] == pytest.approx(weight, rel=1e-5), (text[:40], term)
    if want:
      assert float(np.sum(weights ** 2)) == pytest.approx(1.0, rel=1e-5)
    else:
      # Empty, or punctuation only: no term, a zero vector.
      assert not weights.any() and not ids.any()
  # The document frequencies the exports rebuild the weights from.
  terms, frequencies, documents = text_features.document_frequencies(
      tft_output, 't')
  assert documents == len(_TEXTS)
  df = collections.Counter(
      t for text in _TEXTS for t in set(_reference_terms(text)))
  assert {t.decode(): n for t, n in zip(terms, frequencies)} == dict(
      {t: n for t, n in df.items() if n >= text_features.FREQUENCY_FLOOR},
      **{text_features.DOCUMENTS_TERM: len(_TEXTS)})
  # serving_text rebuilds the same outputs from those constants.
  rebuilt = text_features.serving_text(
      tf.constant(_TEXTS), 't', raw_serving.vocabulary_table(terms),
      frequencies, documents)
  for name in (features.transformed_name('t'), features.text_weights_name('t')):
    np.testing.assert_allclose(rebuilt[name].numpy(),
                               np.stack([row[name] for row in out]),
                               rtol=1e-6)
  # Non-ASCII words are kept whole and lowercased (Unicode-aware).
  assert 'größe' in vocabulary and '退款' in vocabulary
  assert 'café' in vocabulary


def test_normalize_keeps_unicode_and_turns_punctuation_to_spaces():
  got = text_features.normalize(tf.constant([
      'Hello,WORLD!! "quoted"', 'ÉCOLE d\'été', b'bad \xff byte'])).numpy()
  assert got[0].decode() == 'hello world quoted'
  assert got[1].decode() == 'école d été'
  # An invalid UTF-8 byte is replaced, not an error.
  assert got[2].decode().startswith('bad')



def test_analyzers_distinct_terms_are_each_rows_set_of_terms():
  """The analyzers' sort-based distinct terms: per row, the set of its
  non-empty terms, each once (repeats, empty texts, non-ASCII included)."""
  texts = ['a a a a', 'x y x y x y', '', '包 包 é', 'the cat, the cat!']
  all_terms = text_features.terms(tf.constant(texts)).numpy()
  want = collections.Counter(
      term for row in all_terms for term in set(row) if term)
  got = collections.Counter(
      text_features._distinct_terms(  # pylint: disable=protected-access
          tf.constant(all_terms)).numpy().tolist())
  assert got == want
  assert got[b'x y'] == 1 and got[b'a'] == 1

_FORMATS = ('%Y-%m-%d', '%Y-%m-%dT%H:%M:%S%z', '%Y-%m-%d %H:%M:%S',
            '%d/%m/%Y', '%m/%d/%Y', '%Y/%m/%d', '%d.%m.%Y')


def _random_datetimes(n, seed):
  rng = np.random.default_rng(seed)
  base = datetime.datetime(1890, 1, 1)
  return [base + datetime.timedelta(days=int(d), seconds=int(s))
          for d, s in zip(rng.integers(0, 200 * 365, n),
                          rng.integers(0, 86400, n))]


@pytest.mark.parametrize('date_format', _FORMATS)
def test_calendar_fields_match_python_datetime(date_format):
  moments = _random_datetimes(200, seed=len(date_format))
  # Leap days and the turn of a century.
  moments += [datetime.datetime(2000, 2, 29, 23, 59, 59),
              datetime.datetime(1900, 3, 1), datetime.datetime(1970, 1, 1)]
  offsets = [datetime.timezone(datetime.timedelta(minutes=int(m)))
             for m in np.random.default_rng(1).integers(-720, 840,
                                                       len(moments))]
  if '%z' in date_format:
    moments = [m.replace(tzinfo=o) for m, o in zip(moments, offsets)]
  texts = [m.strftime(date_format) for m in moments]
  valid, block = date_features.calendar(tf.constant(texts), date_format)
  assert valid.numpy().all()
  block = block.numpy()
  epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
  for text, row in zip(texts, block):
    parsed = datetime.datetime.strptime(text, date_format)
    aware = parsed if parsed.tzinfo else parsed.replace(
        tzinfo=datetime.timezone.utc)
    elapsed = (aware - epoch).total_seconds() / 86400
    # float32's 24-bit mantissa: within one unit in the last place.
    assert row[0] == pytest.approx(elapsed, abs=abs(elapsed) * 2**-23 +
                                   1e-5), text
    assert tuple(row[1:5]) == (parsed.year, parsed.month, parsed.day,
                               parsed.weekday()), text
    assert row[5] == pytest.approx(parsed.hour + parsed.minute / 60), text


def test_iso_timestamps_with_z_and_fractions_parse():
  valid, block = date_features.calendar(
      tf.constant(['2024-03-01T12:34:56Z', '2024-03-01T12:34:56.250+01:00',
                   ' 2024-03-01T12:34:56-0130 ']), '%Y-%m-%dT%H:%M:%S%z')
  assert valid.numpy().all()
  days = datetime.date(2024, 3, 1).toordinal() - datetime.date(
      1970, 1, 1).toordinal()
  fraction = (12 * 3600 + 34 * 60 + 56) / 86400
  np.testing.assert_allclose(block.numpy()[:, 0], [
      days + fraction, days + fraction - 1 / 24,
      days + fraction + 1.5 / 24], atol=1e-3)


@pytest.mark.parametrize('text', [
    '', 'garbage', '2023-02-29', '2024-13-01', '2024-00-10', '2024-04-31',
    '2024-03-01T25:00:00Z', '01/03/2024', '2024-03-01 extra', '2024-3'])
def test_impossible_or_other_format_dates_are_missing(text):
  valid, block = date_features.calendar(tf.constant([text]), '%Y-%m-%d')
  assert not valid.numpy()[0]
  assert not block.numpy().any()


def test_unsupported_format_is_refused():
  with pytest.raises(ConfigError, match='%b is not supported'):
    date_features.format_pattern('%d %b %Y')
  with pytest.raises(ConfigError, match='needs a year, a month and a day'):
    date_features.format_pattern('%H:%M')


def test_date_block_through_transform_with_parse_counts(tmp_path):
  spec = config_lib.DatasetSpec(
      name='dates', label=_LABEL, classes=('a', 'b'), date_features=('d',),
      date_formats=(('d', '%d/%m/%Y'),))
  texts = (['01/03/2024', '15/08/2023', '29/02/2024', '31/12/1999'] * 3 +
           ['30/02/2024', 'soon', 'soon', ''])
  rows = [{'d': [t.encode()] if t else [], _LABEL: ['a']} for t in texts]
  raw_spec = {'d': tf.io.VarLenFeature(tf.string),
              _LABEL: tf.io.VarLenFeature(tf.string)}
  out, tft_output = _run(spec, raw_spec, rows, tmp_path)
  block = np.stack([r[features.transformed_name('d')] for r in out])
  assert block.shape == (len(texts), len(date_features.PARTS))
  missing = block[:, date_features.PARTS.index('missing')]
  np.testing.assert_array_equal(missing, [0] * 12 + [1] * 4)
  # The elapsed days are z-scored over the 12 parsed values.
  elapsed = block[:12, 0]
  assert elapsed.mean() == pytest.approx(0, abs=1e-5)
  assert elapsed.std() == pytest.approx(1, rel=1e-4)
  assert not block[12:, :-1].any()
  # 1 March 2024 (a Friday): month angle 2/12, weekday angle 4/7.
  month = 2 * np.pi * 2 / 12
  np.testing.assert_allclose(block[0, 2:4], [np.sin(month), np.cos(month)],
                             atol=1e-6)
  weekday = 2 * np.pi * 4 / 7
  np.testing.assert_allclose(block[0, 6:8],
                             [np.sin(weekday), np.cos(weekday)], atol=1e-6)
  report = date_features.parse_report(tft_output, 'd')
  assert report == {'parsed': 12, 'empty': 1, 'unparseable': 3,
                    'unparseable_examples': {'soon': 2, '30/02/2024': 1}}
