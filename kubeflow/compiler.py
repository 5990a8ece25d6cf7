"""Compiles create_pipeline(...) for Kubeflow Pipelines with KubeflowV2DagRunner.

The very same ``pipeline.create_pipeline`` the local runner uses is compiled,
with ``OrchestrationConfig.runtime_parameters`` on, so one spec serves every
run: ``data_root`` (ExampleGen's input base), ``range_config`` (the span to
ingest, '' for the newest), ``span_window`` (how many spans, the newest
included, to train on) and ``train_args`` (the train steps, as TrainArgs
JSON) are pipeline parameters whose defaults are the values given here. ML
Metadata is the cluster's (no connection config is compiled in).

What TFX 1.16's KubeflowV2DagRunner cannot express is added afterwards to the
PipelineSpec, a plain protobuf (``kfp.pipeline_spec.pipeline_spec_pb2``):
  * ``defaultPipelineRoot``, the root every compiled path is derived from, so
    a run created from the uploaded YAML writes where the compiled paths
    point;
  * a retry policy (count, backoff, factor, cap) on every task that runs a
    container, except the ValidationGate, whose failure is a verdict on the
    data that a retry would only repeat;
  * CPU / memory requests and limits on every container, a GPU for Trainer
    (``--task-resources NAME=CPU,MEM`` for any component), and the
    DirectRunner of a task with N >= 2 cores in multi_processing mode with
    N workers, where the Beam options are the defaults;
  * caching switched off for chosen components;
  * for the open-source backend (``--kfp-backend oss``), a ResolveSpan task
    before ExampleGen that resolves the span and the input files'
    fingerprint, ExampleGen's inputs from then on, so a new span changes
    ExampleGen's cache key (kubeflow/resolve_span.py).

Output: ``.yaml``/``.yml`` is the bare PipelineSpec that ``kfp.Client``
uploads; ``.json`` is the PipelineJob (spec + runtime config) that Vertex AI
and ``kfp`` JSON tooling take. Both are written with sorted keys, so the same
input gives the same bytes. The stamped fields, which change only with the
installed versions, are ``sdkVersion`` (``tfx-<version>``), ``schemaVersion``
and, in the JSON job, ``labels`` (TFX telemetry: tfx and Python versions).

The local rolling span window is a Resolver with SpanRangeStrategy, which
TFX 1.16's Kubeflow V2 step builder cannot compile (it supports only the
LatestArtifact and LatestBlessedModel strategies). On Kubeflow, ExampleGen
reads the window itself instead (components/span_window_example_gen):
ResolveSpan (on Vertex AI, the V2 ExampleGen driver) resolves the newest
span N and the executor reads spans N-K+1..N, so statistics, validation,
Transform, Trainer and Evaluator all see the window's examples. The last
blessed model, which the local run and Vertex AI resolve from ML Metadata,
comes on the open-source backend from records the Pusher keeps under the
pipeline root (components/blessed_model/). The ValidationGate's drift check against the previous
span runs on Kubeflow too: instead of the local custom-strategy Resolver of
earlier reports, the gate keeps each passed span's statistics in a baseline
folder under the pipeline root and compares with the highest span below its
own (components/validation_gate/component.py).
"""
import dataclasses
import json
import os
import re
import tempfile
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from leantfx import config as config_lib
from leantfx.errors import ConfigError
from leantfx.kubeflow import bulk_score_task
from leantfx.kubeflow import resolve_span
from leantfx.pipeline import data_stages
from leantfx.pipeline import retraining

FORMATS = ('spec-yaml', 'job-json')
BACKENDS = config_lib.KFP_BACKENDS
DEFAULT_BACKEND = 'oss'
# The pipeline roots the open-source backend's launcher can write to.
OSS_ROOT_SCHEMES = ('gs://', 's3://', 'minio://')
# Tasks that must look again on every run (their inputs never change):
# TFX's resolvers, and the task reading the Pusher's records.
_ALWAYS_RUN = (retraining.LAST_BLESSED_MODEL_ID, resolve_span.TASK_ID)
# Tasks whose failure is a verdict on the data, never retried: a retry
# re-checks the same span. KFP's Argo compiler turns a task's retryPolicy
# into an Argo retryStrategy of a limit and a backoff only, with no
# condition (backend/src/v2/compiler/argocompiler/container.go,
# getTaskRetryStrategyFromInput), so a retried task is retried on any
# failure, a data-validation stop included.
_NEVER_RETRIED = (data_stages.GATE_ID,)
_IMAGE_RE = re.compile(r'^[a-z0-9][a-z0-9._\-/:@]*$')
_DURATION_RE = re.compile(r'^[0-9]+s$')
# Kubernetes-style quantities as kfp-pipeline-spec 0.2.2 takes them: CPU in
# cores (double), memory in GB (double).
_MEMORY_RE = re.compile(r'^([0-9]+(?:\.[0-9]+)?)(G|Gi|M|Mi)$')
_MEMORY_FACTOR_GB = {'G': 1.0, 'Gi': 1.073741824, 'M': 0.001,
                     'Mi': 0.001048576}


