"""ScatterNet features under a linear or a small CNN classifier (Tramer &
Boneh, ICLR 2021).

A scattering network (Bruna & Mallat) is a fixed cascade of wavelet filters
and moduli. With J = 2 scales and L = 8 orientations it maps each channel of
an H x W image to 1 + J L + L^2 J (J - 1) / 2 = 81 channels at H/4 x W/4:

  S0 x = x * phi_J,   S1 x = |x * psi_{j1,t1}| * phi_J,
  S2 x = ||x * psi_{j1,t1}| * psi_{j2,t2}| * phi_J   (j1 < j2),

subsampled by 2^J, where psi are Morlet wavelets and phi_J a Gaussian. The
features are stable to small translations and deformations. The transform
has no parameters and depends on no data, so it costs no privacy: DP-SGD
trains only the head above it. Tramer & Boneh found the linear head (GroupNorm
and one linear layer: 'scatternet'), which learns much faster than an
end-to-end CNN, the stronger one under DP-SGD on Fashion-MNIST at eps = 3
(89.7% against 86.0%), and a small CNN on the features ('scatternet-cnn': two
3x3 convolutions of 16 and 32 channels, the first with stride 2, and a
hidden layer of 32, tanh after each) at 89.0%; GroupNorm normalises the
features without any statistic of the data in both.

The filters are kymatio's, the library the paper used; the cascade is
written here with out-of-place FFTs, which kymatio's in-place ones are not,
so that `torch.func.vmap` (the per-sample gradients of the 'vmap' clipping
engine) runs through it. tests/training/test_scatternet.py checks it against
kymatio's own transform. It is most of the 0.9 ms a Fashion-MNIST training
example takes on one CPU core, so it declares itself a fixed front end:
without augmentation a run computes it once per example
(`fixed_features.py`).
"""

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from tan_tune.errors import ConfigError
from tan_tune.training import dp_cnn

NAME = "scatternet"
CNN_NAME = "scatternet-cnn"
# Scales J and orientations L of the wavelets, as in the paper (a model may
# take other scales: `ModelConfig.scales`).
SCALES, ORIENTATIONS = 2, 8
# Images per pass through the cascade on a CPU: its tensors are 64x an
# image, and 32 images of them stay in cache (2.5x faster than 512 at once).
_CPU_CHUNK = 32


