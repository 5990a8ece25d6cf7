"""Augment: a Beam component that augments and rebalances the train split.

Images (pixel columns or encoded PNG/JPEG): N augmented copies per example
(rotation, shift, zoom, brightness, contrast, Gaussian noise, optional flips).
Any data: minority classes oversampled to a target share of the largest
class, by random duplicates or SMOTE-style interpolation, with optional
Gaussian jitter. The noisy-row policy ('drop') removes train rows with missing
or out-of-domain values. The eval split passes through byte for byte. Counts
per class before and after, and noisy-row counts, are recorded.
"""
import json

from tfx import types
from tfx.dsl.components.base import base_beam_component
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_artifacts

from leantfx import config as config_lib
from leantfx.components.augment import executor
from leantfx.components.augment import spec as spec_lib


class Augment(base_beam_component.BaseBeamComponent):
  """Examples -> Examples with an augmented, rebalanced train split.

  The pipeline makes the ValidationGate its upstream node, so it (and
  Transform after it) runs only once the gate passed, and stays cached when
  only the gate re-ran.

  Outputs:
    augmented_examples: Examples with the same splits, span and version;
      augment_report.json beside the Split-* folders; custom properties
      class_counts_before, class_counts_after and noisy_rows (JSON).
  """

  SPEC_CLASS = spec_lib.AugmentSpec
  EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

  def __init__(self,
               examples: types.BaseChannel,
               schema: types.BaseChannel,
               dataset: config_lib.DatasetSpec,
               augment_config: config_lib.AugmentConfig):
    """Builds the component.

    Args:
      examples: ExampleGen's Examples ('train' is augmented).
      schema: the Schema (domains for the noisy-row policy and clipping).
      dataset: the DatasetSpec (label, feature groups, image layout, policy).
      augment_config: what to do to the train split.
    """
    component_spec = spec_lib.AugmentSpec(
        examples=examples,
        schema=schema,
        dataset=json.dumps(config_lib.to_json_dict(dataset), sort_keys=True),
        augment_config=json.dumps(
            config_lib.to_json_dict(augment_config), sort_keys=True),
        augmented_examples=types.Channel(type=standard_artifacts.Examples))
    super().__init__(spec=component_spec)
