"""Tests for tan_tune.training.augment."""

import pytest
import torch

from tan_tune.errors import ConfigError
from tan_tune.training import augment as augment_lib
from tan_tune.training import keyed_random

RANDOM_FAMILIES = ('crop-flip', 'rrc', 'simclr')
SHAPES = ((1, 8, 8), (3, 32, 32), (3, 224, 224))
# Every family with every random stage it has: crop-flip with colour jitter.
KEYED_CONFIGS = {
    'crop-flip': dict(family='crop-flip', color_jitter=0.4),
    'rrc': dict(family='rrc'),
    'simclr': dict(family='simclr'),
}


def _augment(
    images: torch.Tensor,
    config: augment_lib.AugmentConfig,
    seed: int = 0,
    ids: torch.Tensor | None = None,
) -> torch.Tensor:
  """Augments with images keyed by `ids` (by default their positions)."""
  if ids is None:
    ids = torch.arange(len(images))
  draws = keyed_random.KeyedRandom.for_items((seed,), ids)
  return augment_lib.augment(images, config, draws)


def _images(b: int, shape: tuple[int, int, int], seed: int = 1) -> torch.Tensor:
  return torch.rand((b, *shape), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize('shape', SHAPES)
@pytest.mark.parametrize('family', augment_lib.FAMILIES)
def test_shape_dtype_and_range(
    family: str, shape: tuple[int, int, int]
) -> None:
  k = 1 if family == 'none' else 3
  out = _augment(_images(2, shape), augment_lib.AugmentConfig(family, k))
  assert out.shape == (2, k, *shape)
  assert out.dtype == torch.float32
  assert out.min() >= 0 and out.max() <= 1


def test_none_returns_the_image() -> None:
  images = _images(4, (3, 8, 8))
  out = _augment(images, augment_lib.AugmentConfig('none'))
  torch.testing.assert_close(out[:, 0], images, rtol=0, atol=0)


@pytest.mark.parametrize('family', RANDOM_FAMILIES)
def test_same_seed_same_output_other_seed_differs(family: str) -> None:
  images = _images(4, (3, 32, 32))
  config = augment_lib.AugmentConfig(family, 2)
  first, again = _augment(images, config, 7), _augment(images, config, 7)
  assert torch.equal(first, again)
  assert not torch.equal(first, _augment(images, config, 8))


@pytest.mark.parametrize('k', (1, 3))
@pytest.mark.parametrize('family', KEYED_CONFIGS)
def test_a_neighbouring_batch_leaves_every_other_copy_alone(
    family: str, k: int
) -> None:
  """DP-SGD's sensitivity: one example in or out changes its copies only.

  The old generator drawn in batch order failed this: with one example added
  at the front and one removed, 3 of the 7 others changed; with one removed,
  all 7 changed, as the draws' layout followed the batch size.
  """
  config = augment_lib.AugmentConfig(multiplicity=k, **KEYED_CONFIGS[family])
  data = _images(12, (3, 16, 16))
  batch = torch.arange(1, 9)
  added = torch.cat([torch.tensor([0]), batch[:3], batch[4:]])
  removed = torch.cat([batch[:3], batch[4:]])
  out = _augment(data[batch], config, 5, batch)
  for neighbour in (added, removed):
    theirs = _augment(data[neighbour], config, 5, neighbour)
    for row, example in enumerate(neighbour.tolist()):
      if example in batch:
        assert torch.equal(theirs[row], out[example - 1]), (family, example)


@pytest.mark.parametrize('family', KEYED_CONFIGS)
def test_copies_ignore_the_micro_batch_split_and_the_order(family: str) -> None:
  config = augment_lib.AugmentConfig(multiplicity=2, **KEYED_CONFIGS[family])
  data, ids = _images(7, (3, 16, 16)), torch.tensor([2, 3, 5, 8, 13, 21, 34])
  whole = _augment(data, config, 1, ids)
  split = torch.cat([_augment(data[:3], config, 1, ids[:3]),
                     _augment(data[3:], config, 1, ids[3:])])
  assert torch.equal(split, whole)
  order = torch.randperm(7, generator=torch.Generator().manual_seed(0))
  assert torch.equal(_augment(data[order], config, 1, ids[order]),
                     whole[order])


def test_the_sources_rows_must_match_the_images() -> None:
  draws = keyed_random.KeyedRandom.for_items((0,), torch.arange(3))
  with pytest.raises(ValueError, match='3 rows for 2 images'):
    augment_lib.augment(_images(2, (1, 8, 8)),
                        augment_lib.AugmentConfig('rrc'), draws)


def test_global_rng_is_untouched() -> None:
  torch.manual_seed(0)
  expected = torch.rand(3)
  torch.manual_seed(0)
  _augment(_images(2, (3, 8, 8)), augment_lib.AugmentConfig('simclr', 2))
  assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize('family', RANDOM_FAMILIES)
def test_copies_of_one_image_differ(family: str) -> None:
  out = _augment(_images(2, (3, 32, 32)), augment_lib.AugmentConfig(family, 4))
  for copies in out:
    flat = copies.flatten(1)
    assert torch.cdist(flat, flat).fill_diagonal_(1).min() > 0


def test_crop_flip_without_padding_is_identity_or_mirror() -> None:
  images = _images(8, (3, 8, 8))
  config = augment_lib.AugmentConfig('crop-flip', 4, crop_padding=0)
  out = _augment(images, config)
  mirrored = torch.flip(images, dims=[-1])[:, None]
  is_same = (out == images[:, None]).flatten(2).all(-1)
  is_mirror = (out == mirrored).flatten(2).all(-1)
  assert (is_same | is_mirror).all()
  assert is_same.any() and is_mirror.any()


def test_crop_flip_is_a_uniform_window_of_the_reflect_padded_image() -> None:
  """Every copy is one of the 2 (2p + 1)^2 windows, each about as often."""
  padding = 2
  images = _images(40, (1, 8, 8))
  out = _augment(
      images, augment_lib.AugmentConfig('crop-flip', 20, crop_padding=padding)
  )
  padded = torch.nn.functional.pad(images, (padding,) * 4, mode='reflect')
  offsets = range(2 * padding + 1)
  counts = torch.zeros(2, len(offsets), len(offsets))
  for image, copies in zip(padded, out):
    windows = torch.stack([image[:, i : i + 8, j : j + 8]
                           for i in offsets for j in offsets])
    candidates = torch.cat([windows, torch.flip(windows, dims=[-1])])
    for copy in copies:
      match = (candidates == copy).flatten(1).all(1).nonzero()
      assert len(match) == 1  # Random pixels: windows never coincide.
      counts.view(-1)[match[0]] += 1
  # 800 copies over 50 windows: 16 expected each, standard deviation 4.
  assert counts.min() >= 2
  assert 340 < counts[1].sum() < 460  # Flipped: half, within 4 deviations.


def test_crop_flip_jitter_changes_colours_within_range() -> None:
  images = _images(4, (3, 8, 8))
  plain = augment_lib.AugmentConfig('crop-flip', 2, crop_padding=0)
  jitter = augment_lib.AugmentConfig(
      'crop-flip', 2, crop_padding=0, color_jitter=0.4
  )
  without, with_jitter = _augment(images, plain), _augment(images, jitter)
  assert not torch.allclose(without, with_jitter)
  assert with_jitter.min() >= 0 and with_jitter.max() <= 1


def test_rrc_keeps_a_horizontal_ramp_monotone() -> None:
  """A crop of a left-to-right ramp is a ramp; its mirror runs backwards."""
  ramp = torch.linspace(0, 1, 32).expand(3, 32, 32)
  out = _augment(ramp[None], augment_lib.AugmentConfig('rrc', 64))[0]
  steps = out.diff(dim=-1)
  rising = (steps >= -1e-6).flatten(1).all(-1)
  falling = (steps <= 1e-6).flatten(1).all(-1)
  assert (rising | falling).all()
  assert rising.any() and falling.any()
  # Rows are identical (the ramp is constant down columns)...
  torch.testing.assert_close(out, out[..., :1, :].expand_as(out))
  # ...and crops zoom in: some copies span well under the full range.
  span = out.amax(dim=(1, 2, 3)) - out.amin(dim=(1, 2, 3))
  assert (span < 0.8).any()


def test_simclr_grays_about_a_fifth_of_rgb_copies() -> None:
  out = _augment(_images(50, (3, 8, 8)), augment_lib.AugmentConfig('simclr', 8))
  gray = (out.amax(dim=2) - out.amin(dim=2) < 1e-6).flatten(2).all(-1)
  assert 0.1 < gray.float().mean() < 0.3


def test_random_crop_preserves_a_constant_image() -> None:
  images = torch.full((2, 3, 16, 16), 0.25)
  for family in ('crop-flip', 'rrc'):
    out = _augment(images, augment_lib.AugmentConfig(family, 3))
    torch.testing.assert_close(out, torch.full_like(out, 0.25))


@pytest.mark.parametrize(
    'kwargs, field',
    [
        (dict(family='cutout'), 'augment.family'),
        (dict(family='rrc', multiplicity=0), 'augment.multiplicity'),
        (dict(family='none', multiplicity=2), 'augment.multiplicity'),
        (dict(family='crop-flip', crop_padding=-1), 'augment.crop_padding'),
        (dict(family='rrc', crop_padding=4), 'augment.crop_padding'),
        (dict(family='crop-flip', color_jitter=1.5), 'augment.color_jitter'),
        (dict(family='simclr', color_jitter=0.4), 'augment.color_jitter'),
    ],
)
def test_bad_config_names_the_field(kwargs: dict, field: str) -> None:
  with pytest.raises(ConfigError) as error:
    augment_lib.AugmentConfig(**kwargs)
  assert error.value.field == field
  assert field in str(error.value)


def test_error_lists_families_and_explains_augmult() -> None:
  with pytest.raises(ConfigError, match="'crop-flip', 'rrc', 'simclr'"):
    augment_lib.AugmentConfig('cutout')
  with pytest.raises(ConfigError, match='AugMult needs an augmentation'):
    augment_lib.AugmentConfig('none', 2)


def test_default_padding_scales_with_the_side() -> None:
  config = augment_lib.AugmentConfig('crop-flip')
  assert [config.padding(s) for s in (8, 32, 224)] == [1, 4, 28]


def test_padding_as_large_as_the_image_is_rejected() -> None:
  config = augment_lib.AugmentConfig('crop-flip', crop_padding=8)
  with pytest.raises(ConfigError, match='augment.crop_padding'):
    _augment(_images(1, (1, 8, 8)), config)
