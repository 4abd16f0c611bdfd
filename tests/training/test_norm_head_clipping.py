"""Tests for tan_tune.training.norm_head_clipping: exact against the vmap
path, and taken by fast clipping only where it applies."""

import copy
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
  features = torch.randn(7, 1, 6, 3, 3, dtype=torch.float64) * 3 + 1
  assert norm_head_clipping.covers(head, features)
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
  features = torch.zeros(2, 1, 81, 3, 3)
  assert norm_head_clipping.covers(fixed_features.head(model), features)
  # Its image path, AugMult copies, features of another size.
  assert not norm_head_clipping.covers(model, torch.zeros(2, 1, 1, 12, 12))
  assert not norm_head_clipping.covers(fixed_features.head(model),
                                       features.expand(2, 2, 81, 3, 3))
  assert not norm_head_clipping.covers(fixed_features.head(model),
                                       torch.zeros(2, 1, 81, 3, 6))
  features = torch.zeros(2, 1, 6, 3, 3, dtype=torch.float64)
  frozen = _head()
  frozen[0].bias.requires_grad_(False)
  assert not norm_head_clipping.covers(frozen, features)
  hooked = _head()  # A hook, or a subclass, may change the forward.
  hooked[2].register_forward_hook(lambda module, args, out: 10 * out)
  assert not norm_head_clipping.covers(hooked, features)

  class Scaled(nn.Sequential):
    def forward(self, x):
      return 10 * super().forward(x)

  assert not norm_head_clipping.covers(Scaled(*_head()), features)
  assert not norm_head_clipping.covers(
      nn.Sequential(nn.GroupNorm(1, 6), nn.Flatten(), nn.Linear(54, 2),
                    nn.ReLU()), features)
  assert not norm_head_clipping.covers(
      nn.Sequential(nn.GroupNorm(1, 6, affine=False), nn.Flatten(),
                    nn.Linear(54, 2)), features)


def test_no_clipped_gradient_passes_c_where_the_expansion_cancels():
  """A channel constant over its positions (its group's other channel
  varies), with gamma = 1000 and beta = -gamma xhat: its y is 0, where the
  expansion's terms are 1e8; clipped by float32's norms, every example's
  exact gradient stays within C."""
  head = _head(channels=2, groups=1, size=7, classes=3).float()
  features = torch.zeros(4, 1, 2, 7, 7)
  features[:, 0, 1] = torch.randn(4, 7, 7)
  xhat = torch.nn.functional.group_norm(features[:, 0].double(), 1, eps=1e-5)
  with torch.no_grad():
    head[0].weight.copy_(torch.tensor([1000.0, 1.0]))
    head[0].bias.copy_(torch.tensor([-1000 * xhat[0, 0, 0, 0].item(), 0.0]))
  labels = torch.randint(3, (4,))
  exact = fast_clipping.clipped_sum(copy.deepcopy(head).double(),
                                    features.double(), labels, 1.0).norms
  computed = fast_clipping.clipped_sum(head, features, labels, 1.0).norms
  # Clipped by float32's norms, no exact gradient passes C.
  clipped = exact * (1.0 / computed.double()).clamp(max=1.0)
  assert exact.max() > 100 and (clipped <= 1.0).all(), (computed, exact)
