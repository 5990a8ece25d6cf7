"""``leantfx score``: a span's CSV rows through a pushed version, on Beam.

A SavedModel and its TFLite conversion of four float columns (served under
the names as written through feature_names.json) score a two-file span whose
extra text column holds commas, quotes and a line break: every row is scored
once, in file order, with the model's own answers; the PredictionLogs carry
the model's input keys; bad input exits 2 and writes nothing.
"""
import csv
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from leantfx.serving import feature_names
from tests.helpers import run_cli
from tests.helpers import run_main
from tests.serving import model_builders

# Names as written -> the model's input keys.
WRITTEN = {'alcohol (%)': 'alcohol_x1', 'größe': 'groesse_x2',
           'a,b "q"': 'a_b_q_x3', 'age': 'age'}
HEADER = list(WRITTEN) + ['note', 'kind']


def _rows(count, seed):
  rng = np.random.default_rng(seed)
  rows = []
  for i in range(count):
    values = [f'{v:.3f}' for v in rng.normal(size=4)]
    if i % 7 == 3:
      values[1] = ''  # A missing number: NaN for the model.
    rows.append(values + [f'note {i}, "quoted"\nsecond line', f'k{i % 3}'])
  return rows


@pytest.fixture(scope='module')
def pushed(tmp_path_factory):
  """serving/cols/1 (SavedModel) and tflite/cols/1, plus the span."""
  root = tmp_path_factory.mktemp('score')
  keras_model = model_builders.columns_keras_model()
  saved = model_builders.columns_saved_model(
      str(root / 'serving' / 'cols' / '1'), keras_model)
  tflite = model_builders.columns_tflite(saved, str(root / 'tflite' / 'cols' /
                                                     '1'))
  for version_dir in (saved, tflite):
    feature_names.write_feature_names(
        os.path.join(version_dir, 'assets.extra') if version_dir == saved
        else version_dir, WRITTEN)
  span = root / 'data' / 'span-1'
  span.mkdir(parents=True)
  files = {'a.csv': _rows(40, 1), 'b.CSV': _rows(25, 2)}
  for name, rows in files.items():
    with open(span / name, 'w', newline='', encoding='utf-8') as f:
      writer = csv.writer(f)
      writer.writerow(HEADER)
      writer.writerows(rows)
  return root, keras_model, files


def _expected(keras_model, rows):
  columns = {key: np.array([float(r[i]) if r[i] else np.nan for r in rows],
                           np.float32)
             for i, key in enumerate(WRITTEN.values())}
  return keras_model(columns).numpy()


def _read(out):
  with open(os.path.join(out, 'predictions.csv'), newline='',
            encoding='utf-8') as f:
    table = list(csv.reader(f))
  with open(os.path.join(out, 'summary.json'), encoding='utf-8') as f:
    return table[0], table[1:], json.load(f)


@pytest.mark.parametrize('base', ['serving', 'tflite'])
def test_every_row_is_scored_once_in_file_order_with_the_models_answer(
    pushed, base, tmp_path, capfd):
  root, keras_model, files = pushed
  out = str(tmp_path / 'scores')
  # The folder of versions, or (as `leantfx serve` takes it) the folder of
  # models with --model.
  where = (['--model-base-path', str(root / base / 'cols')] if base == 'serving'
           else ['--model-base-path', str(root / base), '--model', 'cols'])
  result = run_main(['score', *where, '--data-root', str(root / 'data'),
                     '--out', out, '--label', 'kind'], capfd)
  assert result.returncode == 0, result.stdout + result.stderr
  assert 'rows: 65 read, 65 scored' in result.stdout, result.stdout
  header, table, summary = _read(out)
  # 'note' is no input of the model (as an identifier is not): kept as
  # written, so each prediction joins back to its row.
  assert header == ['file', 'row', 'kind', 'note', 'probabilities_0',
                    'probabilities_1', 'probabilities_2']
  assert summary['rows_by_file'] == {'a.csv': {'read': 40, 'scored': 40},
                                     'b.CSV': {'read': 25, 'scored': 25}}
  assert [(r[0], int(r[1])) for r in table] == (
      [('a.csv', i) for i in range(1, 41)] +
      [('b.CSV', i) for i in range(1, 26)])
  expected = np.concatenate([_expected(keras_model, files['a.csv']),
                             _expected(keras_model, files['b.CSV'])])
  scored = np.array([[float(v) for v in r[4:]] for r in table])
  np.testing.assert_allclose(scored, expected, atol=1e-5)
  assert [r[2] for r in table] == [r[-1] for r in files['a.csv'] +
                                   files['b.CSV']]
  assert [r[3] for r in table] == [r[-2] for r in files['a.csv'] +
                                   files['b.CSV']]
  # The PredictionLogs: one per model call (here every block is one call),
  # inputs under the model's own keys, the rows in predictions.csv's order.
  from tensorflow_serving.apis import prediction_log_pb2  # pylint: disable=g-import-not-at-top
  logs = []
  for name in sorted(os.listdir(os.path.join(out, 'prediction_logs'))):
    for record in tf.data.TFRecordDataset(
        os.path.join(out, 'prediction_logs', name), compression_type='GZIP'):
      logs.append(prediction_log_pb2.PredictionLog.FromString(record.numpy()))
  assert len(logs) == 2
  request = logs[0].predict_log.request
  assert set(request.inputs) == set(WRITTEN.values())
  assert request.model_spec.name == 'cols'
  logged = np.concatenate([
      tf.make_ndarray(log.predict_log.response.outputs['probabilities'])
      for log in logs])
  np.testing.assert_allclose(logged, expected, atol=1e-5)
  np.testing.assert_allclose(
      np.concatenate([tf.make_ndarray(log.predict_log.request.inputs['age'])
                      for log in logs]),
      [float(r[3]) for r in files['a.csv'] + files['b.CSV']], rtol=1e-6)
  # Nothing else is left beside the output.
  assert sorted(os.listdir(tmp_path)) == ['scores']


