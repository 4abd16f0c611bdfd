"""Tests of the idx reader and the mnist / fashion-mnist datasets.

Every file here is a tiny idx file the test writes itself: no test needs the
real data.
"""

import gzip
import pathlib

import numpy as np
import pytest
import torch

from tan_tune.errors import ConfigError
from tan_tune.training import datasets
from tan_tune.training import idx


def _idx_bytes(array: np.ndarray) -> bytes:
  header = bytes([0, 0, 0x08, array.ndim])
  header += np.asarray(array.shape, ">u4").tobytes()
  return header + array.astype(np.uint8).tobytes()


def _write_idx(folder: pathlib.Path, train: int = 6, test: int = 4,
               gz: bool = True, side: int = 28) -> dict[str, np.ndarray]:
  """Four idx files of random images and labels; returns what they hold."""
  folder.mkdir(parents=True, exist_ok=True)
  rng = np.random.default_rng(0)
  arrays = {
      "train_images": rng.integers(0, 256, (train, side, side)),
      "train_labels": rng.integers(0, 10, train),
      "test_images": rng.integers(0, 256, (test, side, side)),
      "test_labels": rng.integers(0, 10, test),
  }
  for key, array in arrays.items():
    name = idx.FILES[key][0]
    data = _idx_bytes(array)
    if gz:
      (folder / f"{name}.gz").write_bytes(gzip.compress(data))
    else:
      (folder / name).write_bytes(data)
  return arrays


@pytest.mark.parametrize("gz", [True, False])
@pytest.mark.parametrize("name", ["fashion-mnist", "mnist"])
def test_reads_the_four_files_gzipped_or_plain(tmp_path, gz, name):
  arrays = _write_idx(tmp_path, gz=gz)
  dataset = datasets.load_dataset(datasets.DatasetConfig(name,
                                                         root=str(tmp_path)))
  assert (dataset.num_train, len(dataset.test)) == (6, 4)
  assert dataset.input_shape == (1, 28, 28) and dataset.num_classes == 10
  images, labels = dataset.test.get_batch(torch.arange(4))
  expected = torch.from_numpy(arrays["test_images"]).float()[:, None] / 255
  torch.testing.assert_close(images, expected)
  assert labels.tolist() == arrays["test_labels"].tolist()
  assert len(dataset.mean) == len(dataset.std) == 1


def test_reads_torchvisions_raw_layout(tmp_path):
  _write_idx(tmp_path / "FashionMNIST" / "raw", gz=False)
  dataset = datasets.load_dataset(
      datasets.DatasetConfig("fashion-mnist", root=str(tmp_path)))
  assert dataset.num_train == 6
  _write_idx(tmp_path / "MNIST" / "raw")
  assert datasets.load_dataset(
      datasets.DatasetConfig("mnist", root=str(tmp_path))).num_train == 6


def test_missing_files_say_how_to_get_them(tmp_path):
  with pytest.raises(ConfigError) as error:
    datasets.load_dataset(datasets.DatasetConfig("fashion-mnist",
                                                 root=str(tmp_path)))
  assert error.value.field == "dataset.root"
  for text in ("train-images-idx3-ubyte", "FashionMNIST/raw",
               "apt-get install dataset-fashion-mnist",
               "nothing is downloaded"):
    assert text in error.value.allowed, text


def _damage(tmp_path, key, change):
  _write_idx(tmp_path, gz=False)
  path = tmp_path / idx.FILES[key][0]
  path.write_bytes(change(path.read_bytes()))
  with pytest.raises(ConfigError) as error:
    datasets.load_dataset(datasets.DatasetConfig("mnist", root=str(tmp_path)))
  assert error.value.field == "dataset.root"
  return error.value.allowed


def test_a_wrong_magic_number_is_a_clear_error(tmp_path):
  message = _damage(tmp_path, "train_images",
                    lambda data: bytes([0, 0, 0x0D, 3]) + data[4:])
  assert "train-images-idx3-ubyte is damaged: its magic number" in message


def test_a_truncated_file_is_a_clear_error(tmp_path):
  message = _damage(tmp_path, "test_images", lambda data: data[:-10])
  assert "t10k-images-idx3-ubyte is damaged" in message
  assert "(truncated)" in message


def test_a_damaged_gzip_stream_is_a_clear_error(tmp_path):
  _write_idx(tmp_path)
  path = tmp_path / (idx.FILES["train_labels"][0] + ".gz")
  path.write_bytes(path.read_bytes()[:20])
  with pytest.raises(ConfigError, match="train-labels-idx1-ubyte.gz is"
                     " damaged: it cannot be read"):
    datasets.load_dataset(datasets.DatasetConfig("mnist", root=str(tmp_path)))


def test_labels_that_do_not_match_the_images_are_a_clear_error(tmp_path):
  _write_idx(tmp_path, gz=False)
  labels = np.zeros(5, np.uint8)  # 6 training images.
  (tmp_path / idx.FILES["train_labels"][0]).write_bytes(_idx_bytes(labels))
  with pytest.raises(ConfigError, match="5 labels for 6 images"):
    datasets.load_dataset(datasets.DatasetConfig("mnist", root=str(tmp_path)))


def test_the_image_size_may_only_be_restated():
  assert datasets.DatasetConfig("fashion-mnist", image_size=28).image_size == 28
  with pytest.raises(ConfigError):
    datasets.DatasetConfig("fashion-mnist", image_size=32)


@pytest.mark.parametrize("name", ["fashion-mnist", "mnist"])
def test_normalisation_is_published_not_computed(tmp_path, name):
  """Other images give the same constants: none is a statistic of them."""
  _write_idx(tmp_path / "a")
  _write_idx(tmp_path / "b", train=9)
  first, second = (datasets.load_dataset(
      datasets.DatasetConfig(name, root=str(tmp_path / d))) for d in "ab")
  assert (first.mean, first.std) == (second.mean, second.std)
  assert first.mean == ((0.2860,) if name == "fashion-mnist" else (0.1307,))