@dataclasses.dataclass(frozen=True)
class Resources:
  """Requests (and limits) of one component's container.

  Attributes:
    cpu: CPU cores requested (and the limit).
    memory_gb: memory in GB requested (and the limit).
    gpu_type: accelerator type, e.g. 'nvidia.com/gpu' or 'NVIDIA_TESLA_T4';
      '' for none.
    gpu_count: number of accelerators.
  """
  cpu: float = 1.0
  memory_gb: float = 2.0
  gpu_type: str = ''
  gpu_count: int = 0

  def __post_init__(self):
    if not 0 < self.cpu <= 512:
      raise ConfigError(f'CPU must be in (0, 512] cores, got {self.cpu}.')
    if not 0 < self.memory_gb <= 4096:
      raise ConfigError(
          f'Memory must be in (0, 4096] GB, got {self.memory_gb}.')
    if bool(self.gpu_type) != (self.gpu_count > 0):
      raise ConfigError('A GPU needs both a type and a count >= 1 '
                        '(e.g. --trainer-gpu nvidia.com/gpu:1).')


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
  """How KFP retries a failed task.

  Attributes:
    max_retries: retries after the first failure (0 = none).
    backoff: first wait, as a protobuf duration ('60s').
    backoff_factor: each wait is the previous one times this.
    backoff_max: the longest wait.
  """
  max_retries: int = 2
  backoff: str = '60s'
  backoff_factor: float = 2.0
  backoff_max: str = '3600s'

  def __post_init__(self):
    if not 0 <= self.max_retries <= 10:
      raise ConfigError(
          f'--retries must be from 0 to 10, got {self.max_retries}.')
    for value in (self.backoff, self.backoff_max):
      if not _DURATION_RE.match(value):
        raise ConfigError(
            f'Backoff {value!r} is not a duration in seconds like "60s".')
    if self.backoff_factor < 1:
      raise ConfigError('backoff_factor must be >= 1.')


@dataclasses.dataclass(frozen=True)
class TaskOptions:
  """What is applied to the compiled tasks after compilation.

  Attributes:
    retry: the retry policy of every task a retry can help (see
      apply_task_options).
    default_resources: resources of every component's container.
    component_resources: per component id, replacing the default (an id
      the pipeline lacks is refused: the user named it).
    no_cache: component ids whose tasks never use KFP's cache.
    sized_resources: per component id, from the span's size
      (leantfx/sizing.py), for the components the pipeline has; below
      component_resources.
  """
  retry: RetryPolicy = RetryPolicy()
  default_resources: Resources = Resources()
  component_resources: Tuple[Tuple[str, Resources], ...] = (
      ('Transform', Resources(cpu=2.0, memory_gb=4.0)),
      ('Trainer', Resources(cpu=2.0, memory_gb=4.0)),
      ('Evaluator', Resources(cpu=2.0, memory_gb=4.0)),
  )
  no_cache: Tuple[str, ...] = ()
  sized_resources: Tuple[Tuple[str, Resources], ...] = ()

  def resources_of(self, component_id: str) -> Resources:
    return dict(self.component_resources).get(
        component_id, dict(self.sized_resources).get(component_id,
                                                     self.default_resources))


def parse_memory(text: str) -> float:
  """'4G', '512Mi', ... -> GB (float). Raises ConfigError if malformed."""
  match = _MEMORY_RE.match(text.strip())
  if not match:
    raise ConfigError(
        f'Memory {text!r} is not a quantity like 4G, 4Gi or 512Mi.')
  return float(match.group(1)) * _MEMORY_FACTOR_GB[match.group(2)]


