"""Tests for tan_tune.training.timm_clipping: timm's layers against vmap."""

import pytest
import timm
from timm.layers import std_conv
import torch
from torch import nn

from tan_tune.training import fast_clipping
from clipping_reference import assert_matches_vmap

_CLASSES = 5


@pytest.mark.parametrize("multiplicity", [1, 3])
def test_weight_standardised_convolutions(multiplicity):
  """timm's ScaledStdConv2d (NF-ResNets), with its gain, strided, grouped."""
  torch.manual_seed(2)
  model = nn.Sequential(
      std_conv.ScaledStdConv2d(3, 4, 3, stride=2),
      nn.ReLU(inplace=True),
      std_conv.ScaledStdConv2d(4, 6, 3, groups=2, bias=False),
      nn.Flatten(),
      nn.Linear(6 * 4 * 4, _CLASSES)).double()
  with torch.no_grad():  # Away from their initial values, like in training.
    for module in model:
      if hasattr(module, "gain"):
        module.gain.uniform_(0.5, 2.0)
  images = torch.randn(4, multiplicity, 3, 8, 8, dtype=torch.float64)
  assert not fast_clipping.uncovered_parameters(model)
  assert_matches_vmap(model, images, torch.randint(_CLASSES, (4,)))


def _tiny_vit(**kwargs) -> nn.Module:
  return timm.models.vision_transformer.VisionTransformer(
      img_size=8, patch_size=4, num_classes=_CLASSES, embed_dim=8, depth=1,
      num_heads=2, **kwargs).double()


@pytest.mark.parametrize("kwargs", [
    {},
    {"reg_tokens": 2, "no_embed_class": True},
    {"class_token": False, "global_pool": "avg"},
])
@pytest.mark.parametrize("multiplicity", [1, 2])
# The vmap reference runs attention without a batching rule, slowly.
@pytest.mark.filterwarnings("ignore:There is a performance drop")
def test_vision_transformer_position_embedding_and_tokens(kwargs,
                                                          multiplicity):
  torch.manual_seed(3)
  model = _tiny_vit(**kwargs)
  with torch.no_grad():
    for name, p in model.named_parameters():
      if "token" in name or "pos_embed" in name:
        p.normal_()
  assert not fast_clipping.uncovered_parameters(model)
  images = torch.randn(3, multiplicity, 3, 8, 8, dtype=torch.float64)
  assert_matches_vmap(model, images, torch.randint(_CLASSES, (3,)))


def test_a_dynamic_size_vision_transformer_is_not_covered():
  model = _tiny_vit(dynamic_img_size=True)
  assert {"pos_embed", "cls_token"} <= set(
      fast_clipping.uncovered_parameters(model))
