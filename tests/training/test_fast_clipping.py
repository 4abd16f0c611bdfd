"""Tests for tan_tune.training.fast_clipping: exact against the vmap path."""

import pytest
import torch
from torch import nn

from tan_tune.training import fast_clipping
from tan_tune.training import layer_clipping
from tan_tune.training import models
from clipping_reference import Tokens
from clipping_reference import assert_matches_vmap

_CLASSES = 5


def _every_layer_type() -> nn.Module:
  """Conv2d with stride, padding, dilation and groups; GroupNorm; in-place
  activations; token Linear with LayerNorm; 2-D Linear."""
  return nn.Sequential(
      nn.Conv2d(3, 6, 3, stride=2, padding=1),
      nn.GroupNorm(3, 6),
      nn.ReLU(inplace=True),
      nn.Conv2d(6, 6, 3, padding=2, dilation=2, groups=2, bias=False),
      nn.Tanh(),
      nn.Conv2d(6, 6, 1),
      Tokens(),
      nn.Linear(6, 8),
      nn.LayerNorm(8),
      nn.ReLU(inplace=True),
      nn.Flatten(),
      nn.Linear(16 * 8, _CLASSES),  # 16 tokens from 4x4 maps.
  ).double()


@pytest.mark.parametrize("multiplicity", [1, 4])
@pytest.mark.parametrize("ghost", [True, False])
def test_norms_and_clipped_sum_equal_the_vmap_path(monkeypatch, multiplicity,
                                                   ghost):
  """Both branches of the rule, forced, on every layer type; K = 1 and 4."""
  monkeypatch.setattr(layer_clipping, "use_ghost", lambda module, rows: ghost)
  torch.manual_seed(0)
  model = _every_layer_type()
  images = torch.randn(5, multiplicity, 3, 8, 8, dtype=torch.float64)
  assert_matches_vmap(model, images, torch.randint(_CLASSES, (5,)))


@pytest.mark.parametrize("multiplicity", [1, 4])
def test_the_default_rule_on_the_dp_cnn(multiplicity):
  torch.manual_seed(1)
  model = models.build_model(
      models.ModelConfig("dp-cnn-gn"), (1, 28, 28), 10).double()
  images = torch.randn(3, multiplicity, 1, 28, 28, dtype=torch.float64)
  assert_matches_vmap(model, images, torch.randint(10, (3,)), 0.5)


def test_an_in_place_activation_right_after_the_first_layer():
  """The backward stops at the first layer's output, which ReLU overwrites."""
  torch.manual_seed(2)
  model = nn.Sequential(
      nn.Conv2d(1, 4, 3), nn.ReLU(inplace=True), nn.Flatten(),
      nn.Linear(4 * 6 * 6, _CLASSES)).double()
  images = torch.randn(4, 2, 1, 8, 8, dtype=torch.float64)
  assert_matches_vmap(model, images, torch.randint(_CLASSES, (4,)), 0.1)


def test_an_empty_poisson_batch_gives_zero_sums():
  model = _every_layer_type()
  empty = fast_clipping.clipped_sum(
      model, torch.zeros(0, 2, 3, 8, 8, dtype=torch.float64),
      torch.zeros(0, dtype=torch.long), 1.0)
  assert empty.norms.numel() == 0 and empty.losses.numel() == 0
  assert empty.gradients.keys() == dict(model.named_parameters()).keys()
  assert all(not g.any() for g in empty.gradients.values())


def test_parameters_outside_supported_layers_are_reported():
  class WithPositionEmbedding(nn.Module):
    def __init__(self):
      super().__init__()
      self.pos_embed = nn.Parameter(torch.zeros(4))
      self.head = nn.Linear(4, 2)

    def forward(self, x):
      return self.head(x + self.pos_embed)

  assert fast_clipping.uncovered_parameters(WithPositionEmbedding()) == [
      "pos_embed"]
  assert not fast_clipping.uncovered_parameters(_every_layer_type())


def test_parameters_train_again_afterwards():
  model = _every_layer_type()
  images = torch.randn(2, 1, 3, 8, 8, dtype=torch.float64)
  fast_clipping.clipped_sum(model, images, torch.tensor([0, 1]), 1.0)
  assert all(p.requires_grad for p in model.parameters())
