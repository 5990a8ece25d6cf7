"""Uploads, runs and schedules a compiled pipeline with ``kfp.Client`` (KFP v2).

Every call goes through ``kfp.Client`` 2.5 and so through the KFP v2beta1 REST
API: ``GET /apis/v2beta1/healthz`` when the client starts, ``GET|POST
/apis/v2beta1/experiments``, ``GET /apis/v2beta1/pipelines`` plus
``POST /apis/v2beta1/pipelines/upload[_version]``, ``POST /apis/v2beta1/runs``
and ``POST /apis/v2beta1/recurringruns`` (tests/orchestration/
test_kfp_contract.py serves exactly these and checks the bodies).

Recurring runs always use ``max_concurrency=1`` (a run never overlaps the
previous one, so two runs never train on the same span at once) and
``no_catchup=True`` (after a pause only the latest interval runs).

Cron expressions are checked here before anything is sent: KFP's scheduler
(robfig/cron) takes six fields, seconds first: ``SEC MIN HOUR DOM MONTH DOW``.
"""
import os
import re
import socket
import urllib.parse
from typing import Any, Dict, Optional, Sequence, Tuple

from leantfx.errors import ConfigError, LeantfxError
from leantfx.pipeline import run_parameters as parameters_lib

MAX_CONCURRENCY = 1
CONNECT_TIMEOUT_S = 5.0  # How long an unreachable host may take to say so.
_CRON_FIELDS: Tuple[Tuple[str, int, int], ...] = (
    ('second', 0, 59), ('minute', 0, 59), ('hour', 0, 23),
    ('day of month', 1, 31), ('month', 1, 12), ('day of week', 0, 6))
_MONTHS = ('JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG', 'SEP',
           'OCT', 'NOV', 'DEC')
_DAYS = ('SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT')
_DESCRIPTORS = ('@yearly', '@annually', '@monthly', '@weekly', '@daily',
                '@midnight', '@hourly')
_EVERY_RE = re.compile(r'^@every ([0-9]+(h|m|s))+$')


class KfpError(LeantfxError):
  """The KFP API could not be reached or refused a request; nothing changed."""

  exit_code = 5


def _cron_value(text: str, index: int) -> int:
  name, low, high = _CRON_FIELDS[index]
  upper = text.upper()
  if index == 4 and upper in _MONTHS:
    return _MONTHS.index(upper) + 1
  if index == 5 and upper in _DAYS:
    return _DAYS.index(upper)
  if not text.isdigit():
    raise ValueError(f'{text!r} is not a number for the {name} field')
  value = int(text)
  if not low <= value <= high:
    raise ValueError(f'{value} is outside {low}-{high} for the {name} field')
  return value


def _check_cron_field(field: str, index: int) -> None:
  name = _CRON_FIELDS[index][0]
  for part in field.split(','):
    if not part:
      raise ValueError(f'empty list item in the {name} field {field!r}')
    base, _, step = part.partition('/')
    if step and (not step.isdigit() or int(step) < 1):
      raise ValueError(f'step {step!r} in the {name} field must be >= 1')
    if base in ('*', '?'):
      if base == '?' and index not in (3, 5):
        raise ValueError(f'"?" is only allowed for day of month or week, '
                         f'not for the {name} field')
      continue
    start, _, end = base.partition('-')
    first = _cron_value(start, index)
    if end and _cron_value(end, index) < first:
      raise ValueError(f'range {base!r} in the {name} field goes backwards')


def validate_cron(expression: str) -> str:
  """Checks a KFP cron expression (6 fields, seconds first).

  Args:
    expression: e.g. '0 0 3 * * *' (03:00 every day) or '@hourly'.

  Returns:
    The expression, whitespace-normalised.

  Raises:
    ConfigError: naming the field and what is wrong with it.
  """
  text = ' '.join((expression or '').split())
  if text in _DESCRIPTORS or _EVERY_RE.match(text):
    return text
  fields = text.split(' ') if text else []
  try:
    if len(fields) != 6:
      hint = (' It has 5: KFP counts seconds first, so write "0 ' + text +
              '".' if len(fields) == 5 else '')
      raise ValueError(f'it has {len(fields)} fields, KFP needs 6 (second '
                       f'minute hour day-of-month month day-of-week).{hint}')
    for index, field in enumerate(fields):
      _check_cron_field(field, index)
  except ValueError as e:
    raise ConfigError(
        f'Invalid cron expression {expression!r}: {e} Example: "0 0 3 * * *" '
        'runs at 03:00 every day; "@hourly" and "@every 30m" work too. Or use '
        '--interval SECONDS.') from None
  return text


