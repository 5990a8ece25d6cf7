"""``leantfx compile`` and ``leantfx kfp upload|submit|schedule``.

  leantfx compile --target kubeflow --image IMAGE --out pipeline.yaml \\
      --dataset penguins --data-root gs://BUCKET/data \\
      --pipeline-root gs://BUCKET/root --serving-dir gs://BUCKET/serving \\
      --tflite-dir gs://BUCKET/tflite   [any `leantfx run` pipeline option]
  leantfx kfp upload   --host URL --package pipeline.yaml --name leantfx
  leantfx kfp submit   --host URL --package pipeline.yaml [--span N]
  leantfx kfp schedule --host URL --package pipeline.yaml --cron '0 0 3 * * *'

Exit codes: 0 done; 2 bad option or input (nothing compiled or sent); 5 the
KFP API was unreachable or refused (nothing more was sent).
"""
import argparse
import dataclasses
import os
import tempfile

from leantfx import disk_plan
from leantfx import schemas
from leantfx import sizing
from leantfx.cli import argtypes
from leantfx.cli import options
from leantfx.errors import ConfigError

# Where kubeflow/Dockerfile puts this repository inside the image (editable
# install), so bundled schema paths can be rewritten to it.
IMAGE_SOURCE_DIR = '/opt/leantfx'


def _image_path(local_path: str) -> str:
  """Maps a schema below leantfx.schemas to its path in the image."""
  relative = os.path.relpath(os.path.abspath(local_path), schemas.SCHEMAS_DIR)
  if relative.startswith('..'):
    raise ConfigError(
        f'--schema {local_path} is not in the schemas/ folder of this '
        'repository, so the image (kubeflow/Dockerfile copies the repository) '
        'does not have it: put it under schemas/<name>/ or drop --schema.')
  return f'{IMAGE_SOURCE_DIR}/schemas/{relative}'


def _resources(cpu, memory, gpu=None):
  from leantfx.kubeflow import compiler  # pylint: disable=g-import-not-at-top  # Lazy: TFX.
  kind, count = compiler.parse_gpu(gpu) if gpu else ('', 0)
  return compiler.Resources(cpu=cpu, memory_gb=compiler.parse_memory(memory),
                            gpu_type=kind, gpu_count=count)


def _sized_for_rows(rows, trainer_gpu):
  """--span-rows N: each task's resources from the span's size (sizing.py).

  Prints what it chose, or, without --span-rows, that the tasks keep the
  default sizes. --task-resources still overrides a task.
  """
  if rows is None:
    print('tasks: default sizes (1 core, 2 GB; Transform, Trainer and '
          'Evaluator 2 cores, 4 GB): pass --span-rows N to size them for '
          'spans of N rows')
    return {}
  sized = {name: _resources(cpu, f'{memory:g}G',
                            trainer_gpu if name == 'Trainer' else None)
           for name, (cpu, memory) in sizing.task_resources(rows).items()}
  data = sized['Transform']
  trainer = sized['Trainer']
  mode = ('multi_processing, one Beam worker per core' if data.cpu >= 2
          else 'in_memory')
  print(f'tasks sized for spans of {rows:,} rows: data tasks '
        f'{data.cpu:g} cores, {data.memory_gb:g} GB ({mode}); Trainer and '
        f'ModelOptimizer {trainer.cpu:g} cores, {trainer.memory_gb:g} GB')
  return sized


def _check_runs_on_kubeflow(args: argparse.Namespace) -> None:
  """Refuses, by name, options a Kubeflow task cannot honour.

  Raises:
    ConfigError: for multi-worker training (a KFP task is one pod, with no
      TF_CONFIG cluster) or float16 without a GPU for the Trainer.
  """
  if args.strategy == 'multi_worker':
    raise ConfigError(
        '--strategy multi_worker cannot work on Kubeflow: each component, '
        'the Trainer included, runs in one pod with no TF_CONFIG cluster. '
        'Use --strategy mirrored with --trainer-gpu TYPE:COUNT (GPUs of one '
        'pod), or run multi-worker training locally.')
  if args.precision == 'mixed_float16' and not args.trainer_gpu:
    raise ConfigError(
        '--precision mixed_float16 needs a GPU, and the compiled Trainer '
        'gets none: add --trainer-gpu TYPE[:COUNT] (e.g. nvidia.com/gpu:1), '
        'or use --precision auto.')


