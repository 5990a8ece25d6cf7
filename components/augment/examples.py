"""tf.train.Example helpers shared by the Augment stages: labels, images, domains."""
import dataclasses
import math
from typing import Dict, FrozenSet, List, Mapping, Optional, Tuple

import numpy as np
import tensorflow as tf
from tensorflow_metadata.proto.v0 import schema_pb2

from leantfx import config as config_lib
from leantfx.components.augment import images


def label_of(example: tf.train.Example, label: str) -> str:
  """The label value as text ('' when absent), the key of class counts."""
  feature = example.features.feature.get(label)
  if feature is None:
    return ''
  if feature.bytes_list.value:
    return feature.bytes_list.value[0].decode('utf-8', 'replace')
  if feature.int64_list.value:
    return str(feature.int64_list.value[0])
  if feature.float_list.value:
    value = feature.float_list.value[0]
    return str(int(value)) if float(value).is_integer() else repr(value)
  return ''


def numeric_value(example: tf.train.Example, name: str) -> float:
  """The first value of a numeric feature, NaN when missing."""
  feature = example.features.feature.get(name)
  if feature is None:
    return math.nan
  if feature.float_list.value:
    return float(feature.float_list.value[0])
  if feature.int64_list.value:
    return float(feature.int64_list.value[0])
  return math.nan


def set_numeric(example: tf.train.Example, name: str, value: float) -> None:
  """Sets a numeric feature in place, keeping its int64/float kind."""
  feature = example.features.feature[name]
  if feature.int64_list.value:
    feature.int64_list.value[:] = [int(round(value))]
  else:
    del feature.float_list.value[:]
    feature.float_list.value.append(float(value))


def pixels(example: tf.train.Example, spec: config_lib.DatasetSpec) -> np.ndarray:
  """The example's image as float HxWxC in [0, 1]."""
  if spec.image_key:
    data = example.features.feature[spec.image_key].bytes_list.value[0]
    return images.decode_png_or_jpeg(data).astype(np.float64) / 255.0
  values = [numeric_value(example, c) for c in spec.image_features]
  array = np.nan_to_num(np.asarray(values, dtype=np.float64))
  return (array / spec.image_max_value).reshape(spec.image_shape)


def with_pixels(example: tf.train.Example, image: np.ndarray,
                spec: config_lib.DatasetSpec) -> tf.train.Example:
  """A copy of example whose image is image (float HxWxC in [0, 1])."""
  out = tf.train.Example()
  out.CopyFrom(example)
  if spec.image_key:
    encoded = images.encode_png(np.round(image * 255.0).astype(np.uint8))
    feature = out.features.feature[spec.image_key]
    feature.bytes_list.value[:] = [encoded]
    return out
  flat = image.reshape(-1) * spec.image_max_value
  for name, value in zip(spec.image_features, flat):
    set_numeric(out, name, float(value))
  return out


@dataclasses.dataclass(frozen=True)
class Domain:
  """A feature's schema domain: a numeric range or a set of categories."""
  minimum: Optional[float] = None
  maximum: Optional[float] = None
  values: Optional[FrozenSet[str]] = None

  def contains(self, feature: tf.train.Feature) -> bool:
    if self.values is not None:
      texts = ([v.decode('utf-8', 'replace') for v in feature.bytes_list.value]
               or [str(v) for v in feature.int64_list.value])
      return all(t in self.values for t in texts)
    numbers = list(feature.float_list.value) or list(feature.int64_list.value)
    for number in numbers:
      if math.isnan(number):
        return False
      if self.minimum is not None and number < self.minimum:
        return False
      if self.maximum is not None and number > self.maximum:
        return False
    return True

  def to_json(self) -> Dict[str, object]:
    if self.values is not None:
      return {'values': sorted(self.values)}
    return {'min': self.minimum, 'max': self.maximum}


def schema_domains(schema: schema_pb2.Schema) -> Dict[str, Domain]:
  """Feature name -> Domain, for every feature of the schema that has one."""
  named = {d.name: d for d in schema.string_domain}
  domains = {}
  for feature in schema.feature:
    if feature.HasField('int_domain'):
      d = feature.int_domain
      domains[feature.name] = Domain(
          minimum=d.min if d.HasField('min') else None,
          maximum=d.max if d.HasField('max') else None)
    elif feature.HasField('float_domain'):
      d = feature.float_domain
      domains[feature.name] = Domain(
          minimum=d.min if d.HasField('min') else None,
          maximum=d.max if d.HasField('max') else None)
    elif feature.HasField('string_domain'):
      domains[feature.name] = Domain(
          values=frozenset(feature.string_domain.value))
    elif feature.HasField('domain') and feature.domain in named:
      domains[feature.name] = Domain(
          values=frozenset(named[feature.domain].value))
  return domains


def row_problems(example: tf.train.Example, columns: Tuple[str, ...],
                 domains: Mapping[str, Domain]) -> List[Tuple[str, str]]:
  """(feature, 'missing' | 'out_of_domain') for each noisy value of a row."""
  problems = []
  for name in columns:
    feature = example.features.feature.get(name)
    if feature is None or not (feature.bytes_list.value or
                               feature.int64_list.value or
                               feature.float_list.value):
      problems.append((name, 'missing'))
      continue
    domain = domains.get(name)
    if domain is not None and not domain.contains(feature):
      problems.append((name, 'out_of_domain'))
  return problems
