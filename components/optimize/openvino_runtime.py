"""OpenVINO as the runtime runs it: a compiled model and an infer request.

``OpenVINOPredictor`` compiles model.xml for the CPU with a fixed thread
count (``INFERENCE_NUM_THREADS``, one stream, the latency hint) and runs
examples through one infer request. ``OpenVINOTimer`` prepares an infer
request with the inputs set once, then times ``request.infer()`` alone; the
per-call overhead path is ``compiled_model(inputs)``, the one-line call a
client writes (tensors built from numpy per call, a new result dict).
"""
from typing import Dict, Mapping

import numpy as np

from leantfx.components.optimize import measure
from leantfx.errors import ConfigError


def compile_model(xml_path: str, num_threads: int):
  """Reads and compiles model.xml for the CPU with `num_threads` threads.

  In float32: on a CPU with bfloat16 instructions (AVX512_BF16, AMX; this
  machine's included) OpenVINO's CPU plugin runs a float32 IR in bfloat16
  unless told otherwise (INFERENCE_PRECISION_HINT), which moved penguins'
  probabilities by up to 0.008. A variant called float32 is run and timed
  in float32; an int8 IR's quantized ops stay int8.
  """
  import openvino as ov  # pylint: disable=g-import-not-at-top
  import openvino.properties as props  # pylint: disable=g-import-not-at-top
  import openvino.properties.hint as hints  # pylint: disable=g-import-not-at-top
  core = ov.Core()
  return core.compile_model(core.read_model(xml_path), 'CPU', {
      props.inference_num_threads: int(num_threads),
      props.num_streams: 1,
      hints.performance_mode: hints.PerformanceMode.LATENCY,
      hints.inference_precision: ov.Type.f32,
  })


def _port_name(port) -> str:
  return sorted(port.get_names())[0] if port.get_names() else port.get_any_name()


class OpenVINOPredictor:
  """Runs model.xml on the CPU through one infer request, in float."""

  def __init__(self, xml_path: str,
               num_threads: int = measure.DEFAULT_NUM_THREADS):
    self.path = xml_path
    self.compiled = compile_model(xml_path, num_threads)
    self.request = self.compiled.create_infer_request()
    self.input_names = {}
    # Each input's numpy type (float32, or int64 for a vocabulary id):
    # features are cast to it, not all to float32.
    self.input_types = {p.get_any_name(): p.get_element_type().to_dtype()
                        for p in self.compiled.inputs}
    for port in self.compiled.inputs:
      for name in port.get_names():
        self.input_names.setdefault(port.get_any_name(), set()).add(
            name.split(':')[0])
    outputs = {_port_name(p): p for p in self.compiled.outputs}
    self.output_name = sorted(outputs)[0]
    self.output_port = outputs[self.output_name]

  def feed(self, features: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """{port name: array} from features keyed by the Keras input names."""
    feed = {}
    for port, names in self.input_names.items():
      match = [n for n in names if n in features]
      if not match:
        raise ConfigError(
            f'The features lack the OpenVINO input {port!r} (names '
            f'{sorted(names)}); they have {sorted(features)}.')
      feed[port] = np.ascontiguousarray(features[match[0]],
                                        self.input_types[port])
    return feed

  def predict(self, features: Mapping[str, np.ndarray]) -> np.ndarray:
    result = self.request.infer(self.feed(features))
    return np.asarray(result[self.output_port], np.float32)


class OpenVINOTimer(measure.RuntimeTimer):
  """An infer request with the inputs set once; ``infer()`` is timed."""

  def __init__(self, label: str, xml_path: str, num_threads: int,
               features: Mapping[str, np.ndarray]):
    import openvino as ov  # pylint: disable=g-import-not-at-top
    self.variant = measure.LatencyVariant(label, xml_path, num_threads)
    self.predictor = OpenVINOPredictor(xml_path, num_threads)
    self.inputs = self.predictor.feed(features)
    self.batch_size = int(next(iter(self.inputs.values())).shape[0])
    request = self.predictor.request
    for port, value in self.inputs.items():
      request.set_tensor(port, ov.Tensor(value))
    self.invoke = request.infer

  def call(self) -> None:
    self.predictor.compiled(self.inputs)
