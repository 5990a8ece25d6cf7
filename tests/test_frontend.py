"""The front end: one option set and one config builder for run, compile, watch.

Bad options must get the same message from every command, `watch` must pass
every pipeline option through to the runs it starts, and what one runner
cannot do is refused by name. These call ``main`` in-process with --verbose
(fd 2 stays the test's) and read what it printed; one test runs the real
console script to check the quiet first screen.
"""
import os
import re

import pytest

from leantfx import datasets
from leantfx.cli import build
from leantfx.cli import dataset as dataset_lib
from leantfx.cli import main
from leantfx.cli import options
from leantfx.cli import summary
from leantfx.cli import watch as watch_command
from leantfx.errors import ConfigError
from tests.helpers import run_cli
from tests.orchestration.conftest import IMAGE

pytestmark = pytest.mark.unit


def _commands(tmp_path):
  """The three entry points, each with what it needs besides the options."""
  data = tmp_path / 'watched'
  data.mkdir(exist_ok=True)
  out = str(tmp_path / 'out')
  return {
      'run': ['run', '--dataset', 'penguins', '--output', out],
      'compile': ['compile', '--target', 'kubeflow', '--image', IMAGE,
                  '--out', str(tmp_path / 'p.yaml'), '--dataset', 'penguins',
                  '--pipeline-root', 'gs://b/root', '--data-root',
                  'gs://b/data', '--serving-dir', 'gs://b/serving',
                  '--tflite-dir', 'gs://b/tflite'],
      'watch': ['watch', '--data-root', str(data), '--output', out,
                '--dataset', 'penguins', '--once'],
  }


def _error_of(argv, capsys):
  """Runs main in-process; returns (exit code, the error line, normalized)."""
  try:
    code = main.main(argv + ['--verbose'])
  except SystemExit as e:  # argparse's own errors.
    code = e.code
  err = capsys.readouterr().err
  lines = [l for l in err.splitlines() if 'error:' in l]
  assert lines, err
  # 'leantfx run: error: ...' and 'leantfx: error: ...' name the command or
  # not; the message after 'error:' is what must match.
  return code, re.sub(r'^leantfx( \w+)?: error: ', '', lines[-1])


@pytest.mark.parametrize('bad', [
    ['--train-steps', '0'],
    ['--min-accuracy', '1.5'],
    ['--max-accuracy-drop', '-0.1'],
    ['--beam-workers', '0'],
    ['--shift', '1.0'],
    ['--tflite-max-p99-ms', '0'],
    ['--precision', 'fp8'],
    ['--accumulation-steps', '0'],
    ['--tune', '0'],
    ['--oversample-ratio', '0'],
    ['--warmup-steps', '5000', '--train-steps', '100'],
    ['--allow-anomalies', 'NOT_A_KIND'],
    ['--beam-runner', 'flink', '--beam-mode', 'multi_processing'],
    ['--image-shape', '32x32'],
    # The portable runner: a bad --environment or --job-endpoint
    # is an argparse error naming the option; a missing endpoint, or one the
    # runner cannot use, the builder's.
    ['--beam-runner', 'portable', '--job-endpoint', 'embed',
     '--environment', 'external:nohost'],
    ['--beam-runner', 'portable', '--job-endpoint', 'localhost'],
    ['--beam-runner', 'portable'],
    ['--beam-runner', 'portable', '--job-endpoint', 'embed',
     '--beam-workers', '2'],
    ['--environment', 'loopback'],
    # --runtimes: an unknown runtime (argparse), a list without tflite (the
    # OptimizationConfig's check).
    ['--runtimes', 'tflite,tensorrt'],
    ['--runtimes', 'openvino,onnx'],
    # A deploy CPU and a runtime list both choose the runtimes.
    ['--target-cpu', 'arm', '--runtimes', 'tflite,openvino'],
    ['--target-cpu', 'riscv'],
    ['--latency-threads', '0'],
    # --techniques: a malformed list (argparse), an unknown candidate or one
    # a regression model does not run (the optimizer config's check).
    ['--techniques', 'qat,'],
    ['--techniques', 'qat,qat'],
    ['--techniques', 'all,qat'],
    ['--techniques', 'quantum'],
    ['--dataset', 'diabetes', '--techniques', 'pruning+pqat'],
    # --serve-args: checked with `leantfx serve`'s own parser; the options
    # the InfraValidator sets itself are refused by name.
    ['--serve-args=--workers 0'],
    ['--serve-args=--no-such-option'],
    ['--serve-args=--rest-port 9000 --batching off'],
    ['--serve-args=--batching "off'],
    # --model-family: an unknown family (argparse); trees for pixel columns
    # (the PipelineConfig's check).
    ['--model-family', 'forest'],
    ['--dataset', 'digits', '--model-family', 'trees'],
])
def test_a_bad_option_gets_the_same_message_from_run_compile_and_watch(
    tmp_path, capsys, bad):
  results = {name: _error_of(argv + bad, capsys)
             for name, argv in _commands(tmp_path).items()}
  codes = {name: code for name, (code, _) in results.items()}
  messages = {message for _, message in results.values()}
  assert codes == {'run': 2, 'compile': 2, 'watch': 2}, results
  assert len(messages) == 1, results
  assert not os.path.exists(tmp_path / 'out' / 'serving')
  assert not os.path.exists(tmp_path / 'p.yaml')


