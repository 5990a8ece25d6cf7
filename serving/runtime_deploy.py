"""Deployment files for the x86 model servers: OVMS config.json, Triton config.pbtxt.

``leantfx deploy ovms --model-base-path <output>/openvino --out <dir>`` writes
OpenVINO Model Server's ``config.json`` (``model_config_list``, one entry per
model directory under the base, mounted at ``/models``); OVMS speaks TF
Serving's REST and gRPC API, so the clients of ``leantfx serve`` work against
it. The file is checked against OVMS's own schema before it is written. A
model whose push recorded that its dynamic batch answers batch 1 wrongly
(an OpenVINO CPU bug, leantfx/runtimes/openvino.py) gets
``"batch_size": "auto"``: OVMS then runs each request at its own static
batch, as leantfx gated it. ``leantfx deploy triton --model-repository
<output>/onnx`` writes a ``config.pbtxt`` into each model directory of the
ONNX push base (Triton reads it beside the version folders), with the inputs
and outputs read from the newest version's ``model.onnx``.

The config.pbtxt is checked by parsing it with protobuf's text format against
the fields of Triton's ``inference.ModelConfig`` that it uses (names, numbers
and types copied from triton-inference-server/common's
protobuf/model_config.proto; tritonclient is not installed here because it
needs protobuf>=4). A field name or enum value Triton does not know fails the
parse.
"""
import json
import os
from typing import Dict, List, Sequence, Tuple

import jsonschema
from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import message_factory
from google.protobuf import text_format

from leantfx import versioned_push
from leantfx.runtimes import openvino as openvino_runtime
from leantfx.runtimes import push
from leantfx.runtimes import registry as runtimes_lib
from leantfx.runtimes import string_lookups
from leantfx.errors import ConfigError

OVMS_CONFIG = 'config.json'
TRITON_CONFIG = 'config.pbtxt'
CONTAINER_MODELS_DIR = '/models'
ONNX_FILENAME = runtimes_lib.get(runtimes_lib.ONNX).model_file
OPENVINO_FILENAME = runtimes_lib.get(runtimes_lib.OPENVINO).model_file
# ONNX TensorProto element types -> Triton DataType names.
_TRITON_TYPES = {1: 'TYPE_FP32', 2: 'TYPE_UINT8', 3: 'TYPE_INT8',
                 5: 'TYPE_INT16', 6: 'TYPE_INT32', 7: 'TYPE_INT64',
                 8: 'TYPE_STRING', 9: 'TYPE_BOOL', 10: 'TYPE_FP16',
                 11: 'TYPE_FP64'}


def _model_dirs(base: str, filename: str) -> Dict[str, str]:
  """model name -> its newest version directory holding `filename`."""
  if not os.path.isdir(base):
    raise ConfigError(f'{base} is not a directory; point at the push base '
                      '(e.g. <output>/openvino or <output>/onnx).')
  found = {}
  for name in sorted(os.listdir(base)):
    versions = versioned_push.list_versions(os.path.join(base, name))
    for version in reversed(versions):
      path = os.path.join(base, name, str(version))
      if os.path.isfile(os.path.join(path, filename)):
        found[name] = path
        break
  if not found:
    raise ConfigError(f'No model under {base} has a version with {filename}; '
                      'run the pipeline with the runtime installed first.')
  return found


# OVMS's config.json schema for the entries written here: the top level and
# model_config of MODELS_CONFIG_SCHEMA in openvinotoolkit/model_server's
# src/schema.cpp (same keys, types, bounds and additionalProperties: false
# where it puts them; its pipeline and custom-loader lists are left out, as
# leantfx writes none). OVMS refuses a config.json that fails it.
_OVMS_MODEL_CONFIG = {
    'type': 'object',
    'required': ['name', 'base_path'],
    'properties': {
        'name': {'type': 'string'},
        'base_path': {'type': 'string'},
        'batch_size': {'type': ['integer', 'string'], 'minimum': 0},
        'model_version_policy': {'type': 'object'},
        'shape': {'type': ['object', 'string']},
        'nireq': {'type': 'integer', 'minimum': 0},
        'target_device': {'type': 'string'},
        'plugin_config': {'type': 'object'},
        'stateful': {'type': 'boolean'},
        'idle_sequence_cleanup': {'type': 'boolean'},
        'low_latency_transformation': {'type': 'boolean'},
        'max_sequence_number': {'type': 'integer', 'minimum': 0},
        'custom_loader_options': {'type': 'object',
                                  'required': ['loader_name'],
                                  'properties': {
                                      'loader_name': {'type': 'string'}},
                                  'minProperties': 1},
    },
    'additionalProperties': False,
}
OVMS_CONFIG_SCHEMA = {
    'type': 'object',
    'required': ['model_config_list'],
    'properties': {'model_config_list': {'type': 'array', 'items': {
        'type': 'object', 'required': ['config'],
        'properties': {'config': _OVMS_MODEL_CONFIG}}}},
    'additionalProperties': False,
}


