"""Figure: what serving a model before its push costs, and what a server adds.

One default digits run (``leantfx run --output DIR``: the README's job, the
ModelOptimizer and every installed runtime included), then, from what that
run recorded:

1. cost: the run's seconds end to end; the InfraValidator node's seconds
   (its execution in ML Metadata, last update minus creation: the
   SavedModel served by ``leantfx serve`` in a subprocess, checked over REST
   and gRPC, timed, the warm-up file written); the ModelOptimizer's serve
   check of its picks (``budgets.serve_check_s`` in its report: one
   ``leantfx serve`` with every pick); and their share of the run (the
   target: at most 10%);
2. per served model (the SavedModel the InfraValidator served, and each
   runtime's pick the ModelOptimizer served): the served p50/p99 at batch 1
   one request after another and from 8 concurrent clients (REST, the
   request's JSON built and parsed, loopback), beside the same file's
   offline figure measured in the same run: the Pusher's call of the pushed
   serving graph at batch 1 for the SavedModel, and each pick's raw-column
   export timed with its inputs bound once (its manifest's
   ``serving_inputs``). The difference is the server's overhead: HTTP, JSON
   to tensors and back, the request's Python path, the model manager.

  make bench BENCH_ARGS=infra   (INFRA_RUN_ARGS: more `leantfx run` options)
"""
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks import bench_scale
from benchmarks import harness

LEANTFX = os.path.join(os.path.dirname(sys.executable), 'leantfx')
MODEL = 'digits'


def _manifest(output: str, runtime: str):
  """The newest pushed version's manifest of a runtime's pick, or None."""
  # pylint: disable=g-import-not-at-top
  from leantfx import versioned_push
  from leantfx.runtimes import push
  # pylint: enable=g-import-not-at-top
  base = os.path.join(output, runtime, MODEL)
  versions = versioned_push.list_versions(base) if os.path.isdir(base) else []
  if not versions:
    return None
  with open(os.path.join(base, str(versions[-1]), push.MANIFEST_FILE),
            encoding='utf-8') as f:
    return json.load(f)


def _served_row(name, figures, offline_p50, offline_p99, offline_how):
  row = {'served model': name,
         'served p50 ms (1 client)': figures['latency_p50_ms_batch1'],
         'served p99 ms (1 client)': figures['latency_p99_ms_batch1'],
         'served p50 ms (8 clients)': figures['latency_p50_ms_concurrent'],
         'served p99 ms (8 clients)': figures['latency_p99_ms_concurrent'],
         'offline p50 ms': offline_p50, 'offline p99 ms': offline_p99,
         'offline call': offline_how}
  if offline_p50 is not None:
    row['server overhead p50 ms'] = round(
        figures['latency_p50_ms_batch1'] - offline_p50, 3)
  return row


def main() -> int:
  # pylint: disable=g-import-not-at-top
  from leantfx.pipeline import run_summary
  # pylint: enable=g-import-not-at-top
  extra = shlex.split(os.environ.get('INFRA_RUN_ARGS', ''))
  work = tempfile.mkdtemp(prefix='leantfx-bench-infra-')
  try:
    output = os.path.join(work, 'out')
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    result = subprocess.run([LEANTFX, 'run', '--output', output] + extra,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, check=False)
    run_s = time.monotonic() - started
    load_after = os.getloadavg()[0]
    if result.returncode != 0:
      print(result.stdout[-3000:], file=sys.stderr)
      return 1
    metadata = os.path.join(output, 'metadata.sqlite')
    summary = run_summary.summarize(metadata, f'leantfx-{MODEL}')
    seconds = bench_scale.stage_seconds(metadata)
    report_uri = summary.executions['ModelOptimizer'].outputs['report'][0].uri
    with open(os.path.join(report_uri, 'variants.json'),
              encoding='utf-8') as f:
      report = json.load(f)
    infra_s = seconds.get('InfraValidator', 0.0)
    serve_check_s = float(report.get('budgets', {}).get('serve_check_s', 0))
    cost = [{
        'run s': round(run_s, 1), 'InfraValidator s': infra_s,
        'serve check of the picks s': serve_check_s,
        'share of the run': round((infra_s + serve_check_s) / run_s, 4),
        'InfraValidator share': round(infra_s / run_s, 4),
        'load before/after': f'{load_before:.2f}/{load_after:.2f}'}]
    served = []
    if summary.infra:
      graph = summary.serving_graph or {}
      served.append(_served_row(
          'SavedModel (InfraValidator)', summary.infra,
          graph.get('call_ms_batch1'), None,
          "the Pusher's call of the pushed serving graph, batch 1"))
    for runtime, outcome in sorted(report.get('infra_validation', {}).items()):
      figures = outcome.get('figures') or {}
      if 'latency_p50_ms_batch1' not in figures:
        continue
      manifest = _manifest(output, runtime) or {}
      offline = (manifest.get('metrics') or {}).get('serving_inputs') or {}
      pick = (report.get('runtime_picks', {}).get(runtime, {}).get('selected')
              or report.get('selected'))
      served.append(_served_row(
          f'{runtime}: {pick}', figures, offline.get('latency_p50_ms'),
          offline.get('latency_p99_ms'),
          'the pushed raw-column file, inputs bound once, 1 thread'))
  finally:
    shutil.rmtree(work, ignore_errors=True)
  cpu = bench_scale.cpu()
  notes = [
      f'CPU: {cpu["model"]}, {cpu["cores"]} logical cores, flags '
      f'{", ".join(cpu["flags"]) or "none of AVX2/AVX-512/AMX"}; load '
      f'average {load_before:.2f} before the run, {load_after:.2f} after',
      'command: make bench BENCH_ARGS=infra' + (
          f' INFRA_RUN_ARGS="{" ".join(extra)}"' if extra else ''),
  ]
  harness.report('infra_cost', 'The InfraValidator and the serve check: '
                 'their share of a default digits run', cost, notes=notes)
  harness.report(
      'infra_served', 'Served latency (leantfx serve, REST, loopback) beside '
      'the same file offline, in one run', served,
      notes=notes + [
          'served: batch-1 requests one after another (p50/p99 over the '
          "InfraValidator's bounded requests) and from 8 concurrent clients; "
          'the request, its JSON and the answer included',
          'server overhead: served p50 at 1 client minus the offline p50 of '
          'the same file: HTTP on loopback, JSON to tensors and back, the '
          "request's Python path and the model manager"])
  return 0


if __name__ == '__main__':
  sys.exit(main())
