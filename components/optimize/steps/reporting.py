"""Report: what was built, gated, picked and pushed (evaluation/report.py)."""
from typing import Any, Dict, List, Mapping, Optional, Sequence

from leantfx.components.optimize import config as config_lib
from leantfx.components.optimize.evaluation import measure
from leantfx.components.optimize.evaluation import quality as quality_lib
from leantfx.components.optimize.evaluation import report
from leantfx.components.optimize.evaluation import selection
from leantfx.runtimes import push


def write_report(report_dir: str, baseline: measure.VariantMetrics,
                 decisions: Sequence[selection.GateDecision],
                 selected: Optional[selection.GateDecision],
                 picks: Mapping[str, Optional[selection.GateDecision]],
                 pushed: Optional[push.PushResult],
                 runtime_pushes: Mapping[str, push.PushResult],
                 held_out: Mapping[str, selection.HeldOut],
                 failures: List[Dict[str, str]],
                 config: config_lib.OptimizationConfig,
                 source_model_uri: str,
                 budgets: Dict[str, Any],
                 served: Optional[Mapping[str, Mapping[str, Any]]] = None
                ) -> Dict[str, Any]:
  """Writes the report into ``report_dir``; the files report.write_report
  wrote."""
  quality = config.quality
  return report.write_report(
      report_dir, baseline, decisions, selected, budget=config.budget,
      policy=config.policy, source_model_uri=source_model_uri,
      pushed_to=pushed.directory if pushed else None, failures=failures,
      runtime_picks={
          runtime: {'selected': pick.variant.name if pick else None,
                    'pushed_to': (runtime_pushes[runtime].directory
                                  if runtime in runtime_pushes else None)}
          for runtime, pick in picks.items()},
      held_out=held_out, quality=quality,
      left_out=(config_lib.REGRESSION_LEFT_OUT
                if quality.task == quality_lib.REGRESSION else None),
      budgets=budgets, served=served,
      slices=config.slices if config.slices.columns else None)
