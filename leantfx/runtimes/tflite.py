"""TFLite as the runtime runs it: an interpreter allocated once, signatures bound once.

``prepare_interpreter`` allocates a fresh ``tf.lite.Interpreter`` (the call
that applies TFLite's default delegate, XNNPACK on CPU) and binds each
signature as a ``PreparedSignature``: after that a call is set the inputs,
``invoke()``, read the outputs; tensors are resized only when a shape
changes. The ModelOptimizer's measurement (measure.py) and ``leantfx serve``'s
TFLite backend (serving/tflite_servable.py) both run models through it, so
the latency the gate sees is the latency the server gives.
"""
from typing import Dict, Mapping, Optional, Sequence

import numpy as np


class PreparedSignature:
  """One signature of a ``tf.lite.Interpreter``, bound once, run by ``invoke()``.

  Built on an interpreter whose ``allocate_tensors()`` has run (see
  :func:`prepare_interpreter`). :meth:`bind` sets the inputs, resizing them
  and re-allocating the signature's tensors only when a shape differs from
  the bound one; :meth:`invoke` runs the kernels; :meth:`outputs` copies the
  outputs out. Like the interpreter, it serves one thread at a time.

  The signature's tensor indices come from ``get_signature_runner``, which is
  dropped at once: while a SignatureRunner lives it holds a reference to the
  interpreter's wrapper, and ``Interpreter.invoke()`` refuses to run
  (``_ensure_safe``). A signature in subgraph 0 (every single-signature model)
  runs through the public ``set_tensor``/``invoke``/``get_tensor``; another
  subgraph through the same wrapper calls ``SignatureRunner`` makes, with its
  subgraph index (the public methods address subgraph 0 only).

  Attributes:
    key: the signature key.
    input_details: input name -> the tensor's details (as the runner has them).
    output_details: output name -> the tensor's details.
    resizes: how many times :meth:`bind` resized and re-allocated.
  """

  def __init__(self, interpreter, key: str):
    runner = interpreter.get_signature_runner(key)
    self.key = key
    self.input_details = runner.get_input_details()
    self.output_details = runner.get_output_details()
    self._subgraph = int(runner._subgraph_index)  # pylint: disable=protected-access
    del runner
    self._interpreter = interpreter
    self._input_index = {n: int(d['index'])
                         for n, d in self.input_details.items()}
    self._output_index = {n: int(d['index'])
                          for n, d in self.output_details.items()}
    if self._subgraph != 0:
      # interpreter.allocate_tensors() allocates subgraph 0 only.
      interpreter._interpreter.AllocateTensors(self._subgraph)  # pylint: disable=protected-access
    self._shapes: Optional[Dict[str, tuple]] = {
        n: tuple(int(x) for x in d['shape'])
        for n, d in self.input_details.items()}
    self.resizes = 0

  @property
  def subgraph_index(self) -> int:
    return self._subgraph

  def bound_shapes(self) -> Optional[Dict[str, tuple]]:
    """The input shapes the tensors are allocated for (None after a failure)."""
    return None if self._shapes is None else dict(self._shapes)

  def bind(self, inputs: Mapping[str, np.ndarray]) -> None:
    """Sets every input; resizes and re-allocates only on a shape change.

    Raises:
      ValueError: an input is missing or unknown, or the interpreter rejects
        a shape or dtype.
    """
    if len(inputs) != len(self._input_index) or any(
        n not in self._input_index for n in inputs):
      raise ValueError(
          f'Signature {self.key!r} takes the inputs '
          f'{sorted(self._input_index)}; got {sorted(inputs)}.')
    bound = self._shapes
    if bound is None or any(np.shape(v) != bound[n]
                            for n, v in inputs.items()):
      self._resize({n: tuple(np.shape(v)) for n, v in inputs.items()})
    interpreter, index = self._interpreter, self._input_index
    if self._subgraph == 0:
      for name, value in inputs.items():
        interpreter.set_tensor(index[name], value)
    else:
      for name, value in inputs.items():
        interpreter._interpreter.SetTensor(  # pylint: disable=protected-access
            index[name], value, self._subgraph)

  def _resize(self, shapes: Mapping[str, tuple]) -> None:
    interpreter = self._interpreter
    old = self._shapes or {}
    # Until the allocation succeeds the bound shapes are unknown: a failed
    # resize must not let the next request skip resizing.
    self._shapes = None
    for name, shape in shapes.items():
      if old.get(name) == shape:
        continue
      size = np.array(shape, dtype=np.int32)
      if self._subgraph == 0:
        interpreter.resize_tensor_input(self._input_index[name], size)
      else:
        interpreter._interpreter.ResizeInputTensor(  # pylint: disable=protected-access
            self._input_index[name], size, False, self._subgraph)
    if self._subgraph == 0:
      interpreter.allocate_tensors()
    else:
      interpreter._interpreter.AllocateTensors(self._subgraph)  # pylint: disable=protected-access
    self._shapes = dict(shapes)
    self.resizes += 1

  def invoke(self) -> None:
    """Runs the kernels on the bound inputs (releases the GIL)."""
    if self._subgraph == 0:
      self._interpreter.invoke()
    else:
      self._interpreter._interpreter.Invoke(self._subgraph)  # pylint: disable=protected-access

  def outputs(self, names: Optional[Sequence[str]] = None
             ) -> Dict[str, np.ndarray]:
    """Copies of the outputs (all of them unless `names` is given)."""
    get = self._interpreter.get_tensor
    return {n: get(self._output_index[n], self._subgraph)
            for n in (self._output_index if names is None else names)}

  def run(self, inputs: Mapping[str, np.ndarray],
          names: Optional[Sequence[str]] = None) -> Dict[str, np.ndarray]:
    """bind + invoke + outputs."""
    self.bind(inputs)
    self.invoke()
    return self.outputs(names)


def prepare_interpreter(interpreter) -> Dict[str, PreparedSignature]:
  """Allocates a fresh interpreter and binds each of its signatures.

  ``Interpreter.allocate_tensors()`` is the call that applies TFLite's
  default delegate (XNNPACK on CPU); a SignatureRunner's own allocation does
  not, so it must run here, once, before any signature is invoked.
  """
  interpreter.allocate_tensors()
  return {key: PreparedSignature(interpreter, key)
          for key in interpreter.get_signature_list()}
