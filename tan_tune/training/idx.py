"""MNIST-format (idx) image files from a local folder, gzipped or not.

An idx file is a 4-byte magic number, 0x00 0x00 <type> <ndim>, then ndim
big-endian uint32 dimensions, then the data in row-major order. MNIST and
Fashion-MNIST ship four: `train-images-idx3-ubyte` (type 0x08, unsigned byte,
N x 28 x 28), `train-labels-idx1-ubyte` (N), and the same for `t10k`, each
possibly with `.gz`. Nothing is downloaded: the files are looked for in the
folder given, in torchvision's `<folder>/<Name>/raw/` layout, and without a
folder in the path the distribution's package installs them to.
"""

import gzip
import os
import pathlib

import numpy as np

from tan_tune.errors import ConfigError

_UNSIGNED_BYTE = 0x08
FILES = {
    "train_images": ("train-images-idx3-ubyte", 3),
    "train_labels": ("train-labels-idx1-ubyte", 1),
    "test_images": ("t10k-images-idx3-ubyte", 3),
    "test_labels": ("t10k-labels-idx1-ubyte", 1),
}


def find_folder(root: str | None, default: str, raw_subfolder: str,
                how_to_get: str) -> pathlib.Path:
  """The folder holding the four files: `root`, its torchvision layout, or
  `default` when no root is given.

  Raises:
    ConfigError: no candidate folder holds the four files.
  """
  base = pathlib.Path(root if root else default)
  candidates = [base, base / raw_subfolder / "raw"]
  for folder in candidates:
    if all(_path(folder, name) for name, _ in FILES.values()):
      return folder
  names = [name for name, _ in FILES.values()]
  raise ConfigError(
      "dataset.root", root,
      f"a folder holding {names} (each may end in .gz), or torchvision's"
      f" {raw_subfolder}/raw/ inside it; not found in"
      f" {[str(c) for c in candidates]}. {how_to_get} (nothing is downloaded)")


def read_split(folder: pathlib.Path, split: str) -> tuple[np.ndarray,
                                                          np.ndarray]:
  """uint8 images [N, H, W] and int64 labels [N] of 'train' or 'test'.

  Raises:
    ConfigError: a file is damaged (wrong magic number, truncated, trailing
      bytes) or the label count does not match the image count.
  """
  images = _read(folder, *FILES[f"{split}_images"])
  labels = _read(folder, *FILES[f"{split}_labels"])
  if len(images) != len(labels):
    raise ConfigError(
        "dataset.root", str(folder),
        f"as many {split} labels as images; found {len(labels)} labels for"
        f" {len(images)} images")
  return images, labels.astype(np.int64)


def _path(folder: pathlib.Path, name: str) -> pathlib.Path | None:
  for candidate in (folder / name, folder / f"{name}.gz"):
    if candidate.is_file():
      return candidate
  return None


def _read(folder: pathlib.Path, name: str, ndim: int) -> np.ndarray:
  path = _path(folder, name)
  opener = gzip.open if path.suffix == ".gz" else open
  try:
    with opener(path, "rb") as file:
      data = file.read()
  except (OSError, EOFError) as error:  # A damaged gzip stream.
    raise _damaged(path, f"it cannot be read ({error})") from None
  magic = bytes([0, 0, _UNSIGNED_BYTE, ndim])
  if data[:4] != magic:
    raise _damaged(path, f"its magic number is {data[:4].hex()}, expected"
                   f" {magic.hex()} (unsigned bytes, {ndim} dimensions)")
  header = 4 + 4 * ndim
  if len(data) < header:
    raise _damaged(path, "it ends inside its header")
  shape = tuple(int(d) for d in np.frombuffer(data[4:header], ">u4"))
  expected = header + int(np.prod(shape))
  if len(data) != expected:
    raise _damaged(path, f"it holds {len(data)} bytes where its header"
                   f" {list(shape)} needs {expected}"
                   + (" (truncated)" if len(data) < expected else ""))
  return np.frombuffer(data, np.uint8, offset=header).reshape(shape)


def _damaged(path: pathlib.Path, why: str) -> ConfigError:
  return ConfigError("dataset.root", str(path.parent),
                     f"the original idx files; {os.path.basename(path)} is"
                     f" damaged: {why}")