def check_ovms_config(config: Dict) -> None:
  """Checks a config.json document against OVMS's schema (OVMS_CONFIG_SCHEMA).

  Raises:
    ConfigError: OVMS would refuse it; the message names the key.
  """
  try:
    jsonschema.validate(config, OVMS_CONFIG_SCHEMA)
  except jsonschema.ValidationError as e:
    where = '/'.join(str(p) for p in e.absolute_path) or 'the top level'
    raise ConfigError(f'The OVMS config.json is invalid at {where}: '
                      f'{e.message}') from e


def ovms_reloaded_models(base: str) -> List[str]:
  """The OpenVINO models OVMS must run at each request's own batch size.

  Those whose newest version's manifest says its dynamic batch answers
  batch 1 differently from a static batch of 1
  (openvino_runtime.DYNAMIC_BATCH_ONE_OK false, measured by the optimizer:
  leantfx/runtimes/openvino.py says which OpenVINO CPU bug that is). A version pushed without the check
  (older leantfx, the transformed-input fallback, or files copied in
  without a manifest) is left as it is.
  """
  found = []
  for name, path in _model_dirs(base, OPENVINO_FILENAME).items():
    if not os.path.isfile(os.path.join(path, push.MANIFEST_FILE)):
      continue
    try:
      inputs = push.read_manifest(path).get('metrics', {}).get(
          'serving_inputs') or {}
    except (OSError, ValueError) as e:
      raise ConfigError(f'{path}: its manifest does not read ({e}); re-push '
                        'the model or remove that version.') from e
    if inputs.get(openvino_runtime.DYNAMIC_BATCH_ONE_OK) is False:
      found.append(name)
  return found


def ovms_config(base: str, num_threads: int = 1) -> Dict:
  """OVMS's config.json for every OpenVINO model under `base`."""
  reloaded = set(ovms_reloaded_models(base))
  models = []
  for name in _model_dirs(base, OPENVINO_FILENAME):
    config = {
        'name': name,
        'base_path': f'{CONTAINER_MODELS_DIR}/{name}',
        'target_device': 'CPU',
        # f32: what the optimizer gated and timed (a CPU with bfloat16
        # instructions would otherwise run a float32 IR in bfloat16).
        'plugin_config': {'INFERENCE_NUM_THREADS': num_threads,
                          'PERFORMANCE_HINT': 'LATENCY',
                          'INFERENCE_PRECISION_HINT': 'f32'},
    }
    if name in reloaded:
      # OVMS then reshapes the model to each request's batch (static), the
      # shape leantfx gated it at; a change of batch size reloads it.
      config['batch_size'] = 'auto'
    models.append({'config': config})
  return {'model_config_list': models}


def ovms_id_inputs(base: str) -> Dict[str, List[str]]:
  """{model: its vocabulary columns} for OpenVINO models that take ids.

  Such a version carries string_lookups.STRING_LOOKUPS_FILE, which
  ``leantfx serve`` applies and OVMS does not read: OVMS clients send those
  columns as int64 vocabulary ids.
  """
  found = {}
  for name, path in _model_dirs(base, OPENVINO_FILENAME).items():
    try:
      lookups = string_lookups.read_string_lookups(path)
    except ValueError as e:
      raise ConfigError(f'{path}: {e}') from e
    if lookups:
      found[name] = sorted(lookups)
  return found


def write_ovms_config(base: str, out_dir: str,
                      num_threads: int = 1) -> Tuple[str, Dict]:
  """Writes <out_dir>/config.json; returns its path and the config."""
  config = ovms_config(base, num_threads)
  check_ovms_config(config)
  os.makedirs(out_dir, exist_ok=True)
  path = os.path.join(out_dir, OVMS_CONFIG)
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(config, f, indent=2)
  return path, config


def reloaded_in(config: Dict) -> List[str]:
  """The models of an OVMS config that OVMS reshapes per request's batch."""
  return [entry['config']['name'] for entry in config['model_config_list']
          if entry['config'].get('batch_size') == 'auto']


def _dims(value_info) -> List[int]:
  return [d.dim_value if d.HasField('dim_value') else -1
          for d in value_info.type.tensor_type.shape.dim]


def _tensors(kind: str, infos) -> List[str]:
  lines = []
  for info in infos:
    elem = info.type.tensor_type.elem_type
    if elem not in _TRITON_TYPES:
      raise ConfigError(f'ONNX {kind} {info.name!r} has element type {elem}, '
                        'which has no Triton data type here.')
    dims = ', '.join(str(d) for d in _dims(info))
    lines += [f'{kind} {{', f'  name: "{info.name}"',
              f'  data_type: {_TRITON_TYPES[elem]}', f'  dims: [ {dims} ]',
              '}']
  return lines


