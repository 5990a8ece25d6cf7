"""Named sets of ``beam_pipeline_args`` for every Beam-based component.

``direct`` (the default) runs Beam in this machine's Python with one of the
DirectRunner's three running modes:

  in_memory         one thread, everything in this process (fastest start);
  multi_threading   N threads in this process;
  multi_processing  N worker processes (real parallelism for CPU-bound
                    analyzers; each worker pays TensorFlow's import time).

``portable`` runs the components through Beam's portability framework, the
path Flink, Spark and Dataflow take: the pipeline goes to a job service over
the Job API, and SDK workers run its Python code over the Fn API.

  --job-endpoint embed        Beam's job service inside this process
                              (FnApiRunner; one SDK worker per pipeline);
  --job-endpoint HOST:PORT    a job server: `leantfx beam job-server` here,
                              or a Flink/Spark job server on a cluster;
  --environment loopback      the SDK workers run in the submitting process;
  --environment external:HOST:PORT
                              a worker pool starts them (`leantfx beam
                              worker-pool`, or its sidecar on a cluster);
  --environment process[:COMMAND]
                              the runner's workers run COMMAND with Beam's
                              container contract (default: the SDK image's
                              /opt/apache/beam/boot; not the embedded
                              service, which cannot start processes);
  --environment docker:IMAGE  the runner starts IMAGE (kubeflow/Dockerfile's)
                              per worker; needs Docker where the runner runs.

``flink`` and ``spark`` are ``portable`` pointed at their job server (the
``--job-endpoint`` the deploy files of ``leantfx deploy flink|spark`` give
it), with the worker pool sidecar of every task manager / Spark worker as
the default environment (``external:localhost:50000``). ``dataflow`` keeps
its own arguments; pass the Cloud ones with ``--beam-arg``:

  leantfx run --beam-runner portable --job-endpoint embed
  leantfx run --beam-runner portable --job-endpoint embed \\
      --environment external:127.0.0.1:50000      # leantfx beam worker-pool
  leantfx run --beam-runner flink --job-endpoint beam-job-server:8099
  leantfx run --beam-runner dataflow --beam-arg=--project=P \\
      --beam-arg=--region=europe-west4 --beam-arg=--temp_location=gs://B/tmp
"""
import dataclasses
import json
import re
from typing import Dict, List, Optional, Sequence, Tuple

from leantfx.errors import ConfigError

DIRECT_MODES = ('in_memory', 'multi_threading', 'multi_processing')
EMBED = 'embed'
ENVIRONMENT_KINDS = ('loopback', 'external', 'process', 'docker')
# Where Beam's SDK containers keep their boot executable (the container
# contract: --id, --provision_endpoint, ...). Not checked against
# kubeflow/Dockerfile's image here (no Docker); an image that keeps it
# elsewhere needs --environment process:COMMAND.
DEFAULT_PROCESS_COMMAND = '/opt/apache/beam/boot'
# The port of the worker pool sidecar in the deploy files
# (kubeflow/beam_cluster.py) and of `leantfx beam worker-pool` by default.
WORKER_POOL_PORT = 50000
CLUSTER_ENVIRONMENT = f'external:localhost:{WORKER_POOL_PORT}'
# Beam's Java job servers stage artifacts on this port of the same host.
# They name their own bind address (--job-host=0.0.0.0 in a pod) as the
# staging endpoint, which a client in another pod cannot use; so the flink
# and spark presets name it at the job server's host.
ARTIFACT_PORT = 8098
# Beam's PortableRunner puts --job_server_timeout (default 60 s) on the job's
# state and message streams when the job server knows the job by its
# preparation id, as Beam's own Python job server does: every job longer
# than that fails with DEADLINE_EXCEEDED while it goes on running on the
# server. A remote endpoint therefore gets a bound on one component's Beam
# job instead; whether the server answers at all is the preflight's 10 s
# check (pipeline/beam_preflight.py).
JOB_TIMEOUT_S = 24 * 3600
_HOST_PORT_RE = re.compile(r'^(?P<host>[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:]+\])'
                           r':(?P<port>\d{1,5})$')
