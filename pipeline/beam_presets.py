"""Named sets of ``beam_pipeline_args`` for every Beam-based component.

``direct`` (the default) runs Beam in this machine's Python with one of the
DirectRunner's three running modes:

  in_memory         one thread, everything in this process (fastest start);
  multi_threading   N threads in this process;
  multi_processing  N worker processes (real parallelism for CPU-bound
                    analyzers; each worker pays TensorFlow's import time).

``flink``, ``spark`` and ``dataflow`` are documented starting points for a
cluster. They fix the runner-specific arguments every such run needs and
refuse to start while a required one (the cluster address, the Cloud
project, ...) is missing; pass those with ``--beam-arg``:

  leantfx run --beam-runner flink --beam-arg=--flink_master=flink:8081
  leantfx run --beam-runner spark --beam-arg=--spark_master_url=spark://m:7077
  leantfx run --beam-runner dataflow --beam-arg=--project=P \\
      --beam-arg=--region=europe-west4 --beam-arg=--temp_location=gs://B/tmp

Flink and Spark run the Python SDK through Beam's portable job server; with
``--environment_type=DOCKER`` (the default set here) each worker runs the SDK
in a container, which must be this project's image (kubeflow/Dockerfile) so
TFX, TFT and leantfx import there: pass ``--beam-arg=--environment_config=
IMAGE``. ``LOOPBACK`` instead runs the workers in the submitting process,
for a local test cluster. Dataflow needs the same image as
``--sdk_container_image``.
"""
import dataclasses
from typing import Dict, List, Sequence, Tuple

from leantfx.errors import ConfigError

DIRECT_MODES = ('in_memory', 'multi_threading', 'multi_processing')


@dataclasses.dataclass(frozen=True)
class ClusterPreset:
  """Arguments a cluster runner always gets, and those the user must add.

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
    'flink':
        ClusterPreset(
            runner='FlinkRunner',
            fixed=('--environment_type=DOCKER', '--parallelism=4',
                   # TFX components write their outputs from the workers.
                   '--save_main_session'),
            required=('--flink_master',),
            doc='Apache Flink through the portable job server'),
    'spark':
        ClusterPreset(
            runner='SparkRunner',
            fixed=('--environment_type=DOCKER', '--save_main_session'),
            required=('--spark_master_url',),
            doc='Apache Spark through the portable job server'),
    'dataflow':
        ClusterPreset(
            runner='DataflowRunner',
            fixed=('--experiments=use_runner_v2', '--save_main_session',
                   '--disk_size_gb=50'),
            required=('--project', '--region', '--temp_location'),
            doc='Google Cloud Dataflow (Runner v2, custom SDK container)'),
}
RUNNERS = ('direct',) + tuple(CLUSTER_PRESETS)


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


def beam_pipeline_args(runner: str = 'direct',
                       mode: str = 'in_memory',
                       workers: int = 1,
                       extra: Sequence[str] = ()) -> List[str]:
  """The beam_pipeline_args of a preset plus passthrough arguments.

  Args:
    runner: 'direct' or a CLUSTER_PRESETS key.
    mode: the DirectRunner mode (direct only).
    workers: DirectRunner workers (direct only).
    extra: --beam-arg values, appended; one naming a flag the preset sets
      replaces the preset's value.

  Returns:
    The argument list every Beam-based component gets.

  Raises:
    ConfigError: for an unknown runner or mode, a bad worker count, a
      malformed passthrough argument or a missing required one.
  """
  for arg in extra:
    if not arg.startswith('--') or len(_flag_name(arg)) < 3:
      raise ConfigError(
          f'--beam-arg {arg!r} is not a Beam pipeline option: write it as '
          '--name=value, e.g. --beam-arg=--flink_master=host:8081.')
  if runner == 'direct':
    return _merge(direct_args(mode, workers), extra)
  preset = CLUSTER_PRESETS.get(runner)
  if preset is None:
    raise ConfigError(
        f'Unknown Beam runner preset {runner!r}; use one of {RUNNERS}.')
  if mode != 'in_memory' or workers != 1:
    raise ConfigError(
        f'--beam-mode and --beam-workers set the DirectRunner; the {runner} '
        'preset takes its parallelism from --beam-arg (e.g. '
        '--beam-arg=--parallelism=8 for Flink).')
  given = {_flag_name(a) for a in extra}
  missing = [flag for flag in preset.required if flag not in given]
  if missing:
    raise ConfigError(
        f'The {runner} Beam preset ({preset.doc}) needs '
        f'{", ".join(missing)}: pass each as --beam-arg={missing[0]}=VALUE '
        '(see pipeline/beam_presets.py for a full example).')
  return _merge([f'--runner={preset.runner}', *preset.fixed], extra)
