"""A team's own models, as its package would hold them: the factories that
test_plugins.py names in configs by reference ('plugin_factories:...')."""

import torch
from torch import nn

NOT_CALLABLE = 3


def digits_mlp(hidden: int = 32, num_classes: int = 10) -> nn.Module:
  """An MLP for 1x8x8 digits."""
  return nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.Tanh(),
                       nn.Linear(hidden, num_classes))


def with_batch_norm() -> nn.Module:
  return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(),
                       nn.Linear(4 * 6 * 6, 10))


def broken(depth: int = 1) -> nn.Module:
  raise ValueError(f"no layer for depth {depth}")


def not_a_model() -> str:
  return "an MLP"


class _Scale(nn.Module):
  """A learnt per-feature scale: a parameter fast clipping has no rule for."""

  def __init__(self, features: int):
    super().__init__()
    self.weight = nn.Parameter(torch.ones(features))

  def forward(self, x):
    return x * self.weight


def scaled_mlp() -> nn.Module:
  return nn.Sequential(nn.Flatten(), _Scale(64), nn.Linear(64, 10))