def parse_task_resources(text: str) -> Tuple[str, Resources]:
  """'Transform=4,8G' -> ('Transform', Resources(cpu=4, memory_gb=8)).

  Raises:
    ConfigError: if malformed.
  """
  name, _, value = text.partition('=')
  cpu, _, memory = value.partition(',')
  try:
    cores = float(cpu)
  except ValueError:
    cores = 0.0
  if not name.strip() or not memory or cores <= 0:
    raise ConfigError(
        f'--task-resources {text!r} is not NAME=CPU,MEM, e.g. '
        'Transform=4,8G (4 cores, 8 GB for the Transform task).')
  return name.strip(), Resources(cpu=cores, memory_gb=parse_memory(memory))


def parse_gpu(text: str) -> Tuple[str, int]:
  """'nvidia.com/gpu:1' or 'NVIDIA_TESLA_T4' -> (type, count)."""
  kind, _, count = text.rpartition(':') if ':' in text else (text, '', '1')
  try:
    number = int(count)
  except ValueError:
    number = 0
  if not kind or number < 1:
    raise ConfigError(
        f'--trainer-gpu {text!r} is not TYPE or TYPE:COUNT, e.g. '
        'nvidia.com/gpu:1 (Kubeflow) or NVIDIA_TESLA_T4:1 (Vertex AI).')
  return kind, number


def check_image(image: str) -> str:
  """Returns the image reference, or raises ConfigError if malformed."""
  if not image or not _IMAGE_RE.match(image):
    raise ConfigError(
        f'--image {image!r} is not a container image reference such as '
        'registry.example.com/team/leantfx:1.0 (lowercase, no spaces). Build '
        'it from kubeflow/Dockerfile and push it where the cluster pulls.')
  return image


def _component_id(task_name: str) -> str:
  # The latest blessed model resolver compiles into two tasks named
  # '<id>-model-blessing-resolver' and '<id>-model-resolver'.
  return re.sub(r'-model(-blessing)?-resolver$', '', task_name)


def apply_task_options(pipeline_spec: Dict[str, Any],
                       options: TaskOptions) -> None:
  """Adds retries, resources and caching to a PipelineSpec dict in place.

  Args:
    pipeline_spec: the PipelineSpec as a JSON dict (camelCase keys).
    options: what to apply.

  Raises:
    ConfigError: when an option names a component the pipeline lacks.
  """
  tasks = pipeline_spec['root']['dag']['tasks']
  components = pipeline_spec['components']
  executors = pipeline_spec['deploymentSpec']['executors']
  ids = {_component_id(name) for name in tasks}
  named = set(options.no_cache) | {c for c, _ in options.component_resources}
  unknown = sorted(named - ids)
  if unknown:
    raise ConfigError(
        f'No component named {unknown} in the pipeline; its components are '
        f'{sorted(ids)}.')
  retry = options.retry
  for name, task in tasks.items():
    component_id = _component_id(name)
    if component_id in options.no_cache or component_id in _ALWAYS_RUN:
      task['cachingOptions'] = {'enableCache': False}
    executor_label = components[task['componentRef']['name']].get(
        'executorLabel')
    container = executors.get(executor_label, {}).get('container')
    if container is None:
      continue  # Resolvers and importers run no pod to lose or retry.
    # A retry helps where a pod can be lost or storage fail for a moment;
    # not where the task's failure is its verdict on the data.
    if retry.max_retries and component_id not in _NEVER_RETRIED:
      task['retryPolicy'] = {
          'maxRetryCount': retry.max_retries,
          'backoffDuration': retry.backoff,
          'backoffFactor': retry.backoff_factor,
          'backoffMaxDuration': retry.backoff_max,
      }
    resources = options.resources_of(component_id)
    spec = {
        'cpuRequest': resources.cpu,
        'cpuLimit': resources.cpu,
        'memoryRequest': resources.memory_gb,
        'memoryLimit': resources.memory_gb,
    }
    if resources.gpu_count:
      spec['accelerator'] = {
          'type': resources.gpu_type,
          'count': str(resources.gpu_count)
      }
    container['resources'] = spec
    container['args'] = beam_args_for_cpu(container.get('args', []),
                                          resources.cpu)