def cmd_compile(args: argparse.Namespace) -> int:
  """Handler of ``leantfx compile``."""
  # pylint: disable=g-import-not-at-top
  # Lazy: the builder and the compiler import TFX.
  from leantfx.cli import build
  from leantfx.kubeflow import compiler
  # pylint: enable=g-import-not-at-top
  compiler.check_image(args.image)
  _check_runs_on_kubeflow(args)
  if args.dataset is None and args.sample_data is None:
    raise ConfigError('Pass --dataset NAME (bundled), or --sample-data DIR '
                      '--label COLUMN: a local copy of your data that fixes '
                      'the columns, classes and schema compiled in.')
  with tempfile.TemporaryDirectory(prefix='leantfx-compile-') as scratch:
    target = build.KubeflowTarget(
        pipeline_root=build.cluster_path('--pipeline-root',
                                         args.pipeline_root),
        data_root=build.cluster_path('--data-root', args.data_root),
        serving_dir=build.cluster_path('--serving-dir', args.serving_dir),
        tflite_dir=build.cluster_path('--tflite-dir', args.tflite_dir),
        scratch=scratch, kfp_backend=args.kfp_backend)
    built = build.build_pipeline_config(args, target)
    config = built.config
    print(f'task: {built.data.task.task} ({built.data.task.reason})')
    for note in built.notes:
      print(note.strip())
    print(_disk_line(args, built))
    root_note = compiler.pipeline_root_note(config.pipeline_root,
                                            args.kfp_backend)
    if root_note:
      print(root_note)
  component_resources = {
      'Transform': _resources(args.trainer_cpu, args.trainer_memory),
      'Evaluator': _resources(args.trainer_cpu, args.trainer_memory),
      'Trainer': _resources(args.trainer_cpu, args.trainer_memory,
                            args.trainer_gpu),
  }
  sized = _sized_for_rows(args.span_rows, args.trainer_gpu)
  for name in sized:  # The span's size replaces the fixed defaults.
    component_resources.pop(name, None)
  for text in args.task_resources:
    name, resources = compiler.parse_task_resources(text)
    if name == 'Trainer' and args.trainer_gpu:
      kind, count = compiler.parse_gpu(args.trainer_gpu)
      resources = dataclasses.replace(resources, gpu_type=kind,
                                      gpu_count=count)
    component_resources[name] = resources
  options = compiler.TaskOptions(
      retry=compiler.RetryPolicy(max_retries=args.retries,
                                 backoff=f'{args.retry_backoff}s'),
      default_resources=_resources(args.cpu, args.memory),
      component_resources=tuple(sorted(component_resources.items())),
      no_cache=tuple(args.no_cache_component),
      sized_resources=tuple(sorted(sized.items())))
  # Components read the schema inside the image, where the repository is
  # IMAGE_SOURCE_DIR (the pipeline itself reads it here while being built).
  schema = config.dataset.schema_file
  relocate = {schema: _image_path(schema)} if schema else {}
  job = compiler.compile_pipeline(config, args.image, args.out, args.spec_format,
                                  options, relocate)
  tasks = sorted(job['pipelineSpec']['root']['dag']['tasks'])
  params = job['pipelineSpec']['root']['inputDefinitions']['parameters']
  print(f'wrote {args.out}: {len(tasks)} tasks, image {args.image}, '
        f'parameters {", ".join(sorted(params))}')
  return 0


