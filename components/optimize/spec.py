"""ModelOptimizer's ComponentSpec: artifact keys, parameters and the report type."""
from tfx import types
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter
from tfx.types.component_spec import ExecutionParameter

# Inputs.
MODEL_KEY = 'model'
TRANSFORMED_EXAMPLES_KEY = 'transformed_examples'
TRANSFORM_GRAPH_KEY = 'transform_graph'
# Optional: the raw Examples the Transform read; with RAW_SERVING_KEY, the
# TFLite pick is pushed taking raw features (components/optimize/
# raw_features.py).
EXAMPLES_KEY = 'examples'
# Optional: the Examples as the data arrived (the ExampleGen's, before
# Augment): raw int8 exports calibrate on their train rows, the rows a
# served model sees, not on augmented copies (calibrated on Augment's
# rotated and shifted digits, the MobileNetV2's raw ONNX int8 scored 0.958
# on the raw eval rows; on the ExampleGen's rows 0.978, the float model
# 0.980).
CALIBRATION_EXAMPLES_KEY = 'calibration_examples'
# Outputs.
OPTIMIZED_MODEL_KEY = 'optimized_model'
BLESSING_KEY = 'blessing'
REPORT_KEY = 'report'
# Execution properties.
OPTIMIZATION_CONFIG_KEY = 'optimization_config'
TFLITE_PUSH_BASE_KEY = 'tflite_push_base'
MODEL_NAME_KEY = 'model_name'
# JSON {"label": raw label column, "classes": [class names] ([]: regression)}.
RAW_SERVING_KEY = 'raw_serving'

TRAIN_SPLIT = 'train'
EVAL_SPLIT = 'eval'
# Inside the optimized_model artifact: the selected variant and its manifest
# (the same two files the push writes to <base>/<model_name>/<version>/).
TFLITE_MODEL_DIR = 'Format-TFLite'
# Custom properties.
BLESSED_PROPERTY = 'blessed'
SELECTED_VARIANT_PROPERTY = 'selected_variant'
PUSHED_VERSION_PROPERTY = 'pushed_version'
PUSHED_DESTINATION_PROPERTY = 'pushed_destination'
# JSON: what the pushed .tflite takes (the manifest's metrics.serving_inputs).
SERVING_INPUTS_PROPERTY = 'serving_inputs'


class OptimizationReport(types.Artifact):
  """report.html, report.md, the plots and variants.json of one optimizer run.

  Every variant's .tflite file is kept below it, in variants/<candidate>/.
  """
  TYPE_NAME = 'leantfx.OptimizationReport'


class OptimizeSpec(types.ComponentSpec):
  """ModelOptimizer: trained model + transformed data -> gated TFLite variant."""

  PARAMETERS = {
      OPTIMIZATION_CONFIG_KEY: ExecutionParameter(type=str),
      TFLITE_PUSH_BASE_KEY: ExecutionParameter(type=str),
      MODEL_NAME_KEY: ExecutionParameter(type=str),
      RAW_SERVING_KEY: ExecutionParameter(type=str, optional=True),
  }
  INPUTS = {
      MODEL_KEY:
          ChannelParameter(type=standard_artifacts.Model),
      TRANSFORMED_EXAMPLES_KEY:
          ChannelParameter(type=standard_artifacts.Examples),
      TRANSFORM_GRAPH_KEY:
          ChannelParameter(type=standard_artifacts.TransformGraph),
      EXAMPLES_KEY:
          ChannelParameter(type=standard_artifacts.Examples, optional=True),
      CALIBRATION_EXAMPLES_KEY:
          ChannelParameter(type=standard_artifacts.Examples, optional=True),
  }
  OUTPUTS = {
      OPTIMIZED_MODEL_KEY: ChannelParameter(type=standard_artifacts.Model),
      BLESSING_KEY: ChannelParameter(type=standard_artifacts.ModelBlessing),
      REPORT_KEY: ChannelParameter(type=OptimizationReport),
  }