def _parse(argv):
  return main.build_parser().parse_args(argv)


def test_watch_passes_every_pipeline_option_through_to_run(tmp_path):
  pipeline_args = [
      '--dataset', 'penguins', '--train-steps', '7', '--precision',
      'mixed_bfloat16', '--accumulation-steps', '2', '--oversample', 'smote',
      '--tflite-policy', 'fastest', '--runtimes', 'tflite, onnx',
      '--techniques', 'qat, low_rank', '--allow-anomalies', 'A,B',
      '--allow-anomalies', 'C', '--no-augment', '--no-drift-check',
      '--beam-arg=--foo=1', '--tune', '3', '--min-accuracy', '0.5',
      '--no-optimize', '--span-window', '2', '--warm-start', '--shift',
      '0.25', '--categorical', 'island', '--class-weights', 'auto',
      '--beam-runner', 'portable', '--job-endpoint', '127.0.0.1:8099',
      '--environment', 'external:127.0.0.1:50000', '--beam-workers', '2',
      '--bulk-score', '--serve-args=--workers 2 --batching off',
      '--model-family', 'network', '--min-rows-per-class', '5']
  auto = ['--dataset', 'penguins', '--tune', 'auto']
  run_parser = main.build_parser()._subparsers._group_actions[0].choices['run']  # pylint: disable=protected-access
  for given in (pipeline_args, auto):
    watch_args = _parse(['watch', '--data-root', str(tmp_path)] + given)
    argv = options.pipeline_argv(watch_args.parser, watch_args)
    run_args = _parse(['run'] + argv)
    direct = _parse(['run'] + given)
    for dest in options.pipeline_dests(run_parser):
      assert getattr(run_args, dest) == getattr(direct, dest), dest
  assert '--tune=auto' in argv
  # Every option of run that shapes the pipeline is one watch accepts.
  assert (set(options.pipeline_dests(watch_args.parser)) ==
          set(options.pipeline_dests(run_parser)) - {'data_root', 'span'})


def test_compile_accepts_every_pipeline_option_of_run():
  parser = main.build_parser()
  choices = parser._subparsers._group_actions[0].choices  # pylint: disable=protected-access
  run_dests = set(options.pipeline_dests(choices['run']))
  compile_dests = set(options.pipeline_dests(choices['compile']))
  # compile's --data-root is the cluster's (a runner fact); --sample-data is
  # the local copy that stands for run's --data-root.
  assert compile_dests == run_dests - {'data_root'} | {'sample_data'}


@pytest.mark.parametrize('extra, message', [
    (['--serving-dir', 'serving'], "--serving-dir 'serving' is a relative "
     'path'),
    (['--tflite-dir', 'out/tflite'], "--tflite-dir 'out/tflite' is a "
     'relative path'),
    (['--pipeline-root', 'root'], "--pipeline-root 'root' is a relative"),
])
def test_compile_refuses_paths_the_cluster_cannot_reach(tmp_path, capsys,
                                                        extra, message):
  argv = _commands(tmp_path)['compile']
  flag = extra[0]
  argv[argv.index(flag) + 1] = extra[1]
  code, error = _error_of(argv, capsys)
  assert code == 2 and message in error, error
  assert not os.path.exists(tmp_path / 'p.yaml')


def test_compile_without_tflite_dir_names_the_option(tmp_path, capsys):
  argv = _commands(tmp_path)['compile']
  i = argv.index('--tflite-dir')
  del argv[i:i + 2]
  code, error = _error_of(argv, capsys)
  assert code == 2 and '--tflite-dir' in error and '--no-optimize' in error