def check_host(host: str) -> str:
  """Checks that host is an http(s) URL whose port accepts connections.

  Args:
    host: the KFP API endpoint, e.g. http://127.0.0.1:8888.

  Returns:
    The host without a trailing slash.

  Raises:
    ConfigError: for a malformed URL.
    KfpError: when nothing accepts a connection there within
      CONNECT_TIMEOUT_S (checked before kfp.Client, whose own retries take
      about half a minute).
  """
  parsed = urllib.parse.urlparse(host or '')
  if parsed.scheme not in ('http', 'https') or not parsed.hostname:
    raise ConfigError(
        f'--host {host!r} is not a KFP API URL: write it as '
        'http://HOST:PORT (e.g. http://127.0.0.1:8888 after `kubectl '
        'port-forward -n kubeflow svc/ml-pipeline-ui 8888:80`).')
  port = parsed.port or (443 if parsed.scheme == 'https' else 80)
  try:
    with socket.create_connection((parsed.hostname, port),
                                  timeout=CONNECT_TIMEOUT_S):
      pass
  except OSError as e:
    raise KfpError(
        f'The KFP API at {host} is unreachable ({e.strerror or e}). Nothing '
        'was submitted. Check the URL and that the port-forward or ingress is '
        'up, then run the command again.') from None
  return host.rstrip('/')


def connect(host: str, namespace: Optional[str] = None):
  """Returns a kfp.Client for host, or raises KfpError / ConfigError."""
  host = check_host(host)
  import kfp  # pylint: disable=g-import-not-at-top
  try:
    if namespace:
      return kfp.Client(host=host, namespace=namespace)
    return kfp.Client(host=host)
  except Exception as e:  # pylint: disable=broad-except
    raise KfpError(f'Could not start a KFP client for {host}: {_reason(e)}. '
                   'Nothing was submitted.') from None


def _reason(error: Exception) -> str:
  status = getattr(error, 'status', None)
  body = getattr(error, 'body', None)
  if status:
    return f'HTTP {status} {getattr(error, "reason", "")}: {str(body)[:300]}'
  return f'{type(error).__name__}: {str(error)[:300]}'


def _call(what: str, host: str, fn, *args, **kwargs):
  try:
    return fn(*args, **kwargs)
  except (ConfigError, KfpError):
    raise
  except Exception as e:  # pylint: disable=broad-except
    raise KfpError(f'KFP at {host} refused to {what}: {_reason(e)}. Nothing '
                   'more was submitted.') from None


def check_package(path: str) -> str:
  """The compiled package must exist and be a .yaml/.yml PipelineSpec."""
  if not os.path.isfile(path):
    raise ConfigError(
        f'Pipeline package {path} does not exist: create it with `leantfx '
        'compile --target kubeflow --out FILE.yaml ...` first.')
  if not path.endswith(('.yaml', '.yml')):
    raise ConfigError(
        f'Pipeline package {path} is not a .yaml PipelineSpec: kfp.Client '
        'uploads the YAML that `leantfx compile --out FILE.yaml` writes.')
  return path


