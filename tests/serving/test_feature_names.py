"""feature_names.json: the writer's output reads back; malformed files are refused.

The reader is the server's side of the contract the pipeline writes
(serving/feature_names.py); every refusal must name the file, so a broken
push is found from the model status alone.
"""
import json
import os

import pytest

from leantfx.serving import feature_names

pytestmark = pytest.mark.unit

# Column names a CSV header can hold and TensorFlow cannot take, and one
# plain identifier that keeps its name.
MAPPING = {'alcohol (%)': 'alcohol_x1', 'größe': 'groesse_x2',
           'a,b "q"': 'a_b_q_x3', 'age': 'age'}


def test_a_version_without_the_file_has_no_mapping(tmp_path):
  assert feature_names.read_feature_names(str(tmp_path)) is None


@pytest.mark.parametrize('folder', [feature_names.SAVED_MODEL_FOLDER, ''])
def test_written_mapping_reads_back_from_either_place(tmp_path, folder):
  path = feature_names.write_feature_names(
      os.path.join(str(tmp_path), folder), MAPPING)
  assert path in feature_names.locations(str(tmp_path))
  assert feature_names.read_feature_names(str(tmp_path)) == MAPPING
  with open(path, encoding='utf-8') as f:
    text = f.read()
  # Readable as written: non-ASCII names are not \u-escaped.
  assert '"größe"' in text
  assert json.loads(text) == {'format': 1, 'inputs': MAPPING}


def test_the_pipelines_file_reads_back(tmp_path):
  """The pushes' writer (leantfx/feature_names.py) and this reader agree."""
  from leantfx import feature_names as pipeline_side  # pylint: disable=g-import-not-at-top
  pipeline_side.write_for_saved_model(str(tmp_path), MAPPING)
  assert feature_names.read_feature_names(str(tmp_path)) == MAPPING


def test_the_same_mapping_in_both_places_is_accepted(tmp_path):
  feature_names.write_feature_names(
      os.path.join(str(tmp_path), feature_names.SAVED_MODEL_FOLDER), MAPPING)
  feature_names.write_feature_names(str(tmp_path), MAPPING)
  assert feature_names.read_feature_names(str(tmp_path)) == MAPPING


def test_different_mappings_in_both_places_are_refused(tmp_path):
  feature_names.write_feature_names(
      os.path.join(str(tmp_path), feature_names.SAVED_MODEL_FOLDER), MAPPING)
  feature_names.write_feature_names(str(tmp_path), {'age': 'age'})
  with pytest.raises(feature_names.FeatureNamesError,
                     match='map the columns differently'):
    feature_names.read_feature_names(str(tmp_path))


@pytest.mark.parametrize('content, message', [
    ('{"format": 1, "inputs": {"a": "x"', 'is not valid JSON'),
    ('[1]', 'must hold a JSON object'),
    ('{"inputs": {"a": "x"}}', '"format": null'),
    ('{"format": 2, "inputs": {"a": "x"}}', '"format": 2'),
    ('{"format": true, "inputs": {"a": "x"}}', '"format": true'),
    ('{"format": "1", "inputs": {"a": "x"}}', '"format": "1"'),
    ('{"format": 1}', 'no "inputs" object'),
    ('{"format": 1, "inputs": {"a": "x"}, "outputs": {}}',
     "unknown fields \\['outputs'\\]"),
    ('{"format": 1, "inputs": ["a", "x"]}', 'must be an object'),
    ('{"format": 1, "inputs": {}}', 'lists no columns'),
    ('{"format": 1, "inputs": {"a": 3}}', 'not a string -> string'),
    ('{"format": 1, "inputs": {"a": ""}}', 'empty model input key'),
    ('{"format": 1, "inputs": {"a": "x", "b": "x"}}',
     "columns 'a' and 'b' both map to the model input 'x'"),
    ('{"format": 1, "inputs": {"a": "x", "a": "y"}}', "'a' appears twice"),
])
def test_malformed_files_are_refused_naming_the_file(tmp_path, content,
                                                     message):
  path = os.path.join(str(tmp_path), feature_names.FEATURE_NAMES_FILE)
  with open(path, 'w', encoding='utf-8') as f:
    f.write(content)
  with pytest.raises(feature_names.FeatureNamesError, match=message) as error:
    feature_names.read_feature_names(str(tmp_path))
  assert path in str(error.value)


def test_a_file_that_is_not_utf8_is_refused_naming_it(tmp_path):
  path = os.path.join(str(tmp_path), feature_names.FEATURE_NAMES_FILE)
  with open(path, 'wb') as f:
    f.write('{"format": 1, "inputs": {"größe": "g"}}'.encode('latin-1'))
  with pytest.raises(feature_names.FeatureNamesError, match='Cannot read'
                     ) as error:
    feature_names.read_feature_names(str(tmp_path))
  assert path in str(error.value)


def test_the_writer_refuses_what_the_reader_would(tmp_path):
  with pytest.raises(feature_names.FeatureNamesError, match='both map'):
    feature_names.write_feature_names(str(tmp_path), {'a': 'x', 'b': 'x'})
  assert not os.listdir(str(tmp_path))
