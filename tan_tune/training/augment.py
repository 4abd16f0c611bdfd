"""Batched image augmentations for Augmentation Multiplicity (AugMult).

AugMult (De et al., 2022; Sander et al., 2023, appendix C, eq. 5) replaces the
gradient of sample i by the mean over K augmented copies, taken BEFORE
clipping:

  g_i = clip_C( (1/K) sum_{j=1..K} grad loss(w, aug_j(x_i), y_i) ).

Each sample still contributes one clipped vector of norm <= C, so the privacy
analysis is that of K = 1, while the average has lower variance. This module
only makes the K copies; averaging and clipping belong to the training step.

Randomness comes only from a `keyed_random.KeyedRandom` with one row per
image, and copy j of image i draws from row (i, j) alone. An image's copies
are therefore a function of its key and its own identity (its position in the
training set), never of the other images in the batch, their order or their
number: adding or removing one example changes its own clipped term and no
other, as DP-SGD's sensitivity argument needs. How much each call draws
depends only on the config and the image shape, never on the values drawn.
"""

import dataclasses
import math

import torch
from torch.nn import functional as F

from tan_tune.errors import ConfigError
from tan_tune.training import keyed_random

FAMILIES = ('none', 'crop-flip', 'rrc', 'simclr')

# Random resized crop (Szegedy et al., 2015), as in torchvision.
_RRC_AREA = (0.08, 1.0)
_RRC_LOG_RATIO = (math.log(3 / 4), math.log(4 / 3))
# Rejection sampling tries this many boxes; all failing has probability
# ~1e-10, and then the whole image is used.
_RRC_ATTEMPTS = 10
# SimCLR (Chen et al., 2020) with colour strength s = 1.
_SIMCLR_JITTER = dict(brightness=0.8, contrast=0.8, saturation=0.8, hue=0.2)
_SIMCLR_JITTER_PROB = 0.8
_SIMCLR_GRAYSCALE_PROB = 0.2
_SIMCLR_BLUR_PROB = 0.5
_SIMCLR_BLUR_SIGMA = (0.1, 2.0)
# ITU-R 601 luma, as torchvision's rgb_to_grayscale.
_LUMA = (0.299, 0.587, 0.114)
# RGB -> YIQ. Hue is a rotation of the (I, Q) chroma plane.
_YIQ = (
    (0.299, 0.587, 0.114),
    (0.596, -0.274, -0.322),
    (0.211, -0.523, 0.312),
)


