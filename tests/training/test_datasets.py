"""Tests for tan_tune.training.datasets."""

import dataclasses
import os
import pathlib
import pickle

import numpy as np
from PIL import Image
import pytest
import torch
from torchvision.datasets import cifar

from tan_tune.errors import ConfigError
from tan_tune.training import datasets
from tan_tune.training import splits


def _check_batch(
    dataset: datasets.Dataset, split: datasets.Split, b: int = 5
) -> tuple[torch.Tensor, torch.Tensor]:
  images, labels = split.get_batch(torch.arange(b))
  assert images.shape == (b, *dataset.input_shape)
  assert images.dtype == torch.float32
  assert images.min() >= 0 and images.max() <= 1
  assert labels.shape == (b,) and labels.dtype == torch.int64
  assert ((labels >= 0) & (labels < dataset.num_classes)).all()
  return images, labels


def _all(split: datasets.Split) -> tuple[torch.Tensor, torch.Tensor]:
  return split.get_batch(torch.arange(len(split)))


def test_digits_has_a_fixed_stratified_split() -> None:
  dataset = datasets.load_dataset(datasets.DatasetConfig('digits'))
  assert dataset.num_train == len(dataset.train) == 1437
  assert len(dataset.test) == 360
  assert dataset.input_shape == (1, 8, 8) and dataset.num_classes == 10
  images, labels = _check_batch(dataset, dataset.train)
  assert images.max() > 0.9  # Scaled by 16, not 255.
  again = datasets.load_dataset(datasets.DatasetConfig('digits'))
  for split, same in ((dataset.train, again.train), (dataset.test, again.test)):
    assert all(map(torch.equal, _all(split), _all(same)))
  # Stratified: every class keeps 80% of its examples, to within rounding.
  counts = torch.bincount(_all(dataset.train)[1], minlength=10)
  totals = counts + torch.bincount(_all(dataset.test)[1], minlength=10)
  assert ((counts - 0.8 * totals).abs() <= 1).all()
  other = datasets.load_dataset(datasets.DatasetConfig('digits', seed=1))
  assert other.num_train == 1437
  assert not torch.equal(_all(other.train)[1], _all(dataset.train)[1])


def _with_first_training_image_changed(monkeypatch) -> None:
  """Loaders build the training split first: its example 0 is inverted."""
  original = datasets.TensorSplit
  built = []

  def split(images, labels, max_value):
    if not built:
      images = images.clone()
      images[0] = int(max_value) - images[0]
    built.append(True)
    return original(images, labels, max_value)

  monkeypatch.setattr(datasets, 'TensorSplit', split)


@pytest.mark.parametrize('name', ['digits', 'synthetic', 'cifar10',
                                  'imagefolder'])
