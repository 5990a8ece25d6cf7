"""Time every variant together: one interleaved run over every runtime.

The TFLite variants were timed as they were built, beside the worker's
exports; this run, once nothing else runs, replaces their figures and times
the server-runtime variants in the same rounds (measure.py's
``measure_latency_interleaved``), so every runtime's figures are comparable.
"""
import dataclasses
from typing import List, Mapping, Sequence

from leantfx.components.optimize import config as config_lib
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.export import runtime_variants
from leantfx.components.optimize.steps import tflite_variants


def time_together(by_candidate: Mapping[str, List[measure.VariantMetrics]],
                  built: Mapping[str, Sequence[runtime_variants.Built]],
                  eval_data: measure.LabeledData,
                  config: config_lib.OptimizationConfig,
                  record) -> List[measure.VariantMetrics]:
  """Every variant timed in one interleaved run, once nothing else runs.

  The TFLite variants were timed as they were built, beside the background
  exports; their figures are replaced by this run's, which also times the
  server-runtime variants, so every runtime's figures come from the same
  rounds on a quiet process. Returns the variants in config order, each
  candidate's TFLite variants then its server-runtime ones.
  """
  example = eval_data.example(0)
  tflite = [v for found in by_candidate.values() for v in found]
  timers = [measure.LatencyVariant(v.name, v.path, config.num_threads,
                                   example) for v in tflite]
  server_timers, timed = [], {}
  for name, entries in built.items():
    found_timers, timed[name] = runtime_variants.timers_for(
        entries, config.num_threads, example,
        lambda stage, e, name=name: record(name, stage, e))
    server_timers.extend(found_timers)
  if not timers and not server_timers:
    return []
  latency = measure.measure_latency_interleaved(
      timers + server_timers, runs=config.latency_runs,
      warmup_runs=config.warmup_runs)
  del timers, server_timers
  retimed = {}
  for v in tflite:
    stats = latency.variants[v.name]
    facts = dict(v.details)
    facts['latency'] = dict(
        facts.get('latency', {}), rounds=latency.rounds,
        attempts=latency.attempts, stable=latency.stable,
        max_round_spread=latency.max_round_spread, round_spread=stats.spread,
        interleaved_with=sorted(latency.variants))
    retimed[v.name] = dataclasses.replace(
        v, latency_p50_ms=stats.p50_ms, latency_p99_ms=stats.p99_ms,
        latency_runs=stats.runs, call_overhead_ms=stats.call_overhead_ms,
        latency_round_p50_ms=list(stats.round_p50_ms), details=facts)
  variants = []
  for name, found in by_candidate.items():
    variants.extend(retimed[v.name] for v in found)
    variants.extend(
        runtime_variants.variant_metrics(entry, latency, len(eval_data),
                                         config.num_threads)
        for entry in timed.get(name, ()))
  for metrics in variants:
    tflite_variants.log_variant(metrics, config.quality)
  return variants