def cmd_upload(args: argparse.Namespace) -> int:
  from leantfx.kubeflow import submit  # pylint: disable=g-import-not-at-top
  ids = submit.upload(args.host, args.package, args.name, args.version)
  print('uploaded: ' + ', '.join(f'{k} {v}' for k, v in sorted(ids.items())))
  return 0


def _params(args):
  from leantfx.kubeflow import submit  # pylint: disable=g-import-not-at-top
  return submit.run_parameters(args.data_root, args.span, args.train_steps,
                               args.param, args.span_window)


def cmd_submit(args: argparse.Namespace) -> int:
  from leantfx.kubeflow import submit  # pylint: disable=g-import-not-at-top
  params = _params(args)
  run_id = submit.submit_run(args.host, args.package, args.experiment,
                             args.run_name, params)
  print(f'run created: {run_id}')
  return 0


def cmd_schedule(args: argparse.Namespace) -> int:
  from leantfx.kubeflow import submit  # pylint: disable=g-import-not-at-top
  if args.cron is not None:
    submit.validate_cron(args.cron)  # Before any network traffic.
  params = _params(args)
  recurring_id = submit.schedule(args.host, args.package, args.experiment,
                                 args.run_name, params, cron=args.cron,
                                 interval_s=args.interval)
  print(f'recurring run created: {recurring_id} (max_concurrency=1, '
        'no_catchup)')
  return 0


def _add_compile(sub) -> None:
  p = sub.add_parser(
      'compile', help='compile the pipeline for Kubeflow Pipelines',
      description='Compiles the same create_pipeline() that `leantfx run` '
      'runs, from the same options, with KubeflowV2DagRunner: a PipelineSpec '
      '.yaml (for kfp.Client uploads) or a PipelineJob .json. Pipeline '
      'parameters: data_root, range_config (the span), span_window (CSV '
      'data), train_args. Needs no cluster.')
  p.add_argument('--target', choices=('kubeflow',), required=True)
  p.add_argument('--image', required=True,
                 help='image built from kubeflow/Dockerfile')
  p.add_argument('--out', required=True, help='FILE.yaml or FILE.json')
  p.add_argument('--kfp-backend', choices=('oss', 'vertex'), default='oss',
                 help='the backend that runs the spec: oss (default: the '
                 'open-source Kubeflow Pipelines backend, which runs no '
                 'resolver task; the last blessed model comes from records '
                 'the Pusher keeps under --pipeline-root) or vertex (Vertex '
                 "AI Pipelines, which runs TFX's ML Metadata resolvers)")
  p.add_argument('--spec-format', choices=('spec-yaml', 'job-json'),
                 help='default: from the --out extension (.yaml/.yml: '
                 'spec-yaml, .json: job-json)')
  cluster = p.add_argument_group(
      'paths on the cluster (object-store URIs such as gs://BUCKET/x, or '
      'absolute paths of volumes mounted in every component)')
  cluster.add_argument('--pipeline-root', required=True,
                       help='where components write')
  cluster.add_argument('--serving-dir', required=True,
                       help="the Pusher's base directory")
  cluster.add_argument('--tflite-dir',
                       help="the ModelOptimizer's TFLite push base (needed "
                       'unless --no-optimize)')
  options.add_pipeline_options(p, 'compile')
  p.add_argument('--no-cache-component', action='append', default=[],
                 metavar='ID', help='caching off for this component '
                 '(repeatable), e.g. Pusher')
  tasks = p.add_argument_group('tasks (added to the compiled spec)')
  tasks.add_argument('--retries', type=argtypes.non_negative_int, default=2,
                     help='retries of a failed task (pod lost, storage '
                     'error); the ValidationGate, whose failure is its '
                     'verdict on the data, is never retried')
  tasks.add_argument('--retry-backoff', type=argtypes.positive_int,
                     default=60, metavar='SECONDS')
  tasks.add_argument('--cpu', type=argtypes.positive_float, default=1.0)
  tasks.add_argument('--memory', default='2G')
  tasks.add_argument('--trainer-cpu', type=argtypes.positive_float,
                     default=2.0, help='also Transform and Evaluator')
  tasks.add_argument('--trainer-memory', default='4G',
                     help='also Transform and Evaluator')
  tasks.add_argument('--trainer-gpu', metavar='TYPE[:COUNT]',
                     help='e.g. nvidia.com/gpu:1')
  tasks.add_argument('--span-rows', type=argtypes.positive_int,
                     metavar='N', help='rows of a span (all its files): '
                     'sizes every data task\'s cores and memory and the '
                     'Trainer\'s for it (a data task with 2 or more cores '
                     'runs Beam multi_processing); default: today\'s fixed '
                     'sizes. --task-resources overrides one task')
  tasks.add_argument('--task-resources', action='append', default=[],
                     metavar='NAME=CPU,MEM',
                     help='CPU cores and memory of one component\'s task '
                     '(repeatable), e.g. Transform=4,8G; a task given 2 or '
                     'more cores runs Beam\'s DirectRunner multi_processing '
                     'with one worker per core (unless --beam-mode or '
                     '--beam-workers say otherwise)')
  p.set_defaults(func=cmd_compile)


