"""Runs a multi-worker training cluster on this machine, for tests and benchmarks.

``run(command, workers)`` starts one process per worker, each with a
TF_CONFIG naming every worker at 127.0.0.1:<free port> and its own index,
waits for all of them (bounded) and returns their exit codes.

TensorFlow's gRPC server listens on 0.0.0.0:<port> whatever address
TF_CONFIG gives (grpc_server_lib.cc hard-codes it). To keep the cluster off
every network but loopback, the workers run inside a private network
namespace (``unshare -rn``: a user and network namespace whose only
interface is its own loopback) when the machine allows it; otherwise they
run in the host's namespace, and ``run`` says so in its result.

  python -m leantfx.models.training.local_cluster --workers 2 --timeout 600 \
      -- python -m some.worker --out DIR --tag worker{index}

('{index}' in the command is replaced by each worker's index.)
"""
import argparse
import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from typing import Dict, List, Mapping, Optional, Sequence

INDEX_PLACEHOLDER = '{index}'


@dataclasses.dataclass
class ClusterResult:
  """Exit codes per worker, and whether the network was private."""
  exit_codes: List[int]
  private_network: bool

  @property
  def ok(self) -> bool:
    return all(code == 0 for code in self.exit_codes)


def free_ports(count: int) -> List[int]:
  """Ports free on 127.0.0.1 now (bound to port 0, then released)."""
  sockets = [socket.socket() for _ in range(count)]
  try:
    for s in sockets:
      s.bind(('127.0.0.1', 0))
    return [s.getsockname()[1] for s in sockets]
  finally:
    for s in sockets:
      s.close()


def tf_configs(ports: Sequence[int]) -> List[Dict]:
  """One TF_CONFIG per worker of a loopback cluster."""
  cluster = {'worker': [f'127.0.0.1:{p}' for p in ports]}
  return [{'cluster': cluster, 'task': {'type': 'worker', 'index': i}}
          for i in range(len(ports))]


def private_network_available() -> bool:
  """True when `unshare -rn` and `ip` can give us a loopback-only network."""
  if not (shutil.which('unshare') and shutil.which('ip')):
    return False
  try:
    return subprocess.run(
        ['unshare', '-rn', 'sh', '-c', 'ip link set lo up'],
        capture_output=True, timeout=30, check=False).returncode == 0
  except (OSError, subprocess.SubprocessError):
    return False


def _launch(command: Sequence[str], workers: int, timeout: float,
            log_dir: Optional[str]) -> List[int]:
  """Starts the workers here and waits; kills them all at the deadline."""
  processes = []
  for index, tf_config in enumerate(tf_configs(free_ports(workers))):
    env = dict(os.environ, TF_CONFIG=json.dumps(tf_config))
    argv = [a.replace(INDEX_PLACEHOLDER, str(index)) for a in command]
    log = (open(os.path.join(log_dir, f'worker{index}.log'), 'w')
           if log_dir else subprocess.DEVNULL)
    processes.append(subprocess.Popen(argv, env=env, stdout=log,
                                      stderr=subprocess.STDOUT))
  deadline = time.monotonic() + timeout
  codes = []
  try:
    for process in processes:
      remaining = max(1.0, deadline - time.monotonic())
      try:
        codes.append(process.wait(timeout=remaining))
      except subprocess.TimeoutExpired:
        codes.append(-9)
  finally:
    for process in processes:
      if process.poll() is None:
        process.kill()
        process.wait()
  return codes


def run(command: Sequence[str], workers: int, timeout: float,
        log_dir: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None) -> ClusterResult:
  """Runs `command` as a cluster of `workers` processes (see module doc).

  Args:
    command: the worker command; '{index}' becomes the worker index.
    workers: number of worker processes.
    timeout: seconds until every worker is killed.
    log_dir: where worker<i>.log go (None: discarded).
    env: the environment (os.environ when None); TF_CONFIG is set per
      worker.
    cwd: the workers' working directory.

  Returns:
    The ClusterResult.
  """
  private = private_network_available()
  launcher = [sys.executable, '-m', 'leantfx.models.training.local_cluster',
              '--workers', str(workers), '--timeout', str(timeout)]
  if log_dir:
    launcher += ['--log-dir', log_dir]
  launcher += ['--'] + list(command)
  if private:
    launcher = ['unshare', '-rn', 'sh', '-c',
                'ip link set lo up && exec "$@"', 'sh'] + launcher
  base_env = dict(os.environ if env is None else env)
  base_env.pop('TF_CONFIG', None)
  result = subprocess.run(launcher, env=base_env, cwd=cwd, check=False,
                          capture_output=True, text=True,
                          timeout=timeout + 60)
  try:
    codes = json.loads(result.stdout.strip().splitlines()[-1])['exit_codes']
  except (IndexError, ValueError, KeyError):
    raise RuntimeError(f'The cluster launcher failed: {result.stderr[-2000:]}'
                      ) from None
  return ClusterResult(exit_codes=codes, private_network=private)


def main(argv: Optional[Sequence[str]] = None) -> int:
  parser = argparse.ArgumentParser()
  parser.add_argument('--workers', type=int, required=True)
  parser.add_argument('--timeout', type=float, required=True)
  parser.add_argument('--log-dir')
  parser.add_argument('command', nargs=argparse.REMAINDER)
  args = parser.parse_args(argv)
  command = args.command[1:] if args.command[:1] == ['--'] else args.command
  codes = _launch(command, args.workers, args.timeout, args.log_dir)
  print(json.dumps({'exit_codes': codes}))
  return 0


if __name__ == '__main__':
  sys.exit(main())