def beam_args_for_cpu(args: Sequence[str], cpu: float) -> list:
  """A container's arguments with the DirectRunner sized to its CPUs.

  Every Beam-based task gets the same beam_pipeline_args; with the defaults
  (in_memory, one worker) a task given N >= 2 cores would use one of them.
  Such a task runs multi_processing with one worker per whole core instead.
  Arguments the user chose (another mode or worker count, another runner)
  are kept as they are.

  Args:
    args: the container's args.
    cpu: the cores requested for the task.

  Returns:
    The args, changed only where the defaults were.
  """
  args = list(args)
  defaults = ('--direct_running_mode=in_memory', '--direct_num_workers=1')
  workers = int(cpu)
  if workers < 2 or not all(a in args for a in defaults):
    return args
  return [('--direct_running_mode=multi_processing' if a == defaults[0] else
           f'--direct_num_workers={workers}' if a == defaults[1] else a)
          for a in args]


def set_parameter_defaults(job: Dict[str, Any],
                           defaults: Mapping[str, str]) -> None:
  """Writes the runtime parameters' defaults into the compiled job.

  TFX 1.16 declares each parameter's type but drops its default; KFP needs the
  default in root.inputDefinitions to start a run that does not set it.

  Args:
    job: the PipelineJob dict from KubeflowV2DagRunner.run.
    defaults: parameter name -> default (strings, and the span_window int).

  Raises:
    ConfigError: if the compiled parameters differ from the expected ones.
  """
  declared = job['pipelineSpec']['root'].get('inputDefinitions',
                                             {}).get('parameters', {})
  if set(declared) != set(defaults):
    raise ConfigError(
        f'The compiled pipeline declares parameters {sorted(declared)}, '
        f'expected {sorted(defaults)}: pipeline/retraining.py and the '
        'compiler disagree.')
  for name, value in defaults.items():
    declared[name]['defaultValue'] = value
  job.setdefault('runtimeConfig', {})['parameterValues'] = dict(defaults)


def example_gen_task(pipeline_spec: Dict[str, Any]) -> str:
  """The name of the compiled file-based ExampleGen task.

  Raises:
    ConfigError: when there is not exactly one.
  """
  found = [name for name, task in pipeline_spec['root']['dag']['tasks'].items()
           if {'input_base', 'input_config'} <= set(
               task.get('inputs', {}).get('parameters', {}))]
  if len(found) != 1:
    raise ConfigError(
        f'Expected one file-based ExampleGen task in the compiled pipeline, '
        f'found {sorted(found)}: pipeline/data_stages.py and the compiler '
        'disagree.')
  return found[0]


def pipeline_root_note(pipeline_root: str, kfp_backend: str) -> Optional[str]:
  """A warning when the open-source backend cannot store under the root.

  Its launcher keeps artifacts in object stores only: gs://, s3:// or
  minio:// (kubeflow/pipelines backend/src/v2/objectstore/config.go,
  ParseBucketPathToConfig). A mounted path is fine for the tasks' own files
  but not as the root KFP itself writes to.

  Returns:
    The note to print, or None.
  """
  if kfp_backend != 'oss' or pipeline_root.startswith(OSS_ROOT_SCHEMES):
    return None
  return (f'note: --pipeline-root {pipeline_root} is not a gs://, s3:// or '
          'minio:// bucket path; the open-source KFP backend stores task '
          'outputs in such a bucket only (on a KFP standalone install: '
          'minio://mlpipeline/...), so a run of this spec fails there.')


def set_pipeline_root(pipeline_spec: Dict[str, Any],
                      pipeline_root: str) -> None:
  """Writes the pipeline root into the PipelineSpec as defaultPipelineRoot.

  TFX 1.16 puts it only in the PipelineJob's runtimeConfig, which a YAML
  upload drops: a run created from the uploaded spec would then write to the
  cluster's default root while the paths compiled from the root (the drift
  baselines, the blessed-model records) point at this one.

  Args:
    pipeline_spec: the PipelineSpec as a JSON dict, changed in place.
    pipeline_root: the root every compiled path is derived from.

  Raises:
    ConfigError: if the root is empty.
  """
  if not pipeline_root:
    raise ConfigError('The pipeline root is empty: pass --pipeline-root '
                      'gs://BUCKET/root (or s3://, minio://, a mounted path).')
  pipeline_spec['defaultPipelineRoot'] = pipeline_root


