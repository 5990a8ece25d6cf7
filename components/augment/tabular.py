"""Minority-class oversampling of one class: random duplicates or SMOTE.

Works on the serialized examples of one class, sorted, so the synthetic rows
depend only on the seed, the class and the data, never on the order Beam
delivered them in or on the worker that runs it.

SMOTE-style interpolation (Chawla et al. 2002): a synthetic row lies on the
segment between a row and one of its k nearest same-class neighbours
(distance on the class-standardised numeric features); its categorical values
are the base row's. Optional Gaussian jitter adds noise to the numeric
features of synthetic rows, scaled by the class's standard deviation.
"""
import math
from typing import Dict, List, Mapping, Optional, Sequence

import hashlib

import numpy as np
import tensorflow as tf

from leantfx import config as config_lib
from leantfx.components.augment import examples as examples_lib
from leantfx.components.augment import images

# Neighbours are searched among at most this many rows of a class, chosen
# deterministically, so SMOTE's cost per class stays bounded (O(n * cap)).
MAX_NEIGHBOUR_POOL = 4000
# Synthetic rows of a class are made from at most this many of its rows (a
# deterministic sample: the rows with the smallest digests), so the memory
# of oversampling does not grow with a class's rows; the Augment report
# names the classes that were sampled.
MAX_CLASS_ROWS = 20_000


def row_digest(serialized: bytes) -> bytes:
  """The order the per-class sample is taken in (stable across runs)."""
  return hashlib.sha256(serialized).digest()


def sampled_classes(counts: Mapping[str, int],
                    target_ratio: float) -> Dict[str, int]:
  """{class: rows} of the classes oversampled from a MAX_CLASS_ROWS sample."""
  needed = targets(counts, target_ratio)
  return {label: count for label, count in counts.items()
          if needed.get(label, 0) > 0 and count > MAX_CLASS_ROWS}


def targets(counts: Mapping[str, int], target_ratio: float) -> Dict[str, int]:
  """How many synthetic rows each class needs to reach ratio * largest class."""
  if not counts:
    return {}
  goal = math.ceil(target_ratio * max(counts.values()))
  return {label: max(0, goal - n) for label, n in counts.items()}


def _numeric_matrix(rows: Sequence[tf.train.Example],
                    columns: Sequence[str]) -> np.ndarray:
  return np.array(
      [[examples_lib.numeric_value(r, c) for c in columns] for r in rows],
      dtype=np.float64).reshape(len(rows), len(columns))


def _clip(value: float, domain: Optional[examples_lib.Domain]) -> float:
  if domain is None or domain.values is not None:
    return value
  if domain.minimum is not None:
    value = max(value, domain.minimum)
  if domain.maximum is not None:
    value = min(value, domain.maximum)
  return value


def oversample_class(label: str, serialized: Sequence[bytes], needed: int,
                     cfg: config_lib.AugmentConfig,
                     spec: config_lib.DatasetSpec,
                     domains: Mapping[str, examples_lib.Domain]
                    ) -> List[bytes]:
  """Makes ``needed`` synthetic rows of one class.

  Args:
    label: the class (part of every synthetic row's seed).
    serialized: the class's train examples (any order).
    needed: how many rows to make.
    cfg: method ('random' or 'smote'), neighbours, jitter, seed.
    spec: which features are numeric.
    domains: schema domains; synthetic numbers are clipped into them.

  Returns:
    The synthetic serialized examples.
  """
  if needed <= 0 or not serialized:
    return []
  ordered = sorted(serialized)
  rows = [tf.train.Example.FromString(s) for s in ordered]
  columns = list(spec.numeric_features)
  matrix = _numeric_matrix(rows, columns)
  with np.errstate(invalid='ignore'):
    means = np.nanmean(matrix, axis=0) if len(columns) else np.zeros(0)
    stds = np.nanstd(matrix, axis=0) if len(columns) else np.zeros(0)
  means = np.nan_to_num(means)
  stds = np.where(np.nan_to_num(stds) > 0, np.nan_to_num(stds), 1.0)
  use_smote = cfg.oversample == 'smote' and len(columns) > 0 and len(rows) > 1
  if use_smote:
    standard = (np.where(np.isnan(matrix), means, matrix) - means) / stds
    pool_rng = images.example_rng(cfg.seed, label.encode('utf-8'), -1)
    pool = np.arange(len(rows))
    if len(pool) > MAX_NEIGHBOUR_POOL:
      pool = np.sort(pool_rng.choice(pool, MAX_NEIGHBOUR_POOL, replace=False))
    k = min(cfg.smote_neighbors, len(pool) - 1)

  out = []
  for i in range(needed):
    rng = images.example_rng(cfg.seed, label.encode('utf-8'), i)
    base_index = int(rng.integers(len(rows)))
    new = tf.train.Example()
    new.CopyFrom(rows[base_index])
    if use_smote and k >= 1:
      distances = np.sum((standard[pool] - standard[base_index])**2, axis=1)
      distances[pool == base_index] = np.inf
      nearest = pool[np.argsort(distances, kind='stable')[:k]]
      neighbour = int(nearest[int(rng.integers(len(nearest)))])
      gap = rng.random()
      for j, column in enumerate(columns):
        a, b = matrix[base_index, j], matrix[neighbour, j]
        if math.isnan(a) or math.isnan(b):
          continue  # A missing value stays missing; the policy imputes it.
        examples_lib.set_numeric(new, column, a + gap * (b - a))
    if cfg.jitter_stddev > 0:
      noise = rng.normal(0.0, 1.0, size=len(columns))
      for j, column in enumerate(columns):
        value = examples_lib.numeric_value(new, column)
        if math.isnan(value):
          continue
        value += noise[j] * cfg.jitter_stddev * stds[j]
        examples_lib.set_numeric(new, column, _clip(value, domains.get(column)))
    out.append(new.SerializeToString(deterministic=True))
  return out
