"""A variant's quality on some rows, through the runtime it was built for."""
from typing import Dict

from leantfx.components.optimize import config as config_lib
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.export import runtime_variants


def scores_on(variant: measure.VariantMetrics, data: measure.LabeledData,
              config: config_lib.OptimizationConfig) -> Dict[str, float]:
  """A variant's quality on ``data`` through the runtime it was built for."""
  if variant.runtime in runtime_variants.SERVER_RUNTIMES:
    return runtime_variants.scores_on(variant.runtime, variant.path, data,
                                      config.quality, config.num_threads)
  return measure.scores_on(variant.path, data, config.quality,
                           config.num_threads)
