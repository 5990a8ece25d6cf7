"""The hand-wired baseline: TFX's own penguin example shape, 7 components.

CsvExampleGen -> StatisticsGen -> SchemaGen -> ExampleValidator -> Transform
-> Trainer -> Pusher, with the module file TFX ships
(tfx/examples/penguin/penguin_utils_keras.py) on the example's preprocessed
penguins data (no missing values, 4 numeric features, integer species), as a
user wiring TFX by hand would start. Run as a script:

  python -m benchmarks.baseline_penguin OUTPUT_DIR TRAIN_STEPS
"""
import csv
import os
import sys

import leantfx  # noqa: F401  Keras 2 before TensorFlow (leantfx/__init__.py).

_FEATURES = ('bill_length_mm', 'bill_depth_mm', 'flipper_length_mm',
             'body_mass_g')
_SPECIES = ('Adelie', 'Chinstrap', 'Gentoo')


def write_processed_penguins(data_root: str) -> str:
  """Writes the example's penguins_processed.csv shape from palmerpenguins."""
  import palmerpenguins  # pylint: disable=g-import-not-at-top
  source = os.path.join(os.path.dirname(palmerpenguins.__file__), 'data',
                        'penguins.csv')
  os.makedirs(data_root, exist_ok=True)
  path = os.path.join(data_root, 'penguins_processed.csv')
  with open(source, newline='', encoding='utf-8') as f:
    rows = [r for r in csv.DictReader(f)
            if all(r[c] != 'NA' for c in _FEATURES)]
  lows = {c: min(float(r[c]) for r in rows) for c in _FEATURES}
  highs = {c: max(float(r[c]) for r in rows) for c in _FEATURES}
  with open(path, 'w', newline='', encoding='utf-8') as f:
    writer = csv.writer(f)
    writer.writerow(['species'] + [c.replace('bill', 'culmen')
                                   for c in _FEATURES])
    for r in rows:
      writer.writerow([_SPECIES.index(r['species'])] + [
          (float(r[c]) - lows[c]) / (highs[c] - lows[c]) for c in _FEATURES
      ])
  return path


def run(output: str, train_steps: int) -> None:
  """Builds and runs the 7-component pipeline with LocalDagRunner."""
  from tfx import v1 as tfx  # pylint: disable=g-import-not-at-top
  from tfx.examples.penguin import penguin_utils_keras  # pylint: disable=g-import-not-at-top
  data_root = os.path.join(output, 'data')
  write_processed_penguins(data_root)
  example_gen = tfx.components.CsvExampleGen(input_base=data_root)
  statistics_gen = tfx.components.StatisticsGen(
      examples=example_gen.outputs['examples'])
  schema_gen = tfx.components.SchemaGen(
      statistics=statistics_gen.outputs['statistics'],
      infer_feature_shape=True)
  example_validator = tfx.components.ExampleValidator(
      statistics=statistics_gen.outputs['statistics'],
      schema=schema_gen.outputs['schema'])
  transform = tfx.components.Transform(
      examples=example_gen.outputs['examples'],
      schema=schema_gen.outputs['schema'],
      module_file=penguin_utils_keras.__file__)
  trainer = tfx.components.Trainer(
      module_file=penguin_utils_keras.__file__,
      examples=transform.outputs['transformed_examples'],
      transform_graph=transform.outputs['transform_graph'],
      schema=schema_gen.outputs['schema'],
      train_args=tfx.proto.TrainArgs(num_steps=train_steps),
      eval_args=tfx.proto.EvalArgs(num_steps=5))
  pusher = tfx.components.Pusher(
      model=trainer.outputs['model'],
      push_destination=tfx.proto.PushDestination(
          filesystem=tfx.proto.PushDestination.Filesystem(
              base_directory=os.path.join(output, 'serving'))))
  tfx.orchestration.LocalDagRunner().run(
      tfx.dsl.Pipeline(
          pipeline_name='baseline-penguin',
          pipeline_root=os.path.join(output, 'tfx'),
          components=[
              example_gen, statistics_gen, schema_gen, example_validator,
              transform, trainer, pusher
          ],
          enable_cache=False,
          metadata_connection_config=(
              tfx.orchestration.metadata.sqlite_metadata_connection_config(
                  os.path.join(output, 'metadata.sqlite')))))


if __name__ == '__main__':
  run(sys.argv[1], int(sys.argv[2]))
