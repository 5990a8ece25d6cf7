"""``--tune auto``: whether the Tuner searches, from a probe and the baselines.

The Tuner (components/auto_tuner) first trains the untuned network (the
TrainingConfig as configured, no search values) for one trial's budget
(tuner_steps) and reads its best validation accuracy: the probe, the
network's expected score under a trial's budget. Then:

- the exported family is the trees (``--model-family trees``): no search,
  the network is not what is pushed;
- no strong baseline figure (the Baselines artifact has none): no search;
- the probe is within the margin of the strong baseline (probe >= strong -
  margin, the relative gate's own bound, --baseline-margin or its default
  when the gate is off): no search, the untuned values go to the Trainer;
- otherwise the search runs its trial budget (AUTO_TUNER_TRIALS), and the
  best trial's values go to the Trainer only when they beat the probe
  (``keep_search``); else the untuned values do.

Every decision has its reason and figures (``Decision.to_json``), which the
Tuner records on its best_hyperparameters artifact and the summary prints.
"""
import dataclasses
from typing import Any, Dict, Optional

from leantfx import config as config_lib

# The artifact property the Tuner records the decision in (JSON).
DECISION_PROPERTY = 'auto_tune'


@dataclasses.dataclass(frozen=True)
class Decision:
  """Whether to search, and why.

  Attributes:
    search: run the trial budget.
    reason: one sentence with the figures.
    probe: the untuned network's best validation accuracy (None: not
      probed).
    strong: the strong baseline's eval accuracy (None: none measured).
    strong_model: its name ('HistGradientBoosting', ...).
    margin: the margin the probe was held to.
    trials: the trial budget (0: no search).
  """
  search: bool
  reason: str
  probe: Optional[float] = None
  strong: Optional[float] = None
  strong_model: str = ''
  margin: Optional[float] = None
  trials: int = 0

  def to_json(self) -> Dict[str, Any]:
    """JSON-ready fields."""
    return dataclasses.asdict(self)


def margin_of(evaluation_margin: Optional[float]) -> float:
  """--baseline-margin, or its default when the relative gate is off."""
  if evaluation_margin is None:
    return config_lib.DEFAULT_BASELINE_MARGIN
  return float(evaluation_margin)


def needs_probe(model_family: str, strong: Optional[float]) -> Optional[str]:
  """Why no probe is needed (no search either way), or None."""
  if model_family == 'trees':
    return ('--model-family trees: the trees are exported, so the network '
            'is not tuned')
  if strong is None:
    return 'no strong baseline was measured to compare the network with'
  return None


def decide(probe: float, strong: float, strong_model: str, margin: float,
           trials: int) -> Decision:
  """Search when the probe trails the strong baseline by more than margin.

  Args:
    probe: the untuned network's best validation accuracy.
    strong: the strong baseline's eval accuracy.
    strong_model: its name, for the reason.
    margin: accuracy points the network may trail by (margin_of).
    trials: the trial budget a search gets.

  Returns:
    The Decision.
  """
  figures = (f'untuned network {probe:.4f} after one trial\'s steps, '
             f'{strong_model} {strong:.4f}, margin {margin:g}')
  if probe >= strong - margin:
    return Decision(False, f'{figures}: within the margin, not tuned',
                    probe, strong, strong_model, margin, 0)
  return Decision(True, f'{figures}: {100 * (strong - probe):.1f} points '
                  f'behind, searched {trials} trials', probe, strong,
                  strong_model, margin, trials)


def keep_search(decision: Decision, best_trial: Optional[float]
               ) -> Decision:
  """The decision after a search: whose values the Trainer gets.

  Args:
    decision: a searching Decision.
    best_trial: the best trial's validation accuracy (None: no trial
      finished).

  Returns:
    decision with search True when the best trial beat the probe (its values
    go to the Trainer), else False (the untuned values do), the reason
    saying which.
  """
  if best_trial is not None and best_trial > decision.probe:
    return dataclasses.replace(
        decision, reason=f'{decision.reason}; the best trial ({best_trial:.4f})'
        ' beat the untuned network: its values are trained')
  found = 'no trial finished' if best_trial is None else (
      f'the best trial ({best_trial:.4f}) did not beat the untuned network')
  return dataclasses.replace(
      decision, search=False,
      reason=f'{decision.reason}; {found}: the untuned values are trained')
