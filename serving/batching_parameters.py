"""Server-side batching settings and TF Serving's ``batching_parameters.txt``.

:class:`BatchingConfig` holds the knobs of TF Serving's ``BatchingParameters``
proto that leantfx implements; a file setting one of the others is refused
(``UNIMPLEMENTED_FIELDS`` says what leantfx does instead). The same text file configures both servers:
``--batching-parameters-file`` here, ``--batching_parameters_file`` for
``tensorflow_model_server`` (``leantfx deploy tf-serving`` writes one).

The proto lives in ``tensorflow_serving/servables/tensorflow/
session_bundle_config.proto``, which the ``tensorflow-serving-api`` wheel does
not ship. When ``session_bundle_config_pb2`` cannot be imported, an equivalent
message (same package, name, field names, numbers and types) is built at run
time in a private descriptor pool, so files parse the same way.
"""
import dataclasses
import functools
from typing import Tuple

from leantfx.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class BatchingConfig:
  """How concurrent predict requests are merged into one model call.

  Attributes:
    max_batch_size: most rows in one merged call. 32 keeps a batch of small
      tabular/digits rows well under a millisecond of model time.
    batch_timeout_micros: how long the oldest request may wait for others.
      0 (TF Serving's advice for online serving) merges only what queued up
      while the batch threads were busy, so a lone request never waits.
    num_batch_threads: merged calls that may run at once; 2 = the cores of the
      machines leantfx targets.
    max_enqueued_batches: queued batches per model signature before requests
      are refused with UNAVAILABLE (bounded memory under overload).
    allowed_batch_sizes: if set, batches are padded up to one of these sizes
      (increasing, the last equal to max_batch_size).
  """
  max_batch_size: int = 32
  batch_timeout_micros: int = 0
  num_batch_threads: int = 2
  max_enqueued_batches: int = 100
  allowed_batch_sizes: Tuple[int, ...] = ()

  def __post_init__(self):
    if self.max_batch_size < 1:
      raise ConfigError(
          f'max_batch_size must be >= 1, got {self.max_batch_size}.')
    if self.batch_timeout_micros < 0:
      raise ConfigError('batch_timeout_micros must be >= 0, got '
                        f'{self.batch_timeout_micros}.')
    if self.num_batch_threads < 1:
      raise ConfigError(
          f'num_batch_threads must be >= 1, got {self.num_batch_threads}.')
    if self.max_enqueued_batches < 1:
      raise ConfigError('max_enqueued_batches must be >= 1, got '
                        f'{self.max_enqueued_batches}.')
    sizes = self.allowed_batch_sizes
    if sizes:
      if list(sizes) != sorted(set(sizes)) or sizes[0] < 1:
        raise ConfigError(f'allowed_batch_sizes {list(sizes)} must be '
                          'positive and strictly increasing.')
      if sizes[-1] != self.max_batch_size:
        raise ConfigError(
            f'The last allowed_batch_sizes entry ({sizes[-1]}) must equal '
            f'max_batch_size ({self.max_batch_size}).')


@functools.lru_cache(maxsize=1)
def batching_parameters_class():
  """Returns the ``tensorflow.serving.BatchingParameters`` message class."""
  try:
    from tensorflow_serving.servables.tensorflow import session_bundle_config_pb2  # pylint: disable=g-import-not-at-top
    return session_bundle_config_pb2.BatchingParameters
  except ImportError:
    pass
  from google.protobuf import descriptor_pb2  # pylint: disable=g-import-not-at-top
  from google.protobuf import descriptor_pool  # pylint: disable=g-import-not-at-top
  from google.protobuf import message_factory  # pylint: disable=g-import-not-at-top
  from google.protobuf import wrappers_pb2  # pylint: disable=g-import-not-at-top
  field = descriptor_pb2.FieldDescriptorProto
  file_proto = descriptor_pb2.FileDescriptorProto(
      name='leantfx/serving/batching_parameters.proto',
      package='tensorflow.serving', syntax='proto3',
      dependency=['google/protobuf/wrappers.proto'])
  message = file_proto.message_type.add(name='BatchingParameters')
  # (name, number, type, wrapper type) as in session_bundle_config.proto.
  for name, number, kind, type_name in (
      ('max_batch_size', 1, field.TYPE_MESSAGE, 'Int64Value'),
      ('batch_timeout_micros', 2, field.TYPE_MESSAGE, 'Int64Value'),
      ('max_enqueued_batches', 3, field.TYPE_MESSAGE, 'Int64Value'),
      ('num_batch_threads', 4, field.TYPE_MESSAGE, 'Int64Value'),
      ('thread_pool_name', 5, field.TYPE_MESSAGE, 'StringValue'),
      ('allowed_batch_sizes', 6, field.TYPE_INT64, ''),
      ('pad_variable_length_inputs', 7, field.TYPE_BOOL, ''),
      ('enable_large_batch_splitting', 8, field.TYPE_BOOL, ''),
      ('max_execution_batch_size', 9, field.TYPE_MESSAGE, 'Int64Value'),
  ):
    added = message.field.add(
        name=name, number=number, type=kind,
        label=field.LABEL_REPEATED if number == 6 else field.LABEL_OPTIONAL)
    if type_name:
      added.type_name = f'.google.protobuf.{type_name}'
  pool = descriptor_pool.DescriptorPool()
  wrappers = descriptor_pb2.FileDescriptorProto()
  wrappers_pb2.DESCRIPTOR.CopyToProto(wrappers)
  pool.Add(wrappers)
  pool.Add(file_proto)
  descriptor = pool.FindMessageTypeByName(
      'tensorflow.serving.BatchingParameters')
  return message_factory.MessageFactory(pool).GetPrototype(descriptor)


