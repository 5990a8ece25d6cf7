"""TF Serving's monitoring config file, as ``leantfx serve`` reads it.

``serve --monitoring-config-file`` takes the file ``tensorflow_model_server
--monitoring_config_file`` takes (a text ``MonitoringConfig``:
``prometheus_config { enable: true path: "..." }``, which ``leantfx deploy
tf-serving`` writes), so the same file configures both servers. leantfx
always serves its Prometheus metrics, at ``METRICS_PATH``: a file asking for
that is accepted; one that turns them off or moves them is refused, naming
the field and the file, as an unknown field is, since leantfx would not do
what it says.

The proto (``tensorflow_serving/config/monitoring_config.proto``) is not in
the ``tensorflow-serving-api`` wheel; its two messages are built here in a
private descriptor pool (same package, names, numbers and types), as
batching_parameters.py builds ``BatchingParameters``.
"""
import functools

from leantfx.errors import ConfigError
from leantfx.serving import rest_api

METRICS_PATH = rest_api.METRICS_PATH


@functools.lru_cache(maxsize=1)
def monitoring_config_class():
  """Returns the ``tensorflow.serving.MonitoringConfig`` message class."""
  from google.protobuf import descriptor_pb2  # pylint: disable=g-import-not-at-top
  from google.protobuf import descriptor_pool  # pylint: disable=g-import-not-at-top
  from google.protobuf import message_factory  # pylint: disable=g-import-not-at-top
  field = descriptor_pb2.FieldDescriptorProto
  file_proto = descriptor_pb2.FileDescriptorProto(
      name='leantfx/serving/monitoring_config.proto',
      package='tensorflow.serving', syntax='proto3')
  prometheus = file_proto.message_type.add(name='PrometheusConfig')
  prometheus.field.add(name='enable', number=1, type=field.TYPE_BOOL,
                       label=field.LABEL_OPTIONAL)
  prometheus.field.add(name='path', number=2, type=field.TYPE_STRING,
                       label=field.LABEL_OPTIONAL)
  monitoring = file_proto.message_type.add(name='MonitoringConfig')
  monitoring.field.add(name='prometheus_config', number=1,
                       type=field.TYPE_MESSAGE, label=field.LABEL_OPTIONAL,
                       type_name='.tensorflow.serving.PrometheusConfig')
  pool = descriptor_pool.DescriptorPool()
  pool.Add(file_proto)
  return message_factory.MessageFactory(pool).GetPrototype(
      pool.FindMessageTypeByName('tensorflow.serving.MonitoringConfig'))


def check_monitoring_config(text: str, source: str = 'monitoring config'
                            ) -> None:
  """Checks that a text ``MonitoringConfig`` asks for what leantfx serves.

  Args:
    text: the file's content.
    source: the file name, for messages.

  Raises:
    ConfigError: the text does not parse (an unknown field), turns
      Prometheus off, or puts it at another path than METRICS_PATH.
  """
  from google.protobuf import text_format  # pylint: disable=g-import-not-at-top
  config = monitoring_config_class()()
  try:
    text_format.Parse(text, config)
  except text_format.ParseError as e:
    raise ConfigError(
        f'{source} is not a MonitoringConfig leantfx serve implements: {e}. '
        'Expected prometheus_config { enable: true path: '
        f'"{METRICS_PATH}" }}.') from None
  prometheus = config.prometheus_config
  if not prometheus.enable:
    raise ConfigError(
        f'{source} sets prometheus_config.enable to false (or leaves it '
        'out); leantfx serve always serves its metrics at '
        f'{METRICS_PATH} and cannot turn them off: set enable: true.')
  if prometheus.path and prometheus.path != METRICS_PATH:
    raise ConfigError(
        f'{source} sets prometheus_config.path {prometheus.path!r}; leantfx '
        f'serve serves its metrics at {METRICS_PATH} only: set that path '
        'or leave it out.')


def read_monitoring_config_file(path: str) -> None:
  """Reads and checks ``--monitoring-config-file`` (check_monitoring_config)."""
  try:
    with open(path, encoding='utf-8') as f:
      text = f.read()
  except OSError as e:
    raise ConfigError(f'Cannot read monitoring config file {path}: {e}'
                      ) from None
  check_monitoring_config(text, path)
