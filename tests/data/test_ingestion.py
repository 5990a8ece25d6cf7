"""Image decoding, TFRecord/image pre-flight checks, formats and schema infer."""
import io
import os

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format
from PIL import Image
from tensorflow_metadata.proto.v0 import schema_pb2

from leantfx.cli import data_checks
from leantfx import columns
from leantfx import data_formats
from leantfx import datasets
from leantfx import schema_infer
from leantfx.components.image_example_gen import decode
from leantfx.errors import InputDataError
from tests.data import helpers
from tests.helpers import run_cli

pytestmark = pytest.mark.unit

GREY_8 = decode.ImageSettings(height=8, width=8, channels=1)


def _png(array, mode):
  buf = io.BytesIO()
  Image.fromarray(array, mode=mode).save(buf, format='PNG')
  return buf.getvalue()


def test_decode_resizes_and_reencodes_a_good_image():
  data = _png(np.full((16, 12), 200, np.uint8), 'L')
  png, reason, _ = decode.decode_image(data, GREY_8)
  assert reason == ''
  with Image.open(io.BytesIO(png)) as img:
    assert img.size == (8, 8) and img.mode == 'L'
    assert np.asarray(img).min() == 200


def test_decode_names_corrupt_and_wrong_channel_images():
  png, reason, detail = decode.decode_image(b'not an image at all', GREY_8)
  assert png is None and reason == decode.CORRUPT and 'decode' in detail
  truncated = _png(np.zeros((8, 8), np.uint8), 'L')[:30]
  assert decode.decode_image(truncated, GREY_8)[1] == decode.CORRUPT
  rgb = _png(np.zeros((8, 8, 3), np.uint8), 'RGB')
  png, reason, detail = decode.decode_image(rgb, GREY_8)
  assert reason == decode.WRONG_CHANNELS and '3 channel' in detail


@pytest.fixture()
def digit_images(tmp_path):
  root = str(tmp_path / 'images')
  datasets.prepare('digits', root, 1, 'images')
  return root


def test_digits_as_png_folders(digit_images):
  span_dir = os.path.join(digit_images, 'span-1')
  assert sorted(os.listdir(span_dir)) == [str(d) for d in range(10)]
  total = sum(len(os.listdir(os.path.join(span_dir, d)))
              for d in os.listdir(span_dir))
  assert total == 1797  # scikit-learn's digits.
  assert data_formats.infer_format(span_dir) == 'images'
  profile = data_checks.profile_image_data_root(digit_images, GREY_8)
  assert profile.num_rows == 1797 and profile.label_values[0] == '0'


def test_bad_images_fail_or_are_skipped_by_policy(digit_images):
  span_dir = os.path.join(digit_images, 'span-1')
  with open(os.path.join(span_dir, '3', 'broken.png'), 'wb') as f:
    f.write(b'\x89PNG\r\n\x1a\n garbage')
  with open(os.path.join(span_dir, '4', 'colour.png'), 'wb') as f:
    f.write(_png(np.zeros((8, 8, 3), np.uint8), 'RGB'))
  with pytest.raises(InputDataError) as raised:
    data_checks.profile_image_data_root(digit_images, GREY_8)
  message = str(raised.value)
  assert '2 bad image(s)' in message and 'broken.png' in message
  assert 'colour.png' in message and '--bad-images skip' in message
  skip = decode.ImageSettings(height=8, width=8, channels=1,
                              bad_images='skip')
  profile = data_checks.profile_image_data_root(digit_images, skip)
  assert profile.num_rows == 1797
  assert {k: len(v) for k, v in profile.bad_images.items()} == {
      decode.CORRUPT: 1, decode.WRONG_CHANNELS: 1}


def test_empty_image_span_stops(tmp_path):
  os.makedirs(tmp_path / 'span-1' / 'cat')
  with pytest.raises(InputDataError, match='no usable image'):
    data_checks.profile_image_data_root(str(tmp_path), GREY_8)


def test_tfrecord_checks(tmp_path):
  root = str(tmp_path / 'tf')
  path = datasets.prepare('penguins', root, 1, 'tfrecord')
  spec = datasets.BUNDLED['penguins']
  profile = data_checks.profile_tfrecord_data_root(
      root, 'species', numeric_columns=spec.numeric_features,
      categorical_columns=spec.categorical_features)
  assert profile.num_rows == 344
  assert profile.label_values == ('Adelie', 'Chinstrap', 'Gentoo')
  assert data_formats.infer_format(os.path.dirname(path)) == 'tfrecord'

  with open(path, 'wb') as f:  # A CSV file renamed .tfrecord.
    f.write(b'species,island\nAdelie,Dream\n' * 20)
  with pytest.raises(InputDataError, match='not a readable TFRecord file'):
    data_checks.profile_tfrecord_data_root(root, 'species')

  with open(path, 'wb') as f:
    f.write(data_formats.tfrecord_bytes([]))
  with pytest.raises(InputDataError, match='holds no example'):
    data_checks.profile_tfrecord_data_root(root, 'species')


