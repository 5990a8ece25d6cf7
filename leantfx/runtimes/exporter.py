"""How a server runtime's files are written: the ``Exporter`` interface.

A server runtime (one the ModelOptimizer builds float32 and int8 variants
for from a candidate's serving SavedModel, in its worker process) has an
``Exporter``: its ``Runtime.exporter`` (runtime.py), defined in the
runtime's own module (openvino.py, onnx.py here) beside its files,
predictor, timer and serving session. The optimizer reaches it only through
the registry (``registry.exporter``).

TFLite has none (``Runtime.exporter`` is None): every run builds its five
modes in the ModelOptimizer's own process
(components/optimize/steps/tflite_variants.py), as the baseline the gate
compares against, and its raw-column fold converts the Keras model and the
Transform together (components/optimize/export/raw_features.py).
"""
import abc
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

FLOAT32 = 'float32'
INT8 = 'int8'
MODES = (FLOAT32, INT8)


class Exporter(abc.ABC):
  """How the optimizer writes a server runtime's files.

  Attributes:
    modes: the modes it builds.
    lookups_outside: a raw-feature export takes vocabulary columns as
      their int64 ids (the runtime runs no lookup table), and the
      vocabularies are written beside the model (string_lookups.py).
    lookup_only_strings: a raw-feature export preprocesses free-text and
      date columns with the string ops the runtime's string library
      converts (components/optimize/export/openvino_strings.py).
    export_modules: modules the export imports beyond the runtime's
      ``required_modules`` (the worker imports them before its first job).
  """
  modes: Tuple[str, ...] = MODES
  lookups_outside: bool = False
  lookup_only_strings: bool = False
  export_modules: Tuple[str, ...] = ()

  def prepare_process(self) -> None:
    """Runs in a process before it imports the export's modules (a worker's
    warm-up); nothing by default."""

  @abc.abstractmethod
  def export_saved_model(self, saved_model_dir: str, mode: str,
                         samples: Optional[List[Dict[str, np.ndarray]]],
                         output_dir: str, cache: Dict[str, Any]) -> str:
    """Writes a variant of a serving SavedModel into ``output_dir``.

    Args:
      saved_model_dir: the candidate's serving SavedModel.
      mode: one of ``modes``.
      samples: batch-1 calibration feature dicts (int8).
      output_dir: the variant's folder.
      cache: what the modes of one model may share (the float32 file an
        int8 mode quantizes); kept by the caller across the modes.

    Returns:
      The path of the file the runtime loads (its ``model_file``).
    """

  @abc.abstractmethod
  def export_raw(self, saved_model: str, mode: str,
                 samples: List[Mapping[str, np.ndarray]],
                 vocabularies: Mapping[str, List[bytes]],
                 output_dir: str) -> str:
    """Writes a raw-feature export of the wrapper SavedModel.

    Args:
      saved_model: the wrapper SavedModel of components/optimize/export/
        raw_features.save_raw_serving_model (with ``lookups_outside``, the
        vocabulary columns taken as ids).
      mode: one of ``modes``; int8 leaves the folded Transform in float.
      samples: batch-1 raw requests ({column: value[i:i+1]}) calibrating
        int8, vocabulary columns as strings.
      vocabularies: {column: terms} of the columns taken as ids (empty
        unless ``lookups_outside``).
      output_dir: the export's folder.

    Returns:
      The path of the file the runtime loads.

    Raises:
      ConfigError: the runtime's converter cannot take the graph.
    """