def relocate_strings(value: Any, mapping: Mapping[str, str]) -> Any:
  """Returns value with every occurrence of a mapping key in its strings
  replaced (also inside JSON-encoded parameters such as custom_config)."""
  if isinstance(value, str):
    for old, new in mapping.items():
      value = value.replace(old, new)
    return value
  if isinstance(value, dict):
    return {k: relocate_strings(v, mapping) for k, v in value.items()}
  if isinstance(value, list):
    return [relocate_strings(v, mapping) for v in value]
  return value


def kubeflow_pipeline_config(config: config_lib.PipelineConfig,
                             pipeline_root: str,
                             kfp_backend: str = DEFAULT_BACKEND
                            ) -> config_lib.PipelineConfig:
  """The local config turned into the Kubeflow one.

  Args:
    config: a resolved PipelineConfig (dataset, training, evaluation, ...).
    pipeline_root: where components write on the cluster (gs://, s3://,
      minio://, or a mounted path).
    kfp_backend: 'oss' (the open-source backend: no resolver task; the last
      blessed model from the Pusher's records under the pipeline root) or
      'vertex' (Vertex AI Pipelines, which runs TFX's resolvers).

  Returns:
    The same config with the cluster's pipeline root, no local ML Metadata,
    runtime parameters on and the span window read by ExampleGen (see the
    module docstring). The ValidationGate's drift check stays as configured:
    without local ML Metadata the gate finds its baseline in the folder
    <pipeline_root>/<pipeline name>/ValidationGate/drift_baselines instead of
    through a Resolver (pipeline/data_stages.py: gate_and_augment).
  """
  return dataclasses.replace(
      config,
      pipeline_root=pipeline_root,
      metadata_path=None,
      orchestration=dataclasses.replace(
          config.orchestration, runtime_parameters=True,
          kfp_backend=kfp_backend,
          # SpanWindowCsvExampleGen reads CSV; other formats have no window
          # on Kubeflow (the CLI refuses --span-window > 1 for them).
          window_in_example_gen=config.ingestion.data_format == 'csv'))


def compile_pipeline(config: config_lib.PipelineConfig,
                     image: str,
                     out: str,
                     fmt: Optional[str] = None,
                     options: TaskOptions = TaskOptions(),
                     relocate: Optional[Mapping[str, str]] = None
                    ) -> Dict[str, Any]:
  """Compiles the pipeline and writes it to ``out``.

  Args:
    config: a Kubeflow config (see kubeflow_pipeline_config).
    image: the container image every component runs in.
    out: output file.
    fmt: 'spec-yaml' or 'job-json'; None picks it from out's extension.
    options: retries, resources and caching to apply.
    relocate: local path -> path inside the image, for parameters that name
      files shipped in the image (the curated schema).

  Returns:
    The PipelineJob dict (its 'pipelineSpec' is what was post-processed).

  Raises:
    ConfigError: for a bad image, format or option.
  """
  check_image(image)
  if fmt is None:
    fmt = 'job-json' if out.endswith('.json') else 'spec-yaml'
  if fmt not in FORMATS:
    raise ConfigError(f'Unknown format {fmt!r}; use one of {FORMATS}.')
  if fmt == 'spec-yaml' and not out.endswith(('.yaml', '.yml')):
    raise ConfigError(
        f'--out {out} must end in .yaml or .yml for a PipelineSpec (kfp.Client '
        'reads the format from the extension), or in .json for a PipelineJob.')
  # pylint: disable=g-import-not-at-top
  from tfx import v1 as tfx
  from leantfx.pipeline import pipeline as pipeline_lib
  # pylint: enable=g-import-not-at-top
  runner = tfx.orchestration.experimental.KubeflowV2DagRunner(
      config=tfx.orchestration.experimental.KubeflowV2DagRunnerConfig(
          default_image=image, use_pipeline_spec_2_1=True))
  tfx_pipeline = pipeline_lib.create_pipeline(config)
  try:
    job = runner.run(tfx_pipeline, write_out=False)
  except TypeError as e:
    raise ConfigError(f'The pipeline cannot be compiled for Kubeflow: {e}')
  set_parameter_defaults(job, retraining.runtime_parameter_defaults(config))
  set_pipeline_root(job['pipelineSpec'], config.pipeline_root)
  gen_task = example_gen_task(job['pipelineSpec'])
  if config.orchestration.kfp_backend == 'oss':
    # Vertex AI resolves the span in ExampleGen's preCacheCheck hook; the
    # open-source backend runs no such hook (kubeflow/resolve_span.py).
    resolve_span.add_to_spec(job['pipelineSpec'], gen_task, image)
  if config.orchestration.bulk_score:
    bulk_score_task.add_to_spec(
        job['pipelineSpec'], gen_task, image, {
            bulk_score_task.MODEL_BASE_PATH: config.serving_model_dir,
            bulk_score_task.OUT_ROOT: config.pipeline_root,
            bulk_score_task.LABEL: config.dataset.label or '',
            bulk_score_task.NORMALIZE_LABELS: str(
                config.ingestion.normalize_labels).lower()})
  apply_task_options(job['pipelineSpec'], options)
  if relocate:
    job = relocate_strings(job, relocate)
  # TFX's Kubeflow V2 container entry point imports every input and output
  # artifact's class from its type's schema title, which for a custom type is
  # its TYPE_NAME (e.g. 'leantfx.OptimizationReport'): a title that does not
  # import to the class fails the task before its executor runs ("Could not
  # import ..."). Such titles become the class's import path.
  # pylint: disable=g-import-not-at-top
  from tfx.orchestration.kubeflow.v2 import compiler_utils
  from tfx.utils import import_utils
  # pylint: enable=g-import-not-at-top
  titles = {}
  for node in tfx_pipeline.components:
    for channel in list(node.inputs.values()) + list(node.outputs.values()):
      artifact_class = channel.type
      path = f'{artifact_class.__module__}.{artifact_class.__qualname__}'
      if (compiler_utils.get_artifact_title(artifact_class) != 'tfx.Artifact'
          or artifact_class.TYPE_NAME == path):
        continue  # A standard type, or already its import path.
      try:
        imported = import_utils.import_class_by_path(artifact_class.TYPE_NAME)
      except ImportError:
        imported = None
      if imported is not artifact_class:
        # As YAML in instanceSchema, and JSON-encoded in executor arguments.
        for newline in ('\n', '\\n'):
          titles[f'title: {artifact_class.TYPE_NAME}{newline}'] = (
              f'title: {path}{newline}')
  if titles:
    job = relocate_strings(job, titles)
  write_compiled(job, out, fmt)
  return job


