"""ImageExampleGen: a FileBasedExampleGen for span-N/<class name>/*.png|jpg."""
from typing import Optional

from tfx import v1 as tfx
from tfx.components.example_gen.component import FileBasedExampleGen
from tfx.dsl.components.base import executor_spec
from tfx.proto import example_gen_pb2

from leantfx import spans
from leantfx.components import example_gen_config
from leantfx.components.image_example_gen import decode
from leantfx.components.image_example_gen import executor


def custom_config(settings: decode.ImageSettings) -> example_gen_pb2.CustomConfig:
  """Packs ImageSettings into ExampleGen's custom_config (a Struct in an Any)."""
  return example_gen_config.pack(dict(settings.__dict__))


class ImageExampleGen(FileBasedExampleGen):
  """Reads the newest span of image folders into Examples (image + label).

  Outputs the standard Examples artifact; image_ingestion.json beside the
  splits counts good and bad images (custom properties good_images and
  bad_images hold the counts).
  """

  EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

  def __init__(self, input_base: str, settings: decode.ImageSettings,
               output_config: Optional[tfx.proto.Output] = None,
               range_config=None):
    """Builds the component.

    Args:
      input_base: the data root holding span-N/ folders.
      settings: image size, channels, feature names, bad-image policy.
      output_config: the split configuration.
      range_config: the span range to consider (None: the newest span).
    """
    super().__init__(
        input_base=input_base,
        input_config=tfx.proto.Input(splits=[
            tfx.proto.Input.Split(name='single_split',
                                  pattern=spans.IMAGES_PATTERN)
        ]),
        output_config=output_config,
        range_config=range_config,
        custom_config=custom_config(settings))