@dataclasses.dataclass(frozen=True)
class AugmentConfig:
  """How each training image is augmented, and into how many copies.

  Attributes:
    family: one of `FAMILIES`. 'crop-flip' is the paper's "Ours": reflect-pad,
      random crop and horizontal flip, with optional colour jitter; 'rrc' is a
      random resized crop with flip; 'simclr' adds SimCLR's colour jitter,
      grayscale and Gaussian blur to 'rrc'.
    multiplicity: K, the number of augmented copies per image.
    crop_padding: 'crop-flip' only: reflect padding in pixels; unset means
      max(1, side // 8), i.e. 1 for digits, 4 for CIFAR-10, 28 for 224.
    color_jitter: 'crop-flip' only: brightness, contrast and (RGB only)
      saturation factors are drawn from [1 - s, 1 + s].
  """

  family: str
  multiplicity: int = 1
  crop_padding: int | None = None
  color_jitter: float = 0.0

  def __post_init__(self) -> None:
    if self.family not in FAMILIES:
      raise ConfigError(
          'augment.family', self.family, f'one of {list(FAMILIES)}'
      )
    if self.multiplicity < 1:
      raise ConfigError(
          'augment.multiplicity', self.multiplicity, 'an integer >= 1'
      )
    if self.multiplicity > 1 and self.family == 'none':
      raise ConfigError(
          'augment.multiplicity',
          self.multiplicity,
          "1 with family 'none': AugMult needs an augmentation",
      )
    if self.crop_padding is not None:
      if self.family != 'crop-flip':
        raise ConfigError(
            'augment.crop_padding',
            self.crop_padding,
            "unset unless family is 'crop-flip'",
        )
      if self.crop_padding < 0:
        raise ConfigError(
            'augment.crop_padding', self.crop_padding, 'an integer >= 0'
        )
    if self.color_jitter and self.family != 'crop-flip':
      raise ConfigError(
          'augment.color_jitter',
          self.color_jitter,
          "0 unless family is 'crop-flip'",
      )
    if not 0 <= self.color_jitter <= 1:
      raise ConfigError(
          'augment.color_jitter', self.color_jitter, 'a strength in [0, 1]'
      )

  def padding(self, side: int) -> int:
    """The crop-flip padding for images whose shorter side is `side`."""
    padding = self.crop_padding
    if padding is None:
      padding = max(1, side // 8)
    # Reflection can only mirror pixels that exist.
    if padding >= side:
      raise ConfigError(
          'augment.crop_padding', padding, f'< {side}, the image side'
      )
    return padding


def augment(
    images: torch.Tensor,
    config: AugmentConfig,
    draws: keyed_random.KeyedRandom | None,
) -> torch.Tensor:
  """Makes K independently augmented copies of each image.

  Args:
    images: [b, C, H, W], values in [0, 1]; with family 'none', any inputs
      [b, ...], returned as they are.
    config: the augmentation.
    draws: the only source of randomness, one row per image, keyed by the
      image's identity; may live on another device. Its own state is not
      advanced: the same source gives the same copies. None with family
      'none', which draws nothing.

  Returns:
    float32 [b, K, C, H, W] in [0, 1]; copy [i, j] is aug_j(x_i) of eq. 5.
  """
  if config.family == 'none':  # K = 1; records need not lie in [0, 1].
    return images.to(torch.float32).unsqueeze(1)
  if images.ndim != 4:
    raise ValueError(f'images must be [b, C, H, W], got {tuple(images.shape)}')
  b, c, h, w = images.shape
  if draws is None or len(draws) != b:
    raise ValueError(f'draws has {len(draws) if draws else 0} rows for {b}'
                     ' images')
  k = config.multiplicity
  x = images.to(torch.float32).unsqueeze(1).expand(b, k, c, h, w)
  x = x.reshape(b * k, c, h, w)
  rows = draws.copies(k)  # Row i k + j: copy j of image i, as in x.
  if config.family == 'crop-flip':
    x = _crop_flip(x, config.padding(min(h, w)), rows)
    if config.color_jitter:
      s = config.color_jitter
      x = _color_jitter(x, s, s, s, 0.0, rows)
  elif config.family == 'rrc':
    x = _resized_crop_flip(x, rows)
  elif config.family == 'simclr':
    x = _simclr(x, rows)
  # Clamping also absorbs float round-off of the resampling and blur.
  return x.clamp(0, 1).reshape(b, k, c, h, w)


def _uniform(
    shape: tuple[int, ...],
    low: float,
    high: float,
    draws: keyed_random.KeyedRandom,
    device: torch.device,
) -> torch.Tensor:
  """[n, *shape] uniform in [low, high), row i from row i of `draws`."""
  return (low + (high - low) * draws.uniform(*shape)).to(device)


def _coin(
    p: float, draws: keyed_random.KeyedRandom, device: torch.device
) -> torch.Tensor:
  """[n] booleans, each True with probability p."""
  return _uniform((), 0.0, 1.0, draws, device) < p


def _where(
    mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor
) -> torch.Tensor:
  """Per-sample choice between two [n, C, H, W] batches."""
  return torch.where(mask.view(-1, 1, 1, 1), a, b)


def _crop_flip(
    x: torch.Tensor, padding: int, draws: keyed_random.KeyedRandom
) -> torch.Tensor:
  """Reflect-pads, takes a random HxW window and flips half of them."""
  n, _, h, w = x.shape
  padded = F.pad(x, (padding,) * 4, mode='reflect')
  offsets = draws.integers(2 * padding + 1, 2).to(x.device)
  flip = _coin(0.5, draws, x.device)
  rows = offsets[:, 0, None] + torch.arange(h, device=x.device)
  cols = torch.arange(w, device=x.device)
  # Crop and flip are one gather: a flipped window reads its columns backwards.
  cols = offsets[:, 1, None] + torch.where(flip[:, None], cols.flip(0), cols)
  batch = torch.arange(n, device=x.device)[:, None, None]
  windows = padded.permute(0, 2, 3, 1)
  windows = windows[batch, rows[:, :, None], cols[:, None, :]]
  return windows.permute(0, 3, 1, 2)


def _resized_crop_flip(
    x: torch.Tensor, draws: keyed_random.KeyedRandom
) -> torch.Tensor:
  """Random resized crop back to HxW, then a horizontal flip half the time.

  The box is continuous rather than snapped to pixels, so the whole batch is
  one bilinear `grid_sample`. The box never exceeds the image, so this only
  upsamples and needs no antialiasing.
  """
  n, _, h, w = x.shape
  shape = (_RRC_ATTEMPTS,)
  area = _uniform(shape, *_RRC_AREA, draws, x.device)
  ratio = torch.exp(_uniform(shape, *_RRC_LOG_RATIO, draws, x.device))
  # Box sides as fractions of the image sides, for a box of `area` * h * w
  # pixels and width / height = `ratio`.
  width = torch.sqrt(area * ratio * h / w)
  height = torch.sqrt(area / ratio * w / h)
  fits = (width <= 1) & (height <= 1)
  first = fits.to(torch.int64).argmax(dim=1, keepdim=True)
  found = fits.any(dim=1)
  ones = torch.ones(n, device=x.device)
  width = torch.where(found, width.gather(1, first)[:, 0], ones)
  height = torch.where(found, height.gather(1, first)[:, 0], ones)
  # Box centre in grid_sample's [-1, 1] coordinates, uniform over positions
  # that keep the box inside the image.
  centre = _uniform((2,), -1.0, 1.0, draws, x.device)
  flip = _coin(0.5, draws, x.device)
  theta = torch.zeros(n, 2, 3, device=x.device)
  theta[:, 0, 0] = torch.where(flip, -width, width)
  theta[:, 0, 2] = centre[:, 0] * (1 - width)
  theta[:, 1, 1] = height
  theta[:, 1, 2] = centre[:, 1] * (1 - height)
  grid = F.affine_grid(theta, list(x.shape), align_corners=False)
  return F.grid_sample(
      x, grid, mode='bilinear', padding_mode='border', align_corners=False
  )


def _grayscale(x: torch.Tensor) -> torch.Tensor:
  """[n, 1, H, W] luma for RGB, channel mean otherwise."""
  if x.shape[1] != 3:
    return x.mean(dim=1, keepdim=True)
  luma = torch.tensor(_LUMA, device=x.device).view(1, 3, 1, 1)
  return (x * luma).sum(dim=1, keepdim=True)


def _blend(
    x: torch.Tensor, base: torch.Tensor, factor: torch.Tensor
) -> torch.Tensor:
  """base + factor * (x - base): factor 0 gives base, 1 gives x."""
  return (base + factor.view(-1, 1, 1, 1) * (x - base)).clamp(0, 1)


def _rotate_hue(x: torch.Tensor, turns: torch.Tensor) -> torch.Tensor:
  """Rotates RGB hue by `turns` of a full circle, one angle per sample.

  A rotation of the YIQ chroma plane: linear, hence batched as one einsum,
  and a close stand-in for torchvision's HSV hue shift.
  """
  yiq = torch.tensor(_YIQ, device=x.device)
  cos, sin = torch.cos(2 * math.pi * turns), torch.sin(2 * math.pi * turns)
  rotation = torch.zeros(x.shape[0], 3, 3, device=x.device)
  rotation[:, 0, 0] = 1
  rotation[:, 1, 1], rotation[:, 1, 2] = cos, -sin
  rotation[:, 2, 1], rotation[:, 2, 2] = sin, cos
  matrix = torch.linalg.inv(yiq) @ rotation @ yiq
  return torch.einsum('nij,njhw->nihw', matrix, x).clamp(0, 1)


def _color_jitter(
    x: torch.Tensor,
    brightness: float,
    contrast: float,
    saturation: float,
    hue: float,
    draws: keyed_random.KeyedRandom,
) -> torch.Tensor:
  """torchvision's ColorJitter with per-sample factors, in a fixed order.

  Factors are drawn from [max(0, 1 - s), 1 + s] (hue: [-s, s] turns).
  Saturation and hue need colour, so they only apply to RGB.
  """

  def factor(strength: float) -> torch.Tensor:
    low, high = max(0.0, 1 - strength), 1 + strength
    return _uniform((), low, high, draws, x.device)

  x = _blend(x, torch.zeros_like(x), factor(brightness))
  mean_luma = _grayscale(x).mean(dim=(1, 2, 3), keepdim=True)
  x = _blend(x, mean_luma, factor(contrast))
  if x.shape[1] == 3:
    x = _blend(x, _grayscale(x), factor(saturation))
    if hue:
      x = _rotate_hue(x, _uniform((), -hue, hue, draws, x.device))
  return x


def _gaussian_blur(
    x: torch.Tensor, draws: keyed_random.KeyedRandom
) -> torch.Tensor:
  """SimCLR's blur: kernel ~10% of the side, sigma uniform in [0.1, 2].

  The kernel never shrinks below 3 taps, which is also what keeps the blur
  mild on 8x8 digits and 32x32 CIFAR-10: at most a 3x3 average.
  """
  n, c, h, w = x.shape
  radius = max(1, min(h, w) // 20)
  sigma = _uniform((1,), *_SIMCLR_BLUR_SIGMA, draws, x.device)
  taps = torch.arange(-radius, radius + 1, device=x.device)
  kernel = torch.exp(-0.5 * (taps / sigma) ** 2)
  kernel = (kernel / kernel.sum(dim=1, keepdim=True)).repeat_interleave(c, 0)
  # Separable, and each (sample, channel) is its own conv group, so the
  # whole batch is two grouped convolutions.
  y = F.pad(x.reshape(1, n * c, h, w), (radius,) * 4, mode='reflect')
  y = F.conv2d(y, kernel.view(n * c, 1, 1, -1), groups=n * c)
  y = F.conv2d(y, kernel.view(n * c, 1, -1, 1), groups=n * c)
  return y.view(n, c, h, w)


def _simclr(x: torch.Tensor, draws: keyed_random.KeyedRandom) -> torch.Tensor:
  """SimCLR's ImageNet pipeline; grayscale only applies to RGB.

  Every branch is computed for the whole batch and then selected per sample,
  so each row draws the same number of values whatever the coins say.
  """
  x = _resized_crop_flip(x, draws)
  jittered = _color_jitter(x, **_SIMCLR_JITTER, draws=draws)
  x = _where(_coin(_SIMCLR_JITTER_PROB, draws, x.device), jittered, x)
  if x.shape[1] == 3:
    gray = _grayscale(x).expand_as(x)
    x = _where(_coin(_SIMCLR_GRAYSCALE_PROB, draws, x.device), gray, x)
  blurred = _gaussian_blur(x, draws)
  return _where(_coin(_SIMCLR_BLUR_PROB, draws, x.device), blurred, x)
