"""Pick: per runtime, the selection policy's choice among its blessed variants.

The gate (evaluation/selection.gate) has blessed or refused every variant;
the TFLite pick is the component's blessing and its Format-TFLite output,
each server runtime's pick is pushed beside it.
"""
from typing import Dict, Optional, Sequence, Tuple

from leantfx.components.optimize import config as config_lib
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.evaluation import selection
from leantfx.runtimes import registry as runtimes_lib

Pick = Optional[selection.GateDecision]


def pick_per_runtime(decisions: Sequence[selection.GateDecision],
                     config: config_lib.OptimizationConfig,
                     server_runtimes: Sequence[str]
                    ) -> Tuple[Pick, Dict[str, Pick]]:
  """(the TFLite pick, server runtime -> its pick); None: nothing blessed."""
  picks = {runtime: selection.select(
      [d for d in decisions if d.variant.runtime == runtime], config.policy,
      config.quality)
           for runtime in [runtimes_lib.TFLITE] + list(server_runtimes)}
  selected = picks.pop(runtimes_lib.TFLITE)
  return selected, picks


def picked_variants(selected: Pick, picks: Dict[str, Pick]
                   ) -> Dict[str, measure.VariantMetrics]:
  """runtime -> its picked variant (TFLite's first), where there is one."""
  return {runtime: pick.variant for runtime, pick in
          [(runtimes_lib.TFLITE, selected)] + list(picks.items())
          if pick is not None}