_LOCAL_HOSTS = ('localhost', '127.0.0.1', '[::1]', '0.0.0.0')


def parse_host_port(text: str, option: str) -> Tuple[str, int]:
  """HOST:PORT as (host, port).

  Raises:
    ConfigError: naming option, when text is not HOST:PORT with a port in
      1..65535.
  """
  match = _HOST_PORT_RE.match(text or '')
  port = int(match.group('port')) if match else 0
  if not match or not 1 <= port <= 65535:
    raise ConfigError(
        f'{option} {text!r} is not HOST:PORT (a host name or address, a '
        'colon, a port 1..65535), e.g. 127.0.0.1:50000.')
  return match.group('host'), port


def is_local_host(host: str) -> bool:
  """Whether host names this machine (as the submitting process sees it)."""
  return host in _LOCAL_HOSTS


@dataclasses.dataclass(frozen=True)
class Environment:
  """Where a portable runner starts its SDK workers (--environment).

  Attributes:
    kind: one of ENVIRONMENT_KINDS.
    value: HOST:PORT (external), the command (process), the image (docker);
      '' for loopback.
  """
  kind: str
  value: str = ''

  def __post_init__(self):
    if self.kind not in ENVIRONMENT_KINDS:
      raise ConfigError(
          f'--environment {self.kind!r}: unknown kind; use one of '
          'loopback, external:HOST:PORT, process[:COMMAND], docker:IMAGE.')
    if self.kind == 'external':
      parse_host_port(self.value, '--environment external:')
    elif self.kind == 'docker' and not self.value.strip():
      raise ConfigError('--environment docker: needs an image, e.g. '
                        'docker:REGISTRY/leantfx:1.0 (kubeflow/Dockerfile).')
    elif self.kind == 'loopback' and self.value:
      raise ConfigError(f'--environment loopback takes no value, got '
                        f'{self.value!r}.')

  def __str__(self) -> str:
    return f'{self.kind}:{self.value}' if self.value else self.kind

  @property
  def address(self) -> Optional[Tuple[str, int]]:
    """(host, port) of an external worker pool, else None."""
    if self.kind != 'external':
      return None
    return parse_host_port(self.value, '--environment external:')

  def beam_args(self) -> List[str]:
    """--environment_type/--environment_config for PortableOptions."""
    if self.kind == 'loopback':
      return ['--environment_type=LOOPBACK']
    if self.kind == 'process':
      command = self.value or DEFAULT_PROCESS_COMMAND
      return ['--environment_type=PROCESS',
              '--environment_config=' + json.dumps({'command': command})]
    return [f'--environment_type={self.kind.upper()}',
            f'--environment_config={self.value}']


def parse_environment(text: str) -> Environment:
  """--environment text as an Environment.

  Raises:
    ConfigError: naming --environment, for text that does not parse.
  """
  kind, _, value = (text or '').strip().partition(':')
  if kind not in ENVIRONMENT_KINDS:
    raise ConfigError(
        f'--environment {text!r} does not parse: use loopback, '
        'external:HOST:PORT (a worker pool, e.g. external:127.0.0.1:50000), '
        'process[:COMMAND] or docker:IMAGE.')
  if kind == 'process' and not value:
    value = DEFAULT_PROCESS_COMMAND
  return Environment(kind, value)


def parse_job_endpoint(text: str) -> str:
  """--job-endpoint text: 'embed' or HOST:PORT.

  Raises:
    ConfigError: naming --job-endpoint, for anything else.
  """
  text = (text or '').strip()
  if text == EMBED:
    return text
  try:
    parse_host_port(text, '--job-endpoint')
  except ConfigError:
    raise ConfigError(
        f'--job-endpoint {text!r} does not parse: use embed (Beam\'s job '
        'service in this process) or HOST:PORT of a job server, e.g. '
        '127.0.0.1:8099 (`leantfx beam job-server`) or beam-job-server:8099 '
        '(a Flink/Spark job server).') from None
  return text


