"""models.config parsing, version policies and base-directory discovery."""
import pytest

from leantfx.errors import ConfigError
from leantfx.serving import model_config

pytestmark = pytest.mark.unit


def test_parse_models_config():
  models = model_config.parse_model_config_text("""
      model_config_list {
        config { name: "a" base_path: "/m/a" model_platform: "tflite" }
        config {
          name: "b" base_path: "/m/b"
          model_version_policy { specific { versions: 1 versions: 3 } }
          version_labels { key: "stable" value: 1 }
          version_labels { key: "canary" value: 3 }
        }
        config {
          name: "c" base_path: "/m/c"
          model_version_policy { latest { num_versions: 2 } }
        }
        config { name: "d" base_path: "/m/d" model_version_policy { all {} } }
      }""")
  by_name = {m.name: m for m in models}
  assert by_name['a'].platform == 'tflite'
  assert by_name['a'].version_policy == model_config.VersionPolicy()
  assert by_name['b'].version_policy.versions == (1, 3)
  assert by_name['b'].labels == {'stable': 1, 'canary': 3}
  assert by_name['c'].version_policy.num_versions == 2
  assert by_name['d'].version_policy.kind == 'all'


@pytest.mark.parametrize('text,message', [
    ('model_config_list { config { name: "a" base_path: "/x" } bogus: 1 }',
     'not a valid ModelServerConfig'),
    ('model_config_list { config { name: "a" base_path: "/x" } '
     'config { name: "a" base_path: "/y" } }', "lists model 'a' twice"),
    ('model_config_list { config { name: "../a" base_path: "/x" } }',
     "Model name '../a' is not valid"),
    ('model_config_list { config { name: "a" } }', 'empty base_path'),
    ('model_config_list {}', 'lists no models'),
    ('custom_model_config {}', 'custom_model_config'),
    # Fields leantfx serve does not implement: refused, never ignored.
    ('model_config_list { config { name: "a" base_path: "/x" '
     'logging_config { sampling_config { sampling_rate: 0.5 } } } }',
     "models.config: model 'a' sets logging_config, which leantfx serve "
     'does not implement'),
    ('model_config_list { config { name: "a" base_path: "/x" '
     'model_type: TENSORFLOW } }', "model 'a' sets model_type"),
    ('model_config_list { config { name: "a" base_path: "/x" '
     'model_platform: "pytorch" } }', "model_platform 'pytorch'"),
])
def test_bad_models_config(text, message):
  with pytest.raises(ConfigError, match=message):
    model_config.parse_model_config_text(text)


@pytest.mark.parametrize('policy,on_disk,expected', [
    (model_config.VersionPolicy(), [1, 5, 3], {5}),
    (model_config.VersionPolicy(num_versions=2), [1, 5, 3], {3, 5}),
    (model_config.VersionPolicy('all'), [1, 5, 3], {1, 3, 5}),
    (model_config.VersionPolicy('specific', versions=(1, 4)), [1, 5, 3], {1}),
    (model_config.VersionPolicy(), [], set()),
])
def test_version_policies(policy, on_disk, expected):
  assert policy.select(on_disk) == expected


@pytest.mark.parametrize('name,version', [
    ('1', 1), ('0', 0), ('00012', 12), ('9223372036854775807', 2**63 - 1),
    ('9223372036854775808', None), ('18446744073709551615', None),
    ('.tmp-3', None), ('3.partial', None), ('-1', None), ('', None),
    ('１', None),  # A full-width digit is not a version.
])
def test_version_dir_names(name, version):
  assert model_config.parse_version_dir_name(name) == version


@pytest.mark.parametrize('name,valid', [
    ('digits', True), ('penguins-v2', True), ('a.b_c', True),
    ('..', False), ('../x', False), ('a/b', False), ('%2e%2e', False),
    ('', False), ('.hidden', False), ('a b', False), ('a' * 129, False),
])
def test_model_names(name, valid):
  assert model_config.is_valid_model_name(name) == valid


def test_models_from_base_path(tmp_path):
  for path in ('penguins/1', 'penguins/.tmp-2', 'digits/3', '.push-x/1',
               'not a model/1'):
    (tmp_path / path).mkdir(parents=True)
  models = model_config.models_from_base_path(str(tmp_path))
  assert [m.name for m in models] == ['digits', 'penguins']
  assert model_config.list_versions(models[1].base_path) == {
      1: str(tmp_path / 'penguins' / '1')}
  # With a name: <base>/<name>, or <base> itself when it holds versions.
  named = model_config.models_from_base_path(str(tmp_path), 'digits')
  assert named[0].base_path == str(tmp_path / 'digits')
  direct = model_config.models_from_base_path(str(tmp_path / 'digits'),
                                              'digits')
  assert direct[0].base_path == str(tmp_path / 'digits')
  with pytest.raises(ConfigError, match='holds no model directories'):
    model_config.models_from_base_path(str(tmp_path / 'digits' / '3'))