def test_compile_says_the_span_window_cannot_read_images(tmp_path, capsys):
  images = str(tmp_path / 'images')
  datasets.prepare('digits', images, 1, 'images')
  argv = _commands(tmp_path)['compile'] + [
      '--sample-data', images, '--image-shape', '8x8x1', '--span-window', '3']
  argv[argv.index('--dataset'):argv.index('--dataset') + 2] = []
  code, error = _error_of(argv, capsys)
  assert code == 2, error
  assert '--span-window 3 cannot work on Kubeflow with images data' in error


@pytest.mark.parametrize('extra, message', [
    (['--strategy', 'multi_worker'], '--strategy multi_worker cannot work on '
     'Kubeflow'),
    (['--precision', 'mixed_float16'], '--precision mixed_float16 needs a '
     'GPU'),
])
def test_compile_refuses_what_a_kubeflow_task_cannot_do(tmp_path, capsys,
                                                        extra, message):
  code, error = _error_of(_commands(tmp_path)['compile'] + extra, capsys)
  assert code == 2 and error.startswith(message), error
  assert not os.path.exists(tmp_path / 'p.yaml')


@pytest.mark.parametrize('extra, message', [
    (['--beam-runner', 'portable', '--job-endpoint', '127.0.0.1:8099'],
     '--job-endpoint 127.0.0.1:8099 names this machine'),
    (['--beam-runner', 'portable', '--job-endpoint', 'embed',
      '--environment', 'external:localhost:50000'],
     'no worker pool listens on localhost'),
])
def test_compile_refuses_beam_addresses_of_this_machine(tmp_path, capsys,
                                                        extra, message):
  code, error = _error_of(_commands(tmp_path)['compile'] + extra, capsys)
  assert code == 2 and message in error, error
  assert not os.path.exists(tmp_path / 'p.yaml')


def test_compile_takes_the_flink_preset_into_every_beam_component(tmp_path):
  """What `leantfx deploy flink` points a pipeline at, compiled for KFP."""
  argv = _commands(tmp_path)['compile'] + [
      '--beam-runner', 'flink', '--job-endpoint', 'beam-job-server:8099',
      '--beam-workers', '2']
  # --verbose: fd 2 stays the test's (the next tests read it).
  assert main.main(argv + ['--verbose']) == 0
  spec = open(tmp_path / 'p.yaml', encoding='utf-8').read()
  for arg in ('--runner=PortableRunner', '--job_endpoint=beam-job-server:8099',
              '--environment_type=EXTERNAL',
              '--environment_config=localhost:50000',
              '--sdk_worker_parallelism=2'):
    assert arg in spec, arg


def test_watch_on_kubeflow_refuses_compiled_in_options_by_name(tmp_path,
                                                               capsys):
  argv = ['watch', '--data-root', str(tmp_path), '--target', 'kubeflow',
          '--host', 'http://127.0.0.1:9', '--package', 'p.yaml', '--state',
          str(tmp_path / 's.json'), '--precision', 'float32', '--oversample',
          'random', '--train-steps', '5']
  code, error = _error_of(argv, capsys)
  assert code == 2
  assert error.startswith('--oversample, --precision cannot be set per run '
                          'on Kubeflow'), error
  assert not os.path.exists(tmp_path / 's.json')


def test_cluster_path_rules():
  assert build.cluster_path('--x', 'gs://b/serving/') == 'gs://b/serving'
  assert build.cluster_path('--x', '/mnt/models') == '/mnt/models'
  assert build.cluster_path('--x', None) is None
  with pytest.raises(ConfigError, match='relative path'):
    build.cluster_path('--x', './models')


def test_run_record_round_trip_and_watch_decision(tmp_path):
  path = str(tmp_path / 'logs' / 'run.json')
  summary.write_record(path, {'status': 'rejected', 'error': 'bad label'})
  record = summary.read_record(path)
  assert record['status'] == 'rejected' and record['version'] == 1
  result = watch_command._result_from_record(record, 2, 'console', 1.0)  # pylint: disable=protected-access
  assert (result.status, result.detail) == ('rejected',
                                            'exit code 2: bad label')
  pushed = watch_command._result_from_record(  # pylint: disable=protected-access
      {'status': 'pushed', 'pushed_path': '/s/1'}, 0, '', 1.0)
  assert (pushed.status, pushed.detail) == ('pushed', '/s/1')
  # No record (the run was killed before writing one): failed, with the tail.
  lost = watch_command._result_from_record(None, -9, 'a\nb\n', 1.0)  # pylint: disable=protected-access
  assert lost.status == 'failed' and 'no run record' in lost.detail
  with open(path, 'w') as f:
    f.write('{"version": 99}')
  assert summary.read_record(path) is None


