"""Splits: indexable examples the trainer samples batches from.

A split hands out batches by index, so the trainer owns the sampling (Poisson
or shuffled) that the privacy accounting depends on. In-memory splits hold
uint8 images; folder splits decode one batch at a time; a subset split
renumbers part of another (a validation split held out of a training set).
Each example also has a digest of its content, whatever its position or
container (`example_digest`): the ledger keys a dataset by the set of them
(`datasets.examples`), and augmentation keys each example's draws by it
(`content_ids`).
"""

import dataclasses
import hashlib
import hmac
from typing import Protocol

import numpy as np
import torch

from tan_tune.errors import ConfigError

# The validation split is drawn with its own generator, apart from the seed's
# other uses.
_VALIDATION_SALT = 0x7A11D
# Bytes of an example's digest (blake2b-128).
DIGEST_BYTES = 16
# Rows per batch when every example of an in-memory split is digested.
_DIGEST_CHUNK = 4096
# Bytes read at a time from an image file.
_READ_CHUNK = 1 << 20


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
    """One digest per example, of its content alone (`example_digest`)."""
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
    """The digests of the float32 images the trainer sees, a chunk at a
    time (a float copy of CIFAR-10 whole would take 600 MB)."""
    digests = []
    for chunk in torch.split(torch.arange(len(self)), _DIGEST_CHUNK):
      images, labels = self.get_batch(chunk)
      digests += example_digests(images, labels.tolist())
    return digests


class FolderSplit:
  """A lazy `root/<class>/<image>` split: each batch is decoded from disk.

  Every image is resized (shorter side) and center-cropped to a square, so the
  split is deterministic; random augmentation happens later, on the batch.
  """

  def __init__(self, root: str, image_size: int):
    # Imported here: torchvision (and the torch._dynamo it loads) costs every
    # process that reads no image folder more than a second.
    from torchvision import datasets as tv_datasets  # pylint: disable=g-import-not-at-top
    from torchvision import transforms  # pylint: disable=g-import-not-at-top

    self._folder = tv_datasets.ImageFolder(
        root,
        transform=transforms.Compose([
            transforms.Resize(image_size),
            transforms.CenterCrop(image_size),
            transforms.ToTensor(),
        ]),
    )
    self._labels = torch.tensor(self._folder.targets, dtype=torch.int64)
    self._digests: list[bytes] | None = None

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
    """The class name and the bytes of each image file, not its name: the
    same image under another name is the same example. Every file is read
    once per split, none decoded."""
    if self._digests is None:
      self._digests = [_file_digest(self.classes[label], path)
                       for path, label in self._folder.samples]
    return self._digests


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


@dataclasses.dataclass(frozen=True, repr=False)
class Examples:
  """The set of a dataset's examples: the sorted digests of both splits.

  The same examples give the same set whatever their order, path, container
  or train/test split (digits re-split with another seed is the same data).
  It stays in memory: any unkeyed function of it that left the process would
  be a membership oracle (an adversary who knows every other example hashes
  the data with and without a target and compares), so it leaves only keyed
  (`keyed`, with the privacy ledger's secret key).

  Attributes:
    sorted_digests: d_(1) || ... || d_(n), the `example_digest`s in
      increasing order.
  """

  sorted_digests: bytes

  def __repr__(self) -> str:
    return f'Examples({len(self)} examples)'

  def __len__(self) -> int:
    return len(self.sorted_digests) // DIGEST_BYTES

  def keyed(self, key: bytes) -> str:
    """HMAC-SHA256(key, d_(1) || ... || d_(n)) in hex: without the key, a
    value that says nothing about the examples."""
    return hmac.new(key, self.sorted_digests, hashlib.sha256).hexdigest()


def example_digest(inputs: torch.Tensor, label: int) -> bytes:
  """An example's digest: a function of what the trainer sees, alone.

      digest = blake2b-128(shape as int64 || float32 values || int64 label),

  little-endian, with -0.0 written as 0.0 (they compare equal). uint8 levels
  scaled to [0, 1], or float32 or float64 tensors of the same values, in any
  container, give the same digest.
  """
  return example_digests(inputs[None], [label])[0]


def example_digests(inputs: torch.Tensor, labels) -> list[bytes]:
  """`example_digest` of each example of the batch `inputs` [b, ...] with
  its label, the batch converted once (per example, the conversions took
  most of a 60,000-example dataset's 4 s)."""
  values = inputs.detach().to('cpu', torch.float32)
  values = torch.where(values == 0, 0.0, values).contiguous().numpy()
  values = values.astype('<f4', copy=False)
  shape = np.asarray(values.shape[1:], dtype='<i8').tobytes()
  digests = []
  for row, label in zip(values, labels, strict=True):
    digest = hashlib.blake2b(shape, digest_size=DIGEST_BYTES)
    digest.update(row.tobytes())
    digest.update(int(label).to_bytes(8, 'little', signed=True))
    digests.append(digest.digest())
  return digests


def content_ids(split: Split) -> torch.Tensor:
  """int64 [N]: each example's id from its digest's first 63 bits.

  What augmentation keys an example's draws by: inserting or removing other
  examples anywhere moves positions, never an example's id.
  """
  return torch.tensor(
      [int.from_bytes(d[:8], 'little') >> 1 for d in split.example_digests()],
      dtype=torch.int64)


def _file_digest(class_name: str, path: str) -> bytes:
  """blake2b-128 of the class name (length-prefixed) and the file's bytes."""
  name = class_name.encode()
  digest = hashlib.blake2b(digest_size=DIGEST_BYTES)
  digest.update(len(name).to_bytes(8, 'little') + name)
  with open(path, 'rb') as file:
    while chunk := file.read(_READ_CHUNK):
      digest.update(chunk)
  return digest.digest()