def _padded_size(size: int, scales: int) -> int:
  """The size kymatio pads a side to: room for 2^J on both ends."""
  step = 2**scales
  return ((size + step) // step + 1) * step


def _subsample(spectrum: torch.Tensor, k: int) -> torch.Tensor:
  """k^2 times the spectrum of the image subsampled by k: the sum of its
  k x k periodic blocks (sums of slices, in place into the first sum: a
  strided sum is several times slower). The filter applied before it
  carries the mean's 1 / k^2 (`_scaled`)."""
  if k == 1:
    return spectrum
  height, width = spectrum.shape[-2] // k, spectrum.shape[-1] // k
  blocks = [spectrum[..., a * height:(a + 1) * height, b * width:(b + 1) * width]
            for a in range(k) for b in range(k)]
  total = blocks[0] + blocks[1]
  for block in blocks[2:]:
    total.add_(block)
  return total


def _modulus_spectrum(spectrum: torch.Tensor) -> torch.Tensor:
  """F |F^-1 x|: the spectrum of the modulus of the filtered image. The
  modulus is sqrt(re^2 + im^2), 3x faster on a CPU than torch's complex
  abs (which guards against overflow these magnitudes never reach)."""
  filtered = torch.fft.ifft2(spectrum)
  return torch.fft.fft2(torch.addcmul(filtered.real * filtered.real,
                                      filtered.imag, filtered.imag).sqrt_())


def _scaled(filter_: np.ndarray, k: int) -> torch.Tensor:
  """A filter as a tensor, times 1 / k^2: the mean of the k x k blocks of
  the subsampling that follows it, folded into the filter (`_subsample`)."""
  return torch.tensor(filter_ / k**2, dtype=torch.float32)


class Scattering(nn.Module):
  """The fixed transform: (N, C, H, W) -> (N, K C, H / 2^J, W / 2^J) with
  K = 1 + J L + L^2 J (J - 1) / 2 (81 at J = 2, 217 at J = 3)."""

  # No parameters, no data: a run may compute it once per example.
  fixed_front_end = True

  def __init__(self, input_shape: tuple[int, int, int], scales: int = SCALES):
    super().__init__()
    # Imported here, where the filters are built, so that importing the
    # models costs nothing more; kymatio.torch would also import its 3-D
    # frontend, which needs a function SciPy 1.17 removed.
    from kymatio.scattering2d import filter_bank  # pylint: disable=import-outside-toplevel
    height, width = input_shape[1:]
    if min(height, width) <= 2**scales:  # Reflection needs a wider image.
      raise ConfigError("model.name", NAME,
                        f"images of at least {2**scales + 1}x{2**scales + 1}"
                        f" at {scales} scales; these are {tuple(input_shape)}")
    self.scales = scales
    self.input_size = (height, width)
    self.padded = (_padded_size(height, scales), _padded_size(width, scales))
    bank = filter_bank.filter_bank(*self.padded, scales, ORIENTATIONS)
    # Not saved with the weights: fixed, and rebuilt with the model.
    # phi{level} at resolution 2^-level subsamples to 2^-J.
    for level, phi in enumerate(bank["phi"]["levels"]):
      self.register_buffer(f"phi{level}",
                           _scaled(phi, 2**(scales - level)), persistent=False)
    # psi{j}_{level}: the L wavelets of scale j at resolution 2^-level, at
    # every level the cascade reaches (0 and those of a coarser j1 < j),
    # each subsampling to 2^-j.
    for j in range(scales):
      wavelets = [psi["levels"] for psi in bank["psi"] if psi["j"] == j]
      for level in range(len(wavelets[0])):
        self.register_buffer(f"psi{j}_{level}", torch.stack(
            [_scaled(levels[level], 2**(j - level)) for levels in wavelets]),
                             persistent=False)

  def _low_pass(self, spectrum: torch.Tensor, j: int) -> torch.Tensor:
    """Averages by phi_J and subsamples to H / 2^J, without the border."""
    spectrum = _subsample(spectrum * getattr(self, f"phi{j}"),
                          2**(self.scales - j))
    return torch.fft.ifft2(spectrum).real[..., 1:-1, 1:-1]

  def forward(self, images: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():  # Nothing below the classifier learns.
      # A GPU wants few, large kernels; an exported program (the served
      # model) one graph for any batch size, not one per chunk count.
      if images.device.type != "cpu" or torch.compiler.is_exporting():
        return self._transform(images)
      return torch.cat([self._transform(chunk)
                        for chunk in images.split(_CPU_CHUNK)])

  def _transform(self, images: torch.Tensor) -> torch.Tensor:
    (height, width), (padded_h, padded_w) = self.input_size, self.padded
    top, left = (padded_h - height) // 2, (padded_w - width) // 2
    padded = F.pad(images, (left, padded_w - width - left,
                            top, padded_h - height - top), mode="reflect")
    spectrum = torch.fft.fft2(padded).unsqueeze(2)  # (N, C, 1, H', W')
    # kymatio's order: S0, every S1 (by j1, then angle), then every S2
    # (by j1, angle 1, j2, angle 2).
    order_zero, order_one, order_two = [self._low_pass(spectrum, 0)], [], []
    for j1 in range(self.scales):
      # |x * psi_{j1,t}| for the L angles t, as spectra: (N, C, L, ...).
      modulus_one = _modulus_spectrum(_subsample(
          spectrum * getattr(self, f"psi{j1}_0"), 2**j1))
      order_one.append(self._low_pass(modulus_one, j1))
      extensions = [  # S2 for each coarser j2: (N, C, L, L, ...) each.
          self._low_pass(_modulus_spectrum(_subsample(
              modulus_one.unsqueeze(3) * getattr(self, f"psi{j2}_{j1}"),
              2**(j2 - j1))), j2)
          for j2 in range(j1 + 1, self.scales)]
      if extensions:  # None for the coarsest j1.
        order_two.append(torch.cat(extensions, dim=3).flatten(2, 3))
    features = order_zero + order_one + order_two
    return torch.cat(features, dim=2).flatten(1, 2)


def scatternet(input_shape: tuple[int, int, int], num_classes: int,
               num_groups: int, cnn_head: bool = False,
               scales: int = SCALES) -> nn.Sequential:
  """Scattering at `scales` J, GroupNorm with `num_groups` groups (or the
  largest divisor of the channels below it), then a linear layer over the
  flattened features, or with `cnn_head` Tramer & Boneh's small CNN for
  them."""
  scattering = Scattering(input_shape, scales)
  channels, height, width = scattering(torch.zeros(1, *input_shape)).shape[1:]
  norm = nn.GroupNorm(dp_cnn.group_count(channels, num_groups), channels)
  if not cnn_head:
    return nn.Sequential(scattering, norm, nn.Flatten(),
                         nn.Linear(channels * height * width, num_classes))
  # The stride-2 convolution halves each side, rounding up.
  halved = ((height + 1) // 2) * ((width + 1) // 2)
  return nn.Sequential(
      scattering, norm,
      nn.Conv2d(channels, 16, 3, stride=2, padding=1), nn.Tanh(),
      nn.Conv2d(16, 32, 3, padding=1), nn.Tanh(),
      nn.Flatten(),
      nn.Linear(32 * halved, 32), nn.Tanh(),
      nn.Linear(32, num_classes),
  )