def test_first_screen_shows_leantfx_lines_only(tmp_path):
  """TensorFlow's start-up noise goes to the log; --verbose shows it."""
  cache = tmp_path / 'cache'
  argv = _commands(tmp_path)['compile']
  env = {'XDG_CACHE_HOME': str(cache)}
  quiet = run_cli(argv, timeout=300, env=env)
  assert quiet.returncode == 0, quiet.stderr
  assert quiet.stderr == '', quiet.stderr
  # The task decision, the artifacts' estimate, the tasks' sizes, then what
  # was written.
  assert all(line.startswith(('task: ', 'disk: ', 'tasks: ', 'wrote '))
             for line in
             quiet.stdout.splitlines()), quiet.stdout
  with open(cache / 'leantfx' / 'logs' / 'compile.log') as f:
    log = f.read()
  assert 'FutureWarning' in log or 'Unable to register' in log, log[-2000:]
  loud = run_cli(argv + ['--verbose'], timeout=300, env=env)
  assert loud.returncode == 0, loud.stderr
  assert 'FutureWarning' in loud.stderr or 'Unable to register' in loud.stderr


@pytest.mark.parametrize('argv, runtimes', [
    # Default: every runtime installed where the optimizer runs (None).
    ([], None),
    (['--runtimes', 'tflite'], ('tflite',)),
    (['--runtimes', 'tflite,openvino'], ('tflite', 'openvino')),
    # 'all': every runtime installed where the optimizer runs (None).
    (['--runtimes', 'all'], None),
    # The deploy CPU's runtimes: OpenVINO's int8 kernels are x86.
    (['--target-cpu', 'x86'], ('tflite', 'openvino', 'onnx')),
    (['--target-cpu', 'arm'], ('tflite', 'onnx')),
])
def test_runtimes_default_to_every_installed_one_and_can_be_named(
    argv, runtimes):
  args = _parse(['run', '--dataset', 'digits'] + argv)
  assert build.optimization_config(args).runtimes == runtimes


@pytest.mark.parametrize('argv, names', [
    ([], ('baseline', 'pruning', 'pruning+pqat', 'qat', 'clustering',
          'distillation', 'low_rank')),
    (['--techniques', 'all'], ('baseline', 'pruning', 'pruning+pqat', 'qat',
                               'clustering', 'distillation', 'low_rank')),
    # The baseline is always built: the reference every drop is measured on.
    (['--techniques', 'none'], ('baseline',)),
    # The candidates' own order, whatever the list's.
    (['--techniques', 'low_rank, qat'], ('baseline', 'qat', 'low_rank')),
    (['--dataset', 'diabetes', '--techniques', 'none'], ('baseline',)),
])
def test_techniques_choose_the_candidates_beside_the_baseline(argv, names):
  args = _parse(['run', '--dataset', 'digits'] + argv)
  config = build.optimization_config(args, dataset_lib.known_task(args))
  assert tuple(c.name for c in config.candidates) == names


def test_unknown_and_regression_techniques_say_what_to_pass():
  with pytest.raises(ConfigError, match=r"Unknown technique candidate\(s\) "
                     r"\['quantum'\]; choose from \['pruning'"):
    build.optimization_config(_parse(['run', '--techniques', 'quantum']))
  with pytest.raises(ConfigError, match=r"\['qat'\] are not run on a "
                     r'regression model \(qat fine-tunes with sparse'):
    build.optimization_config(_parse(
        ['run', '--dataset', 'diabetes', '--techniques', 'qat']),
                              'regression')


def test_latency_threads_are_the_optimizer_s_thread_count():
  assert build.optimization_config(_parse(
      ['run', '--latency-threads', '4'])).num_threads == 4
  assert build.optimization_config(_parse(['run'])).num_threads == 1


def test_serve_args_reach_the_config_as_leantfx_serve_options():
  assert build.serve_args('--workers 2  --batching=off') == (
      '--workers', '2', '--batching=off')
  assert build.serve_args('') == ()
  with pytest.raises(ConfigError) as e:
    build.serve_args('--host 0.0.0.0')
  assert '--host, which the InfraValidator sets itself' in str(e.value)
  with pytest.raises(ConfigError) as e:
    build.serve_args('--workers two')
  assert "`leantfx serve` would refuse it: argument --workers" in str(e.value)