def test_two_worker_processes_score_the_same_rows(pushed, tmp_path):
  root, _, _ = pushed
  outs = []
  for mode in ('in_memory', 'multi_processing'):
    out = str(tmp_path / mode)
    result = run_cli(['score', '--model-base-path',
                      str(root / 'serving' / 'cols'), '--data-root',
                      str(root / 'data'), '--out', out, '--beam-mode', mode]
                     + (['--beam-workers', '2'] if mode != 'in_memory' else []),
                     timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    outs.append(out)
  first, second = (_read(out)[1] for out in outs)
  assert first == second


def _refused(capfd, argv, out, *expected):
  result = run_main(argv, capfd)
  assert result.returncode == 2, result.stdout + result.stderr
  for text in expected:
    assert text in result.stderr, result.stderr
  assert 'Traceback' not in result.stderr
  assert not os.path.exists(out) or not os.listdir(out)
  parent = os.path.dirname(out)
  assert not [n for n in os.listdir(parent) if '.partial-' in n]


def test_bad_input_exits_2_and_writes_nothing(pushed, tmp_path, capfd):
  root, _, _ = pushed
  out = str(tmp_path / 'scores')
  base = str(root / 'serving' / 'cols')
  data = str(root / 'data')
  args = ['score', '--model-base-path', base, '--data-root', data,
          '--out', out]
  _refused(capfd, ['score', '--model-base-path', str(tmp_path), '--data-root',
                   data, '--out', out], out, 'holds no version folder')
  _refused(capfd, args + ['--version', '7'], out, 'has no version 7')
  _refused(capfd, ['score', '--model-base-path', str(root / 'serving'),
                   '--model', 'other', '--data-root', data, '--out', out], out,
           "holds the models cols: none is named 'other'")
  _refused(capfd, args + ['--span', '3'], out, 'span-3 does not exist')
  _refused(capfd, args + ['--split', 'eval'], out, 'needs --label')
  _refused(capfd, args + ['--label', 'nope'], out, "'nope' is not a column")
  _refused(capfd, args + ['--beam-runner', 'flink'], out,
           '--beam-runner flink', 'direct')
  # A span without a column the model takes.
  bad = tmp_path / 'bad' / 'span-1'
  bad.mkdir(parents=True)
  (bad / 'x.csv').write_text('alcohol (%),age\n1,2\n', encoding='utf-8')
  _refused(capfd, ['score', '--model-base-path', base, '--data-root',
                   str(tmp_path / 'bad'), '--out', out], out,
           "takes column(s) ['a,b \"q\"', 'größe']")
  # A number column holding a word.
  (bad / 'x.csv').write_text(
      ','.join(f'"{h}"' if ',' in h else h for h in
               [h.replace('"', '""') for h in HEADER]) +
      '\n1,2,3,4,n,k\n1,two,3,4,n,k\n', encoding='utf-8')
  # Found before any worker starts, so worker processes change nothing.
  for mode in ([], ['--beam-mode', 'multi_processing', '--beam-workers', '2']):
    _refused(capfd, ['score', '--model-base-path', base, '--data-root',
                     str(tmp_path / 'bad'), '--out', out, *mode], out,
             "column 'größe' holds a value that is not a number ('two')")
  # An empty --out is kept when scoring fails, and filled when it succeeds.
  os.makedirs(out)
  _refused(capfd, args + ['--span', '3'], out, 'span-3 does not exist')
  assert os.path.isdir(out)
  result = run_main(args, capfd)
  assert result.returncode == 0, result.stderr
  assert os.path.isfile(os.path.join(out, 'predictions.csv'))
  shutil.rmtree(out)
  # An --out that holds files is never written over.
  os.makedirs(out)
  open(os.path.join(out, 'keep'), 'w').close()
  result = run_main(args, capfd)
  assert result.returncode == 2 and 'is not an empty folder' in result.stderr
  assert os.listdir(out) == ['keep']
