"""Tests for tan_tune.training.augment."""

import pytest
import torch

from tan_tune.errors import ConfigError
from tan_tune.training import augment as augment_lib

RANDOM_FAMILIES = ('crop-flip', 'rrc', 'simclr')
SHAPES = ((1, 8, 8), (3, 32, 32), (3, 224, 224))


def _augment(
    images: torch.Tensor, config: augment_lib.AugmentConfig, seed: int = 0
) -> torch.Tensor:
  return augment_lib.augment(
      images, config, torch.Generator().manual_seed(seed)
  )


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


@pytest.mark.parametrize('family', RANDOM_FAMILIES)
def test_restored_generator_state_replays_the_copies(family: str) -> None:
  images = _images(4, (3, 8, 8))
  config = augment_lib.AugmentConfig(family, 2)
  generator = torch.Generator().manual_seed(3)
  augment_lib.augment(images, config, generator)
  checkpoint = generator.get_state()
  resumed = augment_lib.augment(images, config, generator)
  generator.set_state(checkpoint)
  assert torch.equal(augment_lib.augment(images, config, generator), resumed)


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


def test_crop_flip_is_a_window_of_the_reflect_padded_image() -> None:
  padding = 2
  images = _images(4, (1, 8, 8))
  out = _augment(
      images, augment_lib.AugmentConfig('crop-flip', 8, crop_padding=padding)
  )
  padded = torch.nn.functional.pad(images, (padding,) * 4, mode='reflect')
  offsets = range(2 * padding + 1)
  for image, copies in zip(padded, out):
    windows = [image[:, i : i + 8, j : j + 8] for i in offsets for j in offsets]
    candidates = windows + [torch.flip(w, dims=[-1]) for w in windows]
    for copy in copies:
      assert any(torch.equal(copy, c) for c in candidates)


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
