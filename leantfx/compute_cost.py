"""What a model costs: core-hours of its training, cores and price of serving it.

The guide's cost management, from figures the pipeline measures:
  * training: the wall seconds of each training component (the Trainer, and
    the ModelOptimizer, whose techniques train too) times the cores its
    process could run on (its CPU affinity, sizing.machine_cores: TensorFlow
    sizes its thread pools to them), recorded on the component's output
    model by ``record_compute``;
  * serving: for a target load, the cores a model needs at its measured
    served throughput per core, ceil(target / per-core throughput), and
    with a core-hour price what a million predictions cost on those cores
    (``serving_cost``).
"""
import dataclasses
import math
from typing import Optional

from leantfx import sizing

# Custom properties of a training component's output model.
COMPUTE_SECONDS_PROPERTY = 'compute_seconds'
COMPUTE_CORES_PROPERTY = 'compute_cores'
SECONDS_PER_HOUR = 3600.0
PER_MILLION = 1e6


def record_compute(artifact, seconds: float) -> None:
  """Records a component's wall seconds and the cores it could use.

  Args:
    artifact: a TFX Artifact the component writes (its output model).
    seconds: the component's wall time.
  """
  artifact.set_float_custom_property(COMPUTE_SECONDS_PROPERTY, float(seconds))
  artifact.set_int_custom_property(COMPUTE_CORES_PROPERTY,
                                   sizing.machine_cores())


def core_hours(seconds: float, cores: int) -> float:
  """Core-hours of ``seconds`` of wall time on ``cores`` cores."""
  return seconds * cores / SECONDS_PER_HOUR


@dataclasses.dataclass(frozen=True)
class ServingCost:
  """What serving a target load on one model takes.

  Attributes:
    throughput_rps: the measured served throughput (requests of one row per
      second, all clients together).
    cores_measured: the cores the server (and its clients) ran on then.
    per_core_rps: throughput_rps / cores_measured.
    target_qps: the load to serve.
    cores_needed: ceil(target_qps / per_core_rps).
    cost_per_million: core_hour_price x cores_needed / (target_qps x 3600)
      x 1e6: a million predictions served at the target load on those cores
      (None without a price).
  """
  throughput_rps: float
  cores_measured: int
  per_core_rps: float
  target_qps: float
  cores_needed: int
  cost_per_million: Optional[float]


def serving_cost(throughput_rps: float, cores_measured: int,
                 target_qps: float,
                 core_hour_price: Optional[float] = None) -> ServingCost:
  """The cores (and price) a target load needs at a measured throughput.

  Args:
    throughput_rps: measured predictions per second on cores_measured.
    cores_measured: the cores they were measured on.
    target_qps: predictions per second to serve.
    core_hour_price: the price of one core-hour, or None.

  Returns:
    The ServingCost.

  Raises:
    ValueError: a throughput, core count or target that is not > 0.
  """
  if not (throughput_rps > 0 and cores_measured > 0 and target_qps > 0):
    raise ValueError(
        f'serving_cost needs a throughput, cores and a target > 0; got '
        f'{throughput_rps} predictions/s on {cores_measured} cores for '
        f'{target_qps} predictions/s.')
  per_core = throughput_rps / cores_measured
  # A float quotient a hair above a whole number (2.0000000001) is that
  # number of cores, not one more.
  cores = max(1, math.ceil(round(target_qps / per_core, 9)))
  cost = None
  if core_hour_price is not None:
    cost = (core_hour_price * cores / (target_qps * SECONDS_PER_HOUR) *
            PER_MILLION)
  return ServingCost(throughput_rps=throughput_rps,
                     cores_measured=cores_measured, per_core_rps=per_core,
                     target_qps=target_qps, cores_needed=cores,
                     cost_per_million=cost)
