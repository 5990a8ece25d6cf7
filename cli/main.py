"""The ``leantfx`` command line: the parser of every subcommand, and ``main``.

Command modules each add their subcommands (``add_commands(subparsers)``) and
set ``func`` to a handler returning the exit code. Handlers import TensorFlow
and TFX lazily, so ``--help`` and a bad option answer in about a second.

Exit codes: 0 success; 1 an internal error (a bug: the traceback is in the
log); 2 bad input or option (nothing ran); 3 the pipeline failed in a
component (nothing pushed); 4 the model was not blessed (nothing pushed); 5
the KFP API was unreachable or refused; 130 interrupted (SIGINT); 143
stopped by SIGTERM (run and watch stop every process they started first).
"""
import argparse
import sys
import traceback
from typing import Optional, Sequence

from leantfx.cli import beam as beam_commands
from leantfx.cli import console
from leantfx.cli import kubeflow as kubeflow_commands
from leantfx.cli import run as run_command
from leantfx.cli import score as score_command
from leantfx.cli import serving as serving_commands
from leantfx.cli import tools
from leantfx.cli import watch as watch_command
from leantfx.errors import LeantfxError

COMMAND_MODULES = (run_command, kubeflow_commands, watch_command,
                   serving_commands, score_command, beam_commands, tools)
EXIT_INTERNAL_ERROR = 1


def _leaf_parsers(parser: argparse.ArgumentParser):
  """Every parser below parser that runs a command (has a func default)."""
  for action in parser._actions:  # pylint: disable=protected-access
    if isinstance(action, argparse._SubParsersAction):  # pylint: disable=protected-access
      for sub in action.choices.values():
        if sub.get_default('func') is not None:
          yield sub
        yield from _leaf_parsers(sub)


def build_parser() -> argparse.ArgumentParser:
  """Returns the argument parser of every subcommand."""
  parser = argparse.ArgumentParser(
      prog='leantfx',
      description='Train, validate, evaluate, optimize and push small, fast '
      'models with TFX.')
  sub = parser.add_subparsers(dest='command', metavar='COMMAND', required=True)
  for module in COMMAND_MODULES:
    module.add_commands(sub)
  for leaf in _leaf_parsers(parser):
    leaf.add_argument(
        '--verbose', action='store_true',
        help="show TensorFlow's and the libraries' logs on the terminal "
        '(default: they go to the log file)')
  return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Entry point of the ``leantfx`` console script."""
  argv = list(sys.argv[1:] if argv is None else argv)
  args = build_parser().parse_args(argv)
  args.argv = argv
  try:
    if not args.verbose and not getattr(args, 'own_log', False):
      console.divert_stderr(console.default_log_path(args.command))
  except OSError:
    pass  # No writable cache folder: the libraries' logs stay visible.
  try:
    return args.func(args)
  except LeantfxError as e:
    print(f'leantfx: error: {e}', file=console.terminal())
    return e.exit_code
  except KeyboardInterrupt:
    print('leantfx: interrupted', file=console.terminal())
    return 130
  except Exception:  # pylint: disable=broad-except
    # A bug, not a user error: the full traceback goes to the log.
    traceback.print_exc()
    where = console.log_path() or 'the output above'
    print(f'leantfx: internal error: {traceback.format_exc().splitlines()[-1]}'
          f' (the traceback is in {where}). Please report it.',
          file=console.terminal())
    return EXIT_INTERNAL_ERROR
  finally:
    console.restore_stderr()


if __name__ == '__main__':
  sys.exit(main())