def run_parameters(data_root: Optional[str] = None,
                   span: Optional[int] = None,
                   train_steps: Optional[int] = None,
                   extra: Sequence[str] = (),
                   span_window: Optional[int] = None) -> Dict[str, Any]:
  """Pipeline parameters for a run: the named ones plus NAME=VALUE pairs.

  The span_window parameter is an integer in the compiled spec, so a
  ``span_window=K`` pair is sent as a number (KFP rejects a string for it).

  Raises:
    ConfigError: for a pair that is not NAME=VALUE, or a span_window that is
      not a whole number >= 1.
  """
  params: Dict[str, Any] = {}
  if data_root:
    params[parameters_lib.DATA_ROOT_PARAMETER] = data_root
  if span is not None:
    params[parameters_lib.RANGE_CONFIG_PARAMETER] = (
        parameters_lib.pinned_span_json(span))
  if train_steps is not None:
    params[parameters_lib.TRAIN_ARGS_PARAMETER] = (
        parameters_lib.train_args_json(train_steps))
  if span_window is not None:
    params[parameters_lib.SPAN_WINDOW_PARAMETER] = span_window
  for item in extra:
    name, sep, value = item.partition('=')
    if not sep or not name:
      raise ConfigError(f'--param {item!r} is not NAME=VALUE.')
    params[name] = value
  window = params.get(parameters_lib.SPAN_WINDOW_PARAMETER)
  if window is not None:
    if not str(window).isdigit() or int(window) < 1:
      raise ConfigError(
          f'span_window must be a whole number >= 1 (how many spans, the '
          f'newest included, to train on), got {window!r}.')
    params[parameters_lib.SPAN_WINDOW_PARAMETER] = int(window)
  return params


def upload(host: str, package: str, name: str,
           version: Optional[str] = None) -> Dict[str, str]:
  """Uploads the package as pipeline ``name`` (a new version if it exists).

  Returns:
    {'pipeline_id': ..., 'pipeline_version_id': ...} (the version id only
    when a version was uploaded).
  """
  check_package(package)
  client = connect(host)
  pipeline_id = _call('look up the pipeline', host, client.get_pipeline_id,
                      name)
  if pipeline_id is None:
    pipeline = _call('upload the pipeline', host, client.upload_pipeline,
                     package, pipeline_name=name)
    return {'pipeline_id': pipeline.pipeline_id}
  if not version:
    raise ConfigError(
        f'Pipeline {name!r} already exists on {host} (id {pipeline_id}): pass '
        '--version NAME to upload this package as a new version of it.')
  created = _call('upload the pipeline version', host,
                  client.upload_pipeline_version, package, version,
                  pipeline_id=pipeline_id)
  return {'pipeline_id': pipeline_id,
          'pipeline_version_id': created.pipeline_version_id}


def submit_run(host: str, package: str, experiment: str, run_name: str,
               params: Dict[str, Any]) -> str:
  """Creates one run of the package; returns its run id."""
  check_package(package)
  client = connect(host)
  result = _call('create the run', host,
                 client.create_run_from_pipeline_package, package,
                 arguments=params, run_name=run_name,
                 experiment_name=experiment)
  return result.run_id


def schedule(host: str, package: str, experiment: str, job_name: str,
             params: Dict[str, Any], cron: Optional[str] = None,
             interval_s: Optional[int] = None) -> str:
  """Creates a recurring run (cron or interval); returns its id.

  Raises:
    ConfigError: for both or neither of cron and interval, a bad cron
      expression or an interval below 60 s.
    KfpError: when KFP is unreachable or refuses.
  """
  if (cron is None) == (interval_s is None):
    raise ConfigError('Give exactly one of --cron EXPRESSION and --interval '
                      'SECONDS.')
  if cron is not None:
    cron = validate_cron(cron)
  if interval_s is not None and interval_s < 60:
    raise ConfigError(
        f'--interval {interval_s} is below 60 seconds; a pipeline run takes '
        'minutes, and max_concurrency=1 would skip most triggers.')
  check_package(package)
  client = connect(host)
  created = _call('create the experiment', host, client.create_experiment,
                  experiment)
  recurring = _call(
      'create the recurring run', host, client.create_recurring_run,
      experiment_id=created.experiment_id,
      job_name=job_name,
      cron_expression=cron,
      interval_second=interval_s,
      max_concurrency=MAX_CONCURRENCY,
      no_catchup=True,
      params=params,
      pipeline_package_path=package)
  return recurring.recurring_run_id