def test_tfrecord_type_change_names_the_feature(tmp_path):
  rows = helpers.bundled_rows('penguins', str(tmp_path))
  header = list(rows[0])
  table = [header] + [[r[c] for c in header] for r in rows]
  table[5][header.index('body_mass_g')] = 'heavy'  # Whole column -> bytes.
  os.makedirs(tmp_path / 'span-1')
  (tmp_path / 'span-1' / 'p.tfrecord').write_bytes(
      data_formats.tfrecord_bytes(data_formats.rows_to_examples(table)))
  spec = datasets.BUNDLED['penguins']
  with pytest.raises(InputDataError, match="'body_mass_g' holds strings"):
    data_checks.profile_tfrecord_data_root(
        str(tmp_path), 'species', numeric_columns=spec.numeric_features)


def test_inferred_schema_accepts_its_own_data(tmp_path):
  import tensorflow_data_validation as tfdv  # pylint: disable=g-import-not-at-top
  rows = helpers.bundled_rows('penguins', str(tmp_path))
  stats = helpers.statistics(rows)
  schema = schema_infer.infer_schema(stats, 'species')
  species = next(f for f in schema.feature if f.name == 'species')
  assert species.drift_comparator.infinity_norm.threshold == 0.25
  mass = next(f for f in schema.feature if f.name == 'body_mass_g')
  assert mass.drift_comparator.jensen_shannon_divergence.threshold == 0.2
  assert (mass.int_domain.min, mass.int_domain.max) == (2700, 6300)
  assert not tfdv.validate_statistics(stats, schema).anomaly_info


def test_schema_infer_command_writes_a_schema(tmp_path):
  datasets.prepare('digits', str(tmp_path / 'data'), 1, 'images')
  out = str(tmp_path / 'schemas' / 'mine')
  result = run_cli(['schema', 'infer', '--data-root', str(tmp_path / 'data'),
                    '--out', out])
  assert result.returncode == 0, result.stderr
  text = open(os.path.join(out, 'schema.pbtxt')).read()
  assert 'infinity_norm' in text and 'value: "9"' in text
  again = run_cli(['schema', 'infer', '--data-root',
                   str(tmp_path / 'data'), '--out', out])
  assert again.returncode == 2 and 'is not overwritten' in again.stderr


def test_schema_infer_on_csv_names_keys_and_reads_labels_as_text(tmp_path):
  # The schema must describe the examples the pipeline's ExampleGen writes:
  # feature keys for the names a CSV holds, a class label as text.
  span = tmp_path / 'data' / 'span-1'
  os.makedirs(span)
  rows = ''.join(f'{i},{i % 7}.5,{"+1" if i % 2 else "-1"}\n'
                 for i in range(40))
  (span / 'a.csv').write_text('id,alcohol (%),target\n' + rows)
  out = str(tmp_path / 'schema')
  result = run_cli(['schema', 'infer', '--data-root', str(tmp_path / 'data'),
                    '--label', 'target', '--out', out])
  assert result.returncode == 0, result.stderr
  text = open(os.path.join(out, 'schema.pbtxt')).read()
  key = columns.feature_keys(['alcohol (%)'])['alcohol (%)']
  assert f'name: "{key}"' in text and 'alcohol (%)' not in text
  schema = text_format.Parse(
      '\n'.join(l for l in text.splitlines() if not l.startswith('#')),
      schema_pb2.Schema())
  label = next(f for f in schema.feature if f.name == 'target')
  assert label.type == schema_pb2.BYTES  # '+1' stays '+1'.


def test_tfrecord_features_that_cannot_be_served_are_refused(tmp_path):
  # CSV columns get feature keys; tf.Example features keep their names, so
  # one named 'alcohol (%)' or 'label' is refused before anything runs.
  table = [['alcohol (%)', 'label', 'y']] + [
      [str(i), str(i * 2), 'ab'[i % 2]] for i in range(20)]
  os.makedirs(tmp_path / 'data' / 'span-1')
  (tmp_path / 'data' / 'span-1' / 'x.tfrecord').write_bytes(
      data_formats.tfrecord_bytes(data_formats.rows_to_examples(table)))
  result = run_cli(['run', '--data-root', str(tmp_path / 'data'), '--label',
                    'y', '--output', str(tmp_path / 'out')])
  assert result.returncode == 2, result.stderr
  assert "'alcohol (%)', 'label'" in result.stderr
  assert 'Traceback' not in result.stderr


def test_image_settings_round_trip_through_custom_config():
  # pylint: disable=g-import-not-at-top
  from tfx.utils import proto_utils
  from leantfx.components.image_example_gen import component
  from leantfx.components.image_example_gen import executor
  # pylint: enable=g-import-not-at-top
  settings = decode.ImageSettings(height=8, width=6, channels=3,
                                  image_feature='image',
                                  label_feature='digit', bad_images='skip')
  packed = proto_utils.proto_to_json(component.custom_config(settings))
  assert executor.settings_from_exec_properties(
      {'custom_config': packed}) == settings
  with pytest.raises(ValueError, match='ImageExampleGen needs a custom_config'):
    executor.settings_from_exec_properties({})
