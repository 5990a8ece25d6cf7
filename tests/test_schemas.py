"""leantfx.schemas: where the curated schema of a bundled dataset is."""
import os

import pytest

from leantfx import schemas

pytestmark = pytest.mark.unit


def test_schemas_dir_is_the_package_folder():
  assert os.path.isdir(schemas.SCHEMAS_DIR)
  assert os.path.samefile(schemas.SCHEMAS_DIR,
                          os.path.dirname(schemas.__file__))


@pytest.mark.parametrize('dataset,data_format,file_name', [
    ('penguins', 'csv', 'schema.pbtxt'),
    ('penguins', 'tfrecord', 'schema.pbtxt'),  # Same columns as the CSV.
    ('digits', 'csv', 'schema.pbtxt'),
    ('digits', 'images', 'schema_images.pbtxt'),
])
def test_bundled_schema_by_format(dataset, data_format, file_name):
  path = schemas.bundled_schema(dataset, data_format)
  assert path == os.path.join(schemas.SCHEMAS_DIR, dataset, file_name)
  assert os.path.isfile(path)


def test_bundled_schema_defaults_to_csv():
  assert schemas.bundled_schema('penguins') == schemas.bundled_schema(
      'penguins', 'csv')


@pytest.mark.parametrize('dataset,data_format', [
    ('penguins', 'images'),  # The penguins have no images.
    ('unknown', 'csv'),
])
def test_bundled_schema_is_none_without_a_file(dataset, data_format):
  assert schemas.bundled_schema(dataset, data_format) is None
