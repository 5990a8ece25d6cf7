"""`leantfx run`'s model-optimization options and summary, and `leantfx report`.

The ModelOptimizer (components/optimize) runs after the Evaluator blesses the
float model: it builds the configured variants (pruning, QAT, PQAT,
clustering, distillation, low-rank; TFLite float32/float16/dynamic/int8/16x8),
measures each through the TFLite interpreter, blesses those within the budget
and pushes the selected one to <output>/tflite/<model>/<version>/.
"""
import argparse
import glob
import json
import os
from typing import Any, Dict, List, Optional

from leantfx.errors import ConfigError

OPTIMIZER_NODE = 'ModelOptimizer'
POLICIES = ('smallest', 'fastest', 'most_accurate')


def add_arguments(run_parser: argparse.ArgumentParser) -> None:
  """Adds the optimization group to `leantfx run`."""
  group = run_parser.add_argument_group(
      'model optimization (TFLite)',
      'After the Evaluator blesses the model, build optimized TFLite '
      'variants, gate them on the budget and push the selected one.')
  group.add_argument('--no-optimize', dest='optimize', action='store_false',
                     help='skip the ModelOptimizer (no TFLite push)')
  group.add_argument('--tflite-max-accuracy-drop', type=float, default=0.01,
                     help='largest accuracy drop vs the float model a variant '
                     'may have (default 0.01)')
  group.add_argument('--tflite-max-size-bytes', type=int,
                     help='largest .tflite file a variant may be')
  group.add_argument('--tflite-max-p99-ms', type=float,
                     help='largest batch-1 p99 latency (ms, 1 thread)')
  group.add_argument('--tflite-policy', choices=POLICIES, default='smallest',
                     help='which blessed variant to push (default smallest)')
  group.add_argument('--tflite-latency-runs', type=int, default=200,
                     help='timed batch-1 runs per variant (default 200)')


def pipeline_fields(args: argparse.Namespace, output: str) -> Dict[str, Any]:
  """PipelineConfig fields for the optimization options.

  Args:
    args: parsed `leantfx run` arguments.
    output: the run's output directory.

  Returns:
    {'optimization': OptimizationConfig or None, 'tflite_push_base': path}.

  Raises:
    ConfigError: for an invalid budget or latency-run count.
  """
  if not args.optimize:
    return {'optimization': None, 'tflite_push_base': None}
  from leantfx.components.optimize import config as optimize_config  # pylint: disable=g-import-not-at-top
  from leantfx.components.optimize import selection  # pylint: disable=g-import-not-at-top
  if args.tflite_latency_runs < 1:
    raise ConfigError('--tflite-latency-runs must be >= 1, got '
                      f'{args.tflite_latency_runs}.')
  budget = selection.Budget(
      max_accuracy_drop=args.tflite_max_accuracy_drop,
      max_size_bytes=args.tflite_max_size_bytes,
      max_p99_ms=args.tflite_max_p99_ms)
  return {
      'optimization':
          optimize_config.OptimizationConfig(
              budget=budget,
              policy=args.tflite_policy,
              latency_runs=args.tflite_latency_runs),
      'tflite_push_base':
          os.path.join(output, 'tflite'),
  }


def _custom(artifact, key: str):
  value = artifact.custom_properties.get(key)
  if value is None:
    return None
  return value.string_value or value.int_value


def summary_lines(summary, config) -> List[str]:
  """The run summary's lines about optimization (empty when it was off)."""
  if config.optimization is None:
    return []
  execution = summary.executions.get(OPTIMIZER_NODE)
  if execution is None:
    return ['  tflite: not built (the float model was not blessed)']
  lines = []
  optimized = (execution.outputs.get('optimized_model') or [None])[0]
  report = (execution.outputs.get('report') or [None])[0]
  if optimized is not None and _custom(optimized, 'blessed'):
    lines.append(
        f"  tflite: {_custom(optimized, 'selected_variant')} pushed to "
        f"{_custom(optimized, 'pushed_destination')}")
  else:
    lines.append('  tflite: no variant blessed (nothing pushed; see the '
                 'report for each variant\'s figures)')
  skipped = _custom(optimized, 'skipped_candidates') if optimized else None
  for failure in json.loads(skipped) if skipped else ():
    lines.append(f"  tflite: candidate {failure['candidate']} skipped, it "
                 f"failed at {failure['stage']}: {failure['error']}")
  if report is not None:
    lines.append(f"  report: {os.path.join(report.uri, 'report.html')}")
  return lines


def _newest_report_dir(path: str) -> Optional[str]:
  """The newest ModelOptimizer report below a run's output directory."""
  candidates = glob.glob(
      os.path.join(path, 'tfx', OPTIMIZER_NODE, 'report', '*',
                   'variants.json'))
  if not candidates:
    return None
  return os.path.dirname(max(candidates, key=os.path.getmtime))


def cmd_report(args: argparse.Namespace) -> int:
  """Handler of `leantfx report PATH`."""
  from leantfx.components.optimize import report as report_lib  # pylint: disable=g-import-not-at-top
  path = os.path.abspath(args.path)
  if not os.path.exists(path):
    raise ConfigError(f'{path} does not exist: pass a `leantfx run` output '
                      'folder or a report folder holding variants.json.')
  report_dir = path
  if not os.path.isfile(os.path.join(path, 'variants.json')):
    report_dir = _newest_report_dir(path)
    if report_dir is None:
      raise ConfigError(
          f'No optimization report under {path}: run `leantfx run` (without '
          '--no-optimize) there first, or pass a report folder holding '
          'variants.json.')
  written = report_lib.regenerate(report_dir)
  print(f"report: {written['html']}")
  print(f"markdown: {written['markdown']}")
  return 0


def add_commands(subparsers) -> None:
  """Registers `leantfx report`."""
  parser = subparsers.add_parser(
      'report',
      help='regenerate the optimization report (HTML and Markdown)',
      description='Rebuilds report.html, report.md and the plots from a '
      'ModelOptimizer report folder, or from the newest one under a '
      '`leantfx run` output folder.')
  parser.add_argument('path', help='a run output folder or a report folder')
  parser.set_defaults(func=cmd_report)