@dataclasses.dataclass(frozen=True)
class PortablePreset:
  """A preset that runs on Beam's portability framework.

  Attributes:
    name: the --beam-runner value.
    doc: one line on what it is for.
    job_server: what --job-endpoint must name (None: embed is allowed).
    default_environment: --environment when none is given.
  """
  name: str
  doc: str
  job_server: Optional[str]
  default_environment: str
  artifact_port: Optional[int] = None


PORTABLE_PRESETS: Dict[str, PortablePreset] = {
    'portable': PortablePreset(
        'portable', "Beam's portable runner (Job API + Fn API)", None,
        'loopback'),
    'flink': PortablePreset(
        'flink', 'Apache Flink through its Beam job server',
        'the Flink job server (apache/beam_flink1.18_job_server, started '
        'with --flink-master)', CLUSTER_ENVIRONMENT, ARTIFACT_PORT),
    'spark': PortablePreset(
        'spark', 'Apache Spark through its Beam job server',
        'the Spark job server (apache/beam_spark3_job_server, started with '
        '--spark-master-url)', CLUSTER_ENVIRONMENT, ARTIFACT_PORT),
}


@dataclasses.dataclass(frozen=True)
class ClusterPreset:
  """Arguments a managed runner always gets, and those the user must add.

  Attributes:
    runner: the value of --runner.
    fixed: arguments set by the preset (a --beam-arg with the same flag name
      overrides one).
    required: flag names that must come from --beam-arg.
    doc: one line on what the preset is for.
  """
  runner: str
  fixed: Tuple[str, ...]
  required: Tuple[str, ...]
  doc: str


CLUSTER_PRESETS: Dict[str, ClusterPreset] = {
    'dataflow':
        ClusterPreset(
            runner='DataflowRunner',
            fixed=('--experiments=use_runner_v2', '--save_main_session',
                   '--disk_size_gb=50'),
            required=('--project', '--region', '--temp_location'),
            doc='Google Cloud Dataflow (Runner v2, custom SDK container)'),
}
RUNNERS = ('direct',) + tuple(PORTABLE_PRESETS) + tuple(CLUSTER_PRESETS)


def _flag_name(arg: str) -> str:
  return arg.split('=', 1)[0]


def _merge(base: Sequence[str], extra: Sequence[str]) -> List[str]:
  """base then extra; an extra flag replaces a base flag of the same name."""
  overridden = {_flag_name(a) for a in extra}
  return [a for a in base if _flag_name(a) not in overridden] + list(extra)


def direct_args(mode: str, workers: int) -> List[str]:
  """DirectRunner arguments for a running mode.

  Args:
    mode: one of DIRECT_MODES.
    workers: threads or processes (in_memory always uses one).

  Returns:
    The DirectRunner argument list.

  Raises:
    ConfigError: for an unknown mode, or fewer than 1 worker.
  """
  if mode not in DIRECT_MODES:
    raise ConfigError(
        f'Unknown DirectRunner mode {mode!r}; use one of {DIRECT_MODES}.')
  if not isinstance(workers, int) or workers < 1:
    raise ConfigError(f'--beam-workers must be >= 1, got {workers!r}.')
  if mode == 'in_memory' and workers != 1:
    raise ConfigError(
        f'--beam-mode in_memory runs on one thread; --beam-workers {workers} '
        'needs --beam-mode multi_threading or multi_processing.')
  return [
      '--runner=DirectRunner', f'--direct_running_mode={mode}',
      f'--direct_num_workers={workers}'
  ]


