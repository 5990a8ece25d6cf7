"""AutoTuner's executor: read the baselines, probe, search or not, write TFX's outputs.

1. the strong baseline's accuracy from the Baselines artifact (its figures
   property, components/baselines/report.py);
2. tuner_fn (models/tuning.py) builds the tuner and its fit arguments, as
   for TFX's Tuner;
3. unless the trees are the exported family or no strong figure exists, the
   untuned network is trained for one trial's budget (tuning.probe_untuned)
   and models/auto_tune.py decides whether to search;
4. a search runs the tuner's trial budget; the best trial's values are
   written only when they beat the probe (TFX's write_best_hyperparameters),
   otherwise the untuned values ({}: the Trainer's config as configured);
5. the decision goes on the best_hyperparameters artifact (``auto_tune``).
"""
import json
import os
from typing import Any, Dict, List, Optional, Tuple

from absl import logging
from tfx import types
from tfx.components.trainer import fn_args_utils
from tfx.components.tuner import executor as tfx_tuner_executor
from tfx.components.util import udf_utils
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils
from tfx.utils import io_utils

from leantfx import config as config_lib
from leantfx.components.auto_tuner import spec as spec_lib
from leantfx.components.baselines import report
from leantfx.components.baselines import spec as baselines_spec
from leantfx.models import auto_tune

# TFX's Tuner's file names inside its outputs
# (tfx/components/tuner/executor.py).
BEST_HYPERPARAMETERS_FILE = 'best_hyperparameters.txt'
TUNER_RESULTS_FILE = 'tuner_results.json'


def strong_baseline(artifact: types.Artifact) -> Tuple[Optional[float], str]:
  """(the strong baseline's eval accuracy or None, its model's name).

  Raises:
    ValueError: the artifact carries no figures, or they are no accuracy.
  """
  text = (artifact.get_string_custom_property(baselines_spec.FIGURES_PROPERTY)
          if artifact.has_custom_property(baselines_spec.FIGURES_PROPERTY)
          else None)
  doc = report.loads(text)
  if not doc:
    raise ValueError(f'The Baselines artifact {artifact.uri} has no '
                     f'{baselines_spec.FIGURES_PROPERTY!r} property.')
  if doc.get('metric') != 'accuracy':
    raise ValueError(f'--tune auto compares accuracies; the baselines of '
                     f'{artifact.uri} measure {doc.get("metric")!r}.')
  strong = doc['baselines'].get('strong') or {}
  name = strong.get('model', 'the strong baseline').split(' on ')[0]
  return report.figure(doc, 'strong'), name


def _write_untuned(output_dict: Dict[str, List[types.Artifact]],
                   results: List[Dict[str, Any]]) -> None:
  """No values: the Trainer trains its TrainingConfig as configured."""
  hyperparameters = artifact_utils.get_single_uri(
      output_dict[spec_lib.BEST_HYPERPARAMETERS_KEY])
  io_utils.write_string_file(
      os.path.join(hyperparameters, BEST_HYPERPARAMETERS_FILE),
      json.dumps({'space': [], 'values': {}}))
  io_utils.write_string_file(
      os.path.join(artifact_utils.get_single_uri(
          output_dict[spec_lib.TUNER_RESULTS_KEY]), TUNER_RESULTS_FILE),
      json.dumps(results))


def _search(tuner_result, decision: auto_tune.Decision,
            output_dict: Dict[str, List[types.Artifact]]
           ) -> auto_tune.Decision:
  """Runs the trial budget; writes the best trial's values if they beat
  the probe, else the untuned values."""
  tuner = tuner_result.tuner
  tuner.search(**tuner_result.fit_kwargs)
  best = tuner.oracle.get_best_trials(1)
  score = best[0].score if best and best[0].score is not None else None
  decision = auto_tune.keep_search(decision, score)
  if decision.search:
    tfx_tuner_executor.write_best_hyperparameters(tuner, output_dict)
  else:
    _write_untuned(output_dict, [
        {'trial_id': t.trial_id, 'score': t.score, **t.hyperparameters.values}
        for t in tuner.oracle.get_best_trials(tuner.oracle.max_trials)])
  return decision


class Executor(base_executor.BaseExecutor):
  """Probes the untuned network; searches only when it trails."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    strong, strong_model = strong_baseline(artifact_utils.get_single_instance(
        input_dict[spec_lib.BASELINES_KEY]))
    margin = auto_tune.margin_of(exec_properties.get(spec_lib.MARGIN_KEY))
    fn_args = fn_args_utils.get_common_fn_args(input_dict, exec_properties,
                                               self._get_tmp_dir())
    training = config_lib.training_from_dict(
        fn_args.custom_config['training'])
    skip = auto_tune.needs_probe(training.model_family, strong)
    if skip:
      decision = auto_tune.Decision(False, skip, None, strong, strong_model,
                                    margin, 0)
      _write_untuned(output_dict, [])
    else:
      tuner_result = udf_utils.get_fn(exec_properties, 'tuner_fn')(fn_args)
      # Imported here: tuning.py loads keras_tuner (and Keras 3).
      from leantfx.models import tuning  # pylint: disable=g-import-not-at-top
      probe = tuning.probe_untuned(tuner_result)
      decision = auto_tune.decide(probe, strong, strong_model, margin,
                                  training.tuner_trials)
      if decision.search:
        decision = _search(tuner_result, decision, output_dict)
      else:
        _write_untuned(output_dict, [])
    logging.info('--tune auto: %s', decision.reason)
    best = artifact_utils.get_single_instance(
        output_dict[spec_lib.BEST_HYPERPARAMETERS_KEY])
    best.set_string_custom_property(auto_tune.DECISION_PROPERTY,
                                    json.dumps(decision.to_json()))