# The BatchingParameters fields leantfx implements: the four wrapped
# numbers, then allowed_batch_sizes.
IMPLEMENTED_FIELDS = ('max_batch_size', 'batch_timeout_micros',
                      'max_enqueued_batches', 'num_batch_threads',
                      'allowed_batch_sizes')
# The fields of TF Serving's BatchingParameters leantfx does not implement,
# and what it does instead; setting one (or any field not in
# IMPLEMENTED_FIELDS) in a file is refused, never silently ignored.
UNIMPLEMENTED_FIELDS = {
    'thread_pool_name': 'each model signature has its own batch threads',
    'enable_large_batch_splitting': 'a request larger than max_batch_size '
                                    'runs as one batch of its own',
    'max_execution_batch_size': 'batches are at most max_batch_size',
    'pad_variable_length_inputs': 'requests whose inner shapes differ are '
                                  'batched separately, never padded',
}


def parse_batching_parameters(text: str,
                              source: str = 'batching parameters'
                              ) -> BatchingConfig:
  """Parses a text ``BatchingParameters`` proto into a BatchingConfig.

  A field leantfx does not implement (UNIMPLEMENTED_FIELDS) set in the text
  is refused, naming it and the file; an unknown field fails the parse.
  Unset fields keep BatchingConfig's defaults.

  Raises:
    ConfigError: the text does not parse, sets a field leantfx does not
      implement, or a value is out of range.
  """
  from google.protobuf import text_format  # pylint: disable=g-import-not-at-top
  proto = batching_parameters_class()()
  try:
    text_format.Parse(text, proto)
  except text_format.ParseError as e:
    raise ConfigError(
        f'{source} is not a valid BatchingParameters text proto: {e}. '
        'Expected e.g. "max_batch_size { value: 32 }".') from None
  for field, _ in proto.ListFields():
    if field.name not in IMPLEMENTED_FIELDS:
      instead = UNIMPLEMENTED_FIELDS.get(
          field.name, 'it implements ' + ', '.join(IMPLEMENTED_FIELDS))
      raise ConfigError(
          f'{source} sets {field.name}, which leantfx serve does not '
          f'implement ({instead}); remove it from the file.')
  values = {}
  for name in IMPLEMENTED_FIELDS[:4]:
    if proto.HasField(name):
      values[name] = int(getattr(proto, name).value)
  if proto.allowed_batch_sizes:
    values['allowed_batch_sizes'] = tuple(int(v)
                                          for v in proto.allowed_batch_sizes)
  return BatchingConfig(**values)


def read_batching_parameters_file(path: str) -> BatchingConfig:
  """Reads ``--batching-parameters-file`` (see parse_batching_parameters)."""
  try:
    with open(path, encoding='utf-8') as f:
      text = f.read()
  except OSError as e:
    raise ConfigError(f'Cannot read batching parameters file {path}: {e}'
                      ) from None
  return parse_batching_parameters(text, path)


def to_text(config: BatchingConfig) -> str:
  """Writes a BatchingConfig as a text ``BatchingParameters`` proto."""
  lines = [
      f'max_batch_size {{ value: {config.max_batch_size} }}',
      f'batch_timeout_micros {{ value: {config.batch_timeout_micros} }}',
      f'max_enqueued_batches {{ value: {config.max_enqueued_batches} }}',
      f'num_batch_threads {{ value: {config.num_batch_threads} }}',
  ]
  lines += [f'allowed_batch_sizes: {size}'
            for size in config.allowed_batch_sizes]
  return '\n'.join(lines) + '\n'
