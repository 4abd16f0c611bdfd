"""Splits: indexable examples the trainer samples batches from.

A split hands out batches by index, so the trainer owns the sampling (Poisson
or shuffled) that the privacy accounting depends on. In-memory splits hold
uint8 images; folder splits decode one batch at a time; a subset split
renumbers part of another (a validation split held out of a training set).
Each example also has a digest, whatever its position, from which
`datasets.fingerprint` names a dataset for the privacy ledger.
"""

import dataclasses
import hashlib
import os
import pathlib
from typing import Protocol

import torch
from torchvision import datasets as tv_datasets
from torchvision import transforms

from tan_tune.errors import ConfigError

# The validation split is drawn with its own generator, apart from the seed's
# other uses.
_VALIDATION_SALT = 0x7A11D


class Split(Protocol):
  """Indexable examples: what the trainer samples batches from."""

  def __len__(self) -> int:
    ...

  def get_batch(
      self, indices: torch.Tensor
  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns float32 images [b, C, H, W] in [0, 1] and int64 labels [b]."""
    ...

  def example_digests(self) -> list[bytes]:
    """One digest per example, naming it whatever its position."""
    ...


@dataclasses.dataclass(frozen=True, eq=False)
class TensorSplit:
  """An in-memory split, indexed with one fancy-indexing gather per batch.

  Attributes:
    images: uint8 [N, C, H, W] holding integer levels 0..max_value.
    labels: int64 [N].
    max_value: the level that maps to 1.0 (255 for 8-bit, 16 for digits).
  """

  images: torch.Tensor
  labels: torch.Tensor
  max_value: float

  def __len__(self) -> int:
    return self.labels.shape[0]

  def get_batch(
      self, indices: torch.Tensor
  ) -> tuple[torch.Tensor, torch.Tensor]:
    images = self.images[indices].to(torch.float32) / self.max_value
    return images, self.labels[indices]

  def example_digests(self) -> list[bytes]:
    images = self.images.reshape(len(self), -1).numpy()
    labels = self.labels.numpy()
    return [_digest(image.tobytes(), int(label).to_bytes(8, 'little'))
            for image, label in zip(images, labels)]


class FolderSplit:
  """A lazy `root/<class>/<image>` split: each batch is decoded from disk.

  Every image is resized (shorter side) and center-cropped to a square, so the
  split is deterministic; random augmentation happens later, on the batch.
  """

  def __init__(self, root: str, image_size: int):
    self._folder = tv_datasets.ImageFolder(
        root,
        transform=transforms.Compose([
            transforms.Resize(image_size),
            transforms.CenterCrop(image_size),
            transforms.ToTensor(),
        ]),
    )
    self._labels = torch.tensor(self._folder.targets, dtype=torch.int64)

  @property
  def classes(self) -> list[str]:
    return self._folder.classes

  def __len__(self) -> int:
    return len(self._folder)

  def get_batch(
      self, indices: torch.Tensor
  ) -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.stack([self._folder[i][0] for i in indices.tolist()])
    return images, self._labels[indices]

  def example_digests(self) -> list[bytes]:
    """Class, file name and size of each image: no image is decoded."""
    return [
        _digest(f'{self.classes[label]}/{pathlib.Path(path).name}'.encode(),
                os.path.getsize(path).to_bytes(8, 'little'))
        for path, label in self._folder.samples
    ]


@dataclasses.dataclass(frozen=True, eq=False)
class SubsetSplit:
  """The examples of `split` at `indices`, renumbered from 0."""

  split: Split
  indices: torch.Tensor

  def __len__(self) -> int:
    return len(self.indices)

  def get_batch(
      self, indices: torch.Tensor
  ) -> tuple[torch.Tensor, torch.Tensor]:
    return self.split.get_batch(self.indices[indices])

  def example_digests(self) -> list[bytes]:
    digests = self.split.example_digests()
    return [digests[i] for i in self.indices.tolist()]


def evaluation_splits(
    train: Split, test: Split, validation_fraction: float, seed: int
) -> tuple[Split, Split, str]:
  """The split to train on, the split to evaluate on, and the latter's name.

  With `validation_fraction` = 0: the whole training set and the test split
  (the promoted run). Above 0: a seeded random fraction of the training set is
  held out as the validation split and the rest is trained on (search trials),
  so selection never sees the test split.

  Raises:
    ConfigError: the fraction is not in [0, 1), or leaves a split empty.
  """
  if not 0 <= validation_fraction < 1:
    raise ConfigError('validation_fraction', validation_fraction,
                      'a fraction in [0, 1); 0 evaluates on the test split')
  if validation_fraction == 0:
    return train, test, 'test'
  size = len(train)
  held = round(validation_fraction * size)
  if not 0 < held < size:
    raise ConfigError(
        'validation_fraction', validation_fraction,
        f'a fraction that leaves both splits non-empty out of N = {size}')
  generator = torch.Generator().manual_seed(_VALIDATION_SALT + seed)
  order = torch.randperm(size, generator=generator)
  validation = SubsetSplit(train, order[:held].sort().values)
  rest = SubsetSplit(train, order[held:].sort().values)
  return rest, validation, 'validation'


def _digest(*parts: bytes) -> bytes:
  digest = hashlib.blake2b(digest_size=16)
  for part in parts:
    digest.update(part)
  return digest.digest()
