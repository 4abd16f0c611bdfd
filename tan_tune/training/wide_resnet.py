"""TAN's WideResNet and a small CNN, with GroupNorm in either order.

Normalisation order. TAN section 4.4 finds that under DP-SGD a 16-4
WideResNet trains clearly better with CONV-ACT-NORM (after Brock et al.,
2021a) than with the usual CONV-NORM-ACT, and only then benefits from
augmentation multiplicity: it is the default; `norm_before_activation`
switches back for ablations.

* 'wrn-<depth>-<width>': the pre-activation WideResNet of Zagoruyko &
  Komodakis (2016) as used by TAN on CIFAR-10 (e.g. 'wrn-16-4');
* 'small-cnn': a two-layer CNN for tiny images such as 1x8x8 digits.
"""

import collections
import re

import torch
from torch import nn

from tan_tune.errors import ConfigError
from tan_tune.training import dp_cnn

_WRN_NAME = re.compile(r"wrn-(\d+)-(\d+)")


def is_wrn_name(name: str) -> bool:
  """Whether `name` has the form 'wrn-D-W' (its D and W may still be
  refused by `depth_width`)."""
  return _WRN_NAME.fullmatch(name) is not None


def depth_width(name: str) -> tuple[int, int]:
  """D and W of 'wrn-D-W'.

  Raises:
    ConfigError: a depth that is not 6n+4 or a width below 1.
  """
  match = _WRN_NAME.fullmatch(name)
  depth, width = int(match[1]), int(match[2])
  # Zagoruyko & Komodakis count 3 stages of n two-conv blocks as depth 6n+4.
  if depth < 10 or (depth - 4) % 6:
    raise ConfigError(
        "model.name", name,
        "WideResNet depth must be 6n+4 with n >= 1 (10, 16, 22, 28, ...)")
  if width < 1:
    raise ConfigError("model.name", name, "WideResNet width must be >= 1")
  return depth, width


def _norm_act(channels: int, num_groups: int,
              norm_before_activation: bool) -> nn.Sequential:
  """GroupNorm and ReLU in the order asked for (TAN section 4.4).

  The children are named 'norm' and 'act' in both orders so that parameter
  names, and thus checkpoints, do not depend on the order.
  """
  layers = {
      "norm": nn.GroupNorm(dp_cnn.group_count(channels, num_groups), channels),
      "act": nn.ReLU(inplace=False),
  }
  order = ("norm", "act") if norm_before_activation else ("act", "norm")
  return nn.Sequential(collections.OrderedDict((k, layers[k]) for k in order))


def _conv3x3(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
  return nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1)


class _WideBlock(nn.Module):
  """Pre-activation residual block, as in TAN's WideResNet.

  The normalisation and activation come before each convolution, so the
  sequence through a stack of blocks is CONV-[NORM, ACT]-CONV-... with the
  bracket ordered by `norm_before_activation`. A shortcut that changes
  shape gets its own norm-act pair and 1x1 convolution.
  """

  def __init__(self, in_channels: int, out_channels: int, stride: int,
               num_groups: int, norm_before_activation: bool):
    super().__init__()
    norm = (num_groups, norm_before_activation)
    self.residual = nn.Sequential(
        _norm_act(in_channels, *norm),
        _conv3x3(in_channels, out_channels, stride),
        _norm_act(out_channels, *norm),
        _conv3x3(out_channels, out_channels),
    )
    if in_channels == out_channels and stride == 1:
      self.shortcut = nn.Identity()
    else:
      self.shortcut = nn.Sequential(
          _norm_act(in_channels, *norm),
          nn.Conv2d(in_channels, out_channels, 1, stride=stride),
      )

  def forward(self, x: torch.Tensor) -> torch.Tensor:
    # Out of place: `x` is still referenced by autograd and by vmap.
    return self.shortcut(x) + self.residual(x)


def wide_resnet(depth: int, width: int, in_channels: int, num_classes: int,
                num_groups: int, norm_before_activation: bool
                ) -> nn.Sequential:
  """WRN-depth-width; stages at 1, 1/2, 1/4 resolution, any input size."""
  blocks_per_stage = (depth - 4) // 6
  norm = (num_groups, norm_before_activation)
  layers = collections.OrderedDict(stem=_conv3x3(in_channels, 16))
  channels = 16
  for stage, stage_channels in enumerate((16 * width, 32 * width, 64 * width)):
    blocks = []
    for i in range(blocks_per_stage):
      stride = 2 if stage > 0 and i == 0 else 1
      blocks.append(_WideBlock(channels, stage_channels, stride, *norm))
      channels = stage_channels
    layers[f"stage{stage + 1}"] = nn.Sequential(*blocks)
  # Adaptive pooling instead of TAN's fixed 8x8 pool so that 8x8 digits work.
  layers.update(norm_act=_norm_act(channels, *norm),
                pool=nn.AdaptiveAvgPool2d(1), flatten=nn.Flatten(),
                fc=nn.Linear(channels, num_classes))
  return _lecun_init(nn.Sequential(layers))


def small_cnn(in_channels: int, num_classes: int, num_groups: int,
              norm_before_activation: bool, width: float) -> nn.Sequential:
  """Two convolutions and a linear head, enough for 8x8 digits.

  Pooling to a fixed 4x4 grid (the native size after the strided conv on 8x8
  inputs) keeps the head's size independent of the image size.
  """
  norm = (num_groups, norm_before_activation)
  first, second = (max(1, round(c * width)) for c in (32, 64))
  return _lecun_init(nn.Sequential(collections.OrderedDict(
      conv1=_conv3x3(in_channels, first),
      norm_act1=_norm_act(first, *norm),
      conv2=_conv3x3(first, second, stride=2),
      norm_act2=_norm_act(second, *norm),
      pool=nn.AdaptiveAvgPool2d(4),
      flatten=nn.Flatten(),
      fc=nn.Linear(second * 4 * 4, num_classes),
  )))


def _lecun_init(model: nn.Sequential) -> nn.Sequential:
  """Weights ~ truncated N(0, 1/fan_in), zero biases: TAN's WRN init.

  Matching the paper's init (its `init=0`, after De et al., 2022) keeps
  results comparable with its CIFAR-10 numbers.
  """
  for module in model.modules():
    if isinstance(module, (nn.Conv2d, nn.Linear)):
      fan_in = module.weight[0].numel()
      nn.init.trunc_normal_(module.weight, std=fan_in**-0.5)
      nn.init.zeros_(module.bias)
  return model
