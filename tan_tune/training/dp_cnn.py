"""The end-to-end CNN of the DP literature, with a width multiplier.

Papernot et al. (2021) and Tramer & Boneh (2021) train this tanh CNN with
DP-SGD on MNIST-sized images: conv 16@8x8/2 - tanh - maxpool 2/1 - conv
32@4x4/2 - tanh - maxpool 2/1 - linear 32 - tanh - linear, 26,010 parameters
on 1x28x28 inputs. `width` multiplies its channels and hidden units (16w,
32w, 32w): under DP-SGD a wider network adds noise dimensions as well as
capacity, so the width worth paying for is one a search should find, at a
compute cost that grows about as width squared.
"""

import collections

import torch
from torch import nn

from tan_tune.errors import ConfigError

NAMES = ("dp-cnn", "dp-cnn-gn")


def group_count(channels: int, num_groups: int) -> int:
  """Largest divisor of `channels` not above `num_groups`, as GroupNorm needs."""
  return max(g for g in range(1, min(channels, num_groups) + 1)
             if channels % g == 0)


def channels(width: float) -> tuple[int, int, int]:
  """The two convolutions' channels and the hidden units at `width`."""
  return tuple(max(1, round(base * width)) for base in (16, 32, 32))


def dp_cnn(input_shape: tuple[int, int, int], num_classes: int,
           num_groups: int, group_norm: bool, width: float = 1.0
           ) -> nn.Sequential:
  """The CNN for `input_shape` images; PyTorch's default initialisation, as
  in the papers' code. With `group_norm`, a GroupNorm follows each
  convolution, before its tanh."""
  first, second, hidden = channels(width)

  def conv_block(in_channels, out_channels, kernel, padding):
    layers = [nn.Conv2d(in_channels, out_channels, kernel, stride=2,
                        padding=padding)]
    if group_norm:
      layers.append(nn.GroupNorm(group_count(out_channels, num_groups),
                                 out_channels))
    return layers + [nn.Tanh(), nn.MaxPool2d(2, stride=1)]

  features = nn.Sequential(*conv_block(input_shape[0], first, 8, 2),
                           *conv_block(first, second, 4, 0), nn.Flatten())
  if min(input_shape[1:]) < 16:  # Too small for the second convolution.
    raise ConfigError("model.name", NAMES[group_norm],
                      f"images of at least 16x16; these are {input_shape}")
  with torch.no_grad():  # The flattened size, for any input size.
    flat = features(torch.zeros(1, *input_shape)).shape[1]
  return nn.Sequential(collections.OrderedDict(
      features=features,
      fc1=nn.Linear(flat, hidden),
      act=nn.Tanh(),
      fc2=nn.Linear(hidden, num_classes),
  ))