def triton_config_text(name: str, onnx_path: str) -> str:
  """config.pbtxt of one ONNX model (no Triton batching: dims keep batch)."""
  import onnx  # pylint: disable=g-import-not-at-top
  graph = onnx.load(onnx_path, load_external_data=False).graph
  initializers = {i.name for i in graph.initializer}
  inputs = [i for i in graph.input if i.name not in initializers]
  lines = [f'name: "{name}"', 'platform: "onnxruntime_onnx"',
           # 0: requests carry the batch dimension themselves, as they do
           # for TF Serving's API; dims below keep it (-1).
           'max_batch_size: 0',
           'version_policy { latest { num_versions: 1 } }']
  lines += _tensors('input', inputs) + _tensors('output', graph.output)
  lines += ['instance_group {', '  count: 1', '  kind: KIND_CPU', '}']
  return '\n'.join(lines) + '\n'


def _model_config_class():
  """inference.ModelConfig, the subset config.pbtxt uses (field numbers as
  in Triton's model_config.proto)."""
  f = descriptor_pb2.FieldDescriptorProto
  proto = descriptor_pb2.FileDescriptorProto(
      name='leantfx_triton_model_config_subset.proto', package='inference',
      syntax='proto3')
  data_type = proto.enum_type.add(name='DataType')
  for number, value in enumerate(
      ['TYPE_INVALID', 'TYPE_BOOL', 'TYPE_UINT8', 'TYPE_UINT16',
       'TYPE_UINT32', 'TYPE_UINT64', 'TYPE_INT8', 'TYPE_INT16', 'TYPE_INT32',
       'TYPE_INT64', 'TYPE_FP16', 'TYPE_FP32', 'TYPE_FP64', 'TYPE_STRING',
       'TYPE_BF16']):
    data_type.value.add(name=value, number=number)

  def add_fields(target, fields):
    for field_name, number, kind, label, type_name in fields:
      field = target.field.add(name=field_name, number=number, type=kind,
                               label=label)
      if type_name:
        field.type_name = type_name

  def message(name, fields, nested=()):
    m = proto.message_type.add(name=name)
    add_fields(m, fields)
    for nested_name, nested_fields in nested:
      add_fields(m.nested_type.add(name=nested_name), nested_fields)
    return m

  one, rep = f.LABEL_OPTIONAL, f.LABEL_REPEATED
  message('ModelInput', [
      ('name', 1, f.TYPE_STRING, one, None),
      ('data_type', 2, f.TYPE_ENUM, one, '.inference.DataType'),
      ('dims', 4, f.TYPE_INT64, rep, None)])
  message('ModelOutput', [
      ('name', 1, f.TYPE_STRING, one, None),
      ('data_type', 2, f.TYPE_ENUM, one, '.inference.DataType'),
      ('dims', 3, f.TYPE_INT64, rep, None)])
  message('ModelVersionPolicy', [
      ('latest', 1, f.TYPE_MESSAGE, one,
       '.inference.ModelVersionPolicy.Latest')],
          nested=[('Latest', [('num_versions', 1, f.TYPE_UINT32, one, None)])])
  group = message('ModelInstanceGroup', [
      ('count', 2, f.TYPE_INT32, one, None),
      ('kind', 4, f.TYPE_ENUM, one, '.inference.ModelInstanceGroup.Kind')])
  kind = group.enum_type.add(name='Kind')
  for number, value in enumerate(['KIND_AUTO', 'KIND_GPU', 'KIND_CPU',
                                  'KIND_MODEL']):
    kind.value.add(name=value, number=number)
  message('ModelConfig', [
      ('name', 1, f.TYPE_STRING, one, None),
      ('platform', 2, f.TYPE_STRING, one, None),
      ('version_policy', 3, f.TYPE_MESSAGE, one,
       '.inference.ModelVersionPolicy'),
      ('max_batch_size', 4, f.TYPE_INT32, one, None),
      ('input', 5, f.TYPE_MESSAGE, rep, '.inference.ModelInput'),
      ('output', 6, f.TYPE_MESSAGE, rep, '.inference.ModelOutput'),
      ('instance_group', 7, f.TYPE_MESSAGE, rep,
       '.inference.ModelInstanceGroup')])
  pool = descriptor_pool.DescriptorPool()
  pool.Add(proto)
  return message_factory.MessageFactory(pool).GetPrototype(
      pool.FindMessageTypeByName('inference.ModelConfig'))


def parse_triton_config(text: str):
  """Parses a config.pbtxt against the ModelConfig subset.

  Raises:
    ConfigError: the text does not parse.
  """
  try:
    return text_format.Parse(text, _model_config_class()())
  except text_format.ParseError as e:
    raise ConfigError(f'The Triton config.pbtxt does not parse: {e}') from e


def write_triton_configs(repository: str,
                         model_names: Sequence[str] = ()) -> List[str]:
  """Writes <repository>/<model>/config.pbtxt for each ONNX model.

  Returns:
    The paths written.
  """
  written = []
  for name, version_dir in _model_dirs(repository, ONNX_FILENAME).items():
    if model_names and name not in model_names:
      continue
    text = triton_config_text(name, os.path.join(version_dir, ONNX_FILENAME))
    parse_triton_config(text)
    path = os.path.join(repository, name, TRITON_CONFIG)
    with open(path, 'w', encoding='utf-8') as f:
      f.write(text)
    written.append(path)
  return written