def _add_run_params(p) -> None:
  p.add_argument('--host', required=True, help='KFP API URL, e.g. '
                 'http://127.0.0.1:8888')
  p.add_argument('--package', required=True, help='compiled .yaml')
  p.add_argument('--experiment', default='leantfx')
  p.add_argument('--run-name', default='leantfx')
  p.add_argument('--data-root', help='data_root parameter')
  p.add_argument('--span', type=argtypes.positive_int,
                 help='pin ExampleGen to span N (range_config parameter)')
  p.add_argument('--train-steps', type=argtypes.positive_int,
                 help='train_args parameter: the exact steps of a package '
                 'compiled with --train-steps, else the cap of its passes '
                 'rule (compile --max-train-steps)')
  p.add_argument('--span-window', type=argtypes.positive_int,
                 help='train on the newest K spans (span_window parameter)')
  p.add_argument('--param', action='append', default=[],
                 metavar='NAME=VALUE', help='any pipeline parameter')


def _disk_line(args: argparse.Namespace, built) -> str:
  """The artifacts' size a run of the sample data would write; the
  cluster's free space is not visible from here."""
  data = built.data
  estimated = disk_plan.estimate(
      disk_plan.span_input(data.data_root, data.profile.span,
                           args.span_window),
      data.data_format, optimize=built.config.optimization is not None)
  line = disk_plan.describe(estimated).strip()
  if estimated is None:
    return line
  return (f'{line} (the sample data; a run on the cluster writes about as '
          'much per span of that size); the cluster\'s storage is not '
          'checked: compile cannot see it')


def add_commands(subparsers) -> None:
  """Registers ``leantfx compile`` and ``leantfx kfp ...``."""
  _add_compile(subparsers)
  kfp = subparsers.add_parser(
      'kfp', help='upload, run or schedule on Kubeflow Pipelines').add_subparsers(
          dest='kfp_command', metavar='ACTION', required=True)
  upload = kfp.add_parser('upload', help='upload the compiled pipeline')
  upload.add_argument('--host', required=True)
  upload.add_argument('--package', required=True)
  upload.add_argument('--name', default='leantfx')
  upload.add_argument('--version', help='upload as a new version of an '
                      'existing pipeline')
  upload.set_defaults(func=cmd_upload)
  run = kfp.add_parser('submit', help='create one run')
  _add_run_params(run)
  run.set_defaults(func=cmd_submit)
  sched = kfp.add_parser(
      'schedule', help='create a recurring run (max_concurrency=1, '
      'no_catchup)')
  _add_run_params(sched)
  when = sched.add_mutually_exclusive_group(required=True)
  when.add_argument('--cron', help='6 fields, seconds first: '
                    '"0 0 3 * * *" = 03:00 daily')
  when.add_argument('--interval', type=argtypes.positive_int, metavar='SECONDS')
  sched.set_defaults(func=cmd_schedule)