def write_compiled(job: Mapping[str, Any], out: str, fmt: str) -> None:
  """Writes the PipelineSpec YAML or the PipelineJob JSON, atomically."""
  import yaml  # pylint: disable=g-import-not-at-top
  if fmt == 'spec-yaml':
    text = yaml.safe_dump(job['pipelineSpec'], sort_keys=True,
                          default_flow_style=False)
  else:
    text = json.dumps(job, sort_keys=True, indent=2) + '\n'
  directory = os.path.dirname(os.path.abspath(out))
  try:
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix='.compile-')
    with os.fdopen(fd, 'w', encoding='utf-8') as f:
      f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, out)
  except OSError as e:
    raise ConfigError(
        f'Cannot write the compiled pipeline to {out}: {e.strerror}. Pass a '
        '--out path in a writable folder.') from e


def load_spec(path: str):
  """Parses a compiled file into kfp's PipelineSpec proto (for checks)."""
  import yaml  # pylint: disable=g-import-not-at-top
  from google.protobuf import json_format  # pylint: disable=g-import-not-at-top
  from kfp.pipeline_spec import pipeline_spec_pb2  # pylint: disable=g-import-not-at-top
  with open(path, encoding='utf-8') as f:
    if path.endswith('.json'):
      job = json_format.ParseDict(json.load(f),
                                  pipeline_spec_pb2.PipelineJob())
      spec = pipeline_spec_pb2.PipelineSpec()
      json_format.ParseDict(
          json_format.MessageToDict(job.pipeline_spec), spec)
      return spec
    return json_format.ParseDict(yaml.safe_load(f),
                                 pipeline_spec_pb2.PipelineSpec())


def parameters_of(spec) -> Dict[str, Any]:
  """Pipeline parameter name -> default, from a parsed PipelineSpec."""
  from google.protobuf import json_format  # pylint: disable=g-import-not-at-top
  params = {}
  for name, p in spec.root.input_definitions.parameters.items():
    params[name] = json_format.MessageToDict(p).get('defaultValue')
  return params


def task_names(spec) -> Sequence[str]:
  return sorted(spec.root.dag.tasks)