def portable_args(preset: str, job_endpoint: Optional[str],
                  environment: Optional[Environment],
                  workers: int = 1) -> List[str]:
  """PortableRunner arguments of a portable preset.

  Args:
    preset: a PORTABLE_PRESETS key.
    job_endpoint: 'embed' or HOST:PORT (required).
    environment: where the SDK workers run (None: the preset's default).
    workers: SDK workers per environment (--sdk_worker_parallelism).

  Returns:
    The argument list.

  Raises:
    ConfigError: naming the option, for a missing or unusable job endpoint,
      an environment the job service cannot start, or a bad worker count.
  """
  spec = PORTABLE_PRESETS[preset]
  if not job_endpoint:
    where = spec.job_server or ('embed (Beam\'s job service in this process) '
                                'or HOST:PORT of a job server')
    raise ConfigError(
        f'--beam-runner {preset} ({spec.doc}) needs --job-endpoint: '
        f'{where}. See docs/beam.md.')
  job_endpoint = parse_job_endpoint(job_endpoint)
  if job_endpoint == EMBED and spec.job_server:
    raise ConfigError(
        f'--beam-runner {preset} submits to {spec.job_server}: pass its '
        'address as --job-endpoint HOST:PORT (embed runs the pipeline in '
        'this process, not on the cluster; use --beam-runner portable for '
        'that).')
  if environment is None:
    environment = parse_environment(spec.default_environment)
  if not isinstance(workers, int) or workers < 1:
    raise ConfigError(f'--beam-workers must be >= 1, got {workers!r}.')
  if job_endpoint == EMBED:
    if environment.kind == 'process':
      raise ConfigError(
          "--environment process cannot run with --job-endpoint embed: Beam's "
          'embedded job service (FnApiRunner) does not start PROCESS '
          'workers. Use --environment external:HOST:PORT with `leantfx beam '
          'worker-pool`, or loopback.')
    if workers > 1:
      # FnApiRunner.run_via_runner_api, which the embedded job service
      # calls, keeps one worker whatever --sdk_worker_parallelism says.
      raise ConfigError(
          f"--beam-workers {workers}: Beam's embedded job service runs one "
          'SDK worker per pipeline. Start `leantfx beam job-server` and pass '
          'its address as --job-endpoint for several, or use --beam-runner '
          'direct --beam-mode multi_processing.')
  args = ['--runner=PortableRunner', f'--job_endpoint={job_endpoint}']
  if job_endpoint != EMBED:
    args.append(f'--job_server_timeout={JOB_TIMEOUT_S}')
  if spec.artifact_port:
    host = parse_host_port(job_endpoint, '--job-endpoint')[0]
    args.append(f'--artifact_endpoint={host}:{spec.artifact_port}')
  return args + [*environment.beam_args(),
                 f'--sdk_worker_parallelism={workers}']


