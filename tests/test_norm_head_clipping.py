"""Tests for tan_tune.training.norm_head_clipping: exact against the vmap
path, and taken by fast clipping only where it applies."""

import pytest
import torch
from torch import nn

from tan_tune.training import fast_clipping
from tan_tune.training import fixed_features
from tan_tune.training import norm_head_clipping
from tan_tune.training import scatternet
from clipping_reference import assert_matches_vmap


def _head(channels=6, groups=3, size=3, classes=4):
  torch.manual_seed(0)
  head = nn.Sequential(nn.GroupNorm(groups, channels), nn.Flatten(),
                       nn.Linear(channels * size * size, classes)).double()
  with torch.no_grad():  # Away from GroupNorm's initial ones and zeros.
    head[0].weight.normal_()
    head[0].bias.normal_()
  return head


@pytest.mark.parametrize("clip_norm", [None, 1e-3, 1e3])
def test_norms_losses_and_clipped_sums_equal_the_vmap_path(clip_norm):
  """Some examples clipped (the median norm), all, and none."""
  head = _head()
  assert norm_head_clipping.covers(head, 1)
  features = torch.randn(7, 1, 6, 3, 3, dtype=torch.float64) * 3 + 1
  assert_matches_vmap(head, features, torch.randint(4, (7,)), clip_norm,
                      rtol=1e-12)


def test_weights_scale_each_example():
  """A capped sampler's padding rows (w = 0) add nothing."""
  head = _head()
  features = torch.randn(5, 1, 6, 3, 3, dtype=torch.float64)
  labels = torch.randint(4, (5,))
  weights = torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0], dtype=torch.float64)
  weighted = fast_clipping.clipped_sum(head, features, labels, 0.5, weights)
  kept = fast_clipping.clipped_sum(head, features[weights == 1],
                                   labels[weights == 1], 0.5)
  for name, sum_ in kept.gradients.items():
    torch.testing.assert_close(weighted.gradients[name], sum_, rtol=1e-12,
                               atol=1e-15)


def test_the_scatternet_head_is_covered_and_nothing_else():
  model = scatternet.scatternet((1, 12, 12), 10, 27)
  assert norm_head_clipping.covers(fixed_features.head(model), 1)
  # Its image path, AugMult copies, a frozen parameter, another layout.
  assert not norm_head_clipping.covers(model, 1)
  assert not norm_head_clipping.covers(fixed_features.head(model), 2)
  frozen = _head()
  frozen[0].bias.requires_grad_(False)
  assert not norm_head_clipping.covers(frozen, 1)
  assert not norm_head_clipping.covers(
      nn.Sequential(nn.GroupNorm(1, 2), nn.Flatten(), nn.Linear(8, 2),
                    nn.ReLU()), 1)
  assert not norm_head_clipping.covers(
      nn.Sequential(nn.GroupNorm(1, 2, affine=False), nn.Flatten(),
                    nn.Linear(8, 2)), 1)
