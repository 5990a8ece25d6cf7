"""The one error type leantfx raises for problems a user can fix.

Every message says what is wrong, where (file, span, column, row) and what to
do about it. The CLI prints it as one paragraph and exits non-zero; it never
prints a traceback for these.
"""


class LeantfxError(ValueError):
  """A problem with the user's input, data or environment.

  Attributes:
    exit_code: the process exit code the CLI uses for it.
  """

  exit_code = 2


class InputDataError(LeantfxError):
  """The input data cannot be used as given (missing, malformed, inconsistent)."""


class ConfigError(LeantfxError):
  """A command-line option or configuration value is invalid."""


class PipelineRunError(LeantfxError):
  """The pipeline ran but a component failed; nothing was pushed by this run."""

  exit_code = 3


class BeamEnvironmentError(LeantfxError):
  """The Beam job service or SDK workers a run needs do not answer.

  Nothing ran (a preflight check) or the run stopped (the workers were lost);
  either way nothing was pushed.
  """

  exit_code = 3
