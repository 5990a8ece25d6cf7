"""The gated Evaluator's executor: the gate's bound into the EvalConfig, then TFX's.

It reads the Baselines artifact, works out the gate (rule.py) from its
figures, the eval rows and the margin, moves the EvalConfig's overall value
threshold to the gate's bound (thresholds.py), and runs TFX's Evaluator
executor (the one that takes an empty LastBlessedModel as no baseline,
components/blessed_model). The blessing then carries the gate and the
baselines' figures (GATE_PROPERTY).
"""
import json
from typing import Any, Dict, List

from absl import logging
import tensorflow_model_analysis as tfma
from tfx import types
from tfx.components.evaluator import constants
from tfx.types import artifact_utils
from tfx.types import standard_component_specs
from tfx.utils import proto_utils

from leantfx.components.baselines import report
from leantfx.components.baselines import spec as baselines_spec
from leantfx.components.blessed_model import component as blessed_model
from leantfx.components.relative_gate import rule
from leantfx.components.relative_gate import spec as spec_lib
from leantfx.components.relative_gate import thresholds

_EVAL_CONFIG_KEY = standard_component_specs.EVAL_CONFIG_KEY


def read_baselines(artifact: types.Artifact) -> Dict[str, Any]:
  """The baselines document of a Baselines artifact.

  Raises:
    ValueError: the artifact carries no document.
  """
  doc = report.loads(artifact.get_string_custom_property(
      baselines_spec.FIGURES_PROPERTY) if artifact.has_custom_property(
          baselines_spec.FIGURES_PROPERTY) else None)
  if not doc:
    raise ValueError(f'The Baselines artifact {artifact.uri} has no '
                     f'{baselines_spec.FIGURES_PROPERTY!r} property.')
  return doc


def gate_of(doc: Dict[str, Any], eval_config: tfma.EvalConfig,
            margin: Any) -> rule.Gate:
  """The gate for this run: the baselines' figures, the built bounds, margin."""
  metric = doc['metric']
  strong = doc['baselines'].get('strong', {})
  return rule.gate(
      metric,
      trivial_value=report.figure(doc, report.trivial_name(doc)),
      strong_value=report.figure(doc, 'strong'),
      strong_model=strong.get('model', 'strong baseline').split(' on ')[0],
      eval_rows=int(doc['rows']['eval_total']),
      margin=None if margin is None else float(margin),
      absolute=thresholds.absolute_bound(eval_config, metric))


class Executor(blessed_model.BaselineEvaluatorExecutor):
  """TFX's Evaluator executor, its bound moved to the relative gate's."""

  def Do(self, input_dict: Dict[str, List[types.Artifact]],
         output_dict: Dict[str, List[types.Artifact]],
         exec_properties: Dict[str, Any]) -> None:
    """Evaluates with the gate's bound; the blessing records the gate.

    Raises:
      ValueError: no Baselines artifact, or an EvalConfig without the gated
        metric's threshold.
    """
    doc = read_baselines(artifact_utils.get_single_instance(
        input_dict[spec_lib.BASELINES_KEY]))
    eval_config = tfma.EvalConfig()
    proto_utils.json_to_proto(exec_properties[_EVAL_CONFIG_KEY], eval_config)
    gate = gate_of(doc, eval_config, exec_properties.get(spec_lib.MARGIN_KEY))
    for bound in gate.bounds:
      logging.info('Relative gate: %s %s %.4f (%s)', gate.metric,
                   '>=' if gate.higher_is_better else '<=', bound.value,
                   bound.reason)
    properties = dict(exec_properties)
    properties[_EVAL_CONFIG_KEY] = proto_utils.proto_to_json(
        thresholds.with_gate(eval_config, gate))
    inputs = {k: v for k, v in input_dict.items()
              if k != spec_lib.BASELINES_KEY}
    super().Do(inputs, output_dict, properties)
    blessing = artifact_utils.get_single_instance(
        output_dict[standard_component_specs.BLESSING_KEY])
    blessing.set_string_custom_property(spec_lib.GATE_PROPERTY, json.dumps(
        {'gate': gate.to_json(), 'baselines': doc}, sort_keys=True))
    logging.info('Relative gate: blessed=%s',
                 blessing.get_int_custom_property(
                     constants.ARTIFACT_PROPERTY_BLESSED_KEY))
