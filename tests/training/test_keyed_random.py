"""Tests for tan_tune.training.keyed_random."""

import numpy as np
import pytest
import torch

from tan_tune.training import keyed_random

KEY = (7, 3)


def _lowbias32(x: np.ndarray) -> np.ndarray:
  """The reference: Wellons' C code on uint32, whose products wrap."""
  x = x.astype(np.uint32)
  with np.errstate(over='ignore'):
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x7FEB352D)
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x846CA68B)
    x ^= x >> np.uint32(16)
  return x


def test_hash_is_lowbias32() -> None:
  words = np.random.default_rng(0).integers(0, 2**32, 10_000, dtype=np.int64)
  words[:3] = (0, 1, 2**32 - 1)
  got = keyed_random.hash32(torch.from_numpy(words))
  np.testing.assert_array_equal(got.numpy(), _lowbias32(words))
  assert keyed_random.hash32(1) == int(_lowbias32(np.array([1]))[0])


def test_shapes_dtypes_and_ranges() -> None:
  draws = keyed_random.KeyedRandom.for_items(KEY, torch.arange(5))
  assert len(draws) == 5
  assert draws.uniform().shape == (5,)
  u = draws.uniform(2, 3)
  assert u.shape == (5, 2, 3) and u.dtype == torch.float32
  assert u.min() >= 0 and u.max() < 1
  i = draws.integers(7, 4)
  assert i.shape == (5, 4) and i.dtype == torch.int64
  assert i.min() >= 0 and i.max() < 7


def test_uniforms_have_the_moments_of_u01() -> None:
  u = keyed_random.KeyedRandom.for_items(KEY, torch.arange(400)).uniform(500)
  assert abs(float(u.mean()) - 1 / 2) < 0.005
  assert abs(float(u.var()) - 1 / 12) < 0.002
  counts = torch.histc(u, bins=10, min=0, max=1)
  assert (counts - u.numel() / 10).abs().max() < 0.03 * u.numel() / 10


def _correlation(a: torch.Tensor, b: torch.Tensor) -> float:
  return float(np.corrcoef(a.flatten().numpy(), b.flatten().numpy())[0, 1])


def test_rows_values_calls_and_copies_are_uncorrelated() -> None:
  draws = keyed_random.KeyedRandom.for_items(KEY, torch.arange(300))
  first, second = draws.uniform(300), draws.uniform(300)
  copies = draws.copies(2).uniform(300).view(300, 2, 300)
  pairs = {
      'neighbouring rows': (first[:-1], first[1:]),
      'successive values': (first[:, :-1], first[:, 1:]),
      'successive calls': (first, second),
      'two copies of an item': (copies[:, 0], copies[:, 1]),
      'an item and its copy': (first, copies[:, 0]),
  }
  for name, (a, b) in pairs.items():
    # 9e4 pairs: the standard error of a null correlation is 0.0033.
    assert abs(_correlation(a, b)) < 0.015, name


def test_each_row_depends_on_its_item_alone() -> None:
  ids = torch.tensor([5, 9, 12, 40, 41])
  whole = keyed_random.KeyedRandom.for_items(KEY, ids)
  expected = [whole.uniform(3), whole.integers(10, 2)]
  order = torch.tensor([3, 0, 4])
  others = torch.cat([torch.tensor([100, 2]), ids[order]])
  part = keyed_random.KeyedRandom.for_items(KEY, others)
  got = [part.uniform(3), part.integers(10, 2)]
  for mine, theirs in zip(got, expected):
    assert torch.equal(mine[2:], theirs[order])


def test_the_key_and_the_call_change_the_draws() -> None:
  ids = torch.arange(50)
  base = keyed_random.KeyedRandom.for_items(KEY, ids).uniform(4)
  for other in ((7, 4), (8, 3), (7, 3, 0)):
    assert not torch.equal(
        keyed_random.KeyedRandom.for_items(other, ids).uniform(4), base)
  again = keyed_random.KeyedRandom.for_items(KEY, ids)
  assert torch.equal(again.uniform(4), base)
  assert not torch.equal(again.uniform(4), base)


def test_copies_are_item_major_and_keyed_by_item_and_copy() -> None:
  ids = torch.tensor([3, 8, 20])
  copies = keyed_random.KeyedRandom.for_items(KEY, ids).copies(4).uniform(2)
  alone = keyed_random.KeyedRandom.for_items(KEY, ids[1:2]).copies(4)
  assert copies.shape == (12, 2)
  assert torch.equal(copies[4:8], alone.uniform(2))
  assert len(copies.flatten().unique()) == copies.numel()


def test_ids_differing_above_32_bits_get_other_draws() -> None:
  ids = torch.tensor([5, 5 + 2**32, 5 + 2**40])
  u = keyed_random.KeyedRandom.for_items(KEY, ids).uniform(8)
  assert len({tuple(row.tolist()) for row in u}) == 3


def test_integers_are_uniform_over_the_range() -> None:
  draws = keyed_random.KeyedRandom.for_items(KEY, torch.arange(200))
  counts = torch.bincount(draws.integers(5, 500).flatten(), minlength=5)
  assert len(counts) == 5
  assert (counts - 20_000).abs().max() < 600  # 4 standard deviations.


def test_bad_input_is_refused() -> None:
  with pytest.raises(ValueError, match=r'\[n, d\]'):
    keyed_random.KeyedRandom(KEY, torch.arange(3))
  draws = keyed_random.KeyedRandom.for_items(KEY, torch.arange(3))
  with pytest.raises(ValueError, match='high'):
    draws.integers(2**31)
  with pytest.raises(ValueError, match='high'):
    draws.integers(0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a GPU')
def test_a_gpu_draws_the_same_bits_as_the_cpu() -> None:
  ids = torch.arange(1000)
  cpu = keyed_random.KeyedRandom.for_items(KEY, ids).copies(3)
  gpu = keyed_random.KeyedRandom.for_items(KEY, ids.cuda()).copies(3)
  for _ in range(2):
    assert torch.equal(gpu.uniform(4, 5).cpu(), cpu.uniform(4, 5))
