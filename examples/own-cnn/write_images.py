"""Writes a small folder of images: the team's data, as ImageFolder reads it.

    images/train/<class>/*.png   400 per class
    images/val/<class>/*.png     100 per class

Two classes, horizontal and vertical stripes under noise, 16x16 RGB.

Run: python write_images.py [FOLDER]   (default: images)
"""

import pathlib
import sys

import numpy as np
from PIL import Image

SIZES = {"train": 400, "val": 100}
SIDE = 16


def stripes(vertical: bool, generator: np.random.Generator) -> np.ndarray:
  phase = generator.integers(0, 4)
  line = (np.arange(SIDE) + phase) % 4 < 2
  image = np.tile(line, (SIDE, 1)) if vertical else np.tile(line, (SIDE, 1)).T
  noisy = 0.3 * image + generator.normal(0.35, 0.35, (3, SIDE, SIDE))
  return (np.clip(noisy, 0, 1) * 255).astype(np.uint8).transpose(1, 2, 0)


def write(folder: pathlib.Path, seed: int = 0) -> pathlib.Path:
  generator = np.random.default_rng(seed)
  for split, count in SIZES.items():
    for label in ("horizontal", "vertical"):
      target = folder / split / label
      target.mkdir(parents=True, exist_ok=True)
      for i in range(count):
        pixels = stripes(label == "vertical", generator)
        Image.fromarray(pixels).save(target / f"{i:04d}.png")
  return folder


if __name__ == "__main__":
  print(write(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "images")))
