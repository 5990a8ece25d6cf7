"""Image augmentation of one example: rotation, shift, zoom, flips, colour, noise.

Pure numpy/scipy on float images in [0, 1] of shape (height, width,
channels). Each augmented copy draws its parameters from a Generator seeded
by a hash of (seed, example bytes, variant, copy index), so a copy is the same
whichever Beam worker makes it and in whatever order.
"""
import hashlib
import io
from typing import Tuple

import numpy as np
from PIL import Image
from scipy import ndimage

from leantfx import config as config_lib


def example_rng(seed: int, serialized: bytes, *indices: int) -> np.random.Generator:
  """A Generator determined only by the seed, the bytes and the indices."""
  digest = hashlib.sha256()
  digest.update(str(int(seed)).encode('ascii'))
  digest.update(b'\x00')
  digest.update(serialized)
  for index in indices:
    digest.update(b'\x00' + str(int(index)).encode('ascii'))
  return np.random.default_rng(int.from_bytes(digest.digest()[:8], 'little'))


def _affine(image: np.ndarray, angle_degrees: float, scale: float,
            shift: Tuple[float, float]) -> np.ndarray:
  """Rotates by angle, scales by scale and shifts (rows, cols) around the centre."""
  height, width = image.shape[:2]
  centre = np.array([(height - 1) / 2.0, (width - 1) / 2.0])
  theta = np.deg2rad(angle_degrees)
  rotation = np.array([[np.cos(theta), -np.sin(theta)],
                       [np.sin(theta), np.cos(theta)]])
  # affine_transform maps output coordinates to input coordinates: the inverse
  # of "rotate, scale, then shift".
  inverse = rotation.T / scale
  offset = centre - inverse @ (centre + np.asarray(shift))
  channels = [
      ndimage.affine_transform(
          image[:, :, c], inverse, offset=offset, order=1, mode='nearest')
      for c in range(image.shape[2])
  ]
  return np.stack(channels, axis=2)


def augment_image(image: np.ndarray, rng: np.random.Generator,
                  cfg: config_lib.AugmentConfig) -> np.ndarray:
  """Returns one randomly augmented copy of image (float, [0, 1], HxWxC).

  The parameters are drawn in a fixed order whatever is turned off, so the
  same Generator state always gives the same copy.
  """
  height, width = image.shape[:2]
  angle = rng.uniform(-cfg.rotation_degrees, cfg.rotation_degrees)
  scale = rng.uniform(1.0 - cfg.zoom_fraction, 1.0 + cfg.zoom_fraction)
  shift = (rng.uniform(-cfg.shift_fraction, cfg.shift_fraction) * height,
           rng.uniform(-cfg.shift_fraction, cfg.shift_fraction) * width)
  flip_h = rng.random() < 0.5
  flip_v = rng.random() < 0.5
  brightness = rng.uniform(-cfg.brightness, cfg.brightness)
  contrast = rng.uniform(1.0 - cfg.contrast, 1.0 + cfg.contrast)
  noise = rng.normal(0.0, 1.0, size=image.shape)

  out = image.astype(np.float64)
  if angle or scale != 1.0 or shift[0] or shift[1]:
    out = _affine(out, angle, scale, shift)
  if cfg.horizontal_flip and flip_h:
    out = out[:, ::-1, :]
  if cfg.vertical_flip and flip_v:
    out = out[::-1, :, :]
  mean = out.mean()
  out = (out - mean) * contrast + mean + brightness
  out = out + noise * cfg.noise_stddev
  return np.clip(out, 0.0, 1.0)


def decode_png_or_jpeg(data: bytes) -> np.ndarray:
  """Decodes an encoded image to uint8 HxWxC (C = 1 for grey)."""
  with Image.open(io.BytesIO(data)) as img:
    img.load()
    array = np.asarray(img)
  if array.ndim == 2:
    array = array[:, :, None]
  return array


def encode_png(image_uint8: np.ndarray) -> bytes:
  """Encodes uint8 HxWxC (C = 1 or 3) as PNG."""
  array = image_uint8[:, :, 0] if image_uint8.shape[2] == 1 else image_uint8
  buf = io.BytesIO()
  Image.fromarray(array).save(buf, format='PNG')
  return buf.getvalue()