def test_normalisation_ignores_the_training_images(
    name: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
  """One training example changed: the constants every input is normalised
  with (and that ship with the model) stay the same."""
  monkeypatch.setattr(
      cifar, 'check_integrity', lambda path, md5=None: os.path.isfile(path))
  _fake_cifar(tmp_path, per_batch=3)
  _image_tree(tmp_path)
  config = datasets.DatasetConfig(name, root=str(tmp_path), image_size=(
      8 if name == 'imagefolder' else None))
  before = datasets.load_dataset(config)
  images_before = _all(before.train)[0]  # Folders are read lazily.
  with monkeypatch.context() as patch:
    if name == 'imagefolder':
      _write_image(tmp_path / 'train' / 'blue' / '0.png', (0, 255, 0),
                   (12, 10))
    else:
      _with_first_training_image_changed(patch)
    after = datasets.load_dataset(config)
  assert not torch.equal(images_before, _all(after.train)[0])
  assert (after.mean, after.std) == (before.mean, before.std)


def test_a_validation_split_is_held_out_of_the_training_set() -> None:
  dataset = datasets.load_dataset(datasets.DatasetConfig('digits'))
  train, validation, name = splits.evaluation_splits(dataset.train, dataset.test, 0.1, seed=0)
  assert name == 'validation'
  assert (len(train), len(validation)) == (1293, 144)
  # Both are the training split's examples, disjoint, and none is a test one.
  pool = {image.numpy().tobytes() for image in _all(dataset.train)[0]}
  test = {image.numpy().tobytes() for image in _all(dataset.test)[0]}
  rest = [image.numpy().tobytes() for image in _all(train)[0]]
  held = [image.numpy().tobytes() for image in _all(validation)[0]]
  assert set(held) <= pool and set(rest) <= pool
  assert not set(datasets.SubsetSplit(dataset.train, validation.indices)
                 .example_digests()) & set(train.example_digests())
  assert not (set(held) - set(rest)) & test
  again = splits.evaluation_splits(dataset.train, dataset.test, 0.1, seed=0)[1]
  assert torch.equal(again.indices, validation.indices)  # Same for all trials.
  whole, test_split, name = splits.evaluation_splits(dataset.train, dataset.test, 0.0, seed=0)
  assert (whole, test_split, name) == (dataset.train, dataset.test, 'test')
  with pytest.raises(ConfigError, match='validation_fraction'):
    splits.evaluation_splits(dataset.train, dataset.test, 1.0, seed=0)


def test_the_examples_name_the_data_not_its_split() -> None:
  digits = datasets.load_dataset(datasets.DatasetConfig('digits'))
  resplit = datasets.load_dataset(datasets.DatasetConfig('digits', seed=1))
  assert datasets.examples(digits) == datasets.examples(resplit)
  synthetic = datasets.load_dataset(datasets.DatasetConfig('synthetic'))
  assert datasets.examples(synthetic) != datasets.examples(digits)
  assert len(datasets.examples(digits)) == 1797
  # Nothing of the digests in its repr, which a log or traceback may show.
  assert repr(datasets.examples(digits)) == 'Examples(1797 examples)'


@pytest.mark.parametrize('kwargs', [
    {'dtype': 'float32'}, {'dtype': 'float64'},
    {'dtype': 'float32', 'negative_zeros': True}])
def test_the_same_examples_give_the_same_digests_whatever_holds_them(
    kwargs) -> None:
  """uint8 levels built in, or float tensors from a factory, -0.0 or 0.0:
  the digest is of the float32 values the trainer sees."""
  built_in = datasets.load_dataset(datasets.DatasetConfig('digits'))
  factory = datasets.load_dataset(datasets.DatasetConfig(
      None, factory='digits_data:digits_floats', kwargs=kwargs))
  assert factory.train.example_digests() == built_in.train.example_digests()
  assert datasets.examples(factory) == datasets.examples(built_in)


def test_an_examples_digest_is_of_its_values_shape_and_label() -> None:
  image = torch.tensor([[[0.0, 0.5], [1.0, 0.25]]])
  digest = splits.example_digest(image, 3)
  assert splits.example_digest(-image * -1, 3) == digest  # -0.0 in it.
  assert splits.example_digest(image.double(), 3) == digest
  assert splits.example_digest(image, 2) != digest
  assert splits.example_digest(image.reshape(1, 1, 4), 3) != digest
  assert len(digest) == splits.DIGEST_BYTES


def test_a_folder_is_named_by_its_images_bytes_not_their_names(
    tmp_path: pathlib.Path) -> None:
  _image_tree(tmp_path)
  config = datasets.DatasetConfig('imagefolder', root=str(tmp_path),
                                  image_size=8)
  first = datasets.examples(datasets.load_dataset(config))
  blue = tmp_path / 'train' / 'blue'
  (blue / '0.png').rename(blue / 'renamed.png')
  assert datasets.examples(datasets.load_dataset(config)) == first
  _write_image(blue / 'extra.png', (0, 0, 255), (5, 5))
  assert datasets.examples(datasets.load_dataset(config)) != first
  (blue / 'extra.png').unlink()
  # Another picture in a file of the same name and size.
  _write_image(blue / 'renamed.png', (0, 0, 254), (12, 10))
  assert datasets.examples(datasets.load_dataset(config)) != first


def test_synthetic_shapes_and_determinism() -> None:
  config = datasets.DatasetConfig(
      'synthetic',
      image_size=6,
      channels=2,
      num_classes=4,
      train_size=40,
      test_size=12,
      seed=3,
  )
  dataset = datasets.load_dataset(config)
  assert (dataset.num_train, len(dataset.test)) == (40, 12)
  assert dataset.input_shape == (2, 6, 6) and dataset.num_classes == 4
  assert len(dataset.mean) == len(dataset.std) == 2
  _check_batch(dataset, dataset.test)
  again = datasets.load_dataset(config)
  assert all(map(torch.equal, _all(dataset.train), _all(again.train)))
  other = datasets.load_dataset(dataclasses.replace(config, seed=4))
  assert not torch.equal(_all(dataset.train)[0], _all(other.train)[0])


def test_synthetic_is_learnable() -> None:
  """Nearest class mean, fitted on train, is near perfect on test."""
  dataset = datasets.load_dataset(datasets.DatasetConfig('synthetic'))
  train_x, train_y = _all(dataset.train)
  test_x, test_y = _all(dataset.test)
  means = torch.stack(
      [train_x[train_y == c].mean(0) for c in range(dataset.num_classes)]
  )
  distances = torch.cdist(test_x.flatten(1), means.flatten(1))
  accuracy = (distances.argmin(1) == test_y).float().mean()
  assert accuracy > 0.95


def _write_image(
    path: pathlib.Path,
    colour: tuple[int, int, int],
    size: tuple[int, int],
    mode: str = 'RGB',
) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  Image.new('RGB', size, colour).convert(mode).save(path)


def _image_tree(root: pathlib.Path) -> None:
  """Two classes: red and blue, of assorted sizes, one in grayscale."""
  for split, count in (('train', 3), ('val', 2)):
    for i in range(count):
      _write_image(root / split / 'blue' / f'{i}.png', (0, 0, 255), (12, 10))
      _write_image(root / split / 'red' / f'{i}.png', (255, 0, 0), (9, 20))
  _write_image(
      root / 'train' / 'red' / 'gray.png', (128, 128, 128), (10, 10), 'L'
  )


def test_imagefolder_loads_resized_center_crops(tmp_path: pathlib.Path) -> None:
  _image_tree(tmp_path)
  config = datasets.DatasetConfig(
      'imagefolder', root=str(tmp_path), image_size=8
  )
  dataset = datasets.load_dataset(config)
  assert dataset.num_train == 7 and len(dataset.test) == 4
  assert dataset.num_classes == 2 and dataset.input_shape == (3, 8, 8)
  images, labels = _check_batch(dataset, dataset.train, b=7)
  # Classes are sorted folder names: blue is 0, red is 1.
  assert labels.tolist() == [0, 0, 0, 1, 1, 1, 1]
  torch.testing.assert_close(images[0, :, 0, 0], torch.tensor([0.0, 0.0, 1.0]))
  torch.testing.assert_close(images[3, :, 4, 4], torch.tensor([1.0, 0.0, 0.0]))
  gray = images[labels == 1][-1]  # 'gray.png' sorts after '2.png'.
  torch.testing.assert_close(gray, torch.full_like(gray, 128 / 255))


def test_imagefolder_defaults_to_224(tmp_path: pathlib.Path) -> None:
  _image_tree(tmp_path)
  dataset = datasets.load_dataset(
      datasets.DatasetConfig('imagefolder', root=str(tmp_path))
  )
  assert dataset.input_shape == (3, 224, 224)
  _check_batch(dataset, dataset.test, b=2)


@pytest.mark.parametrize('missing', ['train', 'val'])
def test_imagefolder_missing_split_names_root(
    tmp_path: pathlib.Path, missing: str
) -> None:
  _image_tree(tmp_path)
  for path in sorted((tmp_path / missing).rglob('*'), reverse=True):
    path.rmdir() if path.is_dir() else path.unlink()
  (tmp_path / missing).rmdir()
  with pytest.raises(ConfigError, match=f'{missing} is missing') as error:
    datasets.load_dataset(
        datasets.DatasetConfig('imagefolder', root=str(tmp_path))
    )
  assert error.value.field == 'dataset.root'
  assert error.value.value == str(tmp_path)


def test_imagefolder_without_images_or_matching_classes(
    tmp_path: pathlib.Path,
) -> None:
  (tmp_path / 'train').mkdir()
  (tmp_path / 'val').mkdir()
  config = datasets.DatasetConfig('imagefolder', root=str(tmp_path))
  with pytest.raises(ConfigError, match='dataset.root'):
    datasets.load_dataset(config)
  _image_tree(tmp_path)
  os.rename(tmp_path / 'val' / 'red', tmp_path / 'val' / 'green')
  with pytest.raises(ConfigError, match='same class folders'):
    datasets.load_dataset(config)


def test_cifar10_missing_folder_lists_expected_files(
    tmp_path: pathlib.Path,
) -> None:
  config = datasets.DatasetConfig('cifar10', root=str(tmp_path))
  with pytest.raises(ConfigError) as error:
    datasets.load_dataset(config)
  assert error.value.field == 'dataset.root'
  assert error.value.value == str(tmp_path)
  assert 'cifar-10-batches-py' in str(error.value)
  assert 'data_batch_5' in str(error.value) and 'test_batch' in str(error.value)


def _fake_cifar(root: pathlib.Path, per_batch: int) -> None:
  """Tiny files in the pickle layout torchvision reads."""
  folder = root / 'cifar-10-batches-py'
  folder.mkdir()
  rng = np.random.default_rng(0)
  files = cifar.CIFAR10.train_list + cifar.CIFAR10.test_list
  for name, _ in files:
    batch = {
        'data': rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
        'labels': rng.integers(0, 10, per_batch).tolist(),
    }
    (folder / name).write_bytes(pickle.dumps(batch))
  meta = {'label_names': [f'class{i}' for i in range(10)]}
  (folder / 'batches.meta').write_bytes(pickle.dumps(meta))


def test_cifar10_incomplete_or_corrupt_folder(tmp_path: pathlib.Path) -> None:
  _fake_cifar(tmp_path, per_batch=2)
  config = datasets.DatasetConfig('cifar10', root=str(tmp_path))
  # Files that are all there but are not the originals fail torchvision's md5.
  with pytest.raises(ConfigError, match='dataset.root.*md5'):
    datasets.load_dataset(config)
  (tmp_path / 'cifar-10-batches-py' / 'data_batch_3').unlink()
  with pytest.raises(ConfigError, match=r"\['data_batch_3'\] not found"):
    datasets.load_dataset(config)


def test_cifar10_reads_the_python_format(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
  # Fake files cannot match torchvision's md5 sums of the real ones, so only
  # the checksum is bypassed; parsing and layout are torchvision's and ours.
  monkeypatch.setattr(
      cifar, 'check_integrity', lambda path, md5=None: os.path.isfile(path)
  )
  _fake_cifar(tmp_path, per_batch=3)
  dataset = datasets.load_dataset(
      datasets.DatasetConfig('cifar10', root=str(tmp_path))
  )
  assert dataset.num_train == 15 and len(dataset.test) == 3
  assert dataset.input_shape == (3, 32, 32) and dataset.num_classes == 10
  images, labels = _check_batch(dataset, dataset.test, b=3)
  with open(tmp_path / 'cifar-10-batches-py' / 'test_batch', 'rb') as f:
    raw = pickle.load(f)
  # The pickle holds each image as 1024 red, then green, then blue bytes.
  expected = torch.from_numpy(raw['data']).view(3, 3, 32, 32) / 255
  torch.testing.assert_close(images, expected)
  assert labels.tolist() == raw['labels']


@pytest.mark.parametrize(
    'kwargs, field',
    [
        (dict(name='svhn'), 'dataset.name'),
        (dict(name='cifar10'), 'dataset.root'),
        (dict(name='imagefolder', root=''), 'dataset.root'),
        (dict(name='digits', image_size=16), 'dataset.image_size'),
        (dict(name='synthetic', image_size=0), 'dataset.image_size'),
        (dict(name='synthetic', channels=0), 'dataset.channels'),
        (dict(name='synthetic', num_classes=1), 'dataset.num_classes'),
        (dict(name='synthetic', train_size=0), 'dataset.train_size'),
        (dict(name='synthetic', test_size=0), 'dataset.test_size'),
        (dict(name='digits', seed=-1), 'dataset.seed'),
    ],
)
def test_bad_config_names_the_field(kwargs: dict, field: str) -> None:
  with pytest.raises(ConfigError) as error:
    datasets.DatasetConfig(**kwargs)
  assert error.value.field == field


def test_unknown_name_lists_the_valid_names() -> None:
  with pytest.raises(ConfigError) as error:
    datasets.DatasetConfig('svhn')
  for name in datasets.NAMES:
    assert name in str(error.value)


def test_native_image_size_may_be_restated() -> None:
  assert datasets.DatasetConfig('digits', image_size=8).image_size == 8


def test_a_relative_root_is_fixed_against_the_commands_folder(
    tmp_path: pathlib.Path, monkeypatch) -> None:
  monkeypatch.chdir(tmp_path)
  config = datasets.DatasetConfig('imagefolder', root='images')
  assert config.root == str(tmp_path / 'images')
  assert datasets.DatasetConfig('digits').root is None
