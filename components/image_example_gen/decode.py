"""Decoding and checking one image file: the pure part of ImageExampleGen.

An image is good when it decodes and has the configured channel count (1 for
grey, 3 for colour); it is resized to the configured height and width and
re-encoded as PNG. Anything else is a bad image with a reason, handled by the
stated policy ('fail' or 'skip') and counted either way.
"""
import dataclasses
import io
import os
from typing import Optional, Tuple

from PIL import Image

from leantfx.data_formats import IMAGE_EXTENSIONS

CORRUPT = 'corrupt'
WRONG_CHANNELS = 'wrong_channels'
# PIL modes by channel count; palette and 1-bit images are converted first.
_MODE_CHANNELS = {'L': 1, 'RGB': 3, 'RGBA': 4, 'LA': 2, 'CMYK': 4, 'YCbCr': 3}


@dataclasses.dataclass(frozen=True)
class ImageSettings:
  """What ImageExampleGen writes.

  Attributes:
    height, width: the size every image is resized to.
    channels: 1 (grey) or 3 (RGB); other channel counts are bad images.
    image_feature: the feature holding the PNG bytes.
    label_feature: the feature holding the class folder name.
    bad_images: 'fail' or 'skip'.
  """
  height: int
  width: int
  channels: int
  image_feature: str = 'image'
  label_feature: str = 'label'
  bad_images: str = 'fail'


def is_image_file(path: str) -> bool:
  return os.path.splitext(path)[1].lower() in IMAGE_EXTENSIONS


def channel_count(mode: str) -> Optional[int]:
  if mode in ('1', 'I', 'I;16', 'I;16B', 'I;16L', 'F'):
    return 1
  return _MODE_CHANNELS.get(mode)


def decode_image(data: bytes,
                 settings: ImageSettings) -> Tuple[Optional[bytes], str, str]:
  """Decodes, checks and resizes one image file's bytes.

  Args:
    data: the file's bytes.
    settings: size and channels to produce.

  Returns:
    (PNG bytes, '', '') for a good image, else (None, reason, detail) with
    reason CORRUPT or WRONG_CHANNELS.
  """
  try:
    with Image.open(io.BytesIO(data)) as img:
      img.load()
      if img.mode == 'P':
        img = img.convert('RGBA' if 'transparency' in img.info else 'RGB')
      channels = channel_count(img.mode)
      if channels != settings.channels:
        return (None, WRONG_CHANNELS,
                f'{channels or "unknown"} channel(s) (mode {img.mode}), '
                f'expected {settings.channels}')
      if img.mode not in ('L', 'RGB'):
        img = img.convert('L' if settings.channels == 1 else 'RGB')
      if img.size != (settings.width, settings.height):
        img = img.resize((settings.width, settings.height),
                         Image.Resampling.BILINEAR)
      out = io.BytesIO()
      img.save(out, format='PNG')
      return out.getvalue(), '', ''
  except Exception as e:  # pylint: disable=broad-except
    # PIL raises many types (OSError, SyntaxError, ValueError, ...) for bad
    # data; each means the same thing here.
    return None, CORRUPT, f'does not decode as an image ({type(e).__name__}: {e})'
