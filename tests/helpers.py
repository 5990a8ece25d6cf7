"""Helpers shared by the CLI and pipeline tests: run the real console script and Beam servers."""
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Sequence

from leantfx.cli import main

LEANTFX = os.path.join(os.path.dirname(sys.executable), 'leantfx')
# A pipeline run on the bundled data takes one to two minutes on an idle
# 2-core machine (and over ten when the machine is shared); the bound only
# keeps a hung run from hanging CI.
RUN_TIMEOUT_S = 1800
# A process that has loaded TensorFlow (and Beam, TFX) spends seconds in
# interpreter finalization after its own work is done: `leantfx watch` took
# 1.8 s from SIGTERM to exit idle and 11.4 s beside 10 CPU hogs, and over 30 s
# in a CI run (the failure this bound fixes). Tests assert the prompt part
# (the stop is logged, requests answered) on their own short bounds; this
# one only keeps a hung exit from hanging CI.
EXIT_TIMEOUT_S = 180


def _without_optimizer(args: Sequence[str]) -> list:
  """Adds --no-optimize to `run` (and to the runs `watch` starts)."""
  args = list(args)
  if not args or '--no-optimize' in args:
    return args
  if args[0] == 'run' or (args[0] == 'watch' and 'kubeflow' not in args):
    # A Kubeflow watcher submits a compiled package: pipeline options are
    # compiled in, and it refuses them.
    return args + ['--no-optimize']
  return args


def run_cli(args: Sequence[str], timeout: float = RUN_TIMEOUT_S,
            cwd: str = None, optimize: bool = False, env: dict = None
            ) -> subprocess.CompletedProcess:
  """Runs ``leantfx ARGS`` in a subprocess and returns the completed process.

  Args:
    args: the command line after ``leantfx``.
    timeout: seconds before the run is killed.
    cwd: working directory.
    optimize: keep the ModelOptimizer in pipeline runs. It adds one to two
      minutes per run, so only the tests about optimization turn it on; the
      rest test everything else with --no-optimize.
    env: more environment variables for the command.
  """
  if not optimize:
    args = _without_optimizer(args)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', **(env or {}))
  return subprocess.run([LEANTFX, *args], capture_output=True, text=True,
                        timeout=timeout, env=env, cwd=cwd, check=False)



def run_main(args: Sequence[str], capfd, optimize: bool = False
            ) -> subprocess.CompletedProcess:
  """Runs ``leantfx ARGS`` in this process; returns what run_cli would.

  For commands that fail on their input before any pipeline runs: the parser,
  the checks and the error paths are the console script's own (main.main),
  without the 10-20 s a new process spends importing TensorFlow. --verbose
  keeps the libraries' output on stderr, where capfd reads it with the error.

  Args:
    args: the command line after ``leantfx``.
    capfd: pytest's capfd fixture of the calling test.
    optimize: as in run_cli.
  """
  if not optimize:
    args = _without_optimizer(args)
  args = list(args) + ['--verbose']
  capfd.readouterr()
  try:
    code = main.main(args)
  except SystemExit as e:  # argparse's own errors.
    code = e.code
  out, err = capfd.readouterr()
  return subprocess.CompletedProcess(['leantfx', *args], code, out, err)


class BeamServer:
  """A `leantfx beam worker-pool|job-server` started by a test.

  Attributes:
    process: the server's process (its own session: stop() ends it).
    address: HOST:PORT from its "ready at" line.
    log_path: its --verbose output (the pool's workers write there too).
  """

  def __init__(self, args: Sequence[str], log_path: str,
               ready_timeout: float = 120.0, env: dict = None):
    self.log_path = log_path
    self._log = open(log_path, 'w', encoding='utf-8')
    self.process = subprocess.Popen(
        [LEANTFX, 'beam', *args, '--verbose'], stdout=self._log,
        stderr=subprocess.STDOUT, start_new_session=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', **(env or {})))
    deadline = time.monotonic() + ready_timeout
    self.address = None
    while self.address is None:
      match = re.search(r'ready at (\S+)', self.log())
      if match:
        self.address = match.group(1)
      elif self.process.poll() is not None or time.monotonic() > deadline:
        self.stop()
        raise AssertionError(f'leantfx beam {" ".join(args)} did not get '
                             f'ready: {self.log()[-3000:]}')
      else:
        time.sleep(0.2)

  @property
  def port(self) -> int:
    return int(self.address.rsplit(':', 1)[1])

  def log(self) -> str:
    with open(self.log_path, encoding='utf-8', errors='replace') as f:
      return f.read()

  def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
    """Sends sig to the server and waits for it; returns its exit code."""
    if self.process.poll() is None:
      self.process.send_signal(sig)
      try:
        self.process.wait(timeout=timeout)
      except subprocess.TimeoutExpired:
        self.process.kill()
        self.process.wait()
    self._log.close()
    return self.process.returncode


def communicate_rest(proc: subprocess.Popen, timeout: float):
  """Waits for proc to exit; returns (stdout, stderr) still to be read.

  For a test that read lines from proc's text pipes first:
  ``Popen.communicate(timeout=...)`` reads the raw file descriptors, so
  whatever ``readline()`` had already read ahead into the text wrapper's
  buffer (say, the line a process prints just before it exits) is lost.
  This reads through the same file objects, in threads so that neither pipe
  fills.

  Raises:
    subprocess.TimeoutExpired: proc did not exit, or its pipes did not close,
      within timeout.
  """
  results = {}

  def read(name, stream):
    results[name] = stream.read()

  threads = [threading.Thread(target=read, args=(name, stream), daemon=True)
             for name, stream in (('out', proc.stdout), ('err', proc.stderr))
             if stream is not None]
  for thread in threads:
    thread.start()
  deadline = time.monotonic() + timeout
  proc.wait(timeout=timeout)
  for thread in threads:
    thread.join(max(0.0, deadline - time.monotonic()))
    if thread.is_alive():
      raise subprocess.TimeoutExpired(proc.args, timeout)
  return results.get('out'), results.get('err')


def child_pids(pid: int) -> list:
  """The pids of a process's children (Linux /proc)."""
  children = []
  for entry in os.listdir('/proc'):
    if not entry.isdigit():
      continue
    try:
      with open(f'/proc/{entry}/stat', encoding='utf-8') as f:
        # "pid (comm) state ppid ...": comm may hold spaces, so split after
        # its closing parenthesis.
        fields = f.read().rsplit(')', 1)[1].split()
    except OSError:
      continue
    if int(fields[1]) == pid:
      children.append(int(entry))
  return children


def pid_alive(pid: int) -> bool:
  try:
    with open(f'/proc/{pid}/stat', encoding='utf-8') as f:
      return f.read().rsplit(')', 1)[1].split()[0] != 'Z'
  except OSError:
    return False


def write_gzip_split(directory: str, rows: int, shards: int = 3) -> list:
  """Gzipped TFRecord shards of ``rows`` tf.Examples {x: i, label: i % 2}.

  Row i goes to shard i % shards. Returns the shards' paths.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top  # Lazy: most callers never need it.
  os.makedirs(directory)
  paths = []
  for shard in range(shards):
    path = os.path.join(directory, f'part-{shard}.gz')
    with tf.io.TFRecordWriter(path, options='GZIP') as writer:
      for i in range(shard, rows, shards):
        example = tf.train.Example()
        example.features.feature['x'].float_list.value.append(float(i))
        example.features.feature['label'].int64_list.value.append(i % 2)
        writer.write(example.SerializeToString())
    paths.append(path)
  return paths