def beam_pipeline_args(runner: str = 'direct',
                       mode: str = 'in_memory',
                       workers: int = 1,
                       extra: Sequence[str] = (),
                       job_endpoint: Optional[str] = None,
                       environment: Optional[Environment] = None
                      ) -> List[str]:
  """The beam_pipeline_args of a preset plus passthrough arguments.

  Args:
    runner: 'direct', a PORTABLE_PRESETS key or a CLUSTER_PRESETS key.
    mode: the DirectRunner mode (direct only).
    workers: DirectRunner workers (direct), SDK workers (portable presets).
    extra: --beam-arg values, appended; one naming a flag the preset sets
      replaces the preset's value.
    job_endpoint: --job-endpoint (portable presets only).
    environment: --environment (portable presets only).

  Returns:
    The argument list every Beam-based component gets.

  Raises:
    ConfigError: for an unknown runner or mode, a bad worker count, a
      malformed passthrough argument, a missing required one, or an option
      the runner does not take.
  """
  for arg in extra:
    if not arg.startswith('--') or len(_flag_name(arg)) < 3:
      raise ConfigError(
          f'--beam-arg {arg!r} is not a Beam pipeline option: write it as '
          '--name=value, e.g. --beam-arg=--parallelism=8.')
  if runner not in RUNNERS:
    raise ConfigError(
        f'Unknown Beam runner preset {runner!r}; use one of {RUNNERS}.')
  if runner not in PORTABLE_PRESETS:
    given = [name for name, value in (('--job-endpoint', job_endpoint),
                                      ('--environment', environment))
             if value is not None]
    if given:
      raise ConfigError(
          f'{" and ".join(given)} set(s) a portable runner; --beam-runner '
          f'{runner} does not take it. Use --beam-runner portable, flink or '
          'spark.')
  if runner == 'direct':
    return _merge(direct_args(mode, workers), extra)
  if mode != 'in_memory':
    raise ConfigError(
        f'--beam-mode sets the DirectRunner; --beam-runner {runner} takes '
        'its parallelism from --beam-workers (SDK workers) or --beam-arg.')
  if runner in PORTABLE_PRESETS:
    return _merge(portable_args(runner, job_endpoint, environment, workers),
                  extra)
  preset = CLUSTER_PRESETS[runner]
  if workers != 1:
    raise ConfigError(
        f'--beam-workers sets the DirectRunner or a portable runner; the '
        f'{runner} preset takes its parallelism from --beam-arg (e.g. '
        '--beam-arg=--max_num_workers=8).')
  given = {_flag_name(a) for a in extra}
  missing = [flag for flag in preset.required if flag not in given]
  if missing:
    raise ConfigError(
        f'The {runner} Beam preset ({preset.doc}) needs '
        f'{", ".join(missing)}: pass each as --beam-arg={missing[0]}=VALUE '
        '(see pipeline/beam_presets.py for a full example).')
  return _merge([f'--runner={preset.runner}', *preset.fixed], extra)


@dataclasses.dataclass(frozen=True)
class PortableTarget:
  """Where a portable argument list sends its pipelines.

  Attributes:
    job_endpoint: 'embed' or HOST:PORT.
    environment: where the SDK workers run.
  """
  job_endpoint: str
  environment: Environment

  @property
  def runs_here(self) -> bool:
    """The job service runs on this machine, so it reaches what we reach."""
    if self.job_endpoint == EMBED:
      return True
    return is_local_host(parse_host_port(self.job_endpoint,
                                         '--job-endpoint')[0])

  @property
  def pool_address(self) -> Optional[Tuple[str, int]]:
    """The external worker pool's (host, port) when this machine reaches it.

    A remote job server resolves the pool's address itself (a task
    manager's sidecar is its own localhost), so only a job service running
    here contacts the pool at the address this machine would.
    """
    if self.environment.kind != 'external' or not self.runs_here:
      return None
    return self.environment.address


def portable_target(args: Sequence[str]) -> Optional[PortableTarget]:
  """The PortableTarget of a final argument list, None if not portable.

  Reads the list as Beam would (the last value of a flag wins), so it also
  covers portable runs spelled with --beam-arg alone.

  Raises:
    ConfigError: for a portable list without --job_endpoint, or with an
      environment leantfx cannot read.
  """
  values: Dict[str, str] = {}
  for arg in args:
    name, _, value = arg.partition('=')
    values[name] = value
  if values.get('--runner') != 'PortableRunner':
    return None
  endpoint = values.get('--job_endpoint')
  if not endpoint:
    raise ConfigError('--runner=PortableRunner needs a job endpoint: pass '
                      '--beam-runner portable --job-endpoint embed|HOST:PORT.')
  # Beam's own default environment is DOCKER with its SDK image.
  kind = values.get('--environment_type', 'DOCKER').lower()
  config = values.get('--environment_config', '')
  if config.startswith('{'):
    payload = json.loads(config)
    config = payload.get('command') or payload.get('url') or ''
  if kind == 'docker' and not config:
    config = "Beam's default SDK image"
  return PortableTarget(parse_job_endpoint(endpoint),
                        Environment(kind, '' if kind == 'loopback' else
                                    config))
